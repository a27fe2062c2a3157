//! `plugin!`: the manifest section and the component export.

use std::net::IpAddr;

use proc_macro2::{Span, TokenStream};
use quote::{ToTokens, quote};
use syn::parse::{Parse, ParseStream};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Error, Ident, LitStr, Path, PathArguments, Token, bracketed};

use crate::json::{self, Text};
use crate::tool::tool_item;

pub struct Plugin {
    name: LitStr,
    description: Option<LitStr>,
    workspace: Option<LitStr>,
    network: Vec<LitStr>,
    secrets: Vec<Secret>,
    tools: Vec<Path>,
    tools_span: Span,
}

/// `name: { audience: "host", inject: [{ header: "x-api-key" }] }`: a
/// secret the host fills in for `{{secret:name}}`, only in the places named
/// (the host validates the rest at load).
struct Secret {
    name: Ident,
    audience: LitStr,
    inject: Vec<Place>,
}

/// Where a tool plugin's secret may go: `"path"` (inside a path segment),
/// `{ header: "NAME" }`, `{ query: "NAME" }`.
enum Place {
    Path,
    Named(&'static str, LitStr),
}

const PLACES: &str = "\"path\", { header: \"NAME\" } or { query: \"NAME\" }";

impl Parse for Place {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        if input.peek(LitStr) {
            let place: LitStr = input.parse()?;
            return match place.value().as_str() {
                "path" => Ok(Place::Path),
                "url" | "header" => Err(Error::new(
                    place.span(),
                    format!("`\"{}\"` is no longer an injection place: name it precisely, {PLACES}", place.value()),
                )),
                _ => Err(Error::new(place.span(), format!("a tool plugin's secret is injected into {PLACES}"))),
            };
        }
        let content;
        let brace = syn::braced!(content in input);
        let kind: Ident = content.parse()?;
        content.parse::<Token![:]>()?;
        let name: LitStr = content.parse()?;
        if !content.is_empty() {
            return Err(Error::new(brace.span.join(), format!("one place per braces: {PLACES}")));
        }
        match kind.to_string().as_str() {
            "header" => Ok(Place::Named("header", name)),
            "query" => Ok(Place::Named("query", name)),
            _ => Err(Error::new(kind.span(), format!("a tool plugin's secret is injected into {PLACES}"))),
        }
    }
}

impl Place {
    fn json(&self) -> String {
        match self {
            Place::Path => json::string("path"),
            Place::Named(kind, name) => format!("{{{}:{}}}", json::string(kind), json::string(&name.value())),
        }
    }
}

impl Parse for Secret {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let name: Ident = input.parse()?;
        input.parse::<Token![:]>()?;
        let content;
        syn::braced!(content in input);
        let (mut audience, mut inject) = (None, None);
        while !content.is_empty() {
            let key: Ident = content.parse()?;
            content.parse::<Token![:]>()?;
            match key.to_string().as_str() {
                "audience" => audience = Some(content.parse::<LitStr>()?),
                "inject" => {
                    let list;
                    bracketed!(list in content);
                    inject = Some(Punctuated::<Place, Token![,]>::parse_terminated(&list)?.into_iter().collect());
                }
                _ => return Err(Error::new(key.span(), format!("unknown secret key `{key}`; expected `audience` or `inject`"))),
            }
            if content.is_empty() {
                break;
            }
            content.parse::<Token![,]>()?;
        }
        let audience = audience.ok_or_else(|| Error::new(name.span(), "a secret needs `audience: \"host\"`"))?;
        let inject: Vec<Place> = inject.ok_or_else(|| Error::new(name.span(), format!("a secret needs `inject: [...]`, each of {PLACES}")))?;
        Ok(Secret { name, audience, inject })
    }
}

const KEYS: &str = "`name`, `description`, `workspace`, `network`, `secrets` or `tools`";

