//! `#[tool]`: a plain function becomes a tool.

use proc_macro2::{Span, TokenStream};
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Error, FnArg, Ident, ItemFn, LitBool, LitStr, Type, ext::IdentExt};

use crate::attrs;
use crate::json::{self, Text};

#[derive(Default)]
pub struct Options {
    read_only: bool,
    concurrency_safe: bool,
    name: Option<LitStr>,
}

impl Options {
    pub fn parser(&mut self) -> impl syn::parse::Parser<Output = ()> + '_ {
        syn::meta::parser(move |meta| {
            let flag = |meta: &syn::meta::ParseNestedMeta| -> syn::Result<bool> {
                if meta.input.peek(syn::Token![=]) {
                    Ok(meta.value()?.parse::<LitBool>()?.value)
                } else {
                    Ok(true)
                }
            };
            if meta.path.is_ident("read_only") {
                self.read_only = flag(&meta)?;
            } else if meta.path.is_ident("concurrency_safe") {
                self.concurrency_safe = flag(&meta)?;
            } else if meta.path.is_ident("name") {
                self.name = Some(meta.value()?.parse()?);
            } else {
                return Err(meta.error(
                    "unknown #[tool] option; expected `read_only`, `concurrency_safe` or `name = \"...\"`",
                ));
            }
            Ok(())
        })
    }
}

/// The hidden item `#[tool]` puts next to `name`.
pub fn tool_item(name: &Ident) -> Ident {
    format_ident!("__chitin_tool_{}", name.unraw())
}

/// A tool name: `[A-Za-z][A-Za-z0-9_-]*`, at most 64 chars.
pub fn valid_tool_name(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// `&Context` (or `&chitin_sdk::Context`, ...).
fn is_context(ty: &Type) -> bool {
    match ty {
        Type::Reference(r) if r.mutability.is_none() => match &*r.elem {
            Type::Path(p) => p
                .path
                .segments
                .last()
                .is_some_and(|s| s.ident == "Context" && s.arguments.is_empty()),
            _ => false,
        },
        Type::Group(g) => is_context(&g.elem),
        Type::Paren(p) => is_context(&p.elem),
        _ => false,
    }
}

pub fn expand(options: Options, item: ItemFn) -> TokenStream {
    let fn_ident = &item.sig.ident;
    let hidden = tool_item(fn_ident);
    let vis = &item.vis;
    match tool(&options, &item) {
        Ok((name, manifest, call)) => quote! {
            #item

            #[doc(hidden)]
            #[allow(non_camel_case_types, dead_code)]
            #vis struct #hidden;

            #[allow(dead_code)]
            impl #hidden {
                /// The tool's name.
                pub const NAME: &'static str = #name;
                /// The tool's entry in the plugin manifest (JSON).
                pub const MANIFEST: &'static str = #manifest;
                /// Deserializes the arguments and runs the tool.
                #call
            }
        },
        Err(err) => {
            // The error, and a stand-in so that `plugin!` does not add more.
            let err = err.to_compile_error();
            let name = fn_ident.unraw().to_string();
            quote! {
                #item
                #err
                #[doc(hidden)]
                #[allow(non_camel_case_types, dead_code)]
                #vis struct #hidden;
                #[allow(dead_code)]
                impl #hidden {
                    pub const NAME: &'static str = #name;
                    pub const MANIFEST: &'static str = "{}";
                    pub fn call(
                        _: &str,
                        _: &::chitin_sdk::Context,
                    ) -> ::core::result::Result<::std::string::String, ::chitin_sdk::ToolError> {
                        ::core::unreachable!()
                    }
                }
            }
        }
    }
}

