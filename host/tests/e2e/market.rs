//! The plugin marketplace through the binary, offline: an index served on
//! 127.0.0.1:0 by the test (or read through file://) with fault switches,
//! keys made inside the test with `chitin plugin keygen`, the index built
//! with `chitin plugin sign` and `chitin plugin index add/yank/sign` — every
//! scenario of MARKETPLACE.md's test list.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use chitin_testing::{Fault, MockIndex, MockLlm, MockReply};
use serde_json::Value;

/// A publisher (`acme`), an index operator, the index directory, its server
/// and a user's data dir.
struct Market {
    root: tempfile::TempDir,
    server: MockIndex,
}

impl Market {
    fn new() -> Market {
        let root = tempfile::tempdir().unwrap();
        for dir in ["site", "home", "work"] {
            std::fs::create_dir_all(root.path().join(dir)).unwrap();
        }
        let server = MockIndex::start(root.path().join("site"));
        let market = Market { root, server };
        for key in ["acme", "idx", "other"] {
            market.tool(&["plugin", "keygen", market.work(key).to_str().unwrap()]);
        }
        market
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.path().join(rel)
    }

    fn work(&self, name: &str) -> PathBuf {
        self.path("work").join(name)
    }

    fn home(&self) -> PathBuf {
        self.path("home")
    }

    fn site(&self) -> PathBuf {
        self.path("site")
    }

    /// The public key line of key pair `name`.
    fn public(&self, name: &str) -> String {
        std::fs::read_to_string(self.work(&format!("{name}.pub"))).unwrap().lines().nth(1).unwrap().to_string()
    }

    /// A publisher/operator command: must succeed.
    fn tool(&self, args: &[&str]) -> Output {
        let out = run(chitin(&self.path("work"), args));
        assert!(out.status.success(), "{args:?}: {}{}", stdout(&out), stderr(&out));
        out
    }

    /// The user's `chitin ARGS`.
    fn user(&self, args: &[&str]) -> Output {
        run(chitin(&self.home(), args))
    }

    /// Packs the hello component as `name` `version` with `caps` (TOML lines
    /// of `[capabilities]`) and the tools greet and shout.
    fn build(&self, name: &str, version: &str, caps: &str) -> PathBuf {
        let manifest = self.work(&format!("{name}-{version}.toml"));
        let tools = "[[tools]]\nname = \"greet\"\nparameters = { type = \"object\", properties = { name = { type = \"string\" } } }\n";
        std::fs::write(&manifest, format!("name = \"{name}\"\nversion = \"{version}\"\ndescription = \"Greets people\"\n[capabilities]\n{caps}\n{tools}")).unwrap();
        let out_path = self.work(&format!("{name}-{version}.wasm"));
        self.tool(&["plugin", "pack", "--manifest", manifest.to_str().unwrap(), HELLO_WASM, "-o", out_path.to_str().unwrap()]);
        out_path
    }

    /// Builds, signs with `key` and adds `name` `version` to the index.
    fn publish_with(&self, name: &str, version: &str, caps: &str, key: &str) -> PathBuf {
        let file = self.build(name, version, caps);
        self.tool(&["plugin", "sign", file.to_str().unwrap(), "--key", self.work(&format!("{key}.key")).to_str().unwrap()]);
        let pubkey = self.work(&format!("{key}.pub"));
        self.tool(&["plugin", "index", "add", self.site().to_str().unwrap(), file.to_str().unwrap(), "--publisher", "acme", "--publisher-key", pubkey.to_str().unwrap()]);
        file
    }

    fn publish(&self, name: &str, version: &str, caps: &str) -> PathBuf {
        self.publish_with(name, version, caps, "acme")
    }

    fn sign_index(&self, days: i64) {
        let days = days.to_string();
        self.tool(&["plugin", "index", "sign", self.site().to_str().unwrap(), "--key", self.work("idx.key").to_str().unwrap(), "--name", "main", "--expires-days", &days]);
    }

    /// The user's config: the index at `url` pinned to `index_key`, and
    /// `publishers` (TOML) as given.
    fn configure(&self, url: &str, index_key: &str, publishers: &str) {
        let text = format!("[[plugin_index]]\nname = \"main\"\nurl = \"{url}\"\nkeys = [\"{}\"]\ntimeout_secs = 2\n\n{publishers}", self.public(index_key));
        std::fs::write(self.home().join("config.toml"), text).unwrap();
    }

    /// The user pins acme's key `key`.
    fn configure_http(&self) {
        self.configure(&self.server.url("index.json"), "idx", &format!("[publishers.acme]\nkeys = [\"{}\"]\n", self.public("acme")));
    }

