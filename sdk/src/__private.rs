//! Support for the code that `#[derive(ToolArgs)]`, `#[tool]` and `plugin!`
//! generate. Not a public API: it changes without notice.

use crate::{Context, ToolError, ToolOutput};

pub use serde;
pub use serde_json;
pub use wit_bindgen;

/// The signature of the dispatcher `#[tool]` generates.
pub type ToolFn = fn(&str, &Context) -> Result<String, ToolError>;

// ---------------------------------------------------------------------------
// Compile-time strings

/// The total length of `parts`.
pub const fn concat_len(parts: &[&str]) -> usize {
    let mut len = 0;
    let mut i = 0;
    while i < parts.len() {
        len += parts[i].len();
        i += 1;
    }
    len
}

/// `parts` concatenated; `N` must be [`concat_len`]`(parts)`.
pub const fn concat<const N: usize>(parts: &[&str]) -> [u8; N] {
    let mut out = [0u8; N];
    let mut at = 0;
    let mut i = 0;
    while i < parts.len() {
        let bytes = parts[i].as_bytes();
        let mut j = 0;
        while j < bytes.len() {
            out[at] = bytes[j];
            at += 1;
            j += 1;
        }
        i += 1;
    }
    assert!(at == N, "concat: N is not the length of the parts");
    out
}

/// The bytes of `s` as an array; `N` must be `s.len()`.
pub const fn to_array<const N: usize>(s: &str) -> [u8; N] {
    concat::<N>(&[s])
}

/// `bytes` as text (they are the concatenation of `&str`s).
pub const fn utf8(bytes: &'static [u8]) -> &'static str {
    match core::str::from_utf8(bytes) {
        Ok(s) => s,
        Err(_) => panic!("concat: not UTF-8"),
    }
}

/// Concatenates `&'static str` constant expressions into one, at compile
/// time.
#[doc(hidden)]
#[macro_export]
macro_rules! __chitin_concat {
    ($($part:expr),* $(,)?) => {{
        const PARTS: &[&str] = &[$($part),*];
        const LEN: usize = $crate::__private::concat_len(PARTS);
        const BYTES: [u8; LEN] = $crate::__private::concat::<LEN>(PARTS);
        $crate::__private::utf8(&BYTES)
    }};
}
pub use crate::__chitin_concat as concat_str;

/// The JSON object `schema` without its opening brace (the text after `{`),
/// so that members can be put in front of it: `{"description":"..."` +
/// [`object_sep`]`(schema)` + `object_tail(schema)`.
pub const fn object_tail(schema: &'static str) -> &'static str {
    let bytes = schema.as_bytes();
    let start = skip_ws(bytes, 0);
    if start >= bytes.len() || bytes[start] != b'{' {
        panic!("ToolArgs::SCHEMA must be a JSON object");
    }
    let (_, tail) = bytes.split_at(start + 1);
    match core::str::from_utf8(tail) {
        Ok(s) => s,
        Err(_) => panic!("ToolArgs::SCHEMA is not UTF-8"),
    }
}

/// `","` if the JSON object `schema` has members, `""` if it is `{}`.
pub const fn object_sep(schema: &'static str) -> &'static str {
    let tail = object_tail(schema).as_bytes();
    let at = skip_ws(tail, 0);
    if at < tail.len() && tail[at] == b'}' {
        ""
    } else {
        ","
    }
}

const fn skip_ws(bytes: &[u8], mut at: usize) -> usize {
    while at < bytes.len() && matches!(bytes[at], b' ' | b'\t' | b'\n' | b'\r') {
        at += 1;
    }
    at
}

/// `a == b`, in const context (`plugin!` checks tool names are unique).
pub const fn str_eq(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() != b.len() {
        return false;
    }
    let mut i = 0;
    while i < a.len() {
        if a[i] != b[i] {
            return false;
        }
        i += 1;
    }
    true
}

// ---------------------------------------------------------------------------
// Runtime

/// Deserializes a tool's arguments.
pub fn parse_args<T: serde::de::DeserializeOwned>(args_json: &str) -> Result<T, ToolError> {
    serde_json::from_str(args_json).map_err(|err| ToolError::InvalidArgs(err.to_string()))
}

/// Converts what a `#[tool]` function returns.
#[diagnostic::on_unimplemented(
    message = "a #[tool] function must return `Result<String, ToolError>`, not `{Self}`",
    note = "more generally `Result<T, E>` with `T: ToolOutput` (String, &str, serde_json::Value) and `E: Into<ToolError>`"
)]
pub trait IntoToolResult {
    fn into_tool_result(self) -> Result<String, ToolError>;
}

impl<T: ToolOutput, E: Into<ToolError>> IntoToolResult for Result<T, E> {
    fn into_tool_result(self) -> Result<String, ToolError> {
        self.map(ToolOutput::into_text).map_err(Into::into)
    }
}

/// Runs the tool `name` among `tools`.
pub fn dispatch(
    tools: &[(&str, ToolFn)],
    name: &str,
    args_json: &str,
    ctx: &Context,
) -> Result<String, ToolError> {
    match tools.iter().find(|(tool, _)| *tool == name) {
        Some((_, call)) => call(args_json, ctx),
        None => {
            let names: Vec<&str> = tools.iter().map(|(tool, _)| *tool).collect();
            Err(ToolError::UnknownTool(format!(
                "this plugin has no tool `{name}`; its tools are: {}",
                names.join(", ")
            )))
        }
    }
}

/// The body of the exported `chitin:plugin/tool.invoke`.
pub fn guest_invoke(
    invoke: fn(&str, &str, &Context) -> Result<String, ToolError>,
    name: String,
    args_json: String,
    ctx: crate::bindings::chitin::plugin::types::CallContext,
) -> Result<String, crate::bindings::chitin::plugin::types::ToolError> {
    invoke(&name, &args_json, &Context::from(ctx)).map_err(Into::into)
}
