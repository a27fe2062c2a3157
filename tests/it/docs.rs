//! The book (`docs/src`) against the configuration it documents.
//!
//! The book is the configuration reference, so what it shows must be what
//! the host reads: the template `chitin onboard` writes
//! (`host/src/cli/config.toml`, which the binary embeds with `include_str!`
//! and the book includes whole) parses as the real `Config`, and so does
//! every ```` ```toml ```` block of every chapter. `Config` refuses unknown
//! keys at every level, so a documented key the host does not know fails
//! here. Two places take free-form keys and get a check of their own:
//! `[channels.<name>]` (the host's keys, the channel plugin's declared
//! secrets, and settings its component reads) and a built-in plugin's
//! `secrets` (the names its manifest declares). A block that is deliberately
//! partial or not a configuration is fenced ```` ```toml,ignore ````.
//!
//! The other direction holds too: every key of the configuration's
//! defaults appears in some block, so the book is the whole reference.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use chitin::config::Config;
use chitin::plugins::manifest::Manifest;

fn book_src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/src")
}

fn template_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../host/src/cli/config.toml")
}

/// One fenced TOML block of the book.
struct Snippet {
    /// `chapter.md:LINE` of the opening fence.
    place: String,
    /// The block's text, `{{#include}}` directives replaced by the file.
    text: String,
}

/// Every chapter under `dir`, sorted.
fn chapters(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())).map(|e| e.expect("dir entry").path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            chapters(&path, out);
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
}

/// Replaces mdBook's `{{#include PATH}}` with the file it names, relative
/// to the chapter, as mdBook does; a missing file fails the test (mdBook
/// itself only logs it).
fn expand_includes(text: &str, chapter: &Path) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("{{#include ") {
        out.push_str(&rest[..start]);
        let after = &rest[start + "{{#include ".len()..];
        let end = after.find("}}").unwrap_or_else(|| panic!("{}: unclosed {{{{#include", chapter.display()));
        let target = chapter.parent().expect("a chapter is in a dir").join(after[..end].trim());
        out.push_str(&std::fs::read_to_string(&target).unwrap_or_else(|e| panic!("{}: {{{{#include {}}}}}: {e}", chapter.display(), target.display())));
        rest = &after[end + 2..];
    }
    out.push_str(rest);
    out
}

/// The ```` ```toml ```` blocks of the book (fences may be indented, as in
/// a list item; the indent is removed).
fn toml_snippets() -> Vec<Snippet> {
    let root = book_src();
    let mut files = Vec::new();
    chapters(&root, &mut files);
    assert!(files.len() > 20, "the book's chapters were not found under {}", root.display());
    let mut snippets = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let name = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
        let mut lines = text.lines().enumerate();
        while let Some((n, line)) = lines.next() {
            let trimmed = line.trim_start();
            let ticks = trimmed.len() - trimmed.trim_start_matches('`').len();
            if ticks < 3 {
                continue;
            }
            let indent = line.len() - trimmed.len();
            let info = trimmed[ticks..].trim();
            let mut body = String::new();
            for (_, line) in lines.by_ref() {
                let t = line.trim_start();
                if t.len() >= ticks && t.bytes().all(|b| b == b'`') {
                    break;
                }
                body.push_str(line.get(indent.min(line.len() - t.len())..).unwrap_or(line));
                body.push('\n');
            }
            let mut parts = info.split([',', ' ']);
            if parts.next() == Some("toml") && !parts.any(|p| p == "ignore") {
                snippets.push(Snippet { place: format!("{name}:{}", n + 1), text: expand_includes(&body, &file) });
            }
        }
    }
    snippets
}

/// The manifest of the first-party plugin `name`, if there is one.
fn builtin_manifest(name: &str) -> Option<Manifest> {
    let builtin = chitin::plugins::catalog::builtin(name)?;
    Some(Manifest::from_component(builtin.bytes).unwrap_or_else(|e| panic!("manifest of built-in `{name}`: {e}")))
}

/// True when telegram's component reads setting `key`. Its config type
/// ignores unknown keys (settings are the component's own), so this asks
/// it with a value no field accepts: a known key fails, an unknown one is
/// ignored.
fn telegram_reads_setting(key: &str) -> bool {
    let probe = serde_json::json!({ key: [[[]]] });
    serde_json::from_value::<chitin_plugin_telegram::channel::Config>(probe).is_err()
}