    fn index_json(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.site().join("index.json")).unwrap()).unwrap()
    }

    fn write_index_json(&self, index: &Value) {
        std::fs::write(self.site().join("index.json"), serde_json::to_vec_pretty(index).unwrap()).unwrap();
    }

    fn lock(&self) -> Option<String> {
        std::fs::read_to_string(self.home().join("chitin.lock")).ok()
    }

    /// Every file under the user's plugins/.
    fn installed(&self) -> Vec<String> {
        let mut out = Vec::new();
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir() {
                    walk(&path, base, out);
                } else {
                    out.push(path.strip_prefix(base).unwrap().display().to_string());
                }
            }
        }
        walk(&self.home().join("plugins"), &self.home().join("plugins"), &mut out);
        out.sort();
        out
    }
}

/// The command failed with a message containing every needle, and nothing
/// was installed.
fn refused(out: &Output, needles: &[&str]) -> String {
    let text = stderr(out);
    assert_eq!(out.status.code(), Some(1), "{}{text}", stdout(out));
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in: {text}");
    }
    text
}

fn greet(market: &Market) -> Output {
    market.user(&["tool", "call", "greet", "--args", r#"{"name":"Ada"}"#])
}

#[test]
fn happy_path_over_http_then_search_list_verify_and_call() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();

    let out = m.user(&["plugin", "search", "greets"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("hello 1.0.0  (main, by acme)") && stdout(&out).contains("asks: workspace none, network none"), "{}", stdout(&out));

    // No terminal, no --yes: nothing is installed.
    let out = m.user(&["plugin", "install", "hello"]);
    refused(&out, &["install hello 1.0.0 needs your approval: rerun with --yes"]);
    assert!(m.installed().is_empty() && m.lock().is_none());

    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let review = stdout(&out);
    for needle in ["hello 1.0.0", "published by acme (key", "it may:", "workspace: none", "network: none", "imports: chitin:plugin", "installed hello 1.0.0"] {
        assert!(review.contains(needle), "{needle}: {review}");
    }
    let lock = m.lock().unwrap();
    for needle in ["[plugins.hello]", "version = \"1.0.0\"", "source = \"index:main\"", "publisher = \"acme\"", "key_id = ", "approved_at = ", "[plugins.hello.approved]", "world = \"chitin:plugin/tool-plugin@0.1.0\""] {
        assert!(lock.contains(needle), "{needle}: {lock}");
    }
    let files = m.installed();
    assert_eq!(files.len(), 1);
    assert!(files[0].starts_with("hello/") && files[0].ends_with(".wasm") && files[0].len() == "hello/".len() + 64 + 5, "{files:?}");

    let out = greet(&m);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("Hello, Ada"), "{}", stdout(&out));
    let out = m.user(&["plugin", "list"]);
    assert!(stdout(&out).contains("hello        1.0.0"), "{}", stdout(&out));
    let out = m.user(&["plugin", "verify"]);
    assert!(out.status.success() && stdout(&out).contains("ok      hello 1.0.0"), "{}{}", stdout(&out), stderr(&out));

    // Installing it again is a no-op.
    let out = m.user(&["plugin", "install", "hello"]);
    assert!(out.status.success() && stdout(&out).contains("already installed"), "{}{}", stdout(&out), stderr(&out));
}

#[test]
fn happy_path_over_file_url() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    let url = format!("file://{}", m.site().join("index.json").display());
    m.configure(&url, "idx", &format!("[publishers.acme]\nkeys = [\"{}\"]\n", m.public("acme")));
    let out = m.user(&["plugin", "install", "hello@^1", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(m.lock().unwrap().contains("url = \"file://"), "{:?}", m.lock());
    assert!(greet(&m).status.success());
}

#[test]
fn a_tampered_artifact_or_index_is_refused() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    m.server.fault("artifacts/hello-1.0.0.wasm", Fault::FlipByte);
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["hello 1.0.0", "SHA-256 is", "changed in transit or on the server; nothing was installed"]);
    assert!(m.installed().is_empty() && m.lock().is_none());

    m.server.clear();
    m.server.fault("index.json", Fault::FlipByte);
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["the index `main` is not signed by any of its pinned keys", "does not verify"]);
    assert!(m.installed().is_empty());
}

