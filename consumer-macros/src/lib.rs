//! The `#[handler]` attribute of the `consumer` framework. Use it through
//! the facade: `consumer::handler`.
//!
//! See the facade's documentation for the arguments and their defaults.

mod attr;
mod circuit;
mod codec;
mod expand;
mod expand_batch;
mod valid;

use proc_macro::TokenStream;

/// Turns an `async fn` into a message handler. See `consumer::handler`.
#[proc_macro_attribute]
pub fn handler(attr: TokenStream, item: TokenStream) -> TokenStream {
    expand::handler(attr.into(), item.into()).into()
}
