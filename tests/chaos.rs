//! placeholder
#![allow(clippy::panic)]
mod support;
