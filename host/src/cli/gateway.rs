//! `chitin gateway`: runs the always-on host (agent loop, OpenAI-compatible
//! API, channels) until SIGINT or SIGTERM, then shuts down cleanly (see
//! `chitin::gateway`): exit 0 after a clean shutdown, 2 when `[gateway]`
//! lacks a token it needs, 1 for other failures.
//!
//! The first line on stderr says where it listens (`listening on
//! http://ADDR`), with the real port when `listen` asks for port 0: scripts
//! and the tests read it.

use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use tokio::signal::unix::{SignalKind, signal};

use chitin::app::AppOptions;
use chitin::config::{ConfigError, DataDir};
use chitin::gateway::{DRAIN_GRACE, Gateway, GatewayError};

use super::for_terminal;

#[derive(Debug, Args)]
pub(super) struct GatewayArgs {}

/// Exit code of a configuration that would leave the API without a token.
const EXIT_CONFIG: u8 = 2;

pub(super) async fn run(_args: GatewayArgs, data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let app = super::open_app(data, options)?;
    let gateway = match Gateway::bind(&app).await {
        Ok(gateway) => gateway,
        Err(GatewayError::Config(e @ (ConfigError::GatewayNoToken { .. } | ConfigError::GatewayOpen { .. } | ConfigError::GatewayLimit { .. }))) => {
            errln!("error: {}", for_terminal(&e.to_string()));
            return Ok(ExitCode::from(EXIT_CONFIG));
        }
        Err(e) => return Err(e.into()),
    };
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let addr = gateway.local_addr();
    let auth = if gateway.requires_token() { "bearer token required" } else { "NO authentication (loopback only)" };
    errln!("chitin gateway listening on http://{addr} (web chat at http://{addr}/chat, OpenAI API at http://{addr}/v1, {auth}); Ctrl-C or SIGTERM stops it");
    let channels = gateway.channel_names();
    errln!("channels: {}", if channels.is_empty() { "none".to_string() } else { channels.join(", ") });
    let shutdown = async move {
        tokio::select! {
            _ = sigterm.recv() => {}
            _ = sigint.recv() => {}
        }
        errln!("shutting down: finishing running turns (up to {} s)…", DRAIN_GRACE.as_secs());
    };
    let report = gateway.run(shutdown).await?;
    if !report.stopped.is_empty() {
        errln!("stopped {} running turn(s), finished tool steps kept: {}", report.stopped.len(), for_terminal(&report.stopped.join(", ")));
    }
    errln!("gateway stopped; loop stopped and sessions flushed in {} ms", report.flush.as_millis());
    Ok(ExitCode::SUCCESS)
}