#[test]
fn a_signed_build_relabelled_as_another_name_or_version_is_refused() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    // The operator (or an attacker with the index key) lists the same
    // signed bytes as version 1.0.1 and as another plugin.
    let mut index = m.index_json();
    let mut entry = index["plugins"]["hello"]["versions"][0].clone();
    entry["version"] = "1.0.1".into();
    index["plugins"]["hello"]["versions"].as_array_mut().unwrap().push(entry.clone());
    let mut other = index["plugins"]["hello"].clone();
    entry["version"] = "1.0.0".into();
    other["versions"] = Value::Array(vec![entry]);
    index["plugins"]["greeter"] = other;
    m.write_index_json(&index);
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "hello@1.0.1", "--yes"]);
    refused(&out, &["the signature of hello 1.0.1 was made for another artifact", "version=1.0.0"]);
    let out = m.user(&["plugin", "install", "greeter", "--yes"]);
    refused(&out, &["the signature of greeter 1.0.0 was made for another artifact", "name=hello"]);
    assert!(m.installed().is_empty());
}

#[test]
fn wrong_and_unknown_publisher_keys() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    // Pinned, but to another key.
    m.configure(&m.server.url("index.json"), "idx", &format!("[publishers.acme]\nkeys = [\"{}\"]\n", m.public("other")));
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["hello 1.0.0 is signed by key", "which is not a pinned key of publisher `acme`"]);

    // Not pinned at all: refused, then accepted with --trust-publisher,
    // which pins the key the signed index offers.
    m.configure(&m.server.url("index.json"), "idx", "");
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["published by `acme`, who is not in [publishers]", "--trust-publisher", &m.public("acme")]);
    assert!(m.installed().is_empty());
    let out = m.user(&["plugin", "install", "hello", "--yes", "--trust-publisher"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let config = std::fs::read_to_string(m.home().join("config.toml")).unwrap();
    assert!(config.contains("[publishers.acme]") && config.contains(&m.public("acme")), "{config}");
    assert!(config.starts_with("[[plugin_index]]"), "the user's text is kept: {config}");
    assert!(greet(&m).status.success());
}

#[test]
fn an_index_signed_by_the_wrong_key_is_refused() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure(&m.server.url("index.json"), "other", &format!("[publishers.acme]\nkeys = [\"{}\"]\n", m.public("acme")));
    let out = m.user(&["plugin", "search", "hello"]);
    refused(&out, &["the index `main` is not signed by any of its pinned keys", "it was signed by key"]);
}

#[test]
fn rollback_and_expiry_are_refused() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    let v1 = (std::fs::read(m.site().join("index.json")).unwrap(), std::fs::read(m.site().join("index.json.minisig")).unwrap());
    m.publish("hello", "1.1.0", "");
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    // An older, validly signed index: version 1 after version 2 was seen.
    m.server.fault("index.json", Fault::Replace(v1.0));
    m.server.fault("index.json.minisig", Fault::Replace(v1.1));
    let out = m.user(&["plugin", "update"]);
    refused(&out, &["the index `main` has version 1, older than version 2 already seen: refusing a rollback"]);
    assert!(m.lock().unwrap().contains("version = \"1.1.0\""));

    m.server.clear();
    m.sign_index(0);
    let out = m.user(&["plugin", "search", "hello"]);
    refused(&out, &["the index `main` expired at", "its operator must re-sign it"]);
}

#[test]
fn a_yanked_version_is_never_installed() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.publish("hello", "1.1.0", "");
    m.tool(&["plugin", "index", "yank", m.site().to_str().unwrap(), "hello@1.1.0"]);
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "hello@=1.1.0", "--yes"]);
    refused(&out, &["hello 1.1.0 was yanked by its publisher and is not installed"]);
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("installed hello 1.0.0"), "{}", stdout(&out));
    let out = m.user(&["plugin", "install", "hello@^3", "--yes"]);
    refused(&out, &["plugin `hello` has no version matching `^3` (available: 1.0.0)"]);
}

