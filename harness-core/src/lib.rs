#![doc = include_str!("../README.md")]

pub mod action;
pub mod artifact;
pub mod capability;
pub mod error;
pub mod event;
pub mod id;
pub mod lifecycle;
pub mod log;
pub mod manifest;
pub mod registry;
pub mod time;
