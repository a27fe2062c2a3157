//! The per-call sandbox: everything that lives in one call's `Store`.
//!
//! Deny by default: the WASI context starts empty (no env but the plugin's
//! own `[plugins.<name>.settings]`, no args, no stdin,
//! no preopens, sockets denied for every address, no name lookup), and only
//! the call's [`Grant`] adds to it. Each capability reaches its own field
//! through a small view (`WasiView`, `WasiHttpView`, the `host` interface), so
//! none sees the others.
//!
//! What a guest makes the *host* hold is bounded per call too, because it
//! lives outside the guest's `memory_mb`:
//! - resource-table entries (open files, streams, HTTP requests and header
//!   maps, pollables): `[limits] max_resources`; past it the call traps with
//!   a named error;
//! - bytes per `wasi:http` header map: `[limits] max_header_kb` (so header
//!   memory is at most `max_resources × max_header_kb`);
//! - outgoing HTTP requests in flight: `[limits] max_http_requests`;
//! - text through `host.progress` and `host.log`: a byte budget per call, a
//!   cap per line, a rate for progress, and control characters escaped
//!   before any of it reaches a terminal or a channel.
//!
//! A guest that opens a FIFO, socket or device in the workspace is refused at
//! `open-at` ([`add_to_linker`]): opening a FIFO blocks the host thread that
//! does it until a writer appears, which may be never.

mod budget;
mod clock;
mod host_v0_1;
mod host_v0_2;
mod linker;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginError;
use super::grants::Grant;
use super::http::HttpPolicy;
use super::limits::{CallLimiter, Limits};
use super::manifest::WorkspaceAccess;
use super::services::{HostInterface, HostServices};
use super::tool::CallContext;
use budget::{Budget, LOG_BYTES_PER_CALL, LOG_LINES_PER_CALL, PROGRESS_BYTES_PER_CALL, PROGRESS_INTERVAL, PROGRESS_PER_CALL, STDERR_CAPTURE};

pub use budget::CapturedOutput;
pub use clock::{CallClock, PauseGuard, timeout_with_pauses};
pub use linker::add_to_linker;

/// Receives the progress texts a plugin reports during a call.
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// The data of one call's `Store`.
pub struct StoreState {
    wasi: WasiCtx,
    table: ResourceTable,
    http: WasiHttpCtx,
    http_policy: HttpPolicy,
    /// Enforces the memory and table caps.
    pub limiter: CallLimiter,
    host: HostState,
    /// The privileged interfaces: what was granted, and who serves them.
    pub privileged: Privileged,
    /// The guest's stderr, for panic messages.
    pub stderr: CapturedOutput,
    /// Host waits that do not count against the call's time limit.
    pub clock: Arc<CallClock>,
}

/// State of the privileged interfaces for one call
/// ([`super::services`]): each call checks the grant first.
#[derive(Default)]
pub struct Privileged {
    /// What the manifest asked for.
    pub asked: Vec<HostInterface>,
    /// What the plugin was granted (a subset of `asked`).
    pub granted: Vec<HostInterface>,
    /// Other chats `messaging` may reach.
    pub chats: Vec<String>,
    /// The agent behind the interfaces; `None` outside an agent.
    pub services: Option<Arc<dyn HostServices>>,
    /// The conversation of the tool call, set by the host.
    pub call: Option<CallContext>,
    /// Privileged calls made so far in this tool call (see
    /// [`MAX_PRIVILEGED_CALLS`]).
    pub calls: u32,
    /// Whether a refusal was logged already in this tool call.
    pub refusal_logged: bool,
}

/// Privileged calls one tool call may make, over all interfaces. Each can
/// make the host queue a message, write the jobs file or start a run, all
/// outside the guest's memory and time limits, so a guest calling in a loop
/// is stopped here rather than flooding a chat or the bus.
pub const MAX_PRIVILEGED_CALLS: u32 = 32;

/// State of the `chitin:plugin/host` interface for one call.
struct HostState {
    plugin: Arc<str>,
    progress: Option<ProgressSink>,
    log: Budget,
    progress_budget: Budget,
    last_progress: Option<Instant>,
}