#[test]
fn an_update_without_new_capabilities_is_applied_one_with_them_waits_for_approval() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "network = [\"a.example\"]");
    m.sign_index(30);
    m.configure_http();
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    let out = m.user(&["plugin", "inspect", "hello", "--json"]);
    let inspect: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspect["granted"]["network"], serde_json::json!(["a.example"]), "the approved snapshot is the grant");

    // Fewer capabilities: applied.
    m.publish("hello", "1.1.0", "");
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("updated hello 1.0.0 → 1.1.0") && stdout(&out).contains("no new capabilities"), "{}", stdout(&out));
    assert_eq!(m.installed().len(), 1, "the old file is gone");

    // A new host, a higher workspace level and a new host interface... the
    // component must import what it asks, so: network and workspace.
    m.publish("hello", "2.0.0", "network = [\"b.example\"]\nworkspace = \"read\"");
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    let text = refused(&out, &["the update of hello to 2.0.0 asks for more than you approved", "a new network host: b.example", "workspace read (was none)", "chitin plugin approve hello"]);
    let review = stdout(&out);
    assert!(review.contains("before:") && review.contains("after:") && review.contains("NEW: a new network host: b.example") && review.contains("workspace: read files in your workspace"), "{review}{text}");
    let lock = m.lock().unwrap();
    assert!(lock.contains("[staged.hello]") && lock.contains("[plugins.hello]\nversion = \"1.1.0\""), "{lock}");
    let out = m.user(&["plugin", "list"]);
    assert!(stdout(&out).contains("hello        1.1.0"), "still the approved version: {}", stdout(&out));
    assert_eq!(m.installed().len(), 2, "staged beside the installed file");

    let out = m.user(&["plugin", "approve", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("approved hello 1.1.0 → 2.0.0"), "{}", stdout(&out));
    let lock = m.lock().unwrap();
    assert!(!lock.contains("[staged.hello]") && lock.contains("version = \"2.0.0\""), "{lock}");
    assert_eq!(m.installed().len(), 1);
    let out = m.user(&["plugin", "list"]);
    assert!(stdout(&out).contains("hello        2.0.0"), "{}", stdout(&out));
    let out = m.user(&["plugin", "approve", "hello"]);
    refused(&out, &["no update of `hello` is waiting for approval"]);

    // --yes approves an escalation directly.
    m.publish("hello", "3.0.0", "network = [\"b.example\", \"c.example\"]\nworkspace = \"read\"");
    m.sign_index(30);
    let out = m.user(&["plugin", "update", "hello", "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(m.lock().unwrap().contains("\"c.example\""));
}

#[test]
fn frozen_fails_on_a_stale_lock_and_reproduces_a_current_one() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    let before = m.lock().unwrap();
    m.publish("hello", "1.1.0", "");
    m.sign_index(30);
    let out = m.user(&["plugin", "update", "--frozen"]);
    refused(&out, &["--frozen: the lock would change: hello 1.0.0 → 1.1.0"]);
    assert_eq!(m.lock().unwrap(), before);

    // A new machine with the lock: `install --frozen` fetches exactly the
    // locked version, even though 1.1.0 is newer.
    std::fs::remove_dir_all(m.home().join("plugins")).unwrap();
    let out = m.user(&["plugin", "verify"]);
    refused(&out, &["do not match"]);
    let out = m.user(&["plugin", "install", "hello", "--frozen"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("installed hello 1.0.0"), "{}", stdout(&out));
    assert_eq!(m.lock().unwrap().replace(|c: char| c.is_ascii_digit(), ""), before.replace(|c: char| c.is_ascii_digit(), ""));
    let out = m.user(&["plugin", "install", "greeter", "--frozen"]);
    refused(&out, &["--frozen: the lock would change: greeter is not in"]);

    // A file changed after install: verify says so, loading skips it, and
    // every command still works.
    let file = m.home().join("plugins").join(&m.installed()[0]);
    let mut bytes = std::fs::read(&file).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&file, bytes).unwrap();
    let out = m.user(&["plugin", "verify"]);
    refused(&out, &["1 installed file(s) do not match"]);
    assert!(stdout(&out).contains("FAILED  hello 1.0.0") && stdout(&out).contains("does not match chitin.lock"), "{}", stdout(&out));
    let out = m.user(&["tool", "list"]);
    assert!(out.status.success() && stderr(&out).contains("does not match chitin.lock") && stdout(&out).contains("read_file"), "{}{}", stdout(&out), stderr(&out));
    let out = m.user(&["plugin", "list"]);
    assert!(out.status.success() && stdout(&out).contains("skipped installed plugin"), "{}", stdout(&out));
    let ws = m.path("ws");
    let out = m.user(&["tool", "call", "write_file", "--args", r#"{"path":"a.txt","content":"ok"}"#, "--workspace", ws.to_str().unwrap()]);
    assert!(out.status.success(), "{}", stderr(&out));
    let mock = MockLlm::start(vec![MockReply::text("still here")]);
    let out = run(chitin(&m.home(), &["agent", "-m", "hi"]).env("OPENAI_BASE_URL", mock.base_url()));
    assert!(out.status.success() && stdout(&out).contains("still here"), "{}{}", stdout(&out), stderr(&out));
    assert!(stderr(&out).contains("does not match chitin.lock"), "{}", stderr(&out));
    // An unlocked file in plugins/ is a failure only with --frozen.
    std::fs::copy(HELLO_WASM, m.home().join("plugins/stray.wasm")).unwrap();
    std::fs::write(&file, std::fs::read(m.site().join("artifacts/hello-1.0.0.wasm")).unwrap()).unwrap();
    let out = m.user(&["plugin", "verify"]);
    assert!(out.status.success() && stdout(&out).contains("stray.wasm: not in"), "{}{}", stdout(&out), stderr(&out));
    let out = m.user(&["plugin", "verify", "--frozen"]);
    refused(&out, &["1 installed file(s) do not match"]);
}

#[test]
fn publisher_key_rotation() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    // The user pins both the old and the new key.
    m.configure(&m.server.url("index.json"), "idx", &format!("[publishers.acme]\nkeys = [\"{}\", \"{}\"]\n", m.public("acme"), m.public("other")));
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    let old_id = m.lock().unwrap().lines().find(|l| l.starts_with("key_id")).unwrap().to_string();
    m.publish_with("hello", "1.1.0", "", "other");
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let new_id = m.lock().unwrap().lines().find(|l| l.starts_with("key_id")).unwrap().to_string();
    assert_ne!(old_id, new_id, "the lock records the new key");
    // After the rotation the user drops the old key: a build signed by it
    // is refused.
    m.configure(&m.server.url("index.json"), "idx", &format!("[publishers.acme]\nkeys = [\"{}\"]\n", m.public("other")));
    m.publish_with("hello", "1.2.0", "", "acme");
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    refused(&out, &["hello 1.2.0 is signed by key", "not a pinned key of publisher `acme`"]);
}