impl Parse for Plugin {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let mut name = None;
        let mut description = None;
        let mut workspace = None;
        let mut network = None;
        let mut secrets = None;
        let mut tools: Option<(Vec<Path>, Span)> = None;
        while !input.is_empty() {
            let key: Ident = input.parse()?;
            input.parse::<Token![:]>()?;
            let duplicate = || Error::new(key.span(), format!("`{key}` is given twice"));
            match key.to_string().as_str() {
                "name" => {
                    if name.replace(input.parse::<LitStr>()?).is_some() {
                        return Err(duplicate());
                    }
                }
                "description" => {
                    if description.replace(input.parse::<LitStr>()?).is_some() {
                        return Err(duplicate());
                    }
                }
                "workspace" => {
                    if workspace.replace(input.parse::<LitStr>()?).is_some() {
                        return Err(duplicate());
                    }
                }
                "network" => {
                    let content;
                    bracketed!(content in input);
                    let list = Punctuated::<LitStr, Token![,]>::parse_terminated(&content)?;
                    if network
                        .replace(list.into_iter().collect::<Vec<_>>())
                        .is_some()
                    {
                        return Err(duplicate());
                    }
                }
                "secrets" => {
                    let content;
                    bracketed!(content in input);
                    let list = Punctuated::<Secret, Token![,]>::parse_terminated(&content)?;
                    if secrets.replace(list.into_iter().collect::<Vec<_>>()).is_some() {
                        return Err(duplicate());
                    }
                }
                "tools" => {
                    let content;
                    let bracket = bracketed!(content in input);
                    let list = Punctuated::<Path, Token![,]>::parse_terminated(&content)?;
                    let list = (list.into_iter().collect(), bracket.span.join());
                    if tools.replace(list).is_some() {
                        return Err(duplicate());
                    }
                }
                _ => {
                    return Err(Error::new(
                        key.span(),
                        format!("unknown plugin! key `{key}`; expected {KEYS}"),
                    ));
                }
            }
            if input.is_empty() {
                break;
            }
            input.parse::<Token![,]>()?;
        }
        let name =
            name.ok_or_else(|| Error::new(Span::call_site(), "plugin! needs `name: \"...\"`"))?;
        let (tools, tools_span) =
            tools.ok_or_else(|| Error::new(Span::call_site(), "plugin! needs `tools: [...]`"))?;
        Ok(Plugin {
            name,
            description,
            workspace,
            network: network.unwrap_or_default(),
            secrets: secrets.unwrap_or_default(),
            tools,
            tools_span,
        })
    }
}

/// A plugin name: `[a-z][a-z0-9_-]*`, at most 64 chars.
fn valid_plugin_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == '-')
}

/// A network entry: `host`, `host:port`, `*.domain`, an IP address or
/// `[v6]:port`, or `*` (any host); the same rule as the host's grant parser.
fn valid_host(text: &str) -> bool {
    let text = text.trim();
    if text == "*" {
        return true;
    }
    if text.contains("://") || text.contains('/') {
        return false;
    }
    let Some(host) = split_host_port(text) else {
        return false;
    };
    let bare = host.strip_prefix("*.").unwrap_or(host);
    !bare.is_empty()
        && (bare.parse::<IpAddr>().is_ok()
            || bare
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.'))
}

/// The host part of `host[:port]`, if the port (when any) is valid.
fn split_host_port(text: &str) -> Option<&str> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(port) => port.parse::<u16>().ok().map(|_| host),
            None if after.is_empty() => Some(host),
            None => None,
        };
    }
    if text.parse::<IpAddr>().is_ok() {
        return Some(text);
    }
    match text.rsplit_once(':') {
        Some((host, port)) => port.parse::<u16>().ok().map(|_| host),
        None => Some(text),
    }
}

/// `path::to::greet` -> `path::to::__chitin_tool_greet`.
fn hidden_path(path: &Path) -> syn::Result<Path> {
    let mut hidden = path.clone();
    let last = hidden.segments.last_mut().expect("a path has a segment");
    if !matches!(last.arguments, PathArguments::None) {
        return Err(Error::new(
            last.arguments.span(),
            "name the #[tool] function without generic arguments",
        ));
    }
    last.ident = tool_item(&last.ident);
    Ok(hidden)
}

