//! `#[derive(ToolArgs)]`: a JSON Schema as a compile-time constant.

use proc_macro2::TokenStream;
use quote::{ToTokens, quote};
use syn::spanned::Spanned;
use syn::{
    Data, DataEnum, DeriveInput, Error, Expr, ExprLit, Fields, GenericArgument, Lit, PathArguments,
    Type, ext::IdentExt,
};

use crate::attrs;
use crate::json::{self, Schema, Text};

pub fn derive(input: &DeriveInput) -> syn::Result<TokenStream> {
    if !input.generics.params.is_empty() {
        return Err(Error::new(
            input.generics.span(),
            "ToolArgs cannot be derived for a generic type: its schema must be known when the plugin is compiled",
        ));
    }
    let container = attrs::container(&input.attrs)?;
    if let Some((name, span)) = &container.unsupported {
        return Err(Error::new(
            *span,
            format!(
                "ToolArgs does not support #[serde({name})]: the schema would not match what serde accepts"
            ),
        ));
    }
    let schema = match &input.data {
        Data::Struct(data) => match &data.fields {
            Fields::Named(fields) => struct_schema(&container, fields.named.iter())?,
            _ => {
                return Err(Error::new(
                    input.ident.span(),
                    "ToolArgs needs a struct with named fields (`struct Args { name: String }`, or `struct Args {}` for none): a tool's arguments are a JSON object",
                ));
            }
        },
        Data::Enum(data) => enum_schema(&container, data)?,
        Data::Union(_) => {
            return Err(Error::new(
                input.ident.span(),
                "ToolArgs cannot be derived for a union",
            ));
        }
    };
    Ok(impl_tool_args(input, schema.into_text().to_const_expr()))
}

/// `impl ToolArgs for #ident { const SCHEMA = #schema; }`.
pub fn impl_tool_args(input: &DeriveInput, schema: TokenStream) -> TokenStream {
    let ident = &input.ident;
    quote! {
        #[automatically_derived]
        impl ::chitin_sdk::ToolArgs for #ident {
            const SCHEMA: &'static str = #schema;
        }
    }
}

fn struct_schema<'a>(
    container: &attrs::Container,
    fields: impl Iterator<Item = &'a syn::Field>,
) -> syn::Result<Schema> {
    let mut properties = Text::lit("{");
    let mut required = Vec::new();
    let mut count = 0;
    for field in fields {
        let attrs = attrs::field(&field.attrs)?;
        if attrs.skip {
            continue;
        }
        if let Some(span) = attrs.flatten {
            return Err(Error::new(
                span,
                "ToolArgs does not support #[serde(flatten)]: write the fields out",
            ));
        }
        let ident = field
            .ident
            .as_ref()
            .expect("named field")
            .unraw()
            .to_string();
        let name = match (&attrs.rename, container.rename_all) {
            (Some(name), _) => name.clone(),
            (None, Some(rule)) => rule.apply_to_field(&ident),
            (None, None) => ident,
        };
        let (ty, optional) = match option_inner(&field.ty) {
            Some(inner) => (inner, true),
            None => (&field.ty, false),
        };
        let schema = type_schema(ty)?.describe(attrs::docs(&field.attrs).as_deref());
        if count > 0 {
            properties.push_lit(",");
        }
        properties
            .push_lit(&json::string(&name))
            .push_lit(":")
            .push(schema.into_text());
        count += 1;
        if !(optional || attrs.default || container.default) {
            required.push(json::string(&name));
        }
    }
    properties.push_lit("}");

    let mut members = vec![
        ("type".to_string(), Text::lit("\"object\"")),
        ("properties".to_string(), properties),
    ];
    if !required.is_empty() {
        members.push((
            "required".to_string(),
            Text::lit(format!("[{}]", required.join(","))),
        ));
    }
    if container.deny_unknown_fields {
        members.push(("additionalProperties".to_string(), Text::lit("false")));
    }
    Ok(Schema::Object(members))
}

fn enum_schema(container: &attrs::Container, data: &DataEnum) -> syn::Result<Schema> {
    let mut names = Vec::new();
    let mut other = false;
    for variant in &data.variants {
        if !matches!(variant.fields, Fields::Unit) {
            return Err(Error::new(
                variant.span(),
                "ToolArgs supports enums of unit variants only (`enum Mode { Fast, Slow }`, a string in JSON)",
            ));
        }
        let attrs = attrs::variant(&variant.attrs)?;
        if attrs.skip {
            continue;
        }
        other |= attrs.other;
        let ident = variant.ident.unraw().to_string();
        let name = match (&attrs.rename, container.rename_all) {
            (Some(name), _) => name.clone(),
            (None, Some(rule)) => rule.apply_to_variant(&ident),
            (None, None) => ident,
        };
        for name in std::iter::once(name).chain(attrs.aliases) {
            let name = json::string(&name);
            if !names.contains(&name) {
                names.push(name);
            }
        }
    }
    let enum_list = format!("[{}]", names.join(","));
    if other {
        // `#[serde(other)]` takes any string.
        Ok(Schema::literal(&[("type", "\"string\"")]))
    } else {
        Ok(Schema::literal(&[
            ("type", "\"string\""),
            ("enum", &enum_list),
        ]))
    }
}