#[test]
fn remove_and_purge() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    let cache_entries = || std::fs::read_dir(m.home().join("cache/components")).unwrap().filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "cwasm")).count();
    let before = cache_entries();
    assert!(before >= 1, "compiled at install");
    let out = m.user(&["plugin", "remove", "hello", "--purge"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(m.installed().is_empty(), "{:?}", m.installed());
    assert!(!m.lock().unwrap().contains("hello"), "{:?}", m.lock());
    assert_eq!(cache_entries(), before - 1, "its compiled code is gone");
    let out = greet(&m);
    assert_eq!(out.status.code(), Some(1));
    let out = m.user(&["plugin", "remove", "hello"]);
    refused(&out, &["no installed plugin named `hello`"]);
    // A name is a directory under plugins/: nothing but a plugin name.
    std::fs::write(m.home().join("victim.wasm"), "x").unwrap();
    let out = m.user(&["plugin", "remove", "../victim"]);
    refused(&out, &["`../victim` is not a plugin name"]);
    assert!(m.home().join("victim.wasm").exists());
    let out = m.user(&["plugin", "install", "../victim@1", "--yes"]);
    refused(&out, &["is not a plugin name"]);
}

#[test]
fn install_compiles_so_the_first_call_does_not() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    let out = run(chitin(&m.home(), &["tool", "call", "greet", "--args", r#"{"name":"Ada"}"#]).env("RUST_LOG", "chitin::plugins=debug"));
    assert!(out.status.success(), "{}", stderr(&out));
    // Without the terminal colours tracing adds.
    let text: String = stderr(&out).split('\x1b').map(|part| part.find('m').filter(|_| part.starts_with('[')).map_or(part, |i| &part[i + 1..])).collect();
    assert!(text.contains("plugin prepared") && text.contains("cache_hit=true"), "{text}");
}

#[test]
fn not_found_and_slow_servers_are_clear_errors() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    m.server.fault("artifacts/hello-1.0.0.wasm", Fault::NotFound);
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["cannot fetch http://127.0.0.1", "artifacts/hello-1.0.0.wasm: the server answered 404"]);
    m.server.clear();
    m.server.fault("index.json", Fault::Slow(Duration::from_secs(10)));
    let started = std::time::Instant::now();
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["index.json", "no complete answer within 2 s"]);
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    let out = m.user(&["plugin", "install", "nosuch", "--yes", "--index", "elsewhere"]);
    refused(&out, &["no plugin index named `elsewhere` (configured: main)"]);
    m.server.clear();
    let out = m.user(&["plugin", "install", "nosuch", "--yes"]);
    refused(&out, &["no plugin named `nosuch` in the indexes `main`"]);
    assert!(m.installed().is_empty());
}

