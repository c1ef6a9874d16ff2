//! The boxed future and stream that object-safe traits of this crate return, at the bottom of
//! the kernel so that every layer can name them. Public as [`crate::tool::BoxFuture`],
//! [`crate::adapter::BoxFuture`] and [`crate::adapter::BoxStream`].

use std::future::Future;
use std::pin::Pin;

use futures_core::Stream;

/// A boxed, `Send` future: what object-safe async traits of this crate return.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A boxed, `Send` stream borrowing from `'a`.
pub type BoxStream<'a, T> = Pin<Box<dyn Stream<Item = T> + Send + 'a>>;
