//! `chitin tool call`.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;

use chitin::app::AppOptions;
use chitin::config::DataDir;
use chitin::plugins::CallContext;

#[derive(Debug, Subcommand)]
pub enum ToolCommand {
    /// Call one tool and print its result.
    Call {
        /// Tool name, e.g. `read_file`.
        tool: String,
        /// Arguments as a JSON object.
        #[arg(long, default_value = "{}")]
        args: String,
        /// Workspace directory the plugin sees (default: the configured one).
        #[arg(long, value_name = "DIR")]
        workspace: Option<PathBuf>,
        /// Also load this plugin component (repeatable).
        #[arg(long = "plugin", value_name = "FILE.wasm")]
        plugins: Vec<PathBuf>,
    },
    /// List the tools available to the agent.
    List,
}

pub async fn run(cmd: ToolCommand, data: DataDir, mut options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        ToolCommand::Call { tool, args, workspace, plugins } => {
            options.workspace = workspace;
            options.extra_plugins = plugins;
            let app = super::open_app(data, options)?;
            let args: serde_json::Value = serde_json::from_str(&args).context("--args is not valid JSON")?;
            let ctx = CallContext { session_key: "cli:direct".into(), channel: "cli".into(), chat_id: "direct".into(), call_id: "cli-1".into() };
            let progress = Arc::new(|text: &str| eprintln!("… {text}"));
            match app.tools.call(&tool, &args, &ctx, Some(progress)).await {
                Ok(result) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(result.as_bytes())?;
                    if !result.ends_with('\n') {
                        out.write_all(b"\n")?;
                    }
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        ToolCommand::List => {
            let app = super::open_app(data, options)?;
            for name in app.tools.names() {
                let spec = app.tools.spec(name).expect("listed names exist");
                let plugin = app.tools.plugin_of(name).expect("listed names exist");
                println!("{name:<16} {:<10} {}", plugin.name(), first_line(&spec.description));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
