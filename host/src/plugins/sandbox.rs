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

use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use wasmtime::component::{HasSelf, Linker, ResourceTable};
use wasmtime_wasi::cli::{IsTerminal, StdoutStream};
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use super::PluginError;
use super::bindings::{v0_1, v0_2};
use super::grants::Grant;
use super::http::HttpPolicy;
use super::limits::{CallLimiter, Limits};
use super::manifest::WorkspaceAccess;
use super::services::{self, GoalAction, GoalStatus, GoalUpdate, GoalView, HostInterface, HostServices, SendRequest, SpawnRequest, SubagentInfo, SubagentState};
use super::tool::CallContext;

/// Receives the progress texts a plugin reports during a call.
pub type ProgressSink = Arc<dyn Fn(&str) + Send + Sync>;

/// Stderr kept per call: enough for a panic message and a backtrace line.
const STDERR_CAPTURE: usize = 16 * 1024;

/// Log lines a call may emit, and their bytes together.
const LOG_LINES_PER_CALL: u32 = 200;
const LOG_BYTES_PER_CALL: usize = 64 * 1024;

/// Progress texts a call may send, and their bytes together.
const PROGRESS_PER_CALL: u32 = 200;
const PROGRESS_BYTES_PER_CALL: usize = 64 * 1024;

/// Bytes of one log line or progress text; the rest is cut with a marker.
const LINE_BYTES: usize = 1024;

/// At most one progress text per this interval is passed on; the ones in
/// between are dropped, so a plugin cannot flood a terminal or a chat.
const PROGRESS_INTERVAL: Duration = Duration::from_millis(50);

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

/// Time a call spends in host calls that wait on the agent rather than
/// compute (a `wait` subagent): it moves the call's deadline, both the
/// epoch check and the wall-clock timeout, so `[limits] timeout_ms` keeps
/// bounding the plugin's own work without cutting a subagent short. The
/// subagent is bounded by its own limits (iterations, model timeout).
#[derive(Debug, Default)]
pub struct CallClock {
    state: Mutex<(Duration, Option<Instant>)>,
}

impl CallClock {
    /// A wait starts now; it ends when the guard is dropped.
    pub fn pause(self: &Arc<Self>) -> PauseGuard {
        self.state.lock().expect("clock lock").1 = Some(Instant::now());
        PauseGuard(self.clone())
    }

    /// How far the deadline has moved: finished waits plus the current one.
    pub fn extension(&self) -> Duration {
        let (done, since) = *self.state.lock().expect("clock lock");
        done + since.map(|s| s.elapsed()).unwrap_or_default()
    }
}

/// Ends a [`CallClock::pause`].
pub struct PauseGuard(Arc<CallClock>);

impl Drop for PauseGuard {
    fn drop(&mut self) {
        let mut state = self.0.state.lock().expect("clock lock");
        if let Some(since) = state.1.take() {
            state.0 += since.elapsed();
        }
    }
}

