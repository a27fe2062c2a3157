//! `chitin mcp login NAME`: the OAuth login of an HTTP MCP server
//! (`chitin::mcp::oauth`). Prints the URL to open (and opens it with
//! `xdg-open` when there is one); never prints a token.

use std::process::ExitCode;

use anyhow::Context as _;

use chitin::app::AppOptions;
use chitin::config::{Config, DataDir};
use chitin::mcp::oauth;

pub(super) async fn run(
    name: &str,
    data: DataDir,
    options: AppOptions,
) -> anyhow::Result<ExitCode> {
    let config_file = options
        .config_file
        .clone()
        .unwrap_or_else(|| data.config_file());
    let config =
        Config::load(&config_file).with_context(|| format!("reading {}", config_file.display()))?;
    let (url, settings) = oauth::settings(&config, name)?;
    oauth::login(data.root(), name, &url, &settings, |authorize| {
        println!("Open this URL to log in to `{name}`:\n\n  {authorize}\n");
        // A browser on this machine, when there is one; the URL above
        // works from anywhere the redirect to 127.0.0.1 can reach.
        if std::env::var_os("CHITIN_NO_BROWSER").is_none()
            && let Ok(child) = std::process::Command::new("xdg-open")
                .arg(authorize)
                .stdin(std::process::Stdio::null())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
        {
            drop(child);
        }
    })
    .await
    .with_context(|| format!("logging in to `{name}`"))?;
    println!(
        "Logged in to `{name}`; the tokens are in {}/mcp/oauth/{name}.json (mode 600).",
        data.root().display()
    );
    Ok(ExitCode::SUCCESS)
}