#[test]
fn collisions_audit_failures_and_unsupported_worlds_are_refused_at_install() {
    let m = Market::new();
    m.publish("fs", "1.0.0", "");
    m.publish("shadow", "1.0.0", "");
    m.publish("liar", "1.0.0", "");
    // `liar` asks for an interface its code never imports; edited in after
    // `index add` (which refuses it too), re-signed by the publisher.
    let liar = m.build("liar", "1.0.0", "host = [\"messaging\"]");
    m.tool(&["plugin", "sign", liar.to_str().unwrap(), "--key", m.work("acme.key").to_str().unwrap()]);
    // A component with a manifest and no chitin export.
    let empty = m.work("empty.wasm");
    std::fs::write(&empty, wasm_encoder::Component::new().finish()).unwrap();
    let manifest = m.work("hollow.toml");
    std::fs::write(&manifest, "name = \"hollow\"\nversion = \"1.0.0\"\n[[tools]]\nname = \"nothing\"\nparameters = { type = \"object\" }\n").unwrap();
    let hollow = m.work("hollow.wasm");
    m.tool(&["plugin", "pack", "--manifest", manifest.to_str().unwrap(), empty.to_str().unwrap(), "-o", hollow.to_str().unwrap()]);
    m.tool(&["plugin", "sign", hollow.to_str().unwrap(), "--key", m.work("acme.key").to_str().unwrap()]);
    let mut index = m.index_json();
    for (name, file) in [("liar", &liar), ("hollow", &hollow)] {
        let bytes = std::fs::read(file).unwrap();
        let rel = format!("artifacts/{name}-raw.wasm");
        std::fs::write(m.site().join(&rel), &bytes).unwrap();
        let mut plugin = index["plugins"]["shadow"].clone();
        let entry = &mut plugin["versions"][0];
        entry["artifact"] = serde_json::json!({ "url": rel, "sha256": sha256(&bytes), "size": bytes.len() });
        entry["signature"] = std::fs::read_to_string(format!("{}.minisig", file.display())).unwrap().into();
        entry["world"] = "chitin:plugin/tool-plugin@0.1.0".into();
        index["plugins"][name] = plugin;
    }
    m.write_index_json(&index);
    m.sign_index(30);
    m.configure_http();

    let out = m.user(&["plugin", "install", "fs", "--yes"]);
    refused(&out, &["cannot install plugin `fs`: its name `fs` is the name of a built-in plugin"]);
    // `shadow` has the tool `greet`; so does an installed file.
    std::fs::create_dir_all(m.home().join("plugins")).unwrap();
    std::fs::copy(HELLO_WASM, m.home().join("plugins/hello.wasm")).unwrap();
    let out = m.user(&["plugin", "install", "shadow", "--yes"]);
    refused(&out, &["its tool `greet` is already a tool of the installed plugin `hello`"]);
    let out = m.user(&["plugin", "install", "liar", "--yes"]);
    refused(&out, &["liar 1.0.0: import audit failed", "asks for the host interface `messaging` but the component never imports"]);
    let out = m.user(&["plugin", "install", "hollow", "--yes"]);
    refused(&out, &["hollow 1.0.0: unsupported world", "exports none of"]);
    assert_eq!(m.installed(), ["hello.wasm"]);
    assert!(m.lock().is_none());
}

#[test]
fn install_from_a_url_needs_a_pinned_publisher_key() {
    let m = Market::new();
    let file = m.publish("hello", "1.0.0", "");
    std::fs::copy(format!("{}.minisig", file.display()), m.site().join("artifacts/hello-1.0.0.wasm.minisig")).unwrap();
    let url = m.server.url("artifacts/hello-1.0.0.wasm");
    m.configure(&m.server.url("index.json"), "idx", "");
    let out = m.user(&["plugin", "install", &url, "--yes"]);
    refused(&out, &["is signed by key", "which is not a pinned key"]);
    m.configure_http();
    let out = m.user(&["plugin", "install", &url, "--yes"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(m.lock().unwrap().contains(&format!("source = \"{url}\"")), "{:?}", m.lock());
    assert!(greet(&m).status.success());
    let out = m.user(&["plugin", "update"]);
    assert!(out.status.success() && stdout(&out).contains("not from an index"), "{}", stdout(&out));
}

#[test]
fn an_index_that_understates_the_capabilities_is_refused() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "network = [\"a.example\"]");
    let mut index = m.index_json();
    index["plugins"]["hello"]["versions"][0]["capabilities"]["network"] = serde_json::json!([]);
    m.write_index_json(&index);
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["hello 1.0.0: capabilities: its manifest says", "a.example"]);
}