/// `T` of `Option<T>`.
fn option_inner(ty: &Type) -> Option<&Type> {
    match ty {
        Type::Group(g) => option_inner(&g.elem),
        Type::Paren(p) => option_inner(&p.elem),
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last()?;
            match (
                last.ident.to_string().as_str(),
                type_args(&last.arguments).as_slice(),
            ) {
                ("Option", [inner]) => Some(inner),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The type arguments of `X<...>` (lifetimes left out).
fn type_args(args: &PathArguments) -> Vec<&Type> {
    match args {
        PathArguments::AngleBracketed(args) => args
            .args
            .iter()
            .filter_map(|arg| match arg {
                GenericArgument::Type(ty) => Some(ty),
                _ => None,
            })
            .collect(),
        _ => Vec::new(),
    }
}

/// Literal schemas of the primitive types; the same text as their
/// `ToolArgs` impls in the SDK.
fn primitive(name: &str) -> Option<&'static [(&'static str, &'static str)]> {
    Some(match name {
        "String" | "str" | "PathBuf" => &[("type", "\"string\"")],
        "char" => &[
            ("type", "\"string\""),
            ("minLength", "1"),
            ("maxLength", "1"),
        ],
        "bool" => &[("type", "\"boolean\"")],
        "f32" | "f64" => &[("type", "\"number\"")],
        "i64" | "i128" | "isize" => &[("type", "\"integer\"")],
        "u64" | "u128" | "usize" => &[("type", "\"integer\""), ("minimum", "0")],
        "i8" => &[
            ("type", "\"integer\""),
            ("minimum", "-128"),
            ("maximum", "127"),
        ],
        "i16" => &[
            ("type", "\"integer\""),
            ("minimum", "-32768"),
            ("maximum", "32767"),
        ],
        "i32" => &[
            ("type", "\"integer\""),
            ("minimum", "-2147483648"),
            ("maximum", "2147483647"),
        ],
        "u8" => &[
            ("type", "\"integer\""),
            ("minimum", "0"),
            ("maximum", "255"),
        ],
        "u16" => &[
            ("type", "\"integer\""),
            ("minimum", "0"),
            ("maximum", "65535"),
        ],
        "u32" => &[
            ("type", "\"integer\""),
            ("minimum", "0"),
            ("maximum", "4294967295"),
        ],
        _ => return None,
    })
}

fn array(items: Schema, extra: &[(&str, String)]) -> Schema {
    let mut members = vec![
        ("type".to_string(), Text::lit("\"array\"")),
        ("items".to_string(), items.into_text()),
    ];
    for (k, v) in extra {
        members.push((k.to_string(), Text::lit(v.clone())));
    }
    Schema::Object(members)
}

/// The schema of a field's type.
pub fn type_schema(ty: &Type) -> syn::Result<Schema> {
    match ty {
        Type::Group(g) => type_schema(&g.elem),
        Type::Paren(p) => type_schema(&p.elem),
        Type::Reference(r) => type_schema(&r.elem),
        Type::Slice(s) => Ok(array(type_schema(&s.elem)?, &[])),
        Type::Array(a) => {
            let items = type_schema(&a.elem)?;
            match &a.len {
                Expr::Lit(ExprLit {
                    lit: Lit::Int(n), ..
                }) => {
                    let n = n.base10_digits().to_string();
                    Ok(array(items, &[("minItems", n.clone()), ("maxItems", n)]))
                }
                _ => Ok(array(items, &[])),
            }
        }
        Type::Path(p) if p.qself.is_none() => {
            let last = p.path.segments.last().expect("a path has a segment");
            let name = last.ident.to_string();
            let args = type_args(&last.arguments);
            match (name.as_str(), args.as_slice()) {
                ("Option" | "Box" | "Rc" | "Arc" | "Cow", [inner]) => type_schema(inner),
                ("Vec" | "VecDeque" | "LinkedList", [inner]) => Ok(array(type_schema(inner)?, &[])),
                ("HashSet" | "BTreeSet" | "IndexSet", [inner]) => Ok(array(
                    type_schema(inner)?,
                    &[("uniqueItems", "true".to_string())],
                )),
                ("HashMap" | "BTreeMap" | "IndexMap", [_key, value]) => Ok(Schema::Object(vec![
                    ("type".to_string(), Text::lit("\"object\"")),
                    (
                        "additionalProperties".to_string(),
                        type_schema(value)?.into_text(),
                    ),
                ])),
                (name, []) if p.path.segments.len() == 1 && primitive(name).is_some() => {
                    Ok(Schema::literal(primitive(name).expect("checked")))
                }
                _ => Ok(external(ty)),
            }
        }
        Type::Path(_) => Ok(external(ty)),
        _ => Err(Error::new(
            ty.span(),
            format!(
                "ToolArgs does not support the type `{}`; use a struct or enum deriving ToolArgs",
                ty.to_token_stream()
            ),
        )),
    }
}

fn external(ty: &Type) -> Schema {
    Schema::External(quote!(<#ty as ::chitin_sdk::ToolArgs>::SCHEMA))
}
