//! The sandbox against a hostile guest: each attack gets a clear error, and
//! the next call to the same plugin still works.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chitin::plugins::{GrantConfig, Limits, PluginError, WorkspaceAccess};
use chitin_testing::{HOSTILE_WASM, OnePlugin, serve_http, workspace_grant};
use serde_json::json;

fn hostile(grant: GrantConfig) -> OnePlugin {
    OnePlugin::new(HOSTILE_WASM, grant, Limits { timeout_ms: 2_000, memory_mb: 64, ..Limits::default() })
}

/// The plugin still answers after whatever happened before.
async fn assert_recovers(host: &OnePlugin) {
    let out = host.call("echo", json!({"text": "still here"})).await.expect("the call after a failure works");
    assert_eq!(out, "still here");
}

fn denied_or_failed(result: Result<String, PluginError>) -> String {
    match result {
        Err(PluginError::Tool { message, .. }) => message,
        other => panic!("expected the guest to be refused, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn parent_traversal_is_refused() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    std::fs::write(host.outside().join("secret.txt"), "top secret").unwrap();
    let message = denied_or_failed(host.call("read_path", json!({"path": "../secret.txt"})).await);
    assert!(!message.contains("top secret"), "{message}");
    let message = denied_or_failed(host.call("read_path", json!({"path": "sub/../../secret.txt"})).await);
    assert!(!message.contains("top secret"), "{message}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn absolute_paths_are_refused() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    std::fs::write(host.outside().join("secret.txt"), "top secret").unwrap();
    let secret = host.outside().join("secret.txt").display().to_string();
    for path in ["/etc/passwd", secret.as_str()] {
        let message = denied_or_failed(host.call("read_path", json!({"path": path})).await);
        assert!(!message.contains("top secret") && !message.contains("root:"), "{message}");
    }
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn symlinks_out_of_the_workspace_are_refused() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    std::fs::write(host.outside().join("secret.txt"), "top secret").unwrap();
    std::os::unix::fs::symlink(host.outside(), host.workspace.join("dir_out")).unwrap();
    std::os::unix::fs::symlink(host.outside().join("secret.txt"), host.workspace.join("file_out")).unwrap();
    for path in ["dir_out/secret.txt", "file_out"] {
        let message = denied_or_failed(host.call("read_path", json!({"path": path})).await);
        assert!(!message.contains("top secret"), "{path}: {message}");
    }
    let _ = host.call("write_path", json!({"path": "file_out", "content": "overwritten"})).await;
    assert_eq!(std::fs::read_to_string(host.outside().join("secret.txt")).unwrap(), "top secret");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_workspace_itself_is_usable() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    std::fs::create_dir(host.workspace.join("sub")).unwrap();
    std::fs::write(host.workspace.join("sub/a.txt"), "hello").unwrap();
    assert_eq!(host.call("read_path", json!({"path": "sub/a.txt"})).await.unwrap(), "hello");
    host.call("write_path", json!({"path": "b.txt", "content": "written"})).await.unwrap();
    assert_eq!(std::fs::read_to_string(host.workspace.join("b.txt")).unwrap(), "written");
}

#[tokio::test(flavor = "multi_thread")]
async fn read_only_grant_refuses_writes() {
    let host = hostile(workspace_grant(WorkspaceAccess::Read));
    std::fs::write(host.workspace.join("a.txt"), "original").unwrap();
    assert_eq!(host.call("read_path", json!({"path": "a.txt"})).await.unwrap(), "original");
    denied_or_failed(host.call("write_path", json!({"path": "a.txt", "content": "changed"})).await);
    denied_or_failed(host.call("write_path", json!({"path": "new.txt", "content": "x"})).await);
    assert_eq!(std::fs::read_to_string(host.workspace.join("a.txt")).unwrap(), "original");
    assert!(!host.workspace.join("new.txt").exists());
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn no_grant_means_no_filesystem() {
    let host = hostile(GrantConfig::default());
    std::fs::write(host.workspace.join("a.txt"), "invisible").unwrap();
    let message = denied_or_failed(host.call("read_path", json!({"path": "a.txt"})).await);
    assert!(!message.contains("invisible"), "{message}");
    denied_or_failed(host.call("list_path", json!({"path": "."})).await);
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn environment_variables_are_invisible() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    assert!(std::env::var("PATH").is_ok(), "the host has a PATH");
    for name in ["PATH", "HOME"] {
        let message = denied_or_failed(host.call("read_env", json!({"name": name})).await);
        assert!(message.contains("not set"), "{message}");
    }
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sockets_cannot_be_opened() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let host = hostile(GrantConfig { network: vec![addr.to_string()], ..workspace_grant(WorkspaceAccess::ReadWrite) });
    denied_or_failed(host.call("open_socket", json!({"addr": addr.to_string()})).await);
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "no connection reached the listener");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_to_a_host_not_granted_is_denied() {
    let hits = Arc::new(AtomicUsize::new(0));
    let counter = hits.clone();
    let addr = serve_http(move |_| {
        counter.fetch_add(1, Ordering::SeqCst);
        (200, vec![], "secret data".into())
    })
    .await;
    // The manifest asks for 127.0.0.1; the user granted nothing.
    let host = hostile(GrantConfig::default());
    let message = denied_or_failed(host.call("http_get", json!({"url": format!("http://{addr}/")})).await);
    assert!(message.to_lowercase().contains("denied"), "{message}");
    // A different port than the one granted is denied too.
    let host = hostile(GrantConfig { network: vec!["127.0.0.1:1".into()], ..GrantConfig::default() });
    denied_or_failed(host.call("http_get", json!({"url": format!("http://{addr}/")})).await);
    assert_eq!(hits.load(Ordering::SeqCst), 0, "no request reached the server");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn http_to_a_granted_local_server_works_and_redirects_are_rechecked() {
    let target = serve_http(|_| (200, vec![], "not for plugins".into())).await;
    let addr = serve_http(move |path| match path {
        "/redirect" => (302, vec![("location".into(), format!("http://{target}/"))], String::new()),
        _ => (200, vec![], "hello from the test server".into()),
    })
    .await;
    // The manifest asks for 127.0.0.1 (any port); grant exactly one port.
    let host = hostile(GrantConfig { network: vec![format!("127.0.0.1:{}", addr.port())], ..GrantConfig::default() });
    assert_eq!(
        host.call("http_get", json!({"url": format!("http://{addr}/")})).await.unwrap(),
        "200\nhello from the test server"
    );
    let redirect = host.call("http_get", json!({"url": format!("http://{addr}/redirect")})).await.unwrap();
    assert!(redirect.starts_with("302"), "{redirect}");
    let location = redirect.split("location=").nth(1).expect("location reported").trim().to_string();
    denied_or_failed(host.call("http_get", json!({"url": location})).await);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_infinite_loop_times_out() {
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig::default(), Limits { timeout_ms: 300, ..Limits::default() });
    let started = Instant::now();
    let err = host.call("spin", json!({})).await.unwrap_err();
    assert!(matches!(err, PluginError::Timeout { limit_ms: 300, .. }), "{err:?}");
    assert!(err.to_string().contains("300 ms"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(3), "stopped promptly: {:?}", started.elapsed());
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_guest_blocked_in_a_host_call_times_out() {
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig::default(), Limits { timeout_ms: 300, ..Limits::default() });
    let started = Instant::now();
    let err = host.call("sleep", json!({"ms": 10_000})).await.unwrap_err();
    assert!(matches!(err, PluginError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_4_gib_allocation_hits_the_memory_cap() {
    let host = hostile(GrantConfig::default());
    let err = host.call("alloc", json!({"bytes": 4u64 << 30})).await.unwrap_err();
    assert!(matches!(err, PluginError::OutOfMemory { limit_mb: 64, .. }), "{err:?}");
    assert!(err.to_string().contains("out of memory"), "{err}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn deep_recursion_overflows_the_stack() {
    let host = hostile(GrantConfig::default());
    let err = host.call("recurse", json!({"depth": 100_000_000u64})).await.unwrap_err();
    assert!(matches!(err, PluginError::StackOverflow { .. }), "{err:?}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_panic_is_reported_with_its_message() {
    let host = hostile(GrantConfig::default());
    let err = host.call("panic", json!({"message": "the guest gave up"})).await.unwrap_err();
    match &err {
        PluginError::Panicked { message, .. } => assert!(message.contains("the guest gave up"), "{message}"),
        other => panic!("expected a panic, got {other:?}"),
    }
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_megabytes_of_output_are_refused() {
    let host = OnePlugin::new(HOSTILE_WASM, GrantConfig::default(), Limits { memory_mb: 256, ..Limits::default() });
    let err = host.call("big_output", json!({"bytes": 50u64 << 20})).await.unwrap_err();
    assert!(matches!(err, PluginError::OutputTooLarge { size, .. } if size == 50 << 20), "{err:?}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn every_call_gets_a_fresh_instance() {
    let host = hostile(GrantConfig::default());
    for _ in 0..3 {
        assert_eq!(host.call("counter", json!({})).await.unwrap(), "1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_parallel_calls_are_isolated() {
    let host = Arc::new(hostile(GrantConfig::default()));
    host.runtime.prepare(&host.plugin).await.unwrap();
    let calls = (0..16).map(|i| {
        let host = host.clone();
        tokio::spawn(async move {
            let text = format!("call-{i}");
            let echoed = host.call("slow_echo", json!({"text": text, "ms": 50})).await.unwrap();
            let counter = host.call("counter", json!({})).await.unwrap();
            (text, echoed, counter)
        })
    });
    for call in calls {
        let (text, echoed, counter) = call.await.unwrap();
        assert_eq!(echoed, text);
        assert_eq!(counter, "1");
    }
}

// ---- Host-side resources and plugin text (issue: sandbox hardening) ----

/// This process's resident set, in KiB.
fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

async fn call_with_progress(host: &OnePlugin, tool: &str, args: serde_json::Value) -> (Result<String, PluginError>, Vec<String>) {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = seen.clone();
    let progress: chitin::plugins::ProgressSink = Arc::new(move |text: &str| sink.lock().unwrap().push(text.to_string()));
    let ctx = chitin::plugins::CallContext { session_key: "test:1".into(), channel: "test".into(), chat_id: "1".into(), call_id: "c1".into() };
    let result = host.runtime.call(&host.plugin, tool, &args.to_string(), &ctx, Some(progress)).await;
    let seen = seen.lock().unwrap().clone();
    (result, seen)
}

#[tokio::test(flavor = "multi_thread")]
async fn header_maps_a_guest_piles_up_are_bounded() {
    let host = hostile(GrantConfig::default());
    let before = rss_kib();
    // Many maps just under the per-map cap: the attack that took 1 GiB.
    let result = host.call("http_flood", json!({"mode": "fields", "count": 100_000, "size": 60_000})).await;
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    eprintln!("fields flood: {result:?}; RSS grew {grown_mib} MiB");
    match &result {
        Err(PluginError::TooManyResources { limit, .. }) => assert_eq!(*limit, Limits::default().max_resources),
        other => panic!("expected the resource bound, got {other:?}"),
    }
    let message = result.unwrap_err().to_string();
    assert!(message.contains("max_resources"), "{message}");
    assert!(grown_mib < 512, "host memory grew {grown_mib} MiB");
    // One map: values past `max_header_kb` are refused.
    let result = host.call("http_flood", json!({"mode": "fields", "count": 1, "size": 1000, "values": 1000})).await;
    eprintln!("one wide map: {result:?}");
    assert!(matches!(&result, Ok(text) if text.contains("stopped: ") && !text.contains("stopped: done")) || result.is_err(), "{result:?}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn outgoing_requests_in_flight_are_bounded() {
    let addr = serve_http(|_| (200, vec![], "ok".into())).await;
    let grant = GrantConfig { network: vec![addr.to_string()], ..GrantConfig::default() };
    let host = hostile(grant);
    let url = format!("http://{addr}/x");
    // 25 000 requests fired without waiting (the attack that ran the host out
    // of descriptors): each holds host resources, so the call stops at the
    // resource bound, long before the descriptors run out.
    let fds = || std::fs::read_dir("/proc/self/fd").unwrap().count();
    let fds_before = fds();
    let err = host.call("http_flood", json!({"mode": "requests", "count": 25_000, "url": url})).await.unwrap_err();
    assert!(matches!(err, PluginError::TooManyResources { .. }), "{err:?}");
    // Other tests of this process open files too; unbounded, this was 20 000.
    assert!(fds() < fds_before + 1_000, "descriptors leaked: {} -> {}", fds_before, fds());
    // Fewer than the resource bound, to a server that accepts and never
    // answers: `max_http_requests` stay in flight, every other request fails
    // at once with a message naming the key, and none of those connects.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let silent_addr = silent.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
            held.push(socket);
        }
    });
    let grant = GrantConfig { network: vec![silent_addr.to_string(), addr.to_string()], ..GrantConfig::default() };
    let host = hostile(grant);
    let silent_url = format!("http://{silent_addr}/x");
    let out = host.call("http_flood", json!({"mode": "requests", "count": 100, "url": silent_url, "hold_ms": 300})).await.expect("the guest reports");
    eprintln!("requests flood: {out}");
    let limit = Limits::default().max_http_requests as usize;
    assert!(out.contains(&format!("after 300 ms: {} failed", 100 - limit)), "{out}");
    assert!(out.contains("max_http_requests"), "{out}");
    assert_eq!(accepted.load(Ordering::SeqCst), limit, "connections the server saw");
    assert_recovers(&host).await;
    // And a request within the bound really works.
    let out = host.call("http_get", json!({"url": url})).await.expect("a single request works");
    assert!(out.contains("ok"), "{out}");
}

#[tokio::test(flavor = "multi_thread")]
async fn open_descriptors_are_bounded() {
    let host = hostile(workspace_grant(WorkspaceAccess::Read));
    std::fs::write(host.workspace.join("f.txt"), "x").unwrap();
    let result = host.call("open_files", json!({"path": "f.txt", "count": 50_000})).await;
    eprintln!("open_files: {result:?}");
    let message = match result {
        Err(e @ PluginError::TooManyResources { .. }) => e.to_string(),
        Err(PluginError::Tool { message, .. }) => message,
        other => panic!("expected a bound, got {other:?}"),
    };
    assert!(message.contains("max_resources") || message.contains("opened"), "{message}");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_huge_tool_error_is_clipped_and_escaped() {
    let host = hostile(GrantConfig::default());
    let result = host.call("fail", json!({"text": "bad\u{1b}]52;c;cGF3bmVk\u{7}", "repeat": 1_000_000})).await;
    let message = denied_or_failed(result);
    assert!(message.len() <= chitin::plugins::runtime::MAX_ERROR_BYTES * 5, "{} bytes", message.len());
    assert!(message.contains("[error cut: 19000000 bytes in all"), "{}", &message[message.len() - 100..]);
    assert!(!message.contains('\u{1b}') && !message.contains('\u{7}'), "control characters passed");
    assert!(message.starts_with("bad\\x1b]52;"), "{}", &message[..40]);
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn progress_is_bounded_in_count_bytes_and_rate_and_escaped() {
    let host = hostile(GrantConfig::default());
    let text = format!("\u{1b}]0;owned\u{7}\u{1b}[2A{}", "p".repeat(4096));
    let started = Instant::now();
    let (result, seen) = call_with_progress(&host, "progress_flood", json!({"text": text, "count": 1_000_000})).await;
    let took = started.elapsed();
    assert_eq!(result.unwrap(), "sent 1000000");
    let bytes: usize = seen.iter().map(String::len).sum();
    eprintln!("progress flood: {} texts, {bytes} bytes passed on in {took:?}", seen.len());
    assert!(seen.len() <= 201, "{} progress texts", seen.len());
    assert!(bytes <= 64 * 1024 + 200, "{bytes} bytes of progress");
    assert!(seen.iter().all(|t| !t.contains('\u{1b}') && !t.contains('\u{7}')), "control characters passed");
    assert!(seen[0].starts_with("\\x1b]0;owned\\x07"), "{}", &seen[0][..30]);
    assert!(seen[0].len() <= 1100, "one line is capped: {}", seen[0].len());
    let last = seen.last().unwrap();
    assert!(last.starts_with("[progress cut: ") && last.ends_with(" updates dropped]"), "{last}");

    // Logs: a million long lines end the call normally (dropped past the budget).
    let (result, _) = call_with_progress(&host, "log_flood", json!({"text": "l".repeat(64 * 1024), "count": 100_000})).await;
    assert_eq!(result.unwrap(), "sent 100000");
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_only_tool_gets_a_read_only_workspace() {
    let host = hostile(workspace_grant(WorkspaceAccess::ReadWrite));
    let message = denied_or_failed(host.call("sneaky_write", json!({"path": "planted.txt", "content": "x"})).await);
    assert!(!host.workspace.join("planted.txt").exists(), "a read_only tool wrote: {message}");
    // The same grant still lets a tool that does not claim read_only write.
    host.call("write_path", json!({"path": "honest.txt", "content": "x"})).await.unwrap();
    assert!(host.workspace.join("honest.txt").exists());
    assert_recovers(&host).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn exit_is_an_exit_not_a_crash() {
    let host = hostile(GrantConfig::default());
    // WASI p2's `exit` carries success or failure only: 0 or 1.
    for code in [0, 1] {
        let err = host.call("exit", json!({"code": code})).await.unwrap_err();
        assert!(matches!(err, PluginError::Exited { code: c, .. } if c == code), "{err:?}");
        let message = err.to_string();
        assert_eq!(message, format!("tool `exit` of plugin hostile exited with status {code} instead of returning a result"));
    }
    assert_recovers(&host).await;
}
