//! The parts of `#[serde(...)]` attributes that change a schema, and doc
//! comments.

use proc_macro2::{Span, TokenStream};
use syn::meta::ParseNestedMeta;
use syn::{Attribute, Expr, ExprLit, Lit, LitStr, Meta, Token, parenthesized};

use crate::case::RenameRule;

/// Container attributes (`#[serde(...)]` on the struct or enum).
#[derive(Default)]
pub struct Container {
    pub rename_all: Option<RenameRule>,
    pub default: bool,
    /// `#[serde(default)]`, as opposed to `#[serde(default = "path")]`.
    pub default_flag: bool,
    pub deny_unknown_fields: bool,
    /// `#[serde(crate = "...")]` is present.
    pub has_crate: bool,
    /// Representation changes the schema does not follow (`tag`, ...).
    pub unsupported: Option<(String, Span)>,
}

/// Field attributes.
#[derive(Default)]
pub struct Field {
    pub rename: Option<String>,
    pub default: bool,
    pub skip: bool,
    pub flatten: Option<Span>,
}

/// Variant attributes.
#[derive(Default)]
pub struct Variant {
    pub rename: Option<String>,
    pub aliases: Vec<String>,
    pub skip: bool,
    pub other: bool,
}

fn is_serde(attr: &Attribute) -> bool {
    attr.path().is_ident("serde")
}

/// Consumes the value of an attribute we do not interpret: `= expr` or
/// `(...)`, or nothing.
fn skip_value(meta: &ParseNestedMeta) -> syn::Result<()> {
    if meta.input.peek(Token![=]) {
        meta.value()?.parse::<Expr>()?;
    } else if meta.input.peek(syn::token::Paren) {
        let content;
        parenthesized!(content in meta.input);
        content.parse::<TokenStream>()?;
    }
    Ok(())
}

/// `key = "x"` gives `x`; `key(deserialize = "x", serialize = "y")` gives
/// `x`; `key(serialize = "y")` gives nothing.
fn deserialize_name(meta: &ParseNestedMeta) -> syn::Result<Option<LitStr>> {
    if meta.input.peek(Token![=]) {
        return Ok(Some(meta.value()?.parse()?));
    }
    let mut name = None;
    meta.parse_nested_meta(|inner| {
        if inner.path.is_ident("deserialize") {
            name = Some(inner.value()?.parse()?);
        } else {
            skip_value(&inner)?;
        }
        Ok(())
    })?;
    Ok(name)
}

fn ident(meta: &ParseNestedMeta) -> String {
    meta.path
        .get_ident()
        .map(|i| i.to_string())
        .unwrap_or_default()
}

pub fn container(attrs: &[Attribute]) -> syn::Result<Container> {
    let mut out = Container::default();
    for attr in attrs.iter().filter(|a| is_serde(a)) {
        attr.parse_nested_meta(|meta| {
            match ident(&meta).as_str() {
                "rename_all" => {
                    if let Some(lit) = deserialize_name(&meta)? {
                        out.rename_all = Some(
                            RenameRule::parse(&lit.value())
                                .map_err(|e| syn::Error::new(lit.span(), e))?,
                        );
                    }
                }
                "default" => {
                    out.default_flag |= !meta.input.peek(Token![=]);
                    skip_value(&meta)?;
                    out.default = true;
                }
                "deny_unknown_fields" => out.deny_unknown_fields = true,
                "crate" => {
                    skip_value(&meta)?;
                    out.has_crate = true;
                }
                name @ ("tag" | "content" | "untagged" | "transparent" | "from" | "try_from"
                | "remote") => {
                    out.unsupported
                        .get_or_insert((name.to_string(), meta.path.span_of()));
                    skip_value(&meta)?;
                }
                _ => skip_value(&meta)?,
            }
            Ok(())
        })?;
    }
    Ok(out)
}

pub fn field(attrs: &[Attribute]) -> syn::Result<Field> {
    let mut out = Field::default();
    for attr in attrs.iter().filter(|a| is_serde(a)) {
        attr.parse_nested_meta(|meta| {
            match ident(&meta).as_str() {
                "rename" => {
                    if let Some(lit) = deserialize_name(&meta)? {
                        out.rename = Some(lit.value());
                    }
                }
                "default" => {
                    skip_value(&meta)?;
                    out.default = true;
                }
                "skip" | "skip_deserializing" => out.skip = true,
                "flatten" => out.flatten = Some(meta.path.span_of()),
                _ => skip_value(&meta)?,
            }
            Ok(())
        })?;
    }
    Ok(out)
}

pub fn variant(attrs: &[Attribute]) -> syn::Result<Variant> {
    let mut out = Variant::default();
    for attr in attrs.iter().filter(|a| is_serde(a)) {
        attr.parse_nested_meta(|meta| {
            match ident(&meta).as_str() {
                "rename" => {
                    if let Some(lit) = deserialize_name(&meta)? {
                        out.rename = Some(lit.value());
                    }
                }
                "alias" => {
                    let lit: LitStr = meta.value()?.parse()?;
                    out.aliases.push(lit.value());
                }
                "skip" | "skip_deserializing" => out.skip = true,
                "other" => out.other = true,
                _ => skip_value(&meta)?,
            }
            Ok(())
        })?;
    }
    Ok(out)
}

trait SpanOf {
    fn span_of(&self) -> Span;
}

impl SpanOf for syn::Path {
    fn span_of(&self) -> Span {
        self.segments
            .first()
            .map_or_else(Span::call_site, |s| s.ident.span())
    }
}

/// The doc comment: each line without its first space, blank lines at
/// either end dropped, lines joined with `\n`. `None` when there is none.
pub fn docs(attrs: &[Attribute]) -> Option<String> {
    let mut lines = Vec::new();
    for attr in attrs {
        let Meta::NameValue(nv) = &attr.meta else {
            continue;
        };
        if !nv.path.is_ident("doc") {
            continue;
        }
        let Expr::Lit(ExprLit {
            lit: Lit::Str(s), ..
        }) = &nv.value
        else {
            continue;
        };
        for line in s.value().split('\n') {
            let line = line.strip_prefix(' ').unwrap_or(line);
            lines.push(line.trim_end().to_string());
        }
    }
    while lines.first().is_some_and(|l| l.trim().is_empty()) {
        lines.remove(0);
    }
    while lines.last().is_some_and(|l| l.trim().is_empty()) {
        lines.pop();
    }
    if lines.is_empty() {
        None
    } else {
        Some(lines.join("\n"))
    }
}
