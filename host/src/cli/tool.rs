//! `chitin tool call` and `chitin tool list`.

use std::io::{IsTerminal, Read};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Subcommand;

use chitin::app::AppOptions;
use chitin::config::DataDir;
use chitin::plugins::{CallContext, PluginError, ToolFailure};
use chitin::tools::ToolError;

use super::{for_terminal, shown};

/// Longest progress line shown, in bytes (the rest is cut with a marker).
const PROGRESS_SHOWN: usize = 1024;
/// Longest tool error shown on the terminal, in bytes.
const ERROR_SHOWN: usize = 64 * 1024;

#[derive(Debug, Subcommand)]
pub(super) enum ToolCommand {
    /// Call one tool and print its result.
    ///
    /// The result goes to stdout: as exact bytes when stdout is a pipe or a
    /// file (`> out.txt` keeps the content as the tool returned it), with
    /// control characters shown as escapes (`\x1b`) when stdout is a
    /// terminal. Progress and errors go to stderr, always escaped; a failed
    /// call exits with code 1.
    Call {
        /// Tool name, e.g. `read_file`.
        tool: String,
        /// Arguments as a JSON object; `@FILE` reads them from FILE, `-` from
        /// stdin (for large arguments).
        #[arg(long, default_value = "{}", value_name = "JSON|@FILE|-")]
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

pub(super) async fn run(cmd: ToolCommand, data: DataDir, mut options: AppOptions) -> anyhow::Result<ExitCode> {
    match cmd {
        ToolCommand::Call { tool, args, workspace, plugins } => {
            // Arguments first: a typo in them should not wait for the plugins.
            let args = read_args(&args)?;
            options.workspace = workspace;
            options.extra_plugins = plugins;
            let app = super::open_app(data, options)?;
            let ctx = CallContext { session_key: "cli:direct".into(), channel: "cli".into(), chat_id: "direct".into(), call_id: "cli-1".into() };
            let progress = Arc::new(|text: &str| errln!("… {}", shown(text, PROGRESS_SHOWN, "progress")));
            match app.tools.call(&tool, &args, &ctx, Some(progress)).await {
                Ok(result) => {
                    print_result(&result)?;
                    Ok(ExitCode::SUCCESS)
                }
                Err(e) => {
                    // A `failed` tool error reads "error: <message>" already.
                    let text = match &e {
                        ToolError::Plugin(PluginError::Tool { kind: ToolFailure::Failed, message }) => message.clone(),
                        other => other.to_string(),
                    };
                    errln!("error: {}", chitin::text::clip_for_terminal(&text, ERROR_SHOWN, "error"));
                    Ok(ExitCode::FAILURE)
                }
            }
        }
        ToolCommand::List => {
            let app = super::open_app(data, options)?;
            for name in app.tools.names() {
                let spec = app.tools.spec(name).expect("listed names exist");
                let plugin = app.tools.plugin_of(name).expect("listed names exist");
                let flags = plugin.manifest.tools.iter().find(|t| t.name == name).map(|t| tool_flags(t.read_only, t.concurrency_safe)).unwrap_or_default();
                outln!(
                    "{:<16} {:<10} {:<20} {}",
                    shown(name, 64, "name"),
                    shown(plugin.name(), 64, "name"),
                    flags,
                    shown(first_line(&spec.description), 4096, "description")
                )?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `--args`: inline JSON, `@FILE`, or `-` for stdin.
fn read_args(spec: &str) -> anyhow::Result<serde_json::Value> {
    let (text, from) = if spec == "-" {
        let mut text = String::new();
        std::io::stdin().lock().read_to_string(&mut text).context("--args -: cannot read the arguments from stdin")?;
        (text, "stdin".to_string())
    } else if let Some(file) = spec.strip_prefix('@') {
        let path = Path::new(file);
        let text = std::fs::read_to_string(path).with_context(|| format!("--args @{file}: cannot read {}", path.display()))?;
        (text, path.display().to_string())
    } else {
        return serde_json::from_str(spec).context("--args is not valid JSON (pass JSON, @FILE or - for stdin)");
    };
    serde_json::from_str(&text).with_context(|| format!("--args: {from} does not hold valid JSON"))
}

/// The result on stdout: raw to a pipe or file, escaped on a terminal.
fn print_result(result: &str) -> std::io::Result<()> {
    let newline = if result.ends_with('\n') { "" } else { "\n" };
    if std::io::stdout().is_terminal() {
        super::write_out(format_args!("{}{newline}", for_terminal(result)))
    } else {
        super::write_out_bytes(result.as_bytes())?;
        super::write_out_bytes(newline.as_bytes())
    }
}

/// `read-only,concurrency-safe`, `read-only`, ... or `-`: what the
/// scheduler may do with a tool's calls.
fn tool_flags(read_only: bool, concurrency_safe: bool) -> String {
    let flags: Vec<&str> = [(read_only, "read-only"), (concurrency_safe, "concurrency-safe")].into_iter().filter(|(on, _)| *on).map(|(_, f)| f).collect();
    if flags.is_empty() { "-".into() } else { flags.join(",") }
}

fn first_line(text: &str) -> &str {
    text.lines().next().unwrap_or_default()
}