pub fn expand(plugin: Plugin) -> syn::Result<TokenStream> {
    let name = plugin.name.value();
    if !valid_plugin_name(&name) {
        return Err(Error::new(
            plugin.name.span(),
            format!(
                "plugin name {name:?} is not valid: it must match [a-z][a-z0-9_-]* and be at most 64 characters"
            ),
        ));
    }
    let workspace = match &plugin.workspace {
        None => "none".to_string(),
        Some(lit) => match lit.value().as_str() {
            w @ ("none" | "read" | "read-write") => w.to_string(),
            other => {
                return Err(Error::new(
                    lit.span(),
                    format!(
                        "workspace {other:?} is not valid: expected \"none\", \"read\" or \"read-write\""
                    ),
                ));
            }
        },
    };
    let mut network = Vec::new();
    for lit in &plugin.network {
        let host = lit.value();
        if !valid_host(&host) {
            return Err(Error::new(
                lit.span(),
                format!(
                    "network entry {host:?} is not valid: expected `host`, `host:port` or `*.domain` (no scheme, no path)"
                ),
            ));
        }
        if network.contains(&host) {
            return Err(Error::new(
                lit.span(),
                format!("network entry {host:?} is listed twice"),
            ));
        }
        network.push(host);
    }
    if plugin.tools.is_empty() {
        return Err(Error::new(
            plugin.tools_span,
            "a plugin needs at least one tool",
        ));
    }
    let mut seen: Vec<String> = Vec::new();
    let mut hidden = Vec::new();
    for path in &plugin.tools {
        let text = path.to_token_stream().to_string().replace(' ', "");
        if seen.contains(&text) {
            return Err(Error::new(path.span(), format!("`{text}` is listed twice")));
        }
        seen.push(text);
        hidden.push(hidden_path(path)?);
    }

    let version = std::env::var("CARGO_PKG_VERSION").map_err(|_| {
        Error::new(
            Span::call_site(),
            "CARGO_PKG_VERSION is not set: build the plugin with cargo",
        )
    })?;
    let description = match &plugin.description {
        Some(lit) => lit.value(),
        None => std::env::var("CARGO_PKG_DESCRIPTION").unwrap_or_default(),
    };

    // The manifest.
    let mut manifest = Text::lit(format!(
        "{{\"manifest_version\":1,\"name\":{},\"version\":{},\"description\":{},\"tools\":[",
        json::string(&name),
        json::string(&version),
        json::string(&description),
    ));
    for (i, path) in hidden.iter().enumerate() {
        if i > 0 {
            manifest.push_lit(",");
        }
        manifest.push_expr(quote!(#path::MANIFEST));
    }
    let network: Vec<String> = network.iter().map(|h| json::string(h)).collect();
    let secrets: Vec<String> = plugin
        .secrets
        .iter()
        .map(|secret| {
            let inject: Vec<String> = secret.inject.iter().map(Place::json).collect();
            format!(
                "{{\"name\":{},\"audience\":{},\"inject\":[{}]}}",
                json::string(&secret.name.to_string()),
                json::string(&secret.audience.value()),
                inject.join(",")
            )
        })
        .collect();
    let secrets = if secrets.is_empty() { String::new() } else { format!(",\"secrets\":[{}]", secrets.join(",")) };
    manifest.push_lit(&format!(
        "],\"capabilities\":{{\"workspace\":{},\"network\":[{}],\"host\":[]}}{secrets}}}",
        json::string(&workspace),
        network.join(",")
    ));
    let manifest = manifest.to_const_expr();

    // Two tools may share a name through #[tool(name = "...")].
    let mut unique = Vec::new();
    for (i, a) in hidden.iter().enumerate() {
        for (j, b) in hidden.iter().enumerate().skip(i + 1) {
            let message = format!(
                "plugin!: the tools `{}` and `{}` have the same name",
                seen[i], seen[j]
            );
            unique.push(quote! {
                ::core::assert!(!::chitin_sdk::__private::str_eq(#a::NAME, #b::NAME), #message);
            });
        }
    }

    Ok(quote! {
        /// The plugin manifest (JSON), as embedded in the `chitin:manifest`
        /// custom section.
        #[doc(hidden)]
        pub const __CHITIN_MANIFEST: &str = #manifest;

        /// Runs the tool `name`, as the host's `invoke` does.
        #[doc(hidden)]
        pub fn __chitin_invoke(
            name: &str,
            args_json: &str,
            ctx: &::chitin_sdk::Context,
        ) -> ::core::result::Result<::std::string::String, ::chitin_sdk::ToolError> {
            ::chitin_sdk::__private::dispatch(
                &[#((#hidden::NAME, #hidden::call as ::chitin_sdk::__private::ToolFn)),*],
                name,
                args_json,
                ctx,
            )
        }

        const _: () = {
            #(#unique)*
            // Evaluate the manifest on every target, so errors show in native
            // builds too.
            let _ = __CHITIN_MANIFEST;
        };

        #[cfg(target_arch = "wasm32")]
        const _: () = {
            #[used]
            #[unsafe(link_section = "chitin:manifest")]
            static CHITIN_MANIFEST: [u8; __CHITIN_MANIFEST.len()] =
                ::chitin_sdk::__private::to_array(__CHITIN_MANIFEST);

            struct ChitinPlugin;

            impl ::chitin_sdk::bindings::exports::chitin::plugin::tool::Guest for ChitinPlugin {
                fn invoke(
                    name: ::std::string::String,
                    args_json: ::std::string::String,
                    ctx: ::chitin_sdk::bindings::chitin::plugin::types::CallContext,
                ) -> ::core::result::Result<
                    ::std::string::String,
                    ::chitin_sdk::bindings::chitin::plugin::types::ToolError,
                > {
                    ::chitin_sdk::__private::guest_invoke(__chitin_invoke, name, args_json, ctx)
                }
            }

            ::chitin_sdk::bindings::export!(ChitinPlugin with_types_in ::chitin_sdk::bindings);
        };
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_plugin_name("hello"));
        assert!(valid_plugin_name("my-plugin_2"));
        assert!(!valid_plugin_name("Hello"));
        assert!(!valid_plugin_name("2x"));
        assert!(!valid_plugin_name(""));
    }

    #[test]
    fn hosts() {
        for ok in [
            "api.example.com",
            "127.0.0.1:8080",
            "[::1]:443",
            "[::1]",
            "::1",
            "localhost",
            "*.example.com",
            "*.example.com:443",
            "*",
        ] {
            assert!(valid_host(ok), "{ok}");
        }
        for bad in [
            "",
            "https://x.com",
            "x.com/a",
            "x.com:",
            "x.com:http",
            ":80",
            "a b",
            "*.",
            "a_b.com",
        ] {
            assert!(!valid_host(bad), "{bad}");
        }
    }
}
