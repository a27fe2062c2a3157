//! The web chat as a user sees it: the real `chitin gateway` binary over a
//! scripted mock LLM that streams slowly, and the page driven in Debian's
//! headless Chromium by `tests/webchat/drive.js` (playwright-core). The
//! browser part needs `/usr/bin/chromium`, `node` and
//! `npm ci --prefix host/tests/webchat`; `scripts/test slow` installs all three, and
//! the test fails, naming what is missing, rather than skip.

use crate::common::*;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use chitin::session::{JsonlStore, Role, SessionStore as _};
use chitin_testing::{MockLlm, MockReply};
use serde_json::{Value, json};

const TOKEN: &str = "webchat-test-token";

/// The first reply: Markdown, an HTML-injection attempt, a good and a bad
/// link; streamed by the mock in three pieces.
const REPLY: &str = "Here is `let x = 1;` and **bold** text. <img src=x onerror=\"window.__pwned=1\"> A [link](https://example.com/a?b=1&c=2) and [bad](javascript:window.__pwned=1). END-OF-REPLY";
const SECOND: &str = "The second answer, finished while the page was away. SECOND-DONE";

/// A running gateway; killed when dropped.
/// This module's way to start a gateway (a trait: `Gateway` comes from
/// chitin-testing and every module of the binary adds its own).
trait Start {
    fn start(home: &Path, mock: &MockLlm) -> Gateway;
}

impl Start for Gateway {
    fn start(home: &Path, mock: &MockLlm) -> Gateway {
        std::fs::write(home.join("config.toml"), "[agent]\nmodel = \"test-model\"\n[gateway]\nlisten = \"127.0.0.1:0\"\n").unwrap();
        let mut cmd = chitin(home, &["gateway"]);
        cmd.env("OPENAI_BASE_URL", mock.base_url()).env("CHITIN_GATEWAY_TOKEN", TOKEN);
        Gateway::spawn(cmd)
    }
}

/// The last user message's text in a model request.
fn last_user(request: &Value) -> String {
    request["messages"].as_array().into_iter().flatten().filter(|m| m["role"] == "user").last().map(|m| m["content"].to_string()).unwrap_or_default()
}

fn mock() -> MockLlm {
    MockLlm::with_handler(|request, _| {
        let said = last_user(request);
        let after_tool = request["messages"].as_array().and_then(|m| m.last()).is_some_and(|m| m["role"] == "tool");
        if after_tool {
            MockReply::text("The tool ran. TOOL-DONE")
        } else if said.contains("tool please") {
            MockReply::tool_call("echo", json!({"text": "hi"}).to_string())
        } else if said.contains("hang please") {
            MockReply::Hang
        } else if said.contains("second") {
            MockReply::text(SECOND)
        } else {
            MockReply::text(REPLY)
        }
    })
    .with_chunk_delay(Duration::from_millis(400))
}

fn support_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/webchat")
}