fn tool(options: &Options, item: &ItemFn) -> syn::Result<(String, TokenStream, TokenStream)> {
    let sig = &item.sig;
    let fn_ident = &sig.ident;
    if let Some(t) = &sig.asyncness {
        return Err(Error::new(t.span, "a #[tool] function cannot be async"));
    }
    if let Some(t) = &sig.unsafety {
        return Err(Error::new(t.span, "a #[tool] function cannot be unsafe"));
    }
    if !sig.generics.params.is_empty() {
        return Err(Error::new(
            sig.generics.span(),
            "a #[tool] function cannot be generic",
        ));
    }
    if let Some(v) = &sig.variadic {
        return Err(Error::new(
            v.span(),
            "a #[tool] function cannot be variadic",
        ));
    }

    // Parameters: the arguments struct and/or `&Context`, in any order.
    let mut args_ty: Option<&Type> = None;
    let mut has_ctx = false;
    let mut call_args = Vec::new();
    for input in &sig.inputs {
        let FnArg::Typed(pat) = input else {
            return Err(Error::new(
                input.span(),
                "a #[tool] function cannot take `self`",
            ));
        };
        if is_context(&pat.ty) {
            if has_ctx {
                return Err(Error::new(pat.ty.span(), "`&Context` is taken twice"));
            }
            has_ctx = true;
            call_args.push(quote!(ctx));
        } else {
            if args_ty.is_some() {
                return Err(Error::new(
                    pat.ty.span(),
                    "a #[tool] function takes one arguments struct (deriving Deserialize and ToolArgs) and/or `&Context`",
                ));
            }
            if let Type::Reference(r) = &*pat.ty {
                return Err(Error::new(
                    r.span(),
                    "take the arguments struct by value (`args: MyArgs`)",
                ));
            }
            args_ty = Some(&pat.ty);
            call_args.push(quote!(args));
        }
    }

    let name_span = options.name.as_ref().map_or(fn_ident.span(), |n| n.span());
    let name = options
        .name
        .as_ref()
        .map_or_else(|| fn_ident.unraw().to_string(), |n| n.value());
    if !valid_tool_name(&name) {
        return Err(Error::new(
            name_span,
            format!(
                "tool name {name:?} is not valid: it must match [A-Za-z][A-Za-z0-9_-]* and be at most 64 characters"
            ),
        ));
    }
    let description = attrs::docs(&item.attrs).unwrap_or_default();

    let mut manifest = Text::lit(format!(
        "{{\"name\":{},\"description\":{},\"parameters\":",
        json::string(&name),
        json::string(&description)
    ));
    match args_ty {
        Some(ty) => manifest.push_expr(quote!(<#ty as ::chitin_sdk::ToolArgs>::SCHEMA)),
        None => manifest.push_lit("{\"type\":\"object\",\"properties\":{}}"),
    };
    manifest.push_lit(&format!(
        ",\"read_only\":{},\"concurrency_safe\":{}}}",
        options.read_only, options.concurrency_safe
    ));
    let manifest = manifest.to_const_expr();

    let span = Span::call_site();
    let args_json = if args_ty.is_some() {
        Ident::new("args_json", span)
    } else {
        Ident::new("_args_json", span)
    };
    let ctx = if has_ctx {
        Ident::new("ctx", span)
    } else {
        Ident::new("_ctx", span)
    };
    let parse = args_ty.map(|ty| {
        quote! {
            let args: #ty = ::chitin_sdk::__private::parse_args::<#ty>(#args_json)?;
        }
    });
    // Errors about the return type point at it.
    let ret_span = match &sig.output {
        syn::ReturnType::Type(_, ty) => ty.span(),
        syn::ReturnType::Default => fn_ident.span(),
    };
    let invoke = quote_spanned! {ret_span=>
        ::chitin_sdk::__private::IntoToolResult::into_tool_result(#fn_ident(#(#call_args),*))
    };
    let call = quote! {
        pub fn call(
            #args_json: &str,
            #ctx: &::chitin_sdk::Context,
        ) -> ::core::result::Result<::std::string::String, ::chitin_sdk::ToolError> {
            #parse
            #invoke
        }
    };
    Ok((name, manifest, call))
}
