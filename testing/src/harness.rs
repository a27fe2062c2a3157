//! The library tests' harness: guest component paths (declared here once,
//! built by `build.rs`), a one-plugin host, a tiny HTTP server on
//! 127.0.0.1, and attack material the Rust guest cannot express: a compile
//! bomb ([`compile_bomb`]) and a FIFO ([`make_fifo`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use chitin::plugins::{
    CallContext, GrantConfig, Limits, LoadedPlugin, PluginError, PluginRuntime, PluginSource, RuntimeConfig,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The hostile guest component, built by `build.rs`.
pub const HOSTILE_WASM: &str = env!("CHITIN_HOSTILE_WASM");

/// The SDK example component, built by `build.rs`.
pub const HELLO_WASM: &str = env!("CHITIN_HELLO_WASM");

/// The echo channel (a `chitin:plugin@0.2.0` channel plugin with hostile
/// behaviours), built by `build.rs`.
pub const ECHO_CHANNEL_WASM: &str = env!("CHITIN_ECHO_CHANNEL_WASM");

/// A `chitin:plugin@0.2.0` tool plugin, built by `build.rs`.
pub const ECHO_TOOL_V2_WASM: &str = env!("CHITIN_ECHO_TOOL_V2_WASM");

/// Reads a built guest.
pub fn guest_bytes(path: &str) -> Arc<[u8]> {
    std::fs::read(path).unwrap_or_else(|e| panic!("guest component {path} missing ({e}); the build script builds it")).into()
}

/// A runtime with one plugin loaded, over a temporary workspace.
pub struct OnePlugin {
    /// The runtime.
    pub runtime: PluginRuntime,
    /// The loaded plugin.
    pub plugin: LoadedPlugin,
    /// The workspace the plugin sees (a temp dir inside `root`).
    pub workspace: PathBuf,
    /// Owns the temp dirs.
    pub root: tempfile::TempDir,
}

impl OnePlugin {
    /// Loads the component at `path` with `grant` and `limits`. The compile
    /// cache lives in a directory shared by all tests of this build, so each
    /// guest is compiled once per run.
    pub fn new(path: &str, grant: GrantConfig, limits: Limits) -> OnePlugin {
        let root = tempfile::tempdir().expect("temp dir");
        let workspace = root.path().join("workspace");
        std::fs::create_dir_all(&workspace).expect("workspace");
        let runtime = PluginRuntime::new(RuntimeConfig {
            workspace: workspace.clone(),
            cache_dir: Some(shared_cache_dir()),
            limits,
        })
        .expect("runtime");
        let plugin = runtime.load(PluginSource::File(path.into()), guest_bytes(path), &grant).expect("plugin loads");
        OnePlugin { runtime, plugin, workspace, root }
    }

    /// Calls `tool` with `args`.
    pub async fn call(&self, tool: &str, args: serde_json::Value) -> Result<String, PluginError> {
        let ctx = CallContext { session_key: "test:1".into(), channel: "test".into(), chat_id: "1".into(), call_id: "c1".into() };
        self.runtime.call(&self.plugin, tool, &args.to_string(), &ctx, None).await
    }

    /// A directory beside the workspace, outside it.
    pub fn outside(&self) -> &Path {
        self.root.path()
    }
}

/// Compiled-component cache shared by the tests of one build.
pub fn shared_cache_dir() -> PathBuf {
    let dir = Path::new(HOSTILE_WASM).parent().expect("guest dir").join("test-cache");
    std::fs::create_dir_all(&dir).expect("cache dir");
    dir
}

/// A grant of workspace access and nothing else.
pub fn workspace_grant(access: chitin::plugins::WorkspaceAccess) -> GrantConfig {
    GrantConfig { workspace: access, ..GrantConfig::default() }
}

/// Serves fixed HTTP responses on 127.0.0.1: `respond` maps the request path
/// to (status line, extra headers, body). Returns the bound address.
pub async fn serve_http(
    respond: impl Fn(&str) -> (u16, Vec<(String, String)>, String) + Send + Sync + 'static,
) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let respond = Arc::new(respond);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let respond = respond.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let mut read = 0;
                while !buf[..read].windows(4).any(|w| w == b"\r\n\r\n") {
                    match socket.read(&mut buf[read..]).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => read += n,
                    }
                }
                let head = String::from_utf8_lossy(&buf[..read]).to_string();
                let path = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                let (status, headers, body) = respond(&path);
                let mut response = format!("HTTP/1.1 {status} X\r\ncontent-length: {}\r\nconnection: close\r\n", body.len());
                for (k, v) in headers {
                    response.push_str(&format!("{k}: {v}\r\n"));
                }
                response.push_str("\r\n");
                response.push_str(&body);
                let _ = socket.write_all(response.as_bytes()).await;
                let _ = socket.shutdown().await;
            });
        }
    });
    addr
}

pub use crate::bomb::{BOMB_HUGE, BOMB_SMALL, compile_bomb};

/// Makes a FIFO (named pipe) at `path`: opening it for reading blocks until
/// a writer comes, which never happens.
pub fn make_fifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap_or_else(|e| panic!("running mkfifo {}: {e}", path.display()));
    assert!(status.success(), "mkfifo {} failed: {status}", path.display());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compile_bombs_carry_a_valid_manifest() {
        for (locals, depth) in [(10, 2), BOMB_SMALL, BOMB_HUGE] {
            let bomb = compile_bomb(locals, depth);
            let manifest = chitin::plugins::Manifest::from_component(&bomb).expect("the bomb's manifest parses");
            assert_eq!(manifest.name, "bomb");
            assert_eq!(manifest.tools[0].name, "boom");
            assert!(chitin::plugins::manifest::is_component(&bomb));
        }
    }

    #[test]
    fn make_fifo_makes_a_fifo() {
        use std::os::unix::fs::FileTypeExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("pipe");
        make_fifo(&path);
        assert!(std::fs::symlink_metadata(&path).unwrap().file_type().is_fifo());
    }
}
