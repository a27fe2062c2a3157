//! `chitin status`: config, provider, plugins and grants at a glance.

use std::process::ExitCode;

use chitin::app::AppOptions;
use chitin::config::DataDir;

pub fn run(data: DataDir, options: AppOptions) -> anyhow::Result<ExitCode> {
    let config_file = options.config_file.clone().unwrap_or_else(|| data.config_file());
    let app = super::open_app(data, options)?;
    let exists = if config_file.exists() { "" } else { " (not found: using defaults; run `chitin onboard`)" };
    println!("data dir:   {}", app.data.root().display());
    println!("config:     {}{exists}", config_file.display());
    println!("workspace:  {}", app.workspace.root().display());
    let agent = &app.config.agent;
    println!("model:      {} (context {} tokens, max {} completion tokens)", agent.model, agent.context_window, agent.max_tokens);
    match app.config.provider() {
        Ok((name, provider)) => {
            let key = match provider.resolved_api_key(&name) {
                Ok(Some(_)) => "set".to_string(),
                Ok(None) => "none".to_string(),
                Err(e) => format!("MISSING — {e}"),
            };
            println!("provider:   {name} → {} (api key: {key})", provider.base_url);
        }
        Err(e) => println!("provider:   NOT CONFIGURED — {e}"),
    }
    let limits = &app.config.limits;
    println!("limits:     {} ms, {} MiB, {} KiB output per tool call", limits.timeout_ms, limits.memory_mb, limits.max_output_kb);
    println!("plugins:");
    for p in app.catalog.iter() {
        let network: Vec<String> = p.grant.network.iter().map(ToString::to_string).collect();
        let network = if network.is_empty() { "none".to_string() } else { network.join(", ") };
        println!("  {:<12} {:<8} workspace={:<10} network={network}  ({} tools, {})", p.name(), p.manifest.version, p.grant.workspace.as_str(), p.manifest.tools.len(), p.source);
        for note in &p.grant_notes {
            println!("  {:<12} note: {note}", "");
        }
    }
    Ok(ExitCode::SUCCESS)
}