#[test]
fn plain_http_is_refused_off_loopback() {
    let m = Market::new();
    m.configure("http://index.example/index.json", "idx", "");
    let out = m.user(&["plugin", "search", "x"]);
    refused(&out, &["plain http:// is only accepted for a loopback address; use https://"]);
    let out = m.user(&["plugin", "search", "x", "--index", "main"]);
    refused(&out, &["plain http://"]);
    std::fs::remove_file(m.home().join("config.toml")).unwrap();
    let out = m.user(&["plugin", "install", "hello"]);
    refused(&out, &["no plugin index is configured: add a [[plugin_index]] table"]);
}

#[test]
fn a_broken_lock_skips_the_index_plugins_and_the_host_still_starts() {
    let m = Market::new();
    m.publish("hello", "1.0.0", "");
    m.sign_index(30);
    m.configure_http();
    assert!(m.user(&["plugin", "install", "hello", "--yes"]).status.success());
    std::fs::write(m.home().join("chitin.lock"), "version = 1\n[plugins.hello]\nsha256 = 7\n").unwrap();
    let out = m.user(&["tool", "list"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stderr(&out).contains("chitin.lock: not a valid lock file") && stderr(&out).contains("plugins installed from an index are not loaded"), "{}", stderr(&out));
    assert!(stdout(&out).contains("read_file") && !stdout(&out).contains("greet"), "{}", stdout(&out));
    let out = m.user(&["plugin", "list"]);
    assert!(out.status.success() && stdout(&out).contains("skipped installed plugin"), "{}", stdout(&out));
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    refused(&out, &["chitin.lock: not a valid lock file"]);
}

fn sha256(bytes: &[u8]) -> String {
    chitin::market::sha256_hex(bytes)
}

/// A tool plugin that type-checks and links (it exports
/// `chitin:plugin/tool@0.1.0` with the right `invoke`) but cannot be
/// instantiated: its core module's data segment lies past its one page of
/// memory. Built with wit-component from the WIT this host links.
fn uninstantiable_component() -> Vec<u8> {
    use wasm_encoder::{CodeSection, ConstExpr, DataSection, ExportKind, ExportSection, Function, FunctionSection, Instruction, MemorySection, MemoryType, Module, TypeSection, ValType};
    let mut types = TypeSection::new();
    // invoke(name: string, args-json: string, ctx: call-context): 12 flat
    // i32 parameters; the result is returned through a pointer.
    types.ty().function([ValType::I32; 12], [ValType::I32]);
    types.ty().function([ValType::I32; 4], [ValType::I32]);
    let mut functions = FunctionSection::new();
    functions.function(0);
    functions.function(1);
    let mut memory = MemorySection::new();
    memory.memory(MemoryType { minimum: 1, maximum: Some(1), memory64: false, shared: false, page_size_log2: None });
    let mut exports = ExportSection::new();
    exports.export("chitin:plugin/tool@0.1.0#invoke", ExportKind::Func, 0);
    exports.export("cabi_realloc", ExportKind::Func, 1);
    exports.export("memory", ExportKind::Memory, 0);
    let mut code = CodeSection::new();
    for _ in 0..2 {
        let mut body = Function::new([]);
        body.instruction(&Instruction::Unreachable);
        body.instruction(&Instruction::End);
        code.function(&body);
    }
    let mut data = DataSection::new();
    data.active(0, &ConstExpr::i32_const(65536), b"past the end".iter().copied());
    let mut module = Module::new();
    module.section(&types).section(&functions).section(&memory).section(&exports).section(&code).section(&data);
    let mut bytes = module.finish();
    let mut resolve = wit_parser::Resolve::default();
    let wit = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../wit/chitin.wit")).unwrap();
    let package = resolve.push_str("chitin.wit", &wit).unwrap();
    let world = resolve.select_world(&[package], Some("tool-plugin")).unwrap();
    wit_component::embed_component_metadata(&mut bytes, &resolve, world, wit_component::StringEncoding::UTF8).unwrap();
    wit_component::ComponentEncoder::default().module(&bytes).unwrap().validate(true).encode().unwrap()
}

/// Issue 12: a component that links but fails to instantiate is refused at
/// install, from a file and from an index, with a message that says so;
/// nothing is written (no plugin file, no lock entry).
#[test]
fn a_component_that_links_but_cannot_instantiate_is_refused_at_install() {
    let m = Market::new();
    let raw = m.work("oob-raw.wasm");
    std::fs::write(&raw, uninstantiable_component()).unwrap();
    let manifest = m.work("oob.toml");
    std::fs::write(&manifest, "name = \"oob\"\nversion = \"1.0.0\"\n[[tools]]\nname = \"oob_tool\"\nparameters = { type = \"object\" }\n").unwrap();
    let packed = m.work("oob.wasm");
    m.tool(&["plugin", "pack", "--manifest", manifest.to_str().unwrap(), raw.to_str().unwrap(), "-o", packed.to_str().unwrap()]);

    let out = m.user(&["plugin", "install", packed.to_str().unwrap()]);
    let text = refused(&out, &["cannot be installed"]);
    assert!(text.contains("instantiat") || text.contains("out of bounds"), "{text}");
    assert!(m.installed().is_empty(), "{:?}", m.installed());

    // The same from a signed index.
    m.tool(&["plugin", "sign", packed.to_str().unwrap(), "--key", m.work("acme.key").to_str().unwrap()]);
    let pubkey = m.work("acme.pub");
    m.tool(&["plugin", "index", "add", m.site().to_str().unwrap(), packed.to_str().unwrap(), "--publisher", "acme", "--publisher-key", pubkey.to_str().unwrap()]);
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "oob", "--yes"]);
    let text = refused(&out, &["oob"]);
    assert!(text.contains("instantiat") || text.contains("out of bounds"), "{text}");
    assert!(m.installed().is_empty(), "{:?}", m.installed());
    assert!(m.lock().is_none_or(|lock| !lock.contains("oob")), "{:?}", m.lock());
    // The host still works.
    assert!(m.user(&["plugin", "list"]).status.success());
}