/// Fails (never skips) when the browser tooling is missing.
fn require_browser() -> PathBuf {
    let chromium = PathBuf::from(std::env::var("CHITIN_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into()));
    assert!(
        chromium.exists(),
        "{} is missing: the web chat test needs Debian's Chromium (`apt-get install -y --no-install-recommends chromium`, as scripts/test does)",
        chromium.display()
    );
    let node = Command::new("node").arg("--version").output();
    assert!(node.is_ok_and(|o| o.status.success()), "`node` is missing: the web chat test drives the browser with Node.js and playwright-core");
    let playwright = support_dir().join("node_modules/playwright-core");
    assert!(playwright.exists(), "{} is missing: run `npm ci --prefix host/tests/webchat` (as scripts/test does)", playwright.display());
    chromium
}

#[tokio::test(flavor = "multi_thread")]
async fn the_page_is_public_and_every_chat_call_needs_the_token() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock);
    let http = reqwest::Client::new();

    for path in ["/", "/chat"] {
        let page = http.get(gw.url(path)).send().await.unwrap();
        assert_eq!(page.status().as_u16(), 200, "{path}");
        assert!(page.headers()["content-type"].to_str().unwrap().starts_with("text/html"));
        let csp = page.headers()["content-security-policy"].to_str().unwrap().to_string();
        assert!(csp.contains("script-src 'self'") && !csp.contains("unsafe-inline"), "{csp}");
        assert!(page.text().await.unwrap().contains("/chat/app.js"));
    }
    let js = http.get(gw.url("/chat/app.js")).send().await.unwrap();
    assert!(js.headers()["content-type"].to_str().unwrap().starts_with("text/javascript"));
    assert!(js.text().await.unwrap().contains("function escapeHtml"));

    let calls = [
        ("GET", "/chat/sessions", None),
        ("GET", "/chat/history?session=abc", None),
        ("GET", "/chat/events?session=abc", None),
        ("POST", "/chat/send", Some(json!({"session": "abc", "text": "hi"}))),
        ("POST", "/chat/stop", Some(json!({"session": "abc"}))),
    ];
    for (method, path, body) in &calls {
        for token in [None, Some("wrong"), Some("webchat-test-token2"), Some("webchat-test-toke")] {
            let mut request = http.request(method.parse().unwrap(), gw.url(path));
            if let Some(token) = token {
                request = request.bearer_auth(token);
            }
            if let Some(body) = body {
                request = request.json(body);
            }
            let response = request.send().await.unwrap();
            assert_eq!(response.status().as_u16(), 401, "{method} {path} with {token:?}");
        }
    }
    assert_eq!(mock.request_count(), 0, "nothing reached the model without the token");

    let bad = http.get(gw.url("/chat/history?session=../api:x")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(bad.status().as_u16(), 400, "session ids are a closed alphabet");
    let sessions: Value = http.get(gw.url("/chat/sessions")).bearer_auth(TOKEN).send().await.unwrap().json().await.unwrap();
    assert_eq!(sessions, json!({"sessions": []}));
    drop(gw);
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow: drives Chromium"]
async fn a_browser_streams_a_reply_renders_it_safely_switches_sessions_stops_and_reconnects() {
    require_browser();
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    // The hostile guest's `echo` reports progress, for the tool hint step.
    let install = run(chitin(home.path(), &["plugin", "install", HOSTILE_WASM]));
    assert!(install.status.success(), "{}", stderr(&install));
    let gw = Gateway::start(home.path(), &mock);
    let base = gw.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_within(Command::new("node").arg(support_dir().join("drive.js")).arg(&base).arg(TOKEN).current_dir(support_dir()), Duration::from_secs(180))
    })
    .await
    .unwrap();
    let text = stdout(&out);
    let r: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("drive.js printed no JSON ({e}): {text}\nstderr: {}", stderr(&out)));
    let context = format!("{r:#}\ngateway stderr:\n{}", gw.stderr());
    if std::env::var_os("CHITIN_WEBCHAT_SHOW").is_some() {
        eprintln!("{r:#}");
    }
    assert!(r["error"].is_null(), "the browser run failed at a step: {context}");
    assert_eq!(r["lastStep"], "done", "{context}");
    assert_eq!(r["pageErrors"], json!([]), "{context}");

    // Token: asked for, a wrong one refused (the page asks again).
    assert_eq!(r["loginShown"], true);
    assert!(r["wrongToken"]["error"].as_str().unwrap().contains("refused"), "{context}");
    assert_eq!(r["wrongToken"]["loginStillShown"], true, "{context}");

    // Streaming: the bubble held part of the reply before all of it.
    let partial = r["partial"].as_str().unwrap();
    assert!(!partial.is_empty() && !partial.contains("END-OF-REPLY"), "{context}");
    assert!(REPLY.starts_with("Here is") && r["reply"]["text"].as_str().unwrap().starts_with(&partial[..partial.len().min(7)]), "{context}");
    // The progress hint was shown dimmed while the turn ran, and cleared after.
    assert_eq!(r["hint"]["text"], "running", "{context}");
    assert_eq!(r["hint"]["color"], "rgb(153, 153, 153)", "{context}");
    assert_eq!(r["stopEnabledWhileBusy"], true);
    assert_eq!(r["hintsAfterTurn"], 0);

    // Markdown, safely: code and bold are elements; the <img> is text; only
    // the http(s) link became a link, with rel=noopener.
    let reply = &r["reply"];
    assert_eq!(reply["code"], json!(["let x = 1;"]), "{context}");
    assert_eq!(reply["strong"], json!(["bold"]), "{context}");
    assert_eq!(reply["imgs"], 0, "{context}");
    assert_eq!(reply["pwned"], false, "{context}");
    assert!(reply["text"].as_str().unwrap().contains("<img src=x onerror=\"window.__pwned=1\">"), "shown as text: {context}");
    assert_eq!(reply["links"], json!([{"href": "https://example.com/a?b=1&c=2", "rel": "noopener noreferrer", "text": "link"}]), "{context}");
    assert!(reply["text"].as_str().unwrap().contains("[bad](javascript:window.__pwned=1)"), "{context}");
    let tags: Vec<&str> = reply["elements"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(tags.iter().all(|t| ["p", "code", "strong", "em", "a", "br", "pre"].contains(t)), "{tags:?}");
    assert_eq!(reply["userText"], "hello");

    // The session list: the first chat, titled by its first message.
    assert_eq!(r["sessionsAfterFirst"], json!([{"title": "hello", "active": true}]), "{context}");
    let first = r["firstSession"].as_str().unwrap();
    let second = r["newSession"]["id"].as_str().unwrap();
    assert_ne!(first, second, "{context}");
    assert_eq!(r["newSession"]["messages"], 0, "a new chat starts empty: {context}");

    // Reconnect: part of the reply was seen, the stream dropped, the reply
    // finished (stored by the gateway) while the page was offline; after
    // reconnecting the page shows the finished reply once, loaded from the
    // session's history (no delta arrived after the drop).
    let before_drop = r["partialBeforeDrop"].as_str().unwrap();
    assert!(!before_drop.is_empty() && !before_drop.contains("SECOND-DONE"), "{context}");
    assert!(r["shownWhileOffline"].as_array().unwrap().iter().all(|t| !t.as_str().unwrap().contains("SECOND-DONE")), "{context}");
    let (before, after) = (&r["reconnect"]["before"], &r["reconnect"]["after"]);
    assert!(after["connects"].as_u64() > before["connects"].as_u64(), "{context}");
    assert!(after["drops"].as_u64() > before["drops"].as_u64(), "{context}");
    assert!(after["historyLoads"].as_u64() > before["historyLoads"].as_u64(), "{context}");
    assert_eq!(after["deltas"], before["deltas"], "the rest came from the history, not the stream: {context}");
    assert_eq!(r["reconnect"]["assistant"], json!([{"text": SECOND, "streaming": false}]), "{context}");
    assert_eq!(r["reconnect"]["stopDisabled"], true, "the finished turn is not shown as running: {context}");

    // Switching back loads the first chat's history, rendered again.
    assert_eq!(r["switchedBack"]["id"], first);
    assert_eq!(r["switchedBack"]["code"], "let x = 1;");

    // `/stop` typed in the box stopped the hanging turn.
    assert_eq!(r["stopNotice"], "Stopped.", "{context}");

    // A tool's progress: one hint for the call, showing the plugin's text
    // (`host.progress`), marked done, gone with the turn.
    assert_eq!(r["toolHint"]["text"], "↳ echo: echoing", "{context}");
    assert!(r["toolHint"]["call"].as_str().is_some_and(|c| !c.is_empty()), "{context}");
    assert_eq!(r["toolHint"]["hints"], 2, "the turn's hint and one per call: {context}");
    assert_eq!(r["hintsAfterToolTurn"], 0, "{context}");
    assert_eq!(r["stopped"], true);

    // A reload keeps the token and the session.
    assert_eq!(r["afterReload"]["loginHidden"], true, "{context}");
    assert_eq!(r["afterReload"]["id"], first, "{context}");

    // What the model saw, and what the host stored: two `web:` sessions.
    let said: Vec<String> = mock.requests().iter().map(last_user).collect();
    assert!(said.iter().any(|s| s.contains("hello")) && said.iter().any(|s| s.contains("second")) && said.iter().any(|s| s.contains("hang please")), "{said:?}");
    assert!(!said.iter().any(|s| s.contains("/stop")), "/stop never reaches the model: {said:?}");
    drop(gw);
    let store = JsonlStore::new(home.path().join("sessions"));
    let keys = store.list().unwrap();
    assert!(keys.contains(&format!("web:{first}")) && keys.contains(&format!("web:{second}")), "{keys:?}");
    let stored = store.load(&format!("web:{second}")).unwrap();
    let shape: Vec<(Role, String)> = stored.messages.iter().map(|m| (m.role, m.text().to_string())).collect();
    assert_eq!(shape, [(Role::User, "second".to_string()), (Role::Assistant, SECOND.to_string())]);
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_stops_a_hanging_web_turn_within_the_drain_grace() {
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    let mut gw = Gateway::start(home.path(), &mock);
    let http = reqwest::Client::new();
    let sent = http.post(gw.url("/chat/send")).bearer_auth(TOKEN).json(&json!({"session": "s1", "text": "hang please"})).send().await.unwrap();
    assert_eq!(sent.status().as_u16(), 202);
    for _ in 0..500 {
        if mock.request_count() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(mock.request_count(), 1, "the turn reached the model");
    let started = std::time::Instant::now();
    // SAFETY: kill(2) on our own child's pid.
    gw.signal_term();
    let status = loop {
        if let Some(status) = gw.child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "the gateway waited on the hanging web turn: {}", gw.stderr());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status:?}: {}", gw.stderr());
    // DRAIN_GRACE (5 s) for the turn to finish, then stopped, not the
    // loop's 60 s flush limit.
    assert!(started.elapsed() < Duration::from_secs(12), "{:?}", started.elapsed());
    assert!(gw.stderr().contains("stopped 1 running turn(s), finished tool steps kept: web:s1"), "{}", gw.stderr());
}

/// The page's event stream carries a tool's progress: the hostile guest's
/// `echo` reports "echoing" through `host.progress`, and the SSE stream of
/// the session shows the tool's start, that text and its end, each naming
/// the tool and the call, between the turn's "running" hint and its reply.
#[tokio::test(flavor = "multi_thread")]
async fn the_event_stream_carries_tool_progress_naming_the_call() {
    let mock = MockLlm::start(vec![MockReply::tool_call("echo", json!({"text": "hi"}).to_string()), MockReply::text("echoed")]);
    let home = tempfile::tempdir().unwrap();
    let install = run(chitin(home.path(), &["plugin", "install", HOSTILE_WASM]));
    assert!(install.status.success(), "{}", stderr(&install));
    let gw = Gateway::start(home.path(), &mock);
    let http = reqwest::Client::new();
    let response = http.get(gw.url("/chat/events?session=prog")).bearer_auth(TOKEN).send().await.unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let mut stream = response.bytes_stream();
    let mut buffer = String::new();
    let mut events: Vec<Value> = Vec::new();
    let mut sent = false;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !events.iter().any(|e| e["kind"] == "turn_end") {
        assert!(std::time::Instant::now() < deadline, "no turn_end in time: {events:#?}\n{}", gw.stderr());
        let piece = tokio::time::timeout(Duration::from_secs(20), futures::StreamExt::next(&mut stream)).await.expect("an event in time");
        buffer.push_str(std::str::from_utf8(&piece.unwrap().unwrap()).unwrap());
        while let Some(end) = buffer.find("\n\n") {
            let frame: String = buffer.drain(..end + 2).collect();
            if let Some(data) = frame.trim().strip_prefix("data: ") {
                events.push(serde_json::from_str(data).unwrap());
            }
        }
        if !sent && events.iter().any(|e| e["kind"] == "ready") {
            let posted = http.post(gw.url("/chat/send")).bearer_auth(TOKEN).json(&json!({"session": "prog", "text": "echo hi"})).send().await.unwrap();
            assert_eq!(posted.status().as_u16(), 202);
            sent = true;
        }
    }
    let progress: Vec<&Value> = events.iter().filter(|e| e["kind"] == "progress").collect();
    assert_eq!(progress[0]["text"], "running", "{progress:#?}");
    let tool: Vec<(&str, &str)> = progress[1..].iter().map(|e| (e["phase"].as_str().unwrap(), e["text"].as_str().unwrap())).collect();
    assert_eq!(tool, [("started", r#"echo({"text":"hi"})"#), ("progress", "echoing"), ("finished", "")], "{progress:#?}");
    for event in &progress[1..] {
        assert_eq!(event["tool"], "echo");
        assert_eq!(event["call_id"], progress[1]["call_id"]);
        assert!(event["call_id"].as_str().is_some_and(|id| !id.is_empty()));
    }
    assert_eq!(progress[3]["ok"], true);
    let reply = events.iter().find(|e| e["kind"] == "message").unwrap();
    assert_eq!(reply["text"], "echoed");
}

/// Markdown in → the HTML the page makes, run in the browser. Everything is
/// escaped; only http, https and mailto become links; no raw HTML, no
/// `javascript:`, no image is ever loaded.
const RENDER_CASES: &[(&str, &str)] = &[
    (
        "**bold** and *it* and _it_ and ***both*** and ~~gone~~",
        "<p><strong>bold</strong> and <em>it</em> and <em>it</em> and <em><strong>both</strong></em> and <del>gone</del></p>",
    ),
    ("snake_case_name and a * b * c", "<p>snake_case_name and a * b * c</p>"),
    ("`a<b` and ``x ` y`` and `unclosed", "<p><code>a&lt;b</code> and <code>x ` y</code> and `unclosed</p>"),
    (
        "```rust\nfn main() { println!(\"<hi>\"); }\n```",
        "<div class=\"code-block\"><button type=\"button\" class=\"copy\" title=\"Copy the code\">Copy</button><pre><code class=\"language-rust\">fn main() { println!(&quot;&lt;hi&gt;&quot;); }</code></pre></div>",
    ),
    // Mid-stream, an unclosed fence runs to the end.
    (
        "```py\nprint(1)",
        "<div class=\"code-block\"><button type=\"button\" class=\"copy\" title=\"Copy the code\">Copy</button><pre><code class=\"language-py\">print(1)</code></pre></div>",
    ),
    (
        "[a](https://x.test/?q=1&r=2) [b](http://y.test) [m](mailto:me@x.test) [**s**](https://x.test/s)",
        "<p><a href=\"https://x.test/?q=1&amp;r=2\" rel=\"noopener noreferrer\" target=\"_blank\">a</a> <a href=\"http://y.test\" rel=\"noopener noreferrer\" target=\"_blank\">b</a> <a href=\"mailto:me@x.test\" rel=\"noopener noreferrer\" target=\"_blank\">m</a> <a href=\"https://x.test/s\" rel=\"noopener noreferrer\" target=\"_blank\"><strong>s</strong></a></p>",
    ),
    (
        "[c](javascript:alert(1)) [d](JAVASCRIPT:alert(1)) [e](data:text/html,x) [f](  javascript:x ) [g](<javascript:x>)",
        "<p>[c](javascript:alert(1)) [d](JAVASCRIPT:alert(1)) [e](data:text/html,x) [f](  javascript:x ) [g](&lt;javascript:x&gt;)</p>",
    ),
    (
        "[x](https://a.test/\"onmouseover=\"alert(1))",
        "<p><a href=\"https://a.test/&quot;onmouseover=&quot;alert(1)\" rel=\"noopener noreferrer\" target=\"_blank\">x</a></p>",
    ),
    (
        "<script>alert(1)</script> <img src=x onerror=alert(1)> &lt;b&gt;",
        "<p>&lt;script&gt;alert(1)&lt;/script&gt; &lt;img src=x onerror=alert(1)&gt; &amp;lt;b&amp;gt;</p>",
    ),
    (
        "see https://example.com/a_(b). and <https://x.test/a> but not javascript:alert(1)",
        "<p>see <a href=\"https://example.com/a_(b)\" rel=\"noopener noreferrer\" target=\"_blank\">https://example.com/a_(b)</a>. and <a href=\"https://x.test/a\" rel=\"noopener noreferrer\" target=\"_blank\">https://x.test/a</a> but not javascript:alert(1)</p>",
    ),
    ("![pic](https://x.test/i.png)", "<p>!<a href=\"https://x.test/i.png\" rel=\"noopener noreferrer\" target=\"_blank\">pic</a></p>"),
    ("\\*not\\* \\<b\\>", "<p>*not* &lt;b&gt;</p>"),
    ("# Title\n## Sub ##\nline one\nline two", "<h1>Title</h1><h2>Sub</h2><p>line one<br>line two</p>"),
    ("- one\n- two\n  - nested\n- three", "<ul><li>one</li><li>two<ul><li>nested</li></ul></li><li>three</li></ul>"),
    ("1. first\n2. second\n\n7) seven", "<ol><li>first</li><li>second</li></ol><ol start=\"7\"><li>seven</li></ol>"),
    ("- a\n\n- b", "<ul><li><p>a</p></li><li><p>b</p></li></ul>"),
    ("> quoted **text**\n> more\n\n---", "<blockquote><p>quoted <strong>text</strong><br>more</p></blockquote><hr>"),
    (
        "| a | b | c |\n|:--|:-:|--:|\n| 1 | `\\|` | x\\|y |\n| only |",
        "<div class=\"table\"><table><thead><tr><th class=\"align-left\">a</th><th class=\"align-center\">b</th><th class=\"align-right\">c</th></tr></thead><tbody><tr><td class=\"align-left\">1</td><td class=\"align-center\"><code>|</code></td><td class=\"align-right\">x|y</td></tr><tr><td class=\"align-left\">only</td></tr></tbody></table></div>",
    ),
];

/// 100 000 characters built to make a Markdown renderer backtrack or nest:
/// (name, JSON fields for render.js: `unit` repeated after an optional
/// `head`, or `halves`).
fn attacks() -> Vec<Value> {
    let unit = |name: &str, unit: &str| json!({"name": name, "unit": unit});
    vec![
        unit("[ repeated", "["),
        unit("[a]( repeated", "[a]("),
        unit("* repeated", "*"),
        unit("**a repeated", "**a"),
        unit("backticks repeated", "`"),
        unit("_ repeated", "_"),
        json!({"name": "nested brackets", "halves": ["[", "]"]}),
        json!({"name": "a long line with ](", "head": "[", "unit": "x]("}),
        unit("]( repeated", "]("),
        unit("[x](y repeated", "[x](y"),
        unit("[a](< repeated", "[a](<"),
        unit("[a](x \" repeated", "[a](x \""),
        unit("[a](( repeated", "[a](("),
        unit("` `` alternating", "` ``"),
        unit("*_ alternating", "*_"),
        unit("~~a repeated", "~~a"),
        unit("<http:// repeated", "<http://"),
        unit("https:// repeated", "https://"),
        unit("\\ repeated", "\\"),
        unit("> repeated (nested quotes)", ">"),
        unit("- repeated (nested lists)", "- "),
        unit("lines of a", "a\n"),
        unit("```\\n repeated (fences)", "```\n"),
        json!({"name": "a wide table's rows", "head": format!("{}|\n{}|\n", "|a".repeat(64), "|-".repeat(64)), "unit": "|x\n"}),
        unit("valid links", "[a](https://x.test/) "),
    ]
}

/// A reply built to stall a renderer: an injection attempt, tens of
/// thousands of link openers and emphasis runs that never close (so all
/// of it must come out as text), streamed in 400 deltas.
fn hostile_reply() -> String {
    let mut reply = String::from("<script>window.__pwned=1</script><img src=x onerror=\"window.__pwned=1\">");
    reply.push_str(&"[".repeat(40_000));
    reply.push_str(&"[a](".repeat(10_000));
    reply.push_str(&"*".repeat(10_000));
    reply.push_str(&"~".repeat(5_000));
    reply.push_str(" HOSTILE-END");
    reply
}

/// The renderer is linear: the attack first, on the old renderer (its
/// regular expressions, verbatim, in the same page), then the new one on
/// the same 100 000-character inputs, each under 200 ms and growing at
/// most ~linearly from 10 000 characters; a hostile reply streamed in many
/// deltas leaves the page answering and is shown as text; and a table of
/// Markdown → HTML cases, all in Debian's Chromium.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow: drives Chromium"]
async fn a_hostile_reply_renders_in_linear_time_escaped_in_a_browser() {
    require_browser();
    let reply = hostile_reply();
    let mock = {
        let reply = reply.clone();
        MockLlm::with_handler(move |_, _| MockReply::text(reply.clone())).with_stream_pieces(400).with_chunk_delay(Duration::from_millis(5))
    };
    let home = tempfile::tempdir().unwrap();
    let gw = Gateway::start(home.path(), &mock);
    let plan = json!({
        "cases": RENDER_CASES.iter().map(|(input, _)| json!({"input": input})).collect::<Vec<_>>(),
        "attacks": attacks(),
        "sizes": [10_000, 100_000],
        "stream": {"ask": "render this", "final": "HOSTILE-END"},
    });
    let plan_file = home.path().join("plan.json");
    std::fs::write(&plan_file, plan.to_string()).unwrap();
    let base = gw.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_within(Command::new("node").arg(support_dir().join("render.js")).arg(&base).arg(TOKEN).arg(&plan_file).current_dir(support_dir()), Duration::from_secs(300))
    })
    .await
    .unwrap();
    let text = stdout(&out);
    let r: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("render.js printed no JSON ({e}): {text}\nstderr: {}", stderr(&out)));
    let mut shown = r.clone();
    shown["stream"]["text"] = json!(format!("({} chars)", r["stream"]["text"].as_str().map_or(0, str::len)));
    shown["cases"]["outputs"] = json!("(checked below)");
    let context = format!("{shown:#}\ngateway stderr:\n{}", gw.stderr());
    if std::env::var_os("CHITIN_WEBCHAT_SHOW").is_some() {
        eprintln!("{context}");
    }
    assert!(r["error"].is_null(), "the browser run failed at a step: {context}");
    assert_eq!(r["lastStep"], "done", "{context}");
    assert_eq!(r["pageErrors"], json!([]), "{context}");

    // The table of cases, rendered and then put into the live page: nothing
    // ran, no element but the renderer's own.
    let outputs = r["cases"]["outputs"].as_array().unwrap();
    assert_eq!(outputs.len(), RENDER_CASES.len());
    for ((input, expected), got) in RENDER_CASES.iter().zip(outputs) {
        assert_eq!(got["html"], *expected, "rendering {input:?}");
    }
    assert_eq!(r["cases"]["found"], json!({"scripts": 0, "imgs": 0, "iframes": 0}), "{context}");
    assert_eq!(r["cases"]["pwned"], false, "{context}");
    // 3 000 random Markdown-ish texts (markup, quotes, `javascript:`, raw
    // tags): only the renderer's own elements and attributes came out, and
    // links only to http, https or mailto.
    assert_eq!(r["fuzz"]["count"], 3000, "{context}");
    assert_eq!(r["fuzz"]["violations"], json!([]), "{context}");
    // A code block's copy button puts the code (as text) on the clipboard.
    assert_eq!(r["copy"], json!({"label": "Copied", "clipboard": "echo \"<copied>\""}), "{context}");

    let ms = |v: &Value| v.as_f64().unwrap_or(f64::NAN);
    let attacks = r["attacks"].as_array().unwrap();
    assert_eq!(attacks.len(), self::attacks().len(), "{context}");
    let mut report = String::from("attack                     new 10k ms  new 100k ms  ratio  +DOM 100k ms | old size  old 10k ms  old at size ms\n");
    for a in attacks {
        report.push_str(&format!(
            "{:<26} {:>10.3} {:>12.3} {:>6.1} {:>13.3} | {:>8} {:>13.1} {:>11.1}\n",
            a["name"].as_str().unwrap(),
            ms(&a["newSmall"]),
            ms(&a["newLarge"]),
            ms(&a["newLarge"]) / ms(&a["newSmall"]),
            ms(&a["newLargeOnce"]),
            a["oldBigLen"],
            ms(&a["oldSmall"]),
            ms(&a["oldBig"]),
        ));
    }
    eprintln!("{report}");

    // First the attack: the old renderer's link pattern backtracks. On `[`
    // repeated and on nested brackets its time grows far faster than the
    // input (quadratic: 100x for 10x the text); the new renderer does the
    // same input many times faster.
    for name in ["[ repeated", "nested brackets"] {
        let a = attacks.iter().find(|a| a["name"] == name).unwrap();
        let growth = a["oldBigLen"].as_f64().unwrap() / a["smallLen"].as_f64().unwrap();
        let old_ratio = ms(&a["oldBig"]) / ms(&a["oldSmall"]).max(0.1);
        assert!(old_ratio > 3.0 * growth, "{name}: the old renderer grew {old_ratio:.1}x for {growth}x the text\n{report}");
        assert!(ms(&a["oldBig"]) > 5.0 * ms(&a["newAtOldBig"]), "{name}: old {} ms vs new {} ms\n{report}", a["oldBig"], a["newAtOldBig"]);
    }
    // Then the new renderer: every attack at 100 000 characters renders in
    // under 200 ms (and under 500 ms with the browser building the DOM of
    // it), and grows ~linearly from 10 000 (quadratic would be 100x; the
    // bound is generous for a shared machine).
    for a in attacks {
        let name = a["name"].as_str().unwrap();
        assert_eq!(a["largeLen"], 100_000, "{name}");
        assert!(ms(&a["newLarge"]) < 200.0, "{name}: {} ms for 100 000 characters\n{report}", a["newLarge"]);
        assert!(ms(&a["newLargeOnce"]) < 500.0, "{name}: {} ms for 100 000 characters into the DOM\n{report}", a["newLargeOnce"]);
        let ratio = ms(&a["newLarge"]) / ms(&a["newSmall"]).max(0.05);
        assert!(ratio < 30.0, "{name}: {ratio:.1}x the time for 10x the text\n{report}");
    }

    // The stream: the hostile reply reached the page whole, in many deltas
    // (the attack ran), the page answered every check within a second while
    // it streamed, rendered less often than deltas came, and showed the
    // reply as text.
    let stream = &r["stream"];
    assert_eq!(mock.request_count(), 1, "{context}");
    assert!(stream["deltas"].as_u64().unwrap() >= 100, "{context}");
    assert_eq!(stream["sawPartial"], true, "{context}");
    assert_eq!(stream["text"].as_str().unwrap(), reply, "the reply is shown whole, as text: {context}");
    assert_eq!(stream["scripts"], 0, "{context}");
    assert_eq!(stream["pwned"], false, "{context}");
    let tags: Vec<&str> = stream["elements"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(tags, ["p"], "{context}");
    assert!(stream["renders"].as_u64().unwrap() < stream["deltas"].as_u64().unwrap(), "{context}");
    assert!(stream["pings"].as_u64().unwrap() >= 5, "{context}");
    assert!(ms(&stream["maxPing"]) < 1000.0, "the page stalled while the reply streamed: {context}");
    let longest = stream["longTasks"].as_array().unwrap().iter().map(ms).fold(0.0, f64::max);
    assert!(longest < 500.0, "a {longest} ms task while the reply streamed: {context}");
    drop(gw);
}

/// Issue 18 (6): the web chat of a gateway without a token, in a real
/// browser. On its own origin the page works (no token asked; its POSTs
/// carry its own `Origin`, which the gateway accepts). A page on a foreign
/// origin (another port of 127.0.0.1) then sends what an attacker's page
/// would: a `no-cors` text/plain POST to `/chat/send`, which the browser
/// really sends (the gateway logs it, naming the origin) and the gateway
/// refuses before the bus, so the model never sees its sentinel; and a
/// read of the history, which the browser does not let it see.
#[tokio::test(flavor = "multi_thread")]
#[ignore = "slow: drives Chromium"]
async fn without_a_token_the_page_works_and_a_foreign_page_cannot_post() {
    require_browser();
    let mock = mock();
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join("config.toml"), "[agent]\nmodel = \"test-model\"\n[gateway]\nlisten = \"127.0.0.1:0\"\nauth_token = \"\"\n").unwrap();
    let mut cmd = chitin(home.path(), &["gateway"]);
    cmd.env("OPENAI_BASE_URL", mock.base_url());
    let gw = Gateway::spawn(cmd);
    // The foreign site: any other origin on loopback; the mock LLM's own
    // listener serves as one (what it answers for `/` does not matter).
    let foreign = mock.base_url().trim_end_matches("/v1").to_string();
    let base = gw.base.clone();
    let out = tokio::task::spawn_blocking(move || {
        run_within(Command::new("node").arg(support_dir().join("authless.js")).arg(&base).arg(&foreign).current_dir(support_dir()), Duration::from_secs(120))
    })
    .await
    .unwrap();
    let text = stdout(&out);
    let r: Value = serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("authless.js printed no JSON ({e}): {text}\nstderr: {}", stderr(&out)));
    let context = format!("{r:#}\ngateway stderr:\n{}", gw.stderr());
    assert!(r["error"].is_null(), "the browser run failed at a step: {context}");
    assert_eq!(r["lastStep"], "done", "{context}");
    assert_eq!(r["pageErrors"], json!([]), "{context}");
    assert_eq!(r["loginHidden"], true, "no token is asked for: {context}");
    assert_eq!(r["replied"], true, "{context}");
    let said: Vec<String> = mock.requests().iter().map(last_user).collect();
    assert!(said.iter().any(|s| s.contains("SAME-ORIGIN-SENTINEL")), "the page's own message ran a turn: {said:?}");
    // The cross-site POST was sent (an opaque answer) and reached the
    // gateway, which refused it naming the foreign origin.
    assert_eq!(r["foreign"]["sendType"], "opaque", "{context}");
    let err = gw.stderr();
    let refusal = err.lines().find(|l| l.contains("request refused (403)") && l.contains("/chat/send")).unwrap_or_else(|| panic!("the cross-site POST never reached the gateway: {context}"));
    assert!(refusal.contains("http://127.0.0.1:"), "{refusal}");
    assert!(r["foreign"]["history"].is_null() && r["foreign"]["historyError"].is_string(), "the foreign page cannot read the history: {context}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let said: Vec<String> = mock.requests().iter().map(last_user).collect();
    assert!(!said.iter().any(|s| s.contains("CROSS-SITE-SENTINEL")), "the cross-site message reached the model: {said:?}");
}
