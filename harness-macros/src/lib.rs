#![warn(missing_docs)]
#![doc = include_str!("../README.md")]

use proc_macro::TokenStream;
use syn::{DeriveInput, parse_macro_input};

mod ast;
mod attr;
/// The contract rules checked at compile time, duplicated from `harness-core` (see the file).
mod contract;
mod expand;
mod valid;

#[doc = include_str!("../docs/adapter.md")]
#[proc_macro_derive(Adapter, attributes(adapter))]
pub fn derive_adapter(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::adapter(&input).into()
}

#[doc = include_str!("../docs/adapter_options.md")]
#[proc_macro_derive(AdapterOptions, attributes(adapter_options))]
pub fn derive_adapter_options(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand::options(&input).into()
}
