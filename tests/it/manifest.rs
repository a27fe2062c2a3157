//! Manifest validation (negative cases name the field), reading without
//! instantiation, and `pack` for components built without the SDK.

use chitin::plugins::manifest::{self, Manifest};
use chitin::plugins::{GrantConfig, Limits};
use chitin_testing::{HELLO_WASM, HOSTILE_WASM, OnePlugin, guest_bytes};
use serde_json::{Value, json};

fn valid() -> Value {
    json!({
        "manifest_version": 1,
        "name": "weather",
        "version": "1.0.0",
        "description": "Forecasts",
        "tools": [{
            "name": "forecast",
            "description": "Get a forecast",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "read_only": true,
            "concurrency_safe": true
        }],
        "capabilities": {"workspace": "none", "network": ["api.weather.example"]}
    })
}

/// Applies `edit` to a valid manifest and returns the validation error text.
fn rejected(edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut value = valid();
    edit(&mut value);
    let err = Manifest::from_json(value.to_string().as_bytes()).expect_err("must be rejected");
    (err.field.clone(), err.to_string())
}

#[test]
fn a_valid_manifest_parses() {
    let m = Manifest::from_json(valid().to_string().as_bytes()).unwrap();
    assert_eq!(m.name, "weather");
    assert!(m.tools[0].read_only && m.tools[0].concurrency_safe);
}

#[test]
fn invalid_manifests_name_the_field() {
    let cases: Vec<(&str, Box<dyn FnOnce(&mut Value)>)> = vec![
        ("name", Box::new(|v| v["name"] = json!("Bad Name"))),
        ("name", Box::new(|v| v["name"] = json!(""))),
        ("name", Box::new(|v| v["name"] = json!("x".repeat(65)))),
        ("version", Box::new(|v| v["version"] = json!(" "))),
        ("manifest_version", Box::new(|v| v["manifest_version"] = json!(2))),
        ("tools", Box::new(|v| v["tools"] = json!([]))),
        ("tools[0].name", Box::new(|v| v["tools"][0]["name"] = json!("9lives"))),
        ("tools[0].name", Box::new(|v| v["tools"][0]["name"] = json!("has space"))),
        ("tools[1].name", Box::new(|v| {
            let dup = v["tools"][0].clone();
            v["tools"].as_array_mut().unwrap().push(dup);
        })),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "string"}))),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "object", "properties": {"a": {"type": "nonsense"}}}))),
        ("tools[0].parameters", Box::new(|v| v["tools"][0]["parameters"] = json!({"type": "object", "properties": {"a": {"minLength": "five"}}}))),
        ("capabilities.network[0]", Box::new(|v| v["capabilities"]["network"] = json!(["https://x.com/path"]))),
        ("capabilities.host[0]", Box::new(|v| v["capabilities"]["host"] = json!(["process"]))),
    ];
    for (field, edit) in cases {
        let (got, message) = rejected(edit);
        assert_eq!(got, field, "{message}");
        assert!(message.contains(field), "{message}");
    }
}

#[test]
fn unknown_and_malformed_fields_are_errors() {
    let (_, message) = rejected(|v| v["capabilities"]["workspace"] = json!("everything"));
    assert!(message.contains("everything"), "{message}");
    let (_, message) = rejected(|v| v["tools"][0]["readonly"] = json!(true));
    assert!(message.contains("readonly"), "{message}");
    let err = Manifest::from_json(b"{not json").unwrap_err();
    assert_eq!(err.field, "section");
}

#[test]
fn the_sdk_writes_a_manifest_that_is_read_without_instantiating() {
    let bytes = guest_bytes(HELLO_WASM);
    let m = Manifest::from_component(&bytes).unwrap();
    assert_eq!(m.name, "hello");
    let greet = m.tool("greet").expect("greet tool");
    assert!(greet.read_only && greet.concurrency_safe);
    assert_eq!(greet.parameters["type"], "object");
    assert!(greet.parameters["required"].as_array().unwrap().contains(&json!("name")));
}

