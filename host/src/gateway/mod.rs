//! `chitin gateway`: the always-on host. One process runs the agent loop
//! over the bus, the OpenAI-compatible API, the web chat ([`webchat`]) and
//! the chat channels ([`crate::channels`]).
//!
//! Shape (spec §2–3, nanobot's gateway): every front end publishes
//! [`InboundMessage`](crate::bus::InboundMessage)s and reads its answers
//! from the [`OutboundRouter`], the single consumer of the bus's outbound
//! queue; [`AgentLoop::run`] consumes the inbound queue. No front end calls
//! the agent directly, so the API and a channel are served the same way.
//!
//! [`Gateway::bind`] builds the provider, the [`AgentCore`](crate::agent::AgentCore),
//! the bus and the loop and binds the listener (so the caller can print the
//! real address, port 0 included); [`Gateway::run`] serves until `shutdown`
//! resolves, then shuts down in order:
//! 1. **stop intake**: new requests get 503 in OpenAI's error shape (the
//!    listener stays open, so clients see a clear answer, not a refusal);
//! 2. **drain**: requests in flight get up to [`DRAIN_GRACE`] to finish;
//! 3. **stop** the turns still running, as `/stop` does: the runner's last
//!    checkpoint is written into the session, so finished tool steps are kept;
//! 4. stop the channels and the loop, and **flush** the sessions
//!    (`SessionStore::sync`).
//!
//! The HTTP server is plain hyper (already a dependency, as in the mock
//! LLM): a handful of routes, a body cap and a custom drain did not need a
//! framework, and the 503-while-draining step is simpler with our own
//! accept loop than with a framework's graceful shutdown.
//!
//! Limits against clients that hold connections (`[gateway]`, see
//! [`limits`]): hyper's header read timeout (with hyper-util's
//! `TokioTimer`) bounds a request head and a keep-alive connection's idle
//! wait; a deadline bounds each request body; the accept loop caps the
//! connections in total (lowered to what the open-file limit can hold) and
//! per remote address. Without a token, [`origin`] refuses foreign `Host`s
//! and cross-site writes.

pub mod api;
pub mod http;
pub mod limits;
pub mod origin;
pub mod router;
pub mod webchat;
pub mod webhooks;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

pub use crate::channels::{Channel, ChannelContext};
pub use router::OutboundRouter;

use crate::agent::AgentLoop;
use crate::app::{App, AppError};
use crate::bus::MessageBus;
use crate::config::{ConfigError, GatewayAuth, ServerLimits};
use crate::session::SessionError;

/// How long requests in flight may take to finish after shutdown begins.
pub const DRAIN_GRACE: Duration = Duration::from_secs(5);

/// How long stopped turns and channels get to wind down after that.
pub const STOP_GRACE: Duration = Duration::from_secs(2);

/// How long the loop may take to flush the sessions (one `fsync` per
/// session written since the last flush: ~2 ms each on a plain disk).
pub const FLUSH_GRACE: Duration = Duration::from_secs(60);

/// How often due cron jobs are looked for.
pub const CRON_TICK: Duration = Duration::from_secs(1);

