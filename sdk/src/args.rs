/// A type whose JSON Schema is known at compile time: a tool's arguments, or
/// a type used inside them.
///
/// Derive it (`#[derive(Deserialize, ToolArgs)]`) on a struct with named
/// fields (schema `{"type":"object",...}`) or on an enum of unit variants
/// (schema `{"type":"string","enum":[...]}`). It is implemented here for the
/// primitive types, `PathBuf` and `serde_json::Value`; `Option`, `Vec`,
/// `VecDeque`, sets, `Box`/`Rc`/`Arc`, arrays and `BTreeMap`/`HashMap` with
/// string keys are understood by the derive where they are written in a
/// field's type.
#[diagnostic::on_unimplemented(
    message = "`{Self}` has no JSON Schema: it does not implement `ToolArgs`",
    note = "derive it: `#[derive(Deserialize, ToolArgs)]` (structs with named fields, enums of unit variants)",
    note = "`Option`, `Vec`, maps and the like are understood only when written out in a field's type, not through a type alias"
)]
pub trait ToolArgs {
    /// The JSON Schema, as JSON text. For a tool's arguments it is an object
    /// schema (`{"type":"object",...}`).
    const SCHEMA: &'static str;
}

macro_rules! schema {
    ($schema:literal: $($ty:ty),* $(,)?) => {
        $(impl ToolArgs for $ty {
            const SCHEMA: &'static str = $schema;
        })*
    };
}

schema!(r#"{"type":"string"}"#: String, str, std::path::PathBuf);
schema!(r#"{"type":"string","minLength":1,"maxLength":1}"#: char);
schema!(r#"{"type":"boolean"}"#: bool);
schema!(r#"{"type":"number"}"#: f32, f64);
schema!(r#"{"type":"integer"}"#: i64, i128, isize);
schema!(r#"{"type":"integer","minimum":0}"#: u64, u128, usize);
schema!(r#"{"type":"integer","minimum":-128,"maximum":127}"#: i8);
schema!(r#"{"type":"integer","minimum":-32768,"maximum":32767}"#: i16);
schema!(r#"{"type":"integer","minimum":-2147483648,"maximum":2147483647}"#: i32);
schema!(r#"{"type":"integer","minimum":0,"maximum":255}"#: u8);
schema!(r#"{"type":"integer","minimum":0,"maximum":65535}"#: u16);
schema!(r#"{"type":"integer","minimum":0,"maximum":4294967295}"#: u32);
schema!("{}": serde_json::Value);
schema!(r#"{"type":"object"}"#: serde_json::Map<String, serde_json::Value>);