/// Checks one `[channels.<name>]` table as the gateway reads it; returns
/// the problem, if any.
fn check_channel(name: &str, raw: &toml::Value) -> Result<(), String> {
    let (_, plugin) = chitin::channels::config::plugin_of(name, raw).map_err(|e| e.to_string())?;
    let manifest = builtin_manifest(&plugin).ok_or_else(|| format!("channel `{name}` uses plugin `{plugin}`, which is not built in: teach tests/docs.rs its keys"))?;
    let spec = manifest.channel.as_ref().ok_or_else(|| format!("plugin `{plugin}` is not a channel"))?;
    let secrets: Vec<&str> = spec.secrets.iter().map(|s| s.name.as_str()).collect();
    // A secret's `${VAR}` is expanded when the table is read; the book's
    // variables are not set here, and a secret's value is not what is
    // checked, so each secret gets a literal.
    let mut table = raw.as_table().ok_or("not a table")?.clone();
    for secret in &secrets {
        if let Some(value) = table.get_mut(*secret) {
            *value = toml::Value::String("a-secret-value".into());
        }
    }
    let config = chitin::channels::config::ChannelConfig::parse(name, &toml::Value::Table(table), &secrets).map_err(|e| e.to_string())?;
    for key in config.settings.keys() {
        let known = match plugin.as_str() {
            "telegram" => telegram_reads_setting(key),
            other => return Err(format!("no settings check for channel plugin `{other}`")),
        };
        if !known {
            return Err(format!("channels.{name}.{key} is neither a host key, a secret of plugin `{plugin}`, nor a setting its component reads"));
        }
    }
    Ok(())
}

/// Checks what `Config` leaves free-form; returns the problems.
fn check_free_form(config: &Config) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, raw) in &config.channels {
        if let Err(e) = check_channel(name, raw) {
            problems.push(format!("[channels.{name}]: {e}"));
        }
    }
    for (name, raw) in &config.mcp_servers {
        if let Err(e) = chitin::mcp::config::parse_one(name, raw) {
            problems.push(e.to_string());
        }
    }
    for (name, grant) in &config.plugins {
        let Some(manifest) = builtin_manifest(name) else { continue };
        for secret in grant.secrets.0.keys() {
            if !manifest.secrets.iter().any(|s| &s.name == secret) {
                problems.push(format!("plugins.{name}.secrets.{secret}: the built-in `{name}` declares no such secret"));
            }
        }
    }
    problems
}

/// Dotted key paths of a TOML value (tables are walked, arrays of tables
/// too; `plugins.*`, `providers.*`, `channels.*`, `publishers.*` and
/// settings are maps whose keys are the user's, so their names are
/// written `*`).
fn key_paths(value: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
    let map_of_user_keys = ["plugins", "providers", "channels", "publishers", "mcp_servers"];
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table {
                let key = if map_of_user_keys.contains(&prefix) || prefix.ends_with(".settings") || prefix.ends_with(".secrets") || prefix.ends_with(".api_base") || prefix.ends_with(".headers") || prefix.ends_with(".env") { "*" } else { key.as_str() };
                let path = if prefix.is_empty() { key.to_string() } else { format!("{prefix}.{key}") };
                out.insert(path.clone());
                key_paths(value, &path, out);
            }
        }
        toml::Value::Array(items) => {
            for item in items {
                key_paths(item, prefix, out);
            }
        }
        _ => {}
    }
}

/// The snippet parsed with its commented-out keys (`# temperature = 0.7`)
/// taken in too, since they document a key as much as a set one does. A
/// commented line is taken in when the whole still parses with it (so a
/// second, alternative `# settings = ...` or a prose comment stays out).
fn with_commented_keys(text: &str) -> Result<toml::Value, toml::de::Error> {
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    for i in 0..lines.len() {
        let Some(rest) = lines[i].trim_start().strip_prefix("# ") else { continue };
        let mut candidate = lines.clone();
        candidate[i] = rest.to_string();
        if toml::from_str::<toml::Value>(&candidate.join("\n")).is_ok() {
            lines = candidate;
        }
    }
    toml::from_str(&lines.join("\n"))
}

#[test]
fn the_onboard_template_parses_as_the_config_and_is_the_book_s() {
    let template = std::fs::read_to_string(template_path()).expect("host/src/cli/config.toml");
    let config = Config::parse(&template, Path::new("host/src/cli/config.toml")).unwrap_or_else(|e| panic!("{e}"));
    assert!(check_free_form(&config).is_empty(), "{:?}", check_free_form(&config));
    config.gateway.server_limits().expect("the template's gateway limits are in range");
    // The configuration chapter shows this very file, not a copy of it.
    let chapter = book_src().join("configuration/configuration.md");
    let text = std::fs::read_to_string(&chapter).expect("configuration.md");
    let shown = toml_snippets().into_iter().filter(|s| s.place.starts_with("configuration/configuration.md")).any(|s| s.text.trim_end_matches('\n') == template.trim_end_matches('\n'));
    assert!(text.contains("{{#include ../../../host/src/cli/config.toml}}") && shown, "configuration.md must include host/src/cli/config.toml whole in a ```toml block");
}

#[test]
fn every_toml_block_of_the_book_parses_as_the_config() {
    let snippets = toml_snippets();
    assert!(snippets.len() >= 10, "only {} TOML blocks found in the book", snippets.len());
    let mut problems = Vec::new();
    for snippet in &snippets {
        match Config::parse(&snippet.text, Path::new(&snippet.place)) {
            Ok(config) => {
                problems.extend(check_free_form(&config).into_iter().map(|p| format!("{}: {p}", snippet.place)));
                if let Err(e) = config.gateway.server_limits() {
                    problems.push(format!("{}: {e}", snippet.place));
                }
            }
            Err(e) => problems.push(e.to_string()),
        }
    }
    assert!(problems.is_empty(), "TOML blocks of the book that the host would refuse (fence a deliberately partial one ```toml,ignore):\n{}", problems.join("\n"));
}