/// Issue 18: a marketplace update that widens where a secret is injected
/// (a new place) or where it is sent (a new audience) is an escalation that
/// waits for `approve`; the same places written otherwise are not. The
/// review, `plugin inspect` (text and JSON) and `chitin.lock` name each
/// secret's audience and exact places.
#[test]
fn an_update_that_widens_where_a_secret_goes_waits_for_approval() {
    let m = Market::new();
    let caps = |network: &str, audience: &str, inject: &str| {
        format!("network = [{network}]\n[[secrets]]\nname = \"api_key\"\naudience = \"{audience}\"\ninject = {inject}")
    };
    m.publish("hello", "1.0.0", &caps("\"api.example\"", "api.example", r#"[{ header = "x-api-key" }]"#));
    m.sign_index(30);
    m.configure_http();
    let out = m.user(&["plugin", "install", "hello", "--yes"]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("secret: api_key -> api.example in header x-api-key"), "the review names the place: {}", stdout(&out));
    assert!(m.lock().unwrap().contains("api_key -> api.example in header x-api-key"), "{}", m.lock().unwrap());
    let out = m.user(&["plugin", "inspect", "hello"]);
    assert!(stdout(&out).contains("api_key: to api.example, in header x-api-key"), "{}", stdout(&out));
    let inspect: Value = serde_json::from_slice(&m.user(&["plugin", "inspect", "hello", "--json"]).stdout).unwrap();
    assert_eq!(inspect["secrets"][0]["audience"], "api.example");
    assert_eq!(inspect["secrets"][0]["inject"], serde_json::json!(["header x-api-key"]));
    assert_eq!(inspect["manifest"]["secrets"][0]["inject"], serde_json::json!([{"header": "x-api-key"}]));

    // The same place, another spelling of the header: applied.
    m.publish("hello", "1.1.0", &caps("\"api.example\"", "api.example", r#"[{ header = "X-Api-Key" }]"#));
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    assert!(out.status.success() && stdout(&out).contains("updated hello 1.0.0 → 1.1.0"), "{}{}", stdout(&out), stderr(&out));

    // A query parameter too, where a platform might store and show it: staged.
    m.publish("hello", "2.0.0", &caps("\"api.example\"", "api.example", r#"[{ header = "x-api-key" }, { query = "text" }]"#));
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    refused(&out, &["the update of hello to 2.0.0 asks for more than you approved", "secret api_key injected in new places: query text", "chitin plugin approve hello"]);
    let lock = m.lock().unwrap();
    assert!(lock.contains("[staged.hello]") && lock.contains("[plugins.hello]\nversion = \"1.1.0\""), "{lock}");
    let out = m.user(&["plugin", "approve", "hello"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(m.lock().unwrap().contains("api_key -> api.example in header x-api-key, query text"), "{}", m.lock().unwrap());

    // The same secret to another host: staged too.
    m.publish("hello", "3.0.0", &caps("\"api.example\", \"other.example\"", "other.example", r#"[{ header = "x-api-key" }]"#));
    m.sign_index(30);
    let out = m.user(&["plugin", "update"]);
    refused(&out, &["secret api_key sent to a new host: other.example (was api.example)"]);
}