#[test]
fn components_without_a_manifest_or_not_components_are_refused() {
    let err = Manifest::from_component(b"\0asm\x01\0\0\0").unwrap_err();
    assert!(err.to_string().contains("chitin plugin pack"), "{err}");
    let err = Manifest::from_component(b"not wasm at all").unwrap_err();
    assert!(err.to_string().contains("not a valid WebAssembly binary"), "{err}");
    let m = Manifest::from_json(valid().to_string().as_bytes()).unwrap();
    let err = manifest::pack(b"\0asm\x01\0\0\0", &m).unwrap_err();
    assert!(err.to_string().contains("not a WebAssembly component"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn pack_replaces_the_manifest_and_the_component_still_runs() {
    let bytes = guest_bytes(HOSTILE_WASM);
    let mut m = Manifest::from_component(&bytes).unwrap();
    m.name = "repacked".into();
    m.description = "packed by the test".into();
    m.tools.retain(|t| t.name == "echo");
    let packed = manifest::pack(&bytes, &m).unwrap();
    assert_eq!(Manifest::from_component(&packed).unwrap(), m, "the top-level section wins over the nested one");
    // Packing twice replaces, not appends.
    m.version = "9.9.9".into();
    let twice = manifest::pack(&packed, &m).unwrap();
    assert_eq!(Manifest::from_component(&twice).unwrap().version, "9.9.9");
    assert!(twice.len() < packed.len() + 64, "one section, not two");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("repacked.wasm");
    std::fs::write(&path, &twice).unwrap();
    let host = OnePlugin::new(path.to_str().unwrap(), GrantConfig::default(), Limits::default());
    assert_eq!(host.plugin.manifest.name, "repacked");
    assert_eq!(host.call("echo", json!({"text": "packed"})).await.unwrap(), "packed");
}

/// A channel manifest using every part of the `channel` section.
fn valid_channel() -> Value {
    json!({
        "manifest_version": 1,
        "name": "chat",
        "version": "1.0.0",
        "capabilities": {"network": ["api.chat.example", "hooks.chat.example:8443"]},
        "channel": {
            "receive": ["poll", "webhook", "socket"],
            "secrets": [
                {"name": "bot_token", "audience": "api.chat.example", "inject": ["path", {"header": "Authorization"}, {"query": "key"}, {"field": "token"}]},
                {"name": "gateway_token", "audience": "hooks.chat.example:8443", "inject": ["frame"]},
                {"name": "signing_secret"}
            ],
            "webhook": {
                "route": "/chat/events",
                "verify": {
                    "kind": "hmac-sha256", "header": "X-Chat-Signature", "timestamp_header": "X-Chat-Timestamp",
                    "basestring": "v0:{timestamp}:{body}", "window_secs": 300, "secret": "signing_secret", "signature_prefix": "v0="
                }
            },
            "limits": {"max_text": 4096, "edit_interval_ms": 1000, "typing_refresh_ms": 4000, "rate_per_chat_per_min": 20},
            "poll": {"interval_ms": 0, "timeout_secs": 50}
        }
    })
}

fn channel_rejected(edit: impl FnOnce(&mut Value)) -> (String, String) {
    let mut value = valid_channel();
    edit(&mut value);
    let err = Manifest::from_json(value.to_string().as_bytes()).expect_err("must be rejected");
    (err.field.clone(), err.to_string())
}

#[test]
fn a_valid_channel_manifest_parses_with_each_verification_recipe() {
    let m = Manifest::from_json(valid_channel().to_string().as_bytes()).unwrap();
    let channel = m.channel.as_ref().unwrap();
    assert!(m.tools.is_empty());
    assert_eq!(channel.secrets.len(), 3);
    assert_eq!(channel.poll.as_ref().unwrap().timeout_secs, 50);
    let mut header = valid_channel();
    header["channel"]["webhook"]["verify"] =
        json!({"kind": "header-secret", "header": "X-Telegram-Bot-Api-Secret-Token", "secret": "signing_secret"});
    Manifest::from_json(header.to_string().as_bytes()).unwrap();
    let mut ed = valid_channel();
    ed["channel"]["webhook"]["verify"] = json!({
        "kind": "ed25519", "header": "X-Signature-Ed25519", "timestamp_header": "X-Signature-Timestamp",
        "basestring": "{timestamp}{body}", "public_key": "ab".repeat(32)
    });
    ed["channel"]["secrets"].as_array_mut().unwrap().pop();
    Manifest::from_json(ed.to_string().as_bytes()).unwrap();
    // Limits and poll timing have defaults; only `receive` is required.
    let minimal = json!({"manifest_version": 1, "name": "p", "version": "1", "channel": {"receive": ["poll"]}});
    let m = Manifest::from_json(minimal.to_string().as_bytes()).unwrap();
    assert_eq!(m.channel.unwrap().limits.max_text, 4096);
}

#[test]
fn invalid_channel_sections_name_the_field() {
    let verify = "channel.webhook.verify";
    let cases: Vec<(String, Box<dyn FnOnce(&mut Value)>)> = vec![
        ("tools".into(), Box::new(|v| v["tools"] = valid()["tools"].clone())),
        ("channel.receive".into(), Box::new(|v| v["channel"]["receive"] = json!([]))),
        ("channel.receive[1]".into(), Box::new(|v| v["channel"]["receive"] = json!(["poll", "poll"]))),
        ("channel.secrets[0].name".into(), Box::new(|v| v["channel"]["secrets"][0]["name"] = json!("Bot-Token"))),
        ("channel.secrets[1].name".into(), Box::new(|v| v["channel"]["secrets"][1]["name"] = json!("bot_token"))),
        ("channel.secrets[0].audience".into(), Box::new(|v| v["channel"]["secrets"][0]["audience"] = json!("evil.example"))),
        ("channel.secrets[0].audience".into(), Box::new(|v| v["channel"]["secrets"][0]["audience"] = json!("https://api.chat.example/"))),
        ("channel.secrets[0].audience".into(), Box::new(|v| {
            v["capabilities"]["network"] = json!(["*.chat.example", "hooks.chat.example:8443"]);
            v["channel"]["secrets"][0]["audience"] = json!("*.chat.example");
        })),
        ("channel.secrets[0].audience".into(), Box::new(|v| { v["channel"]["secrets"][0].as_object_mut().unwrap().remove("audience"); })),
        ("channel.secrets[0].inject".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!([]))),
        ("channel.secrets[0].inject[1]".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!(["path", "path"]))),
        ("channel.secrets[0].inject[1]".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!([{"header": "x-k"}, {"header": "X-K"}]))),
        ("channel.secrets[0].inject[0]".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!([{"header": "x k"}]))),
        ("channel.secrets[0].inject[0]".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!([{"query": "a&b"}]))),
        ("channel.secrets[0].inject[0]".into(), Box::new(|v| v["channel"]["secrets"][0]["inject"] = json!([{"field": ""}]))),
        ("channel.secrets[1].inject[0]".into(), Box::new(|v| v["channel"]["receive"] = json!(["poll", "webhook"]))),
        ("channel.secrets[2]".into(), Box::new(|v| v["channel"]["webhook"]["verify"]["secret"] = json!("bot_token"))),
        ("channel.webhook".into(), Box::new(|v| { v["channel"].as_object_mut().unwrap().remove("webhook"); })),
        ("channel.webhook".into(), Box::new(|v| v["channel"]["receive"] = json!(["poll", "socket"]))),
        ("channel.webhook.route".into(), Box::new(|v| v["channel"]["webhook"]["route"] = json!("chat"))),
        ("channel.webhook.route".into(), Box::new(|v| v["channel"]["webhook"]["route"] = json!("/chat/../admin"))),
        (format!("{verify}.header"), Box::new(|v| v["channel"]["webhook"]["verify"]["header"] = json!("X Sig"))),
        (format!("{verify}.timestamp_header"), Box::new(|v| v["channel"]["webhook"]["verify"]["timestamp_header"] = json!(""))),
        (format!("{verify}.basestring"), Box::new(|v| v["channel"]["webhook"]["verify"]["basestring"] = json!("{body}"))),
        (format!("{verify}.window_secs"), Box::new(|v| v["channel"]["webhook"]["verify"]["window_secs"] = json!(0))),
        (format!("{verify}.secret"), Box::new(|v| v["channel"]["webhook"]["verify"]["secret"] = json!("nope"))),
        (format!("{verify}.signature_prefix"), Box::new(|v| v["channel"]["webhook"]["verify"]["signature_prefix"] = json!("\u{1b}[31m"))),
        (format!("{verify}.public_key"), Box::new(|v| {
            v["channel"]["webhook"]["verify"] = json!({
                "kind": "ed25519", "header": "X-Sig", "timestamp_header": "X-Ts", "basestring": "{timestamp}{body}", "public_key": "xyz"
            });
        })),
        ("channel.limits.max_text".into(), Box::new(|v| v["channel"]["limits"]["max_text"] = json!(0))),
        ("channel.limits.edit_interval_ms".into(), Box::new(|v| v["channel"]["limits"]["edit_interval_ms"] = json!(10))),
        ("channel.limits.typing_refresh_ms".into(), Box::new(|v| v["channel"]["limits"]["typing_refresh_ms"] = json!(100))),
        ("channel.limits.rate_per_chat_per_min".into(), Box::new(|v| v["channel"]["limits"]["rate_per_chat_per_min"] = json!(0))),
        ("channel.poll".into(), Box::new(|v| v["channel"]["receive"] = json!(["webhook", "socket"]))),
        ("channel.poll.interval_ms".into(), Box::new(|v| v["channel"]["poll"]["interval_ms"] = json!(3_600_001))),
        ("channel.poll.timeout_secs".into(), Box::new(|v| v["channel"]["poll"]["timeout_secs"] = json!(0))),
    ];
    for (field, edit) in cases {
        let (got, message) = channel_rejected(edit);
        assert_eq!(got, field, "{message}");
        assert!(message.contains(&field), "{message}");
    }
}

