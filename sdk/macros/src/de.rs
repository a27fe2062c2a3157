//! `#[derive(Deserialize)]` for crates that do not depend on serde.
//!
//! serde's own derive expands to `extern crate serde`, which only resolves
//! when the crate depends on serde. This derive puts a copy of the type
//! (its fields and `#[serde]` attributes) through serde's derive with
//! `#[serde(crate = "::chitin_sdk::__private::serde", remote = "Type")]`, and
//! implements `Deserialize` for the real type with it, so every serde
//! attribute works as usual.

use proc_macro2::TokenStream;
use quote::{format_ident, quote};
use syn::{Attribute, Data, DeriveInput, Error, GenericParam, Visibility, spanned::Spanned};

use crate::attrs;

fn keep(attrs: &mut Vec<Attribute>) {
    attrs.retain(|a| a.path().is_ident("serde") || a.path().is_ident("cfg"));
}

fn strip_fields(fields: &mut syn::Fields) {
    for field in fields.iter_mut() {
        keep(&mut field.attrs);
        field.vis = Visibility::Inherited;
    }
}

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    if let Some(lifetime) = input.generics.lifetimes().next() {
        return Err(Error::new(
            lifetime.span(),
            "chitin_sdk's Deserialize does not support borrowed types; depend on serde and use serde::Deserialize",
        ));
    }
    let container = attrs::container(&input.attrs)?;
    let ident = &input.ident;
    let shadow_ident = format_ident!("__ChitinDeserialize{}", ident);

    let mut shadow = input.clone();
    shadow.ident = shadow_ident.clone();
    shadow.vis = Visibility::Inherited;
    keep(&mut shadow.attrs);
    match &mut shadow.data {
        Data::Struct(data) => strip_fields(&mut data.fields),
        Data::Enum(data) => {
            for variant in data.variants.iter_mut() {
                keep(&mut variant.attrs);
                strip_fields(&mut variant.fields);
            }
        }
        Data::Union(_) => {
            return Err(Error::new(ident.span(), "serde cannot deserialize a union"));
        }
    }

    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // serde adds the generic arguments itself.
    let remote = ident.to_string();
    let crate_attr = if container.has_crate {
        quote!()
    } else {
        quote!(#[serde(crate = "::chitin_sdk::__private::serde")])
    };

    // `impl<'de, T: Deserialize<'de>, ...>`.
    let mut params: Vec<TokenStream> = vec![quote!('de)];
    for param in &input.generics.params {
        params.push(match param {
            GenericParam::Type(t) => {
                let mut t = t.clone();
                t.default = None;
                t.eq_token = None;
                t.bounds.push(syn::parse_quote!(
                    ::chitin_sdk::__private::serde::Deserialize<'de>
                ));
                quote!(#t)
            }
            GenericParam::Const(c) => {
                let mut c = c.clone();
                c.default = None;
                c.eq_token = None;
                quote!(#c)
            }
            GenericParam::Lifetime(l) => quote!(#l),
        });
    }

    // With `#[serde(default)]` serde requires the copy to implement `Default`
    // too: it is the real type's default, moved over.
    let default_impl = if container.default_flag {
        let body = match &input.data {
            Data::Struct(data) => match &data.fields {
                syn::Fields::Named(fields) => {
                    let names = fields.named.iter().map(|f| &f.ident);
                    quote!(#shadow_ident { #(#names: real.#names),* })
                }
                syn::Fields::Unnamed(fields) => {
                    let index = (0..fields.unnamed.len()).map(syn::Index::from);
                    quote!(#shadow_ident(#(real.#index),*))
                }
                syn::Fields::Unit => quote!(#shadow_ident),
            },
            // serde rejects `default` on enums itself.
            _ => quote!(::core::unreachable!()),
        };
        let mut generics = input.generics.clone();
        let where_clause = generics.make_where_clause();
        where_clause
            .predicates
            .push(syn::parse_quote!(#ident #ty_generics: ::core::default::Default));
        quote! {
            impl #impl_generics ::core::default::Default for #shadow_ident #ty_generics #where_clause {
                fn default() -> Self {
                    #[allow(unused_variables)]
                    let real = <#ident #ty_generics as ::core::default::Default>::default();
                    #body
                }
            }
        }
    } else {
        quote!()
    };

    Ok(quote! {
        const _: () = {
            #[derive(::chitin_sdk::__private::serde::Deserialize)]
            #crate_attr
            #[serde(remote = #remote)]
            #[allow(dead_code, non_camel_case_types, clippy::all)]
            #shadow

            #default_impl

            #[automatically_derived]
            impl<#(#params),*> ::chitin_sdk::__private::serde::Deserialize<'de> for #ident #ty_generics #where_clause {
                fn deserialize<__D>(deserializer: __D) -> ::core::result::Result<Self, __D::Error>
                where
                    __D: ::chitin_sdk::__private::serde::Deserializer<'de>,
                {
                    #shadow_ident::deserialize(deserializer)
                }
            }
        };
    })
}
