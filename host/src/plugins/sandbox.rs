//! The per-call sandbox: everything that lives in one call's `Store`.
//!
//! Deny by default: the WASI context starts empty (no env, no args, no stdin,
//! no preopens, sockets denied for every address, no name lookup), and only
//! the call's [`Grant`] adds to it. Each capability reaches its own field
//! through a small view (`WasiView`, `WasiHttpView`, the `host` interface), so
//! none sees the others.

use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginError;
use super::bindings::{self, LogLevel};
use super::grants::Grant;
use super::http::HttpPolicy;
use super::limits::{CallLimiter, Limits};
use super::manifest::WorkspaceAccess;

/// Receives the progress texts a plugin reports during a call.
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Stderr kept per call: enough for a panic message and a backtrace line.
const STDERR_CAPTURE: usize = 16 * 1024;

/// Log lines a call may emit before the rest are dropped.
const LOG_LINES_PER_CALL: u32 = 200;

/// The data of one call's `Store`.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    /// Enforces the memory and table caps.
    pub limiter: CallLimiter,
    host: HostState,
    /// The guest's stderr, for panic messages.
    pub stderr: CapturedOutput,
}

/// State of the `chitin:plugin/host` interface for one call.
struct HostState {
    plugin: Arc<str>,
    progress: Option<ProgressSink>,
    log_budget: u32,
}

impl StoreState {
    /// Builds the sandbox of one call to `plugin` under `grant`.
    pub fn new(
        plugin: &Arc<str>,
        grant: &Grant,
        workspace: &Path,
        limits: &Limits,
        progress: Option<ProgressSink>,
    ) -> Result<StoreState, PluginError> {
        let stderr = CapturedOutput::new(STDERR_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone()).allow_ip_name_lookup(false).allow_tcp(false).allow_udp(false);
        let perms = match grant.workspace {
            WorkspaceAccess::None => None,
            WorkspaceAccess::Read => Some(FsPerms::ReadOnly),
            WorkspaceAccess::ReadWrite => Some(FsPerms::ReadWrite),
        };
        if let Some(perms) = perms {
            wasi.preopened_dir(workspace, ".", perms).map_err(|e| PluginError::Workspace {
                plugin: plugin.to_string(),
                path: workspace.to_path_buf(),
                message: format!("{e:#}"),
            })?;
        }
        Ok(StoreState {
            wasi: wasi.build(),
            table: ResourceTable::new(),
            http: WasiHttpCtx::new(),
            http_policy: HttpPolicy::new(plugin.clone(), grant.network.clone()),
            limiter: CallLimiter::new(limits),
            host: HostState { plugin: plugin.clone(), progress, log_budget: LOG_LINES_PER_CALL },
            stderr,
        })
    }
}

impl WasiView for StoreState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView { ctx: &mut self.wasi, table: &mut self.table }
    }
}

impl WasiHttpView for StoreState {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView { ctx: &mut self.http, table: &mut self.table, hooks: &mut self.http_policy }
    }
}

impl bindings::chitin::plugin::types::Host for StoreState {}

impl bindings::chitin::plugin::host::Host for StoreState {
    fn log(&mut self, level: LogLevel, message: String) {
        let host = &mut self.host;
        if host.log_budget == 0 {
            return;
        }
        host.log_budget -= 1;
        let plugin = &*host.plugin;
        match level {
            LogLevel::Trace => tracing::trace!(plugin, "{message}"),
            LogLevel::Debug => tracing::debug!(plugin, "{message}"),
            LogLevel::Info => tracing::info!(plugin, "{message}"),
            LogLevel::Warn => tracing::warn!(plugin, "{message}"),
            LogLevel::Error => tracing::error!(plugin, "{message}"),
        }
    }

    fn progress(&mut self, text: String) {
        if let Some(sink) = &self.host.progress {
            sink(&text);
        }
    }
}

/// Adds every interface a plugin may import to `linker`: WASI p2 (with the
/// deny-by-default context above), `wasi:http` (policy in [`HttpPolicy`]),
/// and `chitin:plugin/host`. `wasi:sockets` is linked so that components from
/// language toolchains that always import it still instantiate; the context
/// refuses every address and lookup, so no socket ever opens.
pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    bindings::chitin::plugin::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    Ok(())
}

/// A bounded, shared capture of a guest output stream. Bytes past the
/// capacity are dropped (the guest is not told), so a chatty plugin cannot
/// grow host memory.
#[derive(Clone)]
pub struct CapturedOutput {
    buffer: Arc<Mutex<Vec<u8>>>,
    capacity: usize,
}

impl CapturedOutput {
    fn new(capacity: usize) -> Self {
        CapturedOutput { buffer: Arc::new(Mutex::new(Vec::new())), capacity }
    }

    /// What was captured, lossily decoded.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().expect("capture lock")).into_owned()
    }
}

impl IsTerminal for CapturedOutput {
    fn is_terminal(&self) -> bool {
        false
    }
}

impl StdoutStream for CapturedOutput {
    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(self.clone())
    }
}

impl tokio::io::AsyncWrite for CapturedOutput {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let mut buffer = self.buffer.lock().expect("capture lock");
        let room = self.capacity.saturating_sub(buffer.len());
        buffer.extend_from_slice(&buf[..buf.len().min(room)]);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}
