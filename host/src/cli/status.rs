//! `chitin status`: config, provider, plugins and grants at a glance, and
//! the installed plugins that were skipped, with the reason.

use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;

use super::{for_terminal, shown};

pub(super) fn run(data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let config_file = options.config_file.clone().unwrap_or_else(|| data.config_file());
    let app = super::open_app_quietly(data, options)?;
    let exists = if config_file.exists() { "" } else { " (not found: using defaults; run `chitin onboard`)" };
    outln!("data dir:   {}", app.data.root().display())?;
    outln!("config:     {}{exists}", config_file.display())?;
    outln!("workspace:  {}", app.workspace.root().display())?;
    let agent = &app.config.agent;
    outln!("model:      {} (context {} tokens, max {} completion tokens)", agent.model, agent.context_window, agent.max_tokens)?;
    outln!("provider:   {}", provider_line(app.config.provider()))?;
    // In the order they are tried when the model above is down.
    for (i, fallback) in agent.fallback_models.iter().enumerate() {
        let name = fallback.provider.as_deref().unwrap_or(&agent.provider);
        let context = fallback.context_window.unwrap_or(agent.context_window);
        let max_tokens = fallback.max_tokens.unwrap_or(agent.max_tokens);
        outln!(
            "fallback {}: {}/{} (context {context} tokens, max {max_tokens} completion tokens) on {}",
            i + 1,
            shown(name, 64, "provider"),
            shown(&fallback.model, 128, "model"),
            provider_line(app.config.provider_named(name, "agent.fallback_models"))
        )?;
    }
    let gateway = &app.config.gateway;
    let auth = match gateway.auth() {
        Ok(chitin::config::GatewayAuth::Token(_)) => "auth token: set".to_string(),
        Ok(chitin::config::GatewayAuth::Disabled) => "auth: off (auth_token = \"\", loopback only)".to_string(),
        Err(e) => format!("auth token: MISSING — {e}"),
    };
    outln!("gateway:    http://{} ({auth})", gateway.listen)?;
    if app.config.channels.is_empty() {
        outln!("channels:   none")?;
    } else {
        outln!("channels:")?;
        for (name, raw) in &app.config.channels {
            let line = match chitin::channels::config::plugin_of(name, raw) {
                Ok((enabled, plugin)) => format!("{plugin}: {}", chitin::channels::status_line(app.data.root(), name, enabled)),
                Err(e) => format!("INVALID — {e}"),
            };
            outln!("  {:<12} {}", shown(name, 64, "name"), for_terminal(&line))?;
        }
    }
    let (servers, errors) = chitin::mcp::config::parse_all(&app.config.mcp_servers);
    if servers.is_empty() && errors.is_empty() {
        outln!("mcp:        none")?;
    } else {
        outln!("mcp:")?;
        for line in super::mcp::server_lines(&servers, &errors, "  ") {
            outln!("{line}")?;
        }
    }
    let limits = &app.config.limits;
    // Read without a gateway; a corrupt file is shown, never rewritten.
    match chitin::features::cron::CronService::open(chitin::features::cron::CronService::jobs_file(app.data.root()), std::sync::Arc::new(chitin::compact::SystemClock)) {
        Ok(cron) => {
            let jobs = cron.all();
            match jobs.iter().filter_map(|j| j.next_run).min() {
                Some(next) => outln!("cron:       {} job(s), next run {}", jobs.len(), next.to_rfc3339())?,
                None => outln!("cron:       no jobs")?,
            }
        }
        Err(e) => outln!("cron:       OFF — {}", for_terminal(&e.to_string()))?,
    }
    outln!("limits:     {} ms, {} MiB, {} KiB output per tool call", limits.timeout_ms, limits.memory_mb, limits.max_output_kb)?;
    outln!("plugins:")?;
    for p in app.catalog.iter() {
        let network: Vec<String> = p.grant.network.iter().map(ToString::to_string).collect();
        let network = if network.is_empty() { "none".to_string() } else { network.join(", ") };
        outln!(
            "  {:<12} {:<8} workspace={:<10} network={network}  ({} tools, {})",
            shown(p.name(), 64, "name"),
            shown(&p.manifest.version, 64, "version"),
            p.grant.workspace.as_str(),
            p.manifest.tools.len(),
            for_terminal(&p.source.to_string())
        )?;
        for note in &p.grant_notes {
            outln!("  {:<12} note: {}", "", shown(note, 1024, "note"))?;
        }
    }
    for line in super::load_problems(&app) {
        outln!("  {line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `name → endpoint (api, api key: …)`, or why the provider is unusable.
fn provider_line(provider: Result<(String, chitin::config::ProviderConfig), chitin::config::ConfigError>) -> String {
    match provider {
        Ok((name, provider)) => {
            let key = match provider.check(&name) {
                Ok(Some(_)) => "set".to_string(),
                Ok(None) => "none".to_string(),
                Err(e) => format!("MISSING — {e}"),
            };
            for_terminal(&format!("{name} → {} (api {}, api key: {key})", provider.endpoint(), provider.api.as_str())).into_owned()
        }
        Err(e) => for_terminal(&format!("NOT CONFIGURED — {e}")).into_owned(),
    }
}

/// `text` in red when stdout is a terminal (a warning a person must not
/// miss); plain in a pipe or a file.
pub(super) fn red(text: &str) -> String {
    if std::io::IsTerminal::is_terminal(&std::io::stdout()) { format!("\x1b[1;31m{text}\x1b[0m") } else { text.to_string() }
}