#[test]
fn unknown_channel_fields_and_recipes_are_errors() {
    let (_, message) = channel_rejected(|v| v["channel"]["webhook"]["verify"]["kind"] = json!("md5"));
    assert!(message.contains("md5"), "{message}");
    let (_, message) = channel_rejected(|v| v["channel"]["receive"] = json!(["carrier-pigeon"]));
    assert!(message.contains("carrier-pigeon"), "{message}");
    let (_, message) = channel_rejected(|v| v["channel"]["limits"]["max_txt"] = json!(1));
    assert!(message.contains("max_txt"), "{message}");
    let (_, message) = channel_rejected(|v| v["channel"]["webhook"]["verify"]["windowsecs"] = json!(1));
    assert!(message.contains("windowsecs"), "{message}");
    // A tool plugin (no channel section) still needs a tool.
    let (field, _) = rejected(|v| v["tools"] = json!([]));
    assert_eq!(field, "tools");
}

#[test]
fn a_tool_plugins_secrets_are_validated_like_a_channels() {
    let secret = |v: &mut Value, s: Value| v["secrets"] = json!([s]);
    let mut ok = valid();
    secret(&mut ok, json!({"name": "api_key", "audience": "api.weather.example", "inject": [{"header": "x-api-key"}, "path", {"query": "appid"}]}));
    let m = Manifest::from_json(ok.to_string().as_bytes()).unwrap();
    assert_eq!(m.secrets[0].name, "api_key");

    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"name": "Key", "audience": "api.weather.example", "inject": ["path"]}), "secrets[0].name", "[a-z]"),
        (json!({"name": "k", "audience": "evil.example", "inject": ["path"]}), "secrets[0].audience", "not in capabilities.network"),
        (json!({"name": "k", "audience": "*", "inject": ["path"]}), "secrets[0].audience", "not a wildcard"),
        (json!({"name": "k", "inject": ["path"]}), "secrets[0].audience", "one host"),
        (json!({"name": "k", "audience": "api.weather.example", "inject": ["frame"]}), "secrets[0].inject[0]", "tool plugin"),
        (json!({"name": "k"}), "secrets[0]", "not injected"),
        (json!({"name": "k", "audience": "api.weather.example", "inject": [{"field": "key"}]}), "secrets[0].inject[0]", "header"),
    ];
    for (spec, field, words) in cases {
        let (got, text) = rejected(|v| {
            v["capabilities"]["network"] = json!(["api.weather.example", "*"]);
            secret(v, spec.clone());
        });
        assert_eq!(got, field, "{spec}: {text}");
        assert!(text.contains(words), "{spec}: {text}");
    }
    // A channel keeps its secrets in its own section.
    let mut channel = valid_channel();
    channel["secrets"] = json!([{"name": "k", "audience": "api.chat.example", "inject": ["path"]}]);
    let err = Manifest::from_json(channel.to_string().as_bytes()).unwrap_err();
    assert_eq!(err.field, "secrets", "{err}");
}

/// The catch-all places of before (`url`, `header`, `body`) are refused
/// with the precise forms that replace them, in a channel and a tool plugin.
#[test]
fn retired_injection_places_name_their_precise_forms() {
    for (old, words) in [("url", vec!["\"path\"", "{\"query\": NAME}"]), ("header", vec!["{\"header\": NAME}"]), ("body", vec!["{\"field\": NAME}"])] {
        let (_, message) = channel_rejected(|v| v["channel"]["secrets"][0]["inject"] = json!([old]));
        assert!(message.contains(&format!("`\"{old}\"` is no longer an injection place")), "{message}");
        for word in &words {
            assert!(message.contains(word), "{old}: {message}");
        }
        let (_, message) = rejected(|v| {
            v["capabilities"]["network"] = json!(["api.weather.example"]);
            v["secrets"] = json!([{"name": "k", "audience": "api.weather.example", "inject": [old]}]);
        });
        assert!(message.contains("no longer an injection place"), "{message}");
    }
    let (_, message) = channel_rejected(|v| v["channel"]["secrets"][0]["inject"] = json!([{"cookie": "k"}]));
    assert!(message.contains("cookie") && message.contains("\"path\""), "{message}");
}
