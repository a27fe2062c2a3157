//! Shared harness for chitin's integration tests: guest component paths, a
//! one-plugin host, a whole agent over a mock LLM ([`agent`]), a tiny
//! HTTP server on 127.0.0.1, and attack material the Rust guest cannot
//! express: a compile bomb ([`compile_bomb`]) and a FIFO ([`make_fifo`]).

pub mod agent;

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

/// `(locals, depth)` of a small [`compile_bomb`]: 11 KiB, compiles in ~30 ms
/// (`Component::new`, 20 MB peak RSS; same with `Engine::default()` and
/// with chitin's engine config). Measured on the 2-core dev machine,
/// wasmtime 48.0.8, release build. For reference: (1000, 20) 23 KiB takes
/// ~0.33 s, (2000, 20) 45 KiB ~1.2 s (both configs), (2000, 100) 46 KiB
/// ~30 s / 260 MB (chitin's config); the time grows about with the square
/// of `locals × depth`.
pub const BOMB_SMALL: (u32, u32) = (500, 10);

/// `(locals, depth)` of a [`compile_bomb`] that keeps Cranelift busy far
/// past any tool deadline: 91 KiB; `Component::new` with chitin's engine
/// config was still compiling after 60 s at ~500 MB RSS (killed), and
/// `chitin tool call boom --plugin` on the unhardened host was still
/// compiling after 65 s (killed) at 505 MiB, `timeout_ms` not applying.
/// Extrapolated from (2000, 100): ~2 minutes.
pub const BOMB_HUGE: (u32, u32) = (4000, 100);

/// A component whose one core function has `locals` i64 locals, all live
/// across a loop around `depth` nested blocks that each merge two versions
/// of every local, so register allocation works on `locals × depth` SSA
/// block parameters (its time grows about with their square). It carries
/// a valid top-level `chitin:manifest` (plugin `bomb`, tool `boom`) so the
/// host reads it as a plugin; it neither imports nor exports the tool world,
/// so it fails at link time, *after* the host has compiled it. Nothing in it
/// ever runs.
pub fn compile_bomb(locals: u32, depth: u32) -> Vec<u8> {
    use wasm_encoder::{
        BlockType, CodeSection, Component, CustomSection, ExportKind, ExportSection, Function, FunctionSection,
        Instruction as I, Module, ModuleSection, TypeSection, ValType,
    };

    let n = locals.max(1);
    let mut types = TypeSection::new();
    types.ty().function([], [ValType::I64]);
    let mut functions = FunctionSection::new();
    functions.function(0);
    let mut exports = ExportSection::new();
    exports.export("boom", ExportKind::Func, 0);

    let mut body = Function::new([(n, ValType::I64)]);
    // Distinct starting values, so no two locals are the same value.
    for i in 0..n {
        body.instruction(&I::I64Const(i64::from(i)));
        body.instruction(&I::LocalSet(i));
    }
    // One loop around `depth` nested blocks. Each block starts with a
    // forward `br_if` to its end, skipping the update in the innermost
    // block, so the end of every block merges two versions of every local:
    // `locals × depth` SSA block parameters from O(locals + depth) bytes.
    // Blocks rather than nested loops: wasmtime's epoch interruption puts a
    // check with a call on each loop header, which splits the live ranges
    // and made nested loops ~12× cheaper to compile under chitin's engine.
    body.instruction(&I::Loop(BlockType::Empty));
    for level in 0..depth {
        body.instruction(&I::Block(BlockType::Empty));
        branch_if_small(&mut body, level % n, 0);
    }
    // Innermost: every local is read and written, each new value depending
    // on two old ones, so nothing folds away.
    for i in 0..n {
        body.instruction(&I::LocalGet(i));
        body.instruction(&I::LocalGet((i + 1) % n));
        body.instruction(&I::I64Add);
        body.instruction(&I::I64Const(1));
        body.instruction(&I::I64Add);
        body.instruction(&I::LocalSet((i + 1) % n));
    }
    for _ in 0..depth {
        body.instruction(&I::End);
    }
    // The back edge: every local is live around the whole loop.
    branch_if_small(&mut body, 0, 0);
    body.instruction(&I::End);
    // Use every local after the loop.
    body.instruction(&I::LocalGet(0));
    for i in 1..n {
        body.instruction(&I::LocalGet(i));
        body.instruction(&I::I64Xor);
    }
    body.instruction(&I::End);
    let mut code = CodeSection::new();
    code.function(&body);

    let mut module = Module::new();
    module.section(&types).section(&functions).section(&exports).section(&code);

    let manifest = serde_json::json!({
        "manifest_version": 1,
        "name": "bomb",
        "version": "0.1.0",
        "description": format!("A compile bomb: {locals} locals live across {depth} nested blocks in a loop"),
        "tools": [{
            "name": "boom",
            "description": "Never runs: compiling the plugin is the attack",
            "parameters": {"type": "object", "properties": {}},
        }],
        "capabilities": {},
    });
    let manifest = serde_json::to_vec(&manifest).expect("manifest JSON");

    let mut component = Component::new();
    component.section(&ModuleSection(&module));
    component.section(&CustomSection { name: chitin::plugins::manifest::SECTION_NAME.into(), data: manifest.into() });
    component.finish()
}

/// `br_if label` when local `local` is below 2^40 (data-dependent, so the
/// branch cannot be folded).
fn branch_if_small(body: &mut wasm_encoder::Function, local: u32, label: u32) {
    use wasm_encoder::Instruction as I;
    body.instruction(&I::LocalGet(local));
    body.instruction(&I::I64Const(1 << 40));
    body.instruction(&I::I64LtU);
    body.instruction(&I::BrIf(label));
}

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