/// Why the gateway could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum GatewayError {
    /// `[gateway]` is unusable (no token, an open non-loopback address).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The provider or the host could not be assembled.
    #[error(transparent)]
    App(#[from] AppError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr} (config [gateway] listen): {source}")]
    Bind { addr: SocketAddr, source: std::io::Error },
    /// A `[channels.<name>]` table is unusable.
    #[error(transparent)]
    Channel(#[from] crate::channels::ChannelSetupError),
    /// Sessions could not be flushed at shutdown.
    #[error("flushing sessions at shutdown: {0}")]
    Sync(#[from] SessionError),
}

impl GatewayError {
    /// The model provider is not set up (the CLI exits 2 for it).
    pub fn is_provider_setup(&self) -> bool {
        match self {
            GatewayError::Config(e) => e.is_provider_setup(),
            GatewayError::App(e) => e.is_provider_setup(),
            _ => false,
        }
    }
}

/// The channels `[channels]` enables, each over its loaded channel plugin.
pub fn channels(app: &App) -> Result<Vec<Box<dyn Channel>>, GatewayError> {
    let built = crate::channels::build(&app.config.channels, &app.catalog, &app.runtime, app.data.root())?;
    Ok(built.into_iter().map(|c| Box::new(c) as Box<dyn Channel>).collect())
}

/// How the shutdown went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Sessions whose turns were still running after [`DRAIN_GRACE`] and were
    /// stopped (their checkpoints kept).
    pub stopped: Vec<String>,
    /// How long flushing the sessions to stable storage took.
    pub flush: Duration,
}

/// A bound gateway, ready to run.
pub struct Gateway {
    listener: TcpListener,
    addr: SocketAddr,
    state: Arc<http::ApiState>,
    bus: Arc<MessageBus>,
    channels: Vec<Box<dyn Channel>>,
    cron: Option<Arc<crate::features::cron::CronService>>,
    dream: Arc<crate::features::dream::Dream>,
    /// The MCP servers the agent uses: kept until the gateway stops.
    mcp: Arc<crate::mcp::client::McpClients>,
    /// Ends the `/mcp` sessions (and the calls they run) at shutdown.
    mcp_stop: CancellationToken,
    limits: ServerLimits,
}

impl Gateway {
    /// Builds the agent over `app`'s provider and binds `[gateway] listen`.
    /// Fails before binding when the API would have no token it needs.
    pub async fn bind(app: &App) -> Result<Gateway, GatewayError> {
        let config = &app.config.gateway;
        let auth = config.auth()?;
        let mut limits = config.server_limits()?;
        let channels = channels(app)?;
        let provider = app.provider()?;
        let bus = app.durable_bus()?;
        // The `message` tool reaches the front ends and channels served here.
        let mut reachable: Vec<String> = vec![api::API_CHANNEL.into(), webchat::WEB_CHANNEL.into()];
        reachable.extend(channels.iter().map(|c| c.name().to_string()));
        let mut builder = app.agent_builder(provider, bus.clone()).reachable(reachable);
        // Scheduled jobs: a jobs file that does not parse keeps cron off
        // (and untouched), not the whole gateway.
        let cron = match crate::features::cron::CronService::open(crate::features::cron::CronService::jobs_file(app.data.root()), Arc::new(crate::compact::SystemClock)) {
            Ok(cron) => {
                let cron = Arc::new(cron);
                builder = builder.cron(cron.clone());
                Some(cron)
            }
            Err(e) => {
                tracing::error!("cron is off: {e}");
                None
            }
        };
        let wired = builder.build();
        let dream = wired.dream;
        let mcp = wired.mcp;
        let agent = AgentLoop::new(Arc::new(wired.core));
        let listener = TcpListener::bind(config.listen).await.map_err(|source| GatewayError::Bind { addr: config.listen, source })?;
        let addr = listener.local_addr().map_err(|source| GatewayError::Bind { addr: config.listen, source })?;
        let (total, lowered) = limits::descriptor_bounded(limits.max_connections);
        if let Some(soft) = lowered {
            tracing::warn!("gateway: at most {total} connections (not {}): the open-file limit is {soft} (ulimit -n) and {} descriptors stay for the rest", limits.max_connections, limits::RESERVED_DESCRIPTORS);
            limits.max_connections = total;
            limits.max_connections_per_address = limits.max_connections_per_address.min(total);
        }
        // Only without a token does a browser's ambient access matter.
        let same_origin = matches!(auth, GatewayAuth::Disabled).then(|| origin::SameOrigin::new(addr, &limits.allowed_hosts));
        let mcp_stop = CancellationToken::new();
        let endpoint = mcp_endpoint(app, &auth, mcp_stop.clone());
        let state = Arc::new(http::ApiState::new(agent, OutboundRouter::new(), auth, crate::channels::webhook::Routes::new(), same_origin, limits.body_timeout, endpoint));
        Ok(Gateway { listener, addr, state, bus, channels, cron, dream, limits, mcp, mcp_stop })
    }

    /// The bound address (the real port when `listen` asked for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// The session lock map the loop and the API share (its size is how
    /// many sessions are held or waited for now).
    pub fn session_locks(&self) -> Arc<crate::agent::locks::KeyedLocks> {
        self.state.agent.core().locks.clone()
    }

    /// Whether the API asks for a bearer token.
    pub fn requires_token(&self) -> bool {
        matches!(self.state.auth, GatewayAuth::Token(_))
    }

    /// Names of the channels it will start.
    pub fn channel_names(&self) -> Vec<String> {
        self.channels.iter().map(|c| c.name().to_string()).collect()
    }

    /// Serves until `shutdown` resolves, then shuts down as the module docs
    /// describe.
    pub async fn run(self, shutdown: impl Future<Output = ()>) -> Result<ShutdownReport, GatewayError> {
        let Gateway { listener, state, bus, channels, cron, dream, limits, mcp, mcp_stop, .. } = self;
        let agent = state.agent.clone();
        let router_task = tokio::spawn(state.router.clone().run(bus.clone()));
        let web_task = tokio::spawn(state.web.clone().run(state.router.route_channel(webchat::WEB_CHANNEL)));
        let channel_stop = CancellationToken::new();
        let outbounds: Vec<_> = channels.iter().map(|channel| state.router.route_channel(channel.name())).collect();
        // After the channels' routes exist (it re-sends the replies a crash
        // left undelivered) and before any intake starts (a message
        // accepted now is not a dead process's): `AgentLoop::recover`.
        agent.recover();
        let channel_tasks: Vec<JoinHandle<()>> = channels
            .into_iter()
            .zip(outbounds)
            .map(|(channel, outbound)| channel.start(ChannelContext { bus: bus.clone(), outbound, shutdown: channel_stop.clone(), webhooks: state.webhooks.clone() }))
            .collect();
        let loop_stop = CancellationToken::new();
        let loop_task = tokio::spawn({
            let (agent, stop) = (agent.clone(), loop_stop.clone());
            async move { agent.run(stop.cancelled_owned()).await }
        });
        // Cron stops with the channels: both are intake.
        let cron_task = cron.map(|cron| {
            let active = agent.core().active.clone();
            tokio::spawn(cron.run(bus.clone(), move |key: &str| active.get(key).is_some(), CRON_TICK, channel_stop.clone()))
        });
        // Dream (memory consolidation) stops with the intake too.
        let dream_task = agent.core().settings.dream.enabled.then(|| tokio::spawn(crate::features::dream::run_periodically(agent.clone(), dream.clone(), dream.interval(), channel_stop.clone())));
        let heartbeat_task = agent.core().settings.heartbeat.enabled.then(|| {
            let clock: Arc<dyn crate::compact::Clock> = Arc::new(crate::compact::SystemClock);
            tokio::spawn(crate::features::heartbeat::run_periodically(agent.clone(), clock, CRON_TICK, channel_stop.clone()))
        });
        let server_stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, state.clone(), limits, server_stop.clone()));

        shutdown.await;
        tracing::info!("gateway: shutting down");
        state.draining.store(true, Ordering::Release);
        channel_stop.cancel();
        let mut stopped = Vec::new();
        if !state.in_flight.wait_idle(DRAIN_GRACE).await {
            stopped = state.in_flight.sessions();
            stopped.sort();
            stopped.dedup();
            for key in &stopped {
                agent.stop_for_shutdown(key);
            }
            if !state.in_flight.wait_idle(STOP_GRACE).await {
                tracing::warn!("gateway: requests still open after stopping their turns; closing them");
            }
        }
        tracing::debug!(stopped = stopped.len(), "gateway: drained");
        mcp_stop.cancel();
        server_stop.cancel();
        let _ = server.await;
        tracing::debug!("gateway: listener closed");
        for task in channel_tasks {
            if tokio::time::timeout(STOP_GRACE, task).await.is_err() {
                tracing::warn!("gateway: a channel did not stop within {STOP_GRACE:?}");
            }
        }
        // The loop's last act is `sessions.sync()`: waiting for it is the flush.
        let flushing = std::time::Instant::now();
        loop_stop.cancel();
        if tokio::time::timeout(FLUSH_GRACE, loop_task).await.is_err() {
            tracing::warn!("gateway: the agent loop did not stop within {FLUSH_GRACE:?}");
        }
        router_task.abort();
        web_task.abort();
        if let Some(task) = cron_task {
            let _ = task.await;
        }
        for task in [dream_task, heartbeat_task].into_iter().flatten() {
            let _ = task.await;
        }
        // The MCP servers stop with the agent (stdio processes are killed).
        drop(mcp);
        // Whatever a late turn wrote after the loop's flush; and the error,
        // which the loop can only log.
        agent.core().sessions.sync()?;
        Ok(ShutdownReport { stopped, flush: flushing.elapsed() })
    }
}