#[test]
fn a_key_the_config_does_not_know_is_caught() {
    // The checks above are only as good as this: a mistyped key fails at
    // every level, including the free-form channel and secrets tables.
    for (text, why) in [
        ("[agent]\nmax_token = 5\n", "a top-level section"),
        ("[agent.dream]\nintervall_secs = 5\n", "a nested section"),
        ("[gateway]\nidle_secs = 5\n", "the gateway"),
        ("[plugins.fs]\nworkspaces = \"read\"\n", "a grant"),
        ("[[plugin_index]]\nname = \"m\"\nurl = \"file:///i.json\"\nkeys = []\ntimeout = 5\n", "a plugin index"),
    ] {
        assert!(Config::parse(text, Path::new("t.toml")).is_err(), "{why}: {text}");
    }
    let config = Config::parse("[channels.telegram]\nbot_tokn = \"x\"\nbot_token = \"${T}\"\n", Path::new("t.toml")).expect("channels are raw");
    let problems = check_free_form(&config);
    assert!(problems.len() == 1 && problems[0].contains("channels.telegram.bot_tokn"), "{problems:?}");
    let config = Config::parse("[channels.telegram]\nbot_token = \"${T}\"\nbot_username = \"b\"\nmode = \"poll\"\n", Path::new("t.toml")).unwrap();
    assert!(check_free_form(&config).is_empty(), "a known setting and host keys pass: {:?}", check_free_form(&config));
    let config = Config::parse("[plugins.web.secrets]\nbrave_key = \"${K}\"\n", Path::new("t.toml")).unwrap();
    assert!(check_free_form(&config).iter().any(|p| p.contains("plugins.web.secrets.brave_key")), "an undeclared secret of a built-in");
}

#[test]
fn every_config_key_is_documented_in_the_book() {
    // The defaults, with one entry in each map so its keys are walked too.
    let mut config = Config::default();
    config.providers.insert("p".into(), chitin::config::ProviderConfig { base_url: "https://x".into(), api_key: Some("k".into()), api: Default::default(), thinking_budget: Some(1024), vision: true });
    let mut grant = chitin::plugins::GrantConfig::default();
    grant.settings.insert("s".into(), serde_json::json!(1));
    grant.secrets.0.insert("k".into(), "v".into());
    grant.api_base.insert("h".into(), "http://127.0.0.1".into());
    config.plugins.insert("p".into(), grant);
    config.agent.temperature = Some(0.5);
    config.agent.subagents.tools = Some(vec!["read_file".into()]);
    config.agent.heartbeat.chat = Some("c".into());
    config.agent.fallback_models.push(chitin::config::FallbackModel { model: "m".into(), provider: Some("p".into()), max_tokens: Some(1), context_window: Some(1) });
    config.workspace = Some("w".into());
    config.plugin_index.push(chitin::market::index::IndexSource { name: "i".into(), url: "file:///i.json".into(), keys: vec!["k".into()], timeout_secs: 1 });
    config.publishers.insert("p".into(), chitin::market::index::PublisherConfig { keys: vec!["k".into()] });
    // Every key of an MCP server: a remote one's and a stdio one's.
    let mut remote = chitin::mcp::config::McpServerConfig::remote("https://x/mcp");
    remote.headers.insert("H".into(), "v".into());
    remote.secrets.insert("t".into(), "v".into());
    remote.transport = chitin::mcp::config::RemoteTransport::Sse;
    remote.tools = Some(vec!["t".into()]);
    remote.oauth = Some(chitin::mcp::config::OAuthConfig { client_id: Some("c".into()), client_secret: Some("s".into()), scopes: vec!["s".into()] });
    let mut stdio = chitin::mcp::config::McpServerConfig::stdio("c", vec!["a".into()]);
    stdio.env.insert("E".into(), "v".into());
    stdio.sandbox = chitin::mcp::config::SandboxMode::None;
    stdio.read_only_paths.push("/p".into());
    stdio.network = true;
    config.mcp_servers.insert("r".into(), toml::Value::try_from(&remote).unwrap());
    config.mcp_servers.insert("s".into(), toml::Value::try_from(&stdio).unwrap());
    let mut wanted = BTreeSet::new();
    key_paths(&toml::Value::try_from(&config).expect("the config serialises"), "", &mut wanted);
    for key in ["agent.subagents.keep_alive_secs", "limits.max_table_elements", "gateway.allowed_hosts", "plugins.*.api_base", "plugin_index.timeout_secs", "workspace"] {
        assert!(wanted.contains(key), "the walk of the defaults misses {key}: {wanted:?}");
    }

    let mut documented = BTreeSet::new();
    for snippet in toml_snippets() {
        let value = with_commented_keys(&snippet.text).unwrap_or_else(|e| panic!("{}: {e}", snippet.place));
        key_paths(&value, "", &mut documented);
    }
    let missing: Vec<&String> = wanted.difference(&documented).collect();
    assert!(missing.is_empty(), "config keys no ```toml block of the book shows: {missing:?}");
}
