//! The sandbox against a hostile guest: each attack gets a clear error, and
//! the next call to the same plugin still works.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chitin::plugins::{GrantConfig, Limits, PluginError, WorkspaceAccess};
use chitin_tests::{HOSTILE_WASM, OnePlugin, serve_http, workspace_grant};
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
