//! Procedural macros of `chitin-sdk`. Use them through that crate: it
//! re-exports them, and the code they generate names its paths
//! (`::chitin_sdk::...`).

use proc_macro::TokenStream;
use syn::{DeriveInput, ItemFn, parse_macro_input};

mod args;
mod attrs;
mod case;
mod de;
mod json;
mod plugin;
mod tool;

/// `#[derive(ToolArgs)]`: see `chitin_sdk::ToolArgs`.
#[proc_macro_derive(ToolArgs, attributes(serde))]
pub fn derive_tool_args(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match args::derive(&input) {
        Ok(tokens) => tokens.into(),
        Err(err) => {
            let mut tokens = err.to_compile_error();
            // A stand-in impl, so that the error above is the only one.
            if input.generics.params.is_empty() {
                tokens.extend(args::impl_tool_args(&input, quote::quote!("{}")));
            }
            tokens.into()
        }
    }
}

/// `#[derive(Deserialize)]` without a dependency on serde: see
/// `chitin_sdk::Deserialize`.
#[proc_macro_derive(Deserialize, attributes(serde))]
pub fn derive_deserialize(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    de::derive(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

/// `#[tool]`: see `chitin_sdk::tool`.
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut options = tool::Options::default();
    let parser = options.parser();
    parse_macro_input!(attr with parser);
    let item = parse_macro_input!(item as ItemFn);
    tool::expand(options, item).into()
}

/// `plugin! { ... }`: see `chitin_sdk::plugin`.
#[proc_macro]
pub fn plugin(input: TokenStream) -> TokenStream {
    let plugin = parse_macro_input!(input as plugin::Plugin);
    plugin::expand(plugin)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}