/// `tokio::time::timeout` whose limit grows by what `clock` says was spent
/// waiting on the host.
pub async fn timeout_with_pauses<F: std::future::Future>(limit: Duration, clock: &CallClock, fut: F) -> Result<F::Output, tokio::time::error::Elapsed> {
    let start = tokio::time::Instant::now();
    tokio::pin!(fut);
    loop {
        match tokio::time::timeout_at(start + limit + clock.extension(), &mut fut).await {
            Ok(value) => return Ok(value),
            // Still past the deadline with the waits counted: a real timeout.
            Err(elapsed) if tokio::time::Instant::now() >= start + limit + clock.extension() => return Err(elapsed),
            Err(_) => continue,
        }
    }
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

/// What is left of one kind of text a call may send to the host.
struct Budget {
    lines: u32,
    bytes: usize,
    dropped: u32,
}

impl Budget {
    fn new(lines: u32, bytes: usize) -> Self {
        Budget { lines, bytes, dropped: 0 }
    }

    /// `text` clipped to a line and made safe to show, if the budget still
    /// has room for it; `None` (counted as dropped) otherwise.
    fn take(&mut self, text: &str) -> Option<String> {
        if self.lines == 0 || self.bytes == 0 {
            self.dropped += 1;
            return None;
        }
        let line = crate::text::clip_for_terminal(text, LINE_BYTES.min(self.bytes), "line");
        self.lines -= 1;
        self.bytes = self.bytes.saturating_sub(line.len());
        Some(line)
    }
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

impl v0_1::chitin::plugin::types::Host for StoreState {}

impl v0_1::chitin::plugin::host::Host for StoreState {
    fn log(&mut self, level: v0_1::LogLevel, message: String) {
        use v0_1::LogLevel as L;
        let level = match level {
            L::Trace => tracing::Level::TRACE,
            L::Debug => tracing::Level::DEBUG,
            L::Info => tracing::Level::INFO,
            L::Warn => tracing::Level::WARN,
            L::Error => tracing::Level::ERROR,
        };
        self.host_log(level, &message);
    }

    fn progress(&mut self, text: String) {
        self.host_progress(&text);
    }
}

impl v0_2::tool::chitin::plugin::types::Host for StoreState {}

impl v0_2::tool::chitin::plugin::host::Host for StoreState {
    fn log(&mut self, level: v0_2::LogLevel, message: String) {
        use v0_2::LogLevel as L;
        let level = match level {
            L::Trace => tracing::Level::TRACE,
            L::Debug => tracing::Level::DEBUG,
            L::Info => tracing::Level::INFO,
            L::Warn => tracing::Level::WARN,
            L::Error => tracing::Level::ERROR,
        };
        self.host_log(level, &message);
    }

    fn progress(&mut self, text: String) {
        self.host_progress(&text);
    }
}

impl StoreState {
    /// The services for a call to `interface`, or the refusal to give the
    /// guest: not granted, or no agent behind the call.
    fn privileged_call(&mut self, interface: HostInterface) -> Result<(Arc<dyn HostServices>, CallContext), String> {
        let plugin = &*self.host.plugin;
        let p = &mut self.privileged;
        if !p.granted.contains(&interface) {
            // Logged once per tool call: a guest calling in a loop must not
            // flood the log either.
            if !std::mem::replace(&mut p.refusal_logged, true) {
                tracing::warn!(plugin, %interface, "privileged call refused: not granted");
            }
            return Err(services::not_granted(plugin, interface, p.asked.contains(&interface)));
        }
        if p.calls >= MAX_PRIVILEGED_CALLS {
            if !std::mem::replace(&mut p.refusal_logged, true) {
                tracing::warn!(plugin, %interface, "privileged calls refused: over {MAX_PRIVILEGED_CALLS} in one tool call");
            }
            return Err(format!("{interface}: more than {MAX_PRIVILEGED_CALLS} privileged calls in one tool call; refused"));
        }
        p.calls += 1;
        match (&p.services, &p.call) {
            (Some(services), Some(call)) => Ok((services.clone(), call.clone())),
            _ => Err(format!("{interface}: {}", services::NO_SERVICES)),
        }
    }
}

impl v0_2::messaging::Host for StoreState {
    fn send(&mut self, message: v0_2::messaging::Message) -> Result<v0_2::messaging::Delivery, String> {
        let (services, call) = self.privileged_call(HostInterface::Messaging)?;
        let request = SendRequest { text: message.text, channel: message.channel, chat_id: message.chat_id, media: message.media };
        let delivery = services.send_message(&call, &self.privileged.chats, request)?;
        Ok(v0_2::messaging::Delivery {
            channel: delivery.channel,
            chat_id: delivery.chat_id,
            current_chat: delivery.current_chat,
            attachments: delivery.attachments.len() as u32,
        })
    }
}

impl v0_2::agents::Host for StoreState {
    async fn spawn(&mut self, task: String, label: Option<String>, wait: bool) -> Result<v0_2::agents::Subagent, String> {
        let (services, call) = self.privileged_call(HostInterface::Agents)?;
        let future = services.spawn_subagent(&call, SpawnRequest { task, label, wait });
        // Waiting for a subagent is not the plugin's time.
        let _paused = wait.then(|| self.clock.pause());
        future.await.map(wit_subagent)
    }

    fn status(&mut self) -> Result<Vec<v0_2::agents::Subagent>, String> {
        let (services, call) = self.privileged_call(HostInterface::Agents)?;
        Ok(services.subagent_status(&call)?.into_iter().map(wit_subagent).collect())
    }
}

fn wit_subagent(info: SubagentInfo) -> v0_2::agents::Subagent {
    use v0_2::agents::SubagentState as W;
    v0_2::agents::Subagent {
        id: info.id,
        label: info.label,
        state: match info.state {
            SubagentState::Running => W::Running,
            SubagentState::Completed => W::Completed,
            SubagentState::Failed => W::Failed,
            SubagentState::Cancelled => W::Cancelled,
        },
        elapsed_ms: info.elapsed_ms,
        answer: info.result,
    }
}

impl v0_2::schedule::Host for StoreState {
    fn add_job(&mut self, job: v0_2::schedule::JobSpec) -> Result<v0_2::schedule::Job, String> {
        use v0_2::schedule::When as W;
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        let when = match job.when {
            W::EverySeconds(secs) => services::When::EverySeconds(secs),
            W::Cron(c) => services::When::Cron { expr: c.expr, tz: c.tz },
            W::At(a) => services::When::At { time: a.time, tz: a.tz },
        };
        services.add_job(&call, services::JobRequest { name: job.name, message: job.message, when }).map(wit_job)
    }

    fn list_jobs(&mut self) -> Result<Vec<v0_2::schedule::Job>, String> {
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        Ok(services.list_jobs(&call)?.into_iter().map(wit_job).collect())
    }

    fn remove_job(&mut self, id: String) -> Result<v0_2::schedule::Job, String> {
        let (services, call) = self.privileged_call(HostInterface::Schedule)?;
        services.remove_job(&call, &id).map(wit_job)
    }
}

fn wit_job(job: services::JobView) -> v0_2::schedule::Job {
    v0_2::schedule::Job { id: job.id, name: job.name, message: job.message, schedule: job.schedule, next_run: job.next_run }
}

impl v0_2::goals::Host for StoreState {
    fn create(&mut self, objective: String, ui_summary: Option<String>) -> Result<v0_2::goals::Goal, String> {
        let (services, call) = self.privileged_call(HostInterface::Goals)?;
        services.create_goal(&call, objective, ui_summary).map(wit_goal)
    }

    fn update(
        &mut self,
        action: v0_2::goals::GoalAction,
        recap: Option<String>,
        objective: Option<String>,
        ui_summary: Option<String>,
    ) -> Result<v0_2::goals::Goal, String> {
        let (services, call) = self.privileged_call(HostInterface::Goals)?;
        use v0_2::goals::GoalAction as W;
        let action = match action {
            W::Complete => GoalAction::Complete,
            W::Cancel => GoalAction::Cancel,
            W::Block => GoalAction::Block,
            W::Replace => GoalAction::Replace,
        };
        services.update_goal(&call, GoalUpdate { action, recap, objective, ui_summary }).map(wit_goal)
    }
}

fn wit_goal(goal: GoalView) -> v0_2::goals::Goal {
    use v0_2::goals::GoalStatus as W;
    let status = match goal.status {
        GoalStatus::Active => W::Active,
        GoalStatus::Complete => W::Complete,
        GoalStatus::Cancelled => W::Cancelled,
        GoalStatus::Blocked => W::Blocked,
    };
    v0_2::goals::Goal {
        objective: goal.objective,
        ui_summary: goal.ui_summary,
        status,
        recap: goal.recap,
        created_at: goal.created_at,
        updated_at: goal.updated_at,
    }
}

/// Adds every interface a plugin may import to `linker`: WASI p2 (with the
/// deny-by-default context above), `wasi:http` (policy in [`HttpPolicy`]),
/// and `chitin:plugin/host` of 0.1.0 and 0.2.0 side by side (a 0.x minor is
/// its own semver track, so each component resolves to the version it was
/// built against). `wasi:sockets` is linked so that components from
/// language toolchains that always import it still instantiate; the context
/// refuses every address and lookup, so no socket ever opens.
pub fn add_to_linker(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    wasmtime_wasi::p2::add_to_linker_async(linker)?;
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)?;
    v0_1::chitin::plugin::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::tool::chitin::plugin::host::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    // Privileged interfaces: linked for all, each call checks the grant.
    v0_2::messaging::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::agents::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::schedule::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    v0_2::goals::add_to_linker::<StoreState, HasSelf<StoreState>>(linker, |s| s)?;
    guard_open_at(linker)
}

/// The WASI filesystem version wasmtime-wasi links (components importing any
/// 0.2.x resolve to it).
const WASI_FILESYSTEM_TYPES: &str = "wasi:filesystem/types@0.2.12";

/// Replaces `descriptor.open-at` with one that refuses anything but a
/// directory or a regular file before opening it. Only host-side actors can
/// put a FIFO or device in the workspace (WASI cannot make one), but opening
/// a FIFO blocks the host thread that does it until a writer appears, and a
/// call's timeout cannot unblock a thread: the process would never exit.
fn guard_open_at(linker: &mut Linker<StoreState>) -> wasmtime::Result<()> {
    use wasmtime::component::Resource;
    use wasmtime_wasi::filesystem::WasiFilesystemView;
    use wasmtime_wasi::p2::bindings::filesystem::types::{
        self as fs, Descriptor, DescriptorFlags, DescriptorType, HostDescriptor, OpenFlags, PathFlags,
    };
    type Args = (Resource<Descriptor>, PathFlags, String, OpenFlags, DescriptorFlags);
    linker.allow_shadowing(true);
    let mut types = linker.instance(WASI_FILESYSTEM_TYPES)?;
    types.func_wrap_async("[method]descriptor.open-at", |mut store, (fd, path_flags, path, oflags, flags): Args| {
        Box::new(async move {
            let state: &mut StoreState = store.data_mut();
            let probe = Resource::<Descriptor>::new_borrow(fd.rep());
            // Probe whatever exists at the path, following links as the open
            // would (`create` on an existing FIFO still opens the FIFO).
            if let Ok(stat) = state.filesystem().stat_at(probe, path_flags, path.clone()).await
                && !matches!(stat.type_, DescriptorType::Directory | DescriptorType::RegularFile | DescriptorType::SymbolicLink)
            {
                tracing::warn!(plugin = &*state.host.plugin, %path, kind = ?stat.type_, "refused to open a special file in the workspace");
                return Ok((Err(fs::ErrorCode::Access),));
            }
            let mut fs_view = state.filesystem();
            match fs_view.open_at(fd, path_flags, path, oflags, flags).await {
                Ok(opened) => Ok((Ok(opened),)),
                Err(e) => Ok((Err(fs::Host::convert_error_code(&mut fs_view, e)?),)),
            }
        })
    })?;
    linker.allow_shadowing(false);
    Ok(())
}

/// A bounded, shared capture of a guest output stream: the last `capacity`
/// bytes; older ones are dropped (the guest is not told), so a chatty
/// plugin cannot grow host memory.
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
        // The last bytes are kept: a runtime prints the cause of an abort
        // (a panic, a traceback) at the end, after whatever came before.
        let mut buffer = self.buffer.lock().expect("capture lock");
        let tail = &buf[buf.len().saturating_sub(self.capacity)..];
        let excess = (buffer.len() + tail.len()).saturating_sub(self.capacity);
        buffer.drain(..excess);
        buffer.extend_from_slice(tail);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
