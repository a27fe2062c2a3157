//! JSON text built at macro time, with holes for `&'static str` constants
//! that are only known when the plugin crate is compiled (the schemas of
//! nested types), joined by `chitin_sdk::__private::concat_str!`.

use proc_macro2::TokenStream;
use quote::quote;

/// JSON string literal for `s`.
pub fn string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                out.push_str(&format!("\\u{:04x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

enum Frag {
    Lit(String),
    /// An expression of type `&'static str`, usable in a `const`.
    Expr(TokenStream),
}

/// A piece of JSON text under construction.
#[derive(Default)]
pub struct Text(Vec<Frag>);

impl Text {
    pub fn lit(s: impl Into<String>) -> Self {
        Text(vec![Frag::Lit(s.into())])
    }

    pub fn expr(e: TokenStream) -> Self {
        Text(vec![Frag::Expr(e)])
    }

    pub fn push_lit(&mut self, s: &str) -> &mut Self {
        match self.0.last_mut() {
            Some(Frag::Lit(last)) => last.push_str(s),
            _ => self.0.push(Frag::Lit(s.to_string())),
        }
        self
    }

    pub fn push_expr(&mut self, e: TokenStream) -> &mut Self {
        self.0.push(Frag::Expr(e));
        self
    }

    pub fn push(&mut self, other: Text) -> &mut Self {
        for frag in other.0 {
            match frag {
                Frag::Lit(s) => self.push_lit(&s),
                Frag::Expr(e) => self.push_expr(e),
            };
        }
        self
    }

    /// The whole text, when it has no holes.
    pub fn as_literal(&self) -> Option<String> {
        match self.0.as_slice() {
            [] => Some(String::new()),
            [Frag::Lit(s)] => Some(s.clone()),
            _ => None,
        }
    }

    /// A `&'static str` constant expression for the text.
    pub fn to_const_expr(&self) -> TokenStream {
        if let Some(s) = self.as_literal() {
            return quote!(#s);
        }
        let parts = self.0.iter().map(|frag| match frag {
            Frag::Lit(s) => quote!(#s),
            Frag::Expr(e) => e.clone(),
        });
        quote!(::chitin_sdk::__private::concat_str!(#(#parts),*))
    }
}

/// A JSON Schema under construction.
pub enum Schema {
    /// An object whose members we know: key and JSON value text, in order.
    Object(Vec<(String, Text)>),
    /// `<T as ToolArgs>::SCHEMA`: the text of a JSON object, known when the
    /// plugin crate is compiled.
    External(TokenStream),
    /// The complete text of a JSON object.
    Text(Text),
}

impl Schema {
    /// An object schema from literal members (`("type", "\"string\"")`).
    pub fn literal(members: &[(&str, &str)]) -> Schema {
        Schema::Object(
            members
                .iter()
                .map(|(k, v)| (k.to_string(), Text::lit(*v)))
                .collect(),
        )
    }

    /// The schema with `"description"` added: after `"type"` when the
    /// members are known, first otherwise.
    pub fn describe(self, description: Option<&str>) -> Schema {
        let Some(description) = description else {
            return self;
        };
        let value = Text::lit(string(description));
        match self {
            Schema::Object(mut members) => {
                members.retain(|(k, _)| k != "description");
                let at = members
                    .iter()
                    .position(|(k, _)| k == "type")
                    .map_or(0, |i| i + 1);
                members.insert(at, ("description".into(), value));
                Schema::Object(members)
            }
            Schema::External(schema) => {
                let mut text = Text::lit("{\"description\":");
                text.push(value);
                text.push_expr(quote!(::chitin_sdk::__private::object_sep(#schema)));
                text.push_expr(quote!(::chitin_sdk::__private::object_tail(#schema)));
                Schema::Text(text)
            }
            Schema::Text(text) => {
                // Only `describe` makes `Text`, and nothing describes twice.
                Schema::Text(text)
            }
        }
    }

    pub fn into_text(self) -> Text {
        match self {
            Schema::External(e) => Text::expr(e),
            Schema::Text(text) => text,
            Schema::Object(members) => {
                let mut text = Text::lit("{");
                for (i, (key, value)) in members.into_iter().enumerate() {
                    if i > 0 {
                        text.push_lit(",");
                    }
                    text.push_lit(&string(&key)).push_lit(":").push(value);
                }
                text.push_lit("}");
                text
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes() {
        assert_eq!(string("a\"b\\c\nd\u{1}"), r#""a\"b\\c\nd\u0001""#);
        assert_eq!(string("héllo"), "\"héllo\"");
    }

    #[test]
    fn describe_literal() {
        let s = Schema::literal(&[("type", "\"string\"")]).describe(Some("Who \"to\" greet"));
        assert_eq!(
            s.into_text().as_literal().unwrap(),
            r#"{"type":"string","description":"Who \"to\" greet"}"#
        );
    }
}