impl StoreState {
    /// Builds the sandbox of one call to `plugin` under `grant`. `read_only`
    /// is the called tool's declaration: such a call gets the workspace
    /// read-only whatever the grant, so the flag cannot lie. `settings`
    /// (the plugin's `[plugins.<name>.settings]` as JSON) is the one
    /// environment variable a component gets, [`super::configured::SETTINGS_VAR`].
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plugin: &Arc<str>,
        grant: &Grant,
        workspace: &Path,
        limits: &Limits,
        progress: Option<ProgressSink>,
        read_only: bool,
        outbound: Option<Arc<super::http::Outbound>>,
        settings: Option<&str>,
    ) -> Result<StoreState, PluginError> {
        let stderr = CapturedOutput::new(STDERR_CAPTURE);
        let mut wasi = WasiCtxBuilder::new();
        wasi.stderr(stderr.clone()).allow_ip_name_lookup(false).allow_tcp(false).allow_udp(false);
        if let Some(settings) = settings {
            wasi.env(super::configured::SETTINGS_VAR, settings);
        }
        let perms = match grant.workspace {
            WorkspaceAccess::None => None,
            WorkspaceAccess::Read => Some(FsPerms::ReadOnly),
            WorkspaceAccess::ReadWrite if read_only => Some(FsPerms::ReadOnly),
            WorkspaceAccess::ReadWrite => Some(FsPerms::ReadWrite),
        };
        if let Some(perms) = perms {
            wasi.preopened_dir(workspace, ".", perms).map_err(|e| PluginError::Workspace {
                plugin: plugin.to_string(),
                path: workspace.to_path_buf(),
                message: format!("{e:#}"),
            })?;
        }
        let mut table = ResourceTable::new();
        table.set_max_capacity(limits.max_resources as usize);
        let mut http = WasiHttpCtx::new();
        http.set_field_size_limit((limits.max_header_kb as usize) << 10);
        Ok(StoreState {
            wasi: wasi.build(),
            table,
            http,
            http_policy: HttpPolicy::new(plugin.clone(), grant.network.clone(), limits.max_http_requests, outbound),
            limiter: CallLimiter::new(limits),
            host: HostState {
                plugin: plugin.clone(),
                progress,
                log: Budget::new(LOG_LINES_PER_CALL, LOG_BYTES_PER_CALL),
                progress_budget: Budget::new(PROGRESS_PER_CALL, PROGRESS_BYTES_PER_CALL),
                last_progress: None,
            },
            privileged: Privileged::default(),
            stderr,
            clock: Arc::default(),
        })
    }

    /// Says once, at the end of a call, how much of the plugin's text was
    /// dropped: in the log, and to the progress sink.
    pub fn report_dropped_text(&self) {
        let host = &self.host;
        if host.log.dropped > 0 {
            tracing::warn!(plugin = &*host.plugin, dropped = host.log.dropped, "plugin log budget exhausted; lines dropped");
        }
        if host.progress_budget.dropped > 0
            && let Some(sink) = &host.progress
        {
            sink(&format!("[progress cut: {} updates dropped]", host.progress_budget.dropped));
        }
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

impl StoreState {
    /// `host.log` of every package version.
    fn host_log(&mut self, level: tracing::Level, message: &str) {
        let host = &mut self.host;
        let Some(message) = host.log.take(message) else { return };
        let plugin = &*host.plugin;
        match level {
            tracing::Level::TRACE => tracing::trace!(plugin, "{message}"),
            tracing::Level::DEBUG => tracing::debug!(plugin, "{message}"),
            tracing::Level::INFO => tracing::info!(plugin, "{message}"),
            tracing::Level::WARN => tracing::warn!(plugin, "{message}"),
            tracing::Level::ERROR => tracing::error!(plugin, "{message}"),
        }
    }

    /// `host.progress` of every package version.
    fn host_progress(&mut self, text: &str) {
        let host = &mut self.host;
        let Some(sink) = &host.progress else { return };
        let now = Instant::now();
        if host.last_progress.is_some_and(|last| now.duration_since(last) < PROGRESS_INTERVAL) {
            host.progress_budget.dropped += 1;
            return;
        }
        if let Some(line) = host.progress_budget.take(text) {
            host.last_progress = Some(now);
            sink(&line);
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::services::SendRequest;
    use crate::plugins::bindings::v0_2::messaging::{Host as _, Message};
    use crate::plugins::services::Delivery;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// Counts the sends that reach the agent.
    #[derive(Default)]
    struct Counting(AtomicU32);

    impl HostServices for Counting {
        fn send_message(&self, call: &CallContext, _chats: &[String], _request: SendRequest) -> Result<Delivery, String> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Ok(Delivery { channel: call.channel.clone(), chat_id: call.chat_id.clone(), current_chat: true, attachments: vec![] })
        }
    }

    fn store(granted: Vec<HostInterface>, services: Arc<Counting>) -> StoreState {
        let mut state = StoreState::new(&Arc::from("p"), &Grant::default(), Path::new("/nonexistent"), &Limits::default(), None, true, None, None).unwrap();
        state.privileged = Privileged {
            asked: vec![HostInterface::Messaging],
            granted,
            services: Some(services),
            call: Some(CallContext { session_key: "t:1".into(), channel: "t".into(), chat_id: "1".into(), call_id: "c".into() }),
            ..Default::default()
        };
        state
    }

    fn message() -> Message {
        Message { text: "hi".into(), channel: None, chat_id: None, media: vec![] }
    }

    /// A runtime prints why it aborts last: the capture keeps the end.
    #[tokio::test]
    async fn the_stderr_capture_keeps_the_last_bytes() {
        use tokio::io::AsyncWriteExt as _;
        let capture = CapturedOutput::new(8);
        let mut writer = capture.clone();
        writer.write_all(b"0123456789").await.unwrap();
        assert_eq!(capture.text(), "23456789");
        writer.write_all(b"ab").await.unwrap();
        assert_eq!(capture.text(), "456789ab");
    }

    #[test]
    fn a_guest_sending_in_a_loop_is_stopped_at_the_per_call_cap() {
        let services = Arc::new(Counting::default());
        let mut state = store(vec![HostInterface::Messaging], services.clone());
        for _ in 0..MAX_PRIVILEGED_CALLS {
            state.send(message()).expect("under the cap");
        }
        for _ in 0..1000 {
            let e = state.send(message()).unwrap_err();
            assert!(e.contains("more than 32 privileged calls"), "{e}");
        }
        assert_eq!(services.0.load(Ordering::SeqCst), MAX_PRIVILEGED_CALLS, "nothing past the cap reached the agent");
    }

    #[test]
    fn an_ungranted_interface_is_refused_before_the_agent_sees_the_call() {
        let services = Arc::new(Counting::default());
        let mut state = store(vec![], services.clone());
        for _ in 0..100 {
            assert!(state.send(message()).unwrap_err().starts_with("capability not granted: messaging"));
        }
        assert_eq!(services.0.load(Ordering::SeqCst), 0);
        assert!(state.privileged.refusal_logged);
    }
}