/// The `/mcp` endpoint over the plugins' tools (those of `[gateway]
/// mcp_tools` when it names some), when the gateway has a token to put in
/// front of it and `mcp_tools` is not `[]`. A name that cannot be served
/// turns `/mcp` off with a warning; the rest of the gateway runs.
fn mcp_endpoint(app: &App, auth: &GatewayAuth, stop: CancellationToken) -> Option<crate::mcp::server::http::McpEndpoint> {
    use crate::mcp::server::{DEFAULT_MAX_CALLS, ToolServer, http::McpEndpoint, served_tools};
    if matches!(auth, GatewayAuth::Disabled) {
        return None;
    }
    let only = match &app.config.gateway.mcp_tools {
        Some(names) if names.is_empty() => return None,
        Some(names) => names.as_slice(),
        None => &[],
    };
    match served_tools(&app.tools, only) {
        Ok(tools) => Some(McpEndpoint::new(ToolServer::new(tools, DEFAULT_MAX_CALLS, "http"), http::MAX_BODY_BYTES, stop)),
        Err(e) => {
            tracing::warn!("gateway: /mcp is off: {e}");
            None
        }
    }
}

/// Accepts connections until `stop` fires; dropping the set then closes
/// every connection still open. A connection over a cap is answered 503
/// (best effort, without waiting) and closed at once (see [`limits`]).
async fn serve(listener: TcpListener, state: Arc<http::ApiState>, limits: ServerLimits, stop: CancellationToken) {
    let slots = limits::ConnectionSlots::new(limits.max_connections, limits.max_connections_per_address);
    let mut http = hyper::server::conn::http1::Builder::new();
    // hyper starts this timer when a connection opens and again whenever a
    // keep-alive connection goes idle: a head trickled byte by byte, or a
    // connection left idle, is closed when it fires.
    http.keep_alive(true).timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
    let http = Arc::new(http);
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors and the like: back off, go on.
                        tracing::warn!("gateway: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let slot = match slots.acquire(peer.ip()) {
                    Ok(slot) => slot,
                    Err(refusal) => {
                        // Never waits: a full socket buffer just loses the answer.
                        let _ = stream.try_write(&refusal.response());
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let (state, http) = (state.clone(), http.clone());
                connections.spawn(async move {
                    let _slot = slot;
                    let service = service_fn(move |request| http::handle(state.clone(), request));
                    if let Err(e) = http.serve_connection(TokioIo::new(stream), service).await {
                        tracing::debug!(%peer, "gateway: connection ended: {e}");
                    }
                });
            }
        }
    }
}
