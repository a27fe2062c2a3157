//! The JSON Schemas `#[derive(ToolArgs)]` computes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use chitin_sdk::prelude::*;
use chitin_sdk::serde_json::{self, Value, json};

fn schema<T: ToolArgs + ?Sized>() -> Value {
    serde_json::from_str(T::SCHEMA)
        .unwrap_or_else(|e| panic!("SCHEMA is not JSON ({e}): {}", T::SCHEMA))
}

/// Greeting arguments (container docs are not part of the schema).
#[derive(Debug, Deserialize, ToolArgs)]
struct GreetArgs {
    /// Who to greet.
    name: String,
    /// How many times.
    #[serde(default)]
    times: Option<u32>,
    loud: bool,
}

#[test]
fn basic_struct() {
    assert_eq!(
        schema::<GreetArgs>(),
        json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "description": "Who to greet."},
                "times": {
                    "type": "integer",
                    "description": "How many times.",
                    "minimum": 0,
                    "maximum": 4294967295u32
                },
                "loud": {"type": "boolean"},
            },
            "required": ["name", "loud"],
        })
    );
    // Properties keep the order of the fields.
    assert!(GreetArgs::SCHEMA.starts_with(r#"{"type":"object","properties":{"name":"#));

    // And the derived Deserialize agrees.
    let args: GreetArgs = serde_json::from_str(r#"{"name":"Ada","loud":true}"#).unwrap();
    assert_eq!(
        (args.name.as_str(), args.times, args.loud),
        ("Ada", None, true)
    );
}

#[test]
fn empty_struct() {
    #[derive(Deserialize, ToolArgs)]
    struct NoArgs {}
    assert_eq!(
        schema::<NoArgs>(),
        json!({"type": "object", "properties": {}})
    );
}

#[derive(Debug, PartialEq, Deserialize, ToolArgs)]
#[serde(rename_all = "snake_case")]
enum Mode {
    /// Variant docs are not part of the schema.
    FastAndLoose,
    Careful,
    #[serde(rename = "paranoid!")]
    Paranoid,
    #[serde(skip)]
    #[allow(dead_code)]
    Hidden,
}

#[test]
fn unit_enum() {
    assert_eq!(
        schema::<Mode>(),
        json!({"type": "string", "enum": ["fast_and_loose", "careful", "paranoid!"]})
    );
    let mode: Mode = serde_json::from_str(r#""fast_and_loose""#).unwrap();
    assert_eq!(mode, Mode::FastAndLoose);
    let mode: Mode = serde_json::from_str(r#""paranoid!""#).unwrap();
    assert_eq!(mode, Mode::Paranoid);
}

#[test]
fn enum_rename_rules() {
    #[derive(Deserialize, ToolArgs)]
    #[serde(rename_all = "kebab-case")]
    #[allow(dead_code)]
    enum Kebab {
        OneTwo,
        #[serde(alias = "drei")]
        Three,
    }
    #[derive(Deserialize, ToolArgs)]
    #[serde(rename_all = "SCREAMING_SNAKE_CASE")]
    #[allow(dead_code)]
    enum Screaming {
        OneTwo,
    }
    #[derive(Deserialize, ToolArgs)]
    #[serde(rename_all = "lowercase")]
    #[allow(dead_code)]
    enum Lower {
        OneTwo,
    }
    #[derive(Deserialize, ToolArgs)]
    #[serde(rename_all = "camelCase")]
    #[allow(dead_code)]
    enum Camel {
        OneTwo,
    }
    #[derive(Deserialize, ToolArgs)]
    #[allow(dead_code)]
    enum Other {
        Known,
        #[serde(other)]
        Unknown,
    }
    assert_eq!(
        schema::<Kebab>()["enum"],
        json!(["one-two", "three", "drei"])
    );
    assert_eq!(schema::<Screaming>()["enum"], json!(["ONE_TWO"]));
    assert_eq!(schema::<Lower>()["enum"], json!(["onetwo"]));
    assert_eq!(schema::<Camel>()["enum"], json!(["oneTwo"]));
    // `#[serde(other)]` accepts any string.
    assert_eq!(schema::<Other>(), json!({"type": "string"}));
}

#[derive(Debug, Deserialize, ToolArgs)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct Renamed {
    /// A "quoted" \ path,
    ///   with an indented second line.
    file_path: String,
    #[serde(rename = "n")]
    max_count: usize,
    #[serde(rename(serialize = "ignored", deserialize = "deName"))]
    de_only: i64,
    #[serde(skip)]
    #[allow(dead_code)]
    internal: u8,
    #[serde(default, alias = "tolerant")]
    #[allow(dead_code)]
    lenient: Option<bool>,
}

#[test]
fn renames_and_docs() {
    let s = schema::<Renamed>();
    let props = s["properties"].as_object().unwrap();
    let order: Vec<usize> = ["\"filePath\"", "\"n\"", "\"deName\"", "\"lenient\""]
        .iter()
        .map(|k| Renamed::SCHEMA.find(k).unwrap())
        .collect();
    assert!(order.is_sorted(), "{}", Renamed::SCHEMA);
    assert_eq!(props.len(), 4);
    assert_eq!(
        props["filePath"]["description"],
        "A \"quoted\" \\ path,\n  with an indented second line."
    );
    assert_eq!(props["n"], json!({"type": "integer", "minimum": 0}));
    assert_eq!(s["required"], json!(["filePath", "n", "deName"]));
    assert_eq!(s["additionalProperties"], json!(false));

    let r: Renamed = serde_json::from_str(r#"{"filePath":"a","n":3,"deName":-1}"#).unwrap();
    assert_eq!((r.file_path.as_str(), r.max_count, r.de_only), ("a", 3, -1));
    assert!(
        serde_json::from_str::<Renamed>(r#"{"filePath":"a","n":3,"deName":-1,"x":1}"#).is_err()
    );
}

#[derive(Debug, Default, Deserialize, ToolArgs)]
#[serde(default)]
struct AllDefault {
    a: String,
    b: u16,
}

#[test]
fn container_default() {
    let s = schema::<AllDefault>();
    assert!(s.get("required").is_none(), "{s}");
    assert_eq!(
        s["properties"]["b"],
        json!({"type":"integer","minimum":0,"maximum":65535})
    );
    let d: AllDefault = serde_json::from_str("{}").unwrap();
    assert_eq!((d.a.as_str(), d.b), ("", 0));
}

/// A position.
#[derive(Debug, Deserialize, ToolArgs)]
#[allow(dead_code)]
struct Point {
    x: f64,
    y: f32,
}

#[derive(Debug, Deserialize, ToolArgs)]
#[allow(dead_code)]
struct Containers {
    /// Where to go.
    target: Point,
    nested_bare: Point,
    maybe_point: Option<Point>,
    points: Vec<Point>,
    tags: HashSet<String>,
    queue: VecDeque<i32>,
    sorted: BTreeSet<u64>,
    env: HashMap<String, String>,
    by_name: BTreeMap<String, Point>,
    /// Anything.
    extra: Value,
    extra_bare: Value,
    boxed: Box<Mode>,
    pair: [i8; 2],
    letter: char,
    path: std::path::PathBuf,
    map: serde_json::Map<String, Value>,
    nested_vec: Vec<Vec<Option<String>>>,
    fq: std::string::String,
}

#[test]
fn nested_and_containers() {
    let s = schema::<Containers>();
    let p = &s["properties"];
    let point = json!({
        "type": "object",
        "properties": {"x": {"type": "number"}, "y": {"type": "number"}},
        "required": ["x", "y"],
    });
    let mut described = point.clone();
    described["description"] = json!("Where to go.");
    assert_eq!(p["target"], described);
    assert_eq!(p["nested_bare"], point);
    assert_eq!(p["maybe_point"], point);
    assert_eq!(p["points"], json!({"type": "array", "items": point}));
    assert_eq!(
        p["tags"],
        json!({"type": "array", "items": {"type": "string"}, "uniqueItems": true})
    );
    assert_eq!(p["queue"]["items"]["minimum"], json!(-2147483648i64));
    assert_eq!(p["sorted"]["uniqueItems"], json!(true));
    assert_eq!(
        p["env"],
        json!({"type": "object", "additionalProperties": {"type": "string"}})
    );
    assert_eq!(
        p["by_name"],
        json!({"type": "object", "additionalProperties": point})
    );
    assert_eq!(p["extra"], json!({"description": "Anything."}));
    assert_eq!(p["extra_bare"], json!({}));
    assert_eq!(p["boxed"], schema::<Mode>());
    assert_eq!(
        p["pair"],
        json!({"type": "array", "items": {"type": "integer", "minimum": -128, "maximum": 127}, "minItems": 2, "maxItems": 2})
    );
    assert_eq!(
        p["letter"],
        json!({"type": "string", "minLength": 1, "maxLength": 1})
    );
    assert_eq!(p["path"], json!({"type": "string"}));
    assert_eq!(p["map"], json!({"type": "object"}));
    assert_eq!(
        p["nested_vec"],
        json!({"type": "array", "items": {"type": "array", "items": {"type": "string"}}})
    );
    assert_eq!(p["fq"], json!({"type": "string"}));
    let required = s["required"].as_array().unwrap();
    assert!(!required.contains(&json!("maybe_point")));
    assert_eq!(required.len(), 17);
}

#[test]
fn primitive_impls_match_the_derive() {
    // The derive writes primitives out literally; the impls are used through
    // paths and aliases. They must agree.
    #[derive(Deserialize, ToolArgs)]
    #[allow(dead_code)]
    struct Prims {
        a: i8,
        b: i16,
        c: i32,
        d: i64,
        e: u8,
        f: u16,
        g: u32,
        h: u64,
        i: usize,
        j: isize,
        k: f32,
        l: f64,
        m: bool,
        n: String,
        o: char,
    }
    let s = schema::<Prims>();
    let p = &s["properties"];
    assert_eq!(p["a"], schema::<i8>());
    assert_eq!(p["b"], schema::<i16>());
    assert_eq!(p["c"], schema::<i32>());
    assert_eq!(p["d"], schema::<i64>());
    assert_eq!(p["e"], schema::<u8>());
    assert_eq!(p["f"], schema::<u16>());
    assert_eq!(p["g"], schema::<u32>());
    assert_eq!(p["h"], schema::<u64>());
    assert_eq!(p["i"], schema::<usize>());
    assert_eq!(p["j"], schema::<isize>());
    assert_eq!(p["k"], schema::<f32>());
    assert_eq!(p["l"], schema::<f64>());
    assert_eq!(p["m"], schema::<bool>());
    assert_eq!(p["n"], schema::<String>());
    assert_eq!(p["o"], schema::<char>());
    assert_eq!(schema::<str>(), json!({"type": "string"}));
}

mod aliases {
    use super::*;

    type Count = u32;

    #[derive(Deserialize, ToolArgs)]
    #[allow(dead_code)]
    pub struct ThroughAlias {
        /// Through a type alias: the trait impl of `u32`.
        pub count: Count,
    }
}

#[test]
fn type_alias_uses_the_impl() {
    assert_eq!(
        schema::<aliases::ThroughAlias>()["properties"]["count"],
        json!({"description": "Through a type alias: the trait impl of `u32`.", "type": "integer", "minimum": 0, "maximum": 4294967295u32})
    );
}

#[test]
fn serde_own_derive_works_too() {
    // A plugin that depends on serde may use its derive instead.
    #[derive(serde::Deserialize, ToolArgs)]
    struct WithSerde {
        #[serde(rename = "q")]
        query: String,
    }
    assert_eq!(schema::<WithSerde>()["required"], json!(["q"]));
    let w: WithSerde = serde_json::from_str(r#"{"q":"x"}"#).unwrap();
    assert_eq!(w.query, "x");
}

#[test]
fn sdk_deserialize_on_other_shapes() {
    // The SDK's Deserialize is serde's underneath: any shape serde supports.
    #[derive(Debug, PartialEq, Deserialize)]
    struct Tuple(u8, String);
    #[derive(Debug, PartialEq, Deserialize)]
    #[serde(tag = "kind", rename_all = "lowercase")]
    enum Shape {
        Circle { r: f64 },
        Square { side: f64 },
    }
    #[derive(Debug, PartialEq, Deserialize)]
    struct Generic<T> {
        inner: T,
    }
    assert_eq!(
        serde_json::from_str::<Tuple>(r#"[1,"a"]"#).unwrap(),
        Tuple(1, "a".into())
    );
    assert_eq!(
        serde_json::from_str::<Shape>(r#"{"kind":"circle","r":2.0}"#).unwrap(),
        Shape::Circle { r: 2.0 }
    );
    assert_eq!(
        serde_json::from_str::<Generic<Vec<u8>>>(r#"{"inner":[1,2]}"#).unwrap(),
        Generic { inner: vec![1, 2] }
    );
    let _ = Shape::Square { side: 1.0 };
}
