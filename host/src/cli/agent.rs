//! `chitin agent`: one message (`-m`) or an interactive chat.
//!
//! The reply goes to stdout; what the turn does meanwhile goes to stderr, so
//! `chitin agent -m ... > answer.txt` captures only the answer. The turn's
//! [`TurnSink`] here is [`Progress`]: a spinner, and a line per tool start
//! (`↳ name(arguments)`) and per progress text the plugin reports
//! (`… name: text`). The lines are shown when stderr is a terminal, or with
//! `--progress` (scripts that read stderr for errors get no chatter unless
//! they ask). Everything shown is the model's or a plugin's text (replies,
//! tool names and arguments, progress, errors that quote tools): control
//! characters are shown as escapes.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use rustyline::{DefaultEditor, ExternalPrinter};
use rustyline::error::ReadlineError;

use chitin::agent::sink::{TurnSink, args_preview, tool_name};
use chitin::agent::runner::StopReason;
use chitin::agent::{AgentLoop, TurnOutcome};
use chitin::app::AppOptions;
use chitin::bus::MessageBus;
use chitin::config::DataDir;
use chitin::session::ToolCall;

use super::for_terminal;

#[derive(Debug, Args)]
pub(super) struct AgentArgs {
    /// Send this message and print the reply (otherwise: interactive chat).
    /// Control characters in the reply, tool hints and errors are shown as
    /// escapes (`\x1b`), on a terminal or not.
    #[arg(short, long)]
    message: Option<String>,
    /// Session name; messages of one session share history.
    #[arg(short, long, default_value = "cli:direct")]
    session: String,
    /// Show tool starts and the tools' progress on stderr even when stderr
    /// is not a terminal (on a terminal they are always shown).
    #[arg(long)]
    progress: bool,
}

/// Bytes of the model's reasoning shown per answer (the rest is cut).
const REASONING_SHOWN_BYTES: usize = 300;

/// Shows what the agent is doing on stderr: the turn's sink.
struct Progress {
    spinner: ProgressBar,
    /// Whether tool and progress lines are printed.
    lines: bool,
}

impl Progress {
    fn new(forced: bool) -> Arc<Self> {
        let terminal = std::io::stderr().is_terminal();
        let spinner = if terminal { ProgressBar::new_spinner() } else { ProgressBar::hidden() };
        spinner.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
        Arc::new(Progress { spinner, lines: terminal || forced })
    }

    fn start(&self) {
        self.spinner.reset();
        self.spinner.set_message("thinking…");
        self.spinner.enable_steady_tick(Duration::from_millis(100));
    }

    fn stop(&self) {
        self.spinner.finish_and_clear();
    }
}

impl Progress {
    /// A line above the spinner; straight to stderr when there is no
    /// spinner (stderr is not a terminal: indicatif would drop the line).
    fn line(&self, text: &str) {
        if !self.lines {
            return;
        }
        if self.spinner.is_hidden() {
            errln!("{text}");
        } else {
            self.spinner.println(text);
        }
    }
}

impl TurnSink for Progress {
    fn tool_started(&self, call: &ToolCall) {
        // The name and the arguments are the model's: escaped, one line.
        let name = tool_name(call);
        self.line(&format!("  ↳ {name}({})", args_preview(call)));
        self.spinner.set_message(format!("running {name}…"));
    }

    fn tool_progress(&self, call: &ToolCall, text: &str) {
        // Escaped by the sandbox already; escaping again costs nothing and
        // keeps this display safe whatever feeds it. One line per text.
        self.line(&format!("    … {}: {}", tool_name(call), for_terminal(text).replace('\n', "\\n")));
    }

    fn tool_finished(&self, _call: &ToolCall, _ok: bool) {
        self.spinner.set_message("thinking…");
    }

    /// The model's reasoning (DeepSeek, Qwen, Anthropic thinking): one
    /// clipped, escaped line of progress, never part of the reply.
    fn reasoning(&self, text: &str) {
        self.line(&format!("  ∴ {}", super::shown(text.trim(), REASONING_SHOWN_BYTES, "reasoning")));
    }

    /// A goal's interim answer: shown on stderr like progress (stdout gets
    /// the final reply only).
    fn interim_answer(&self, text: &str) {
        self.line(&format!("  · {}", for_terminal(text).replace('\n', "\n    ")));
        self.spinner.set_message("working on the goal…");
    }

    fn notice(&self, text: &str) {
        self.spinner.set_message(text.to_string());
    }
}

/// The longest a chat waits for its MCP servers before the first turn.
const MCP_FIRST_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) async fn run(args: AgentArgs, data: DataDir, options: AppOptions) -> anyhow::Result<std::process::ExitCode> {
    let app = super::open_app(data, options)?;
    let provider = app.provider()?;
    let progress = Progress::new(args.progress);
    // `process_direct` sends its output to the sink; on the bus are only
    // what plugins sent through `messaging` (printed after each turn).
    // An interactive chat is durable (`chitin::durable`): a message it
    // accepted is answered after a crash, at the next start. A one-shot is
    // not: nobody would be there to read a late answer.
    let bus = match &args.message {
        Some(_) => Arc::new(MessageBus::new()),
        None => match app.durable_bus() {
            Ok(bus) => bus,
            Err(e) => {
                errln!("note: {}; this chat is not kept across crashes", for_terminal(&e.to_string()));
                Arc::new(MessageBus::new())
            }
        },
    };
    // Here the only chat is the terminal.
    let wired = app.agent_builder(provider, bus).reachable(vec![chitin::bus::SessionKey::new(args.session.as_str()).chat_hint().channel]).build();
    // The first turn starts with the MCP servers that came up in time (each
    // within its own startup_timeout_secs); the others join when they do.
    let mcp = wired.mcp;
    mcp.first_attempts(MCP_FIRST_WAIT).await;
    let agent = AgentLoop::new(Arc::new(wired.core));
    match args.message {
        Some(message) => one_shot(&agent, &progress, &message, &args.session).await,
        None => interactive(&agent, &progress, &args.session, &app.data).await,
    }
}

/// Prints what plugins sent through `messaging` (the `message` tool) during
/// the turn that just ended, before its reply: in the CLI the current chat
/// is the terminal. The bus's other outbound events (progress) are dropped,
/// so nothing piles up in the queue.
fn print_sent_messages(bus: &MessageBus) -> std::io::Result<()> {
    while let Some(event) = bus.try_consume_outbound() {
        if !event.kind.reply().is_some_and(|r| r.via_tool) {
            continue;
        }
        outln!("{}", for_terminal(&event.content))?;
        for path in &event.media {
            outln!("[attachment: {}]", for_terminal(&path.display().to_string()))?;
        }
    }
    Ok(())
}

async fn one_shot(agent: &AgentLoop, progress: &Arc<Progress>, message: &str, session: &str) -> anyhow::Result<std::process::ExitCode> {
    progress.start();
    let outcome = agent.process_direct(message, session, progress.clone()).await;
    progress.stop();
    print_sent_messages(&agent.core().bus)?;
    let code = print_outcome(outcome)?;
    finish_subagents(agent, session).await?;
    agent.core().sessions.sync().context("syncing the session")?;
    Ok(code)
}

/// After a one-shot turn: subagents it spawned without `wait` may still
/// run (the turn waited `[agent.subagents] keep_alive_secs` for them, or a
/// result came just as it ended). Their results arrive on the bus as
/// `system` messages; each is handled as a turn of its own (stored in the
/// session, as the gateway does) and its reply printed, for up to
/// `keep_alive_secs` more. Past that, the ones still running are stopped
/// with a note on stderr: the process is about to end, and a result
/// nobody will see must not be announced as if it had been delivered.
async fn finish_subagents(agent: &AgentLoop, session: &str) -> anyhow::Result<()> {
    let bus = &agent.core().bus;
    let manager = agent.core().subagents.clone();
    let running = || manager.as_ref().is_some_and(|m| m.has_running(session));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(agent.core().settings.subagents.keep_alive_secs);
    loop {
        let next = match bus.try_consume_inbound() {
            Some(message) => Some(message),
            None if running() => tokio::time::timeout_at(deadline, bus.consume_inbound()).await.ok().flatten(),
            None => None,
        };
        let Some(message) = next else { break };
        let outcome = agent.process_accepted(message, chitin::agent::sink::silent()).await;
        print_sent_messages(bus)?;
        match outcome {
            TurnOutcome::Done(ctx) => {
                if let Some(reply) = ctx.outbound {
                    outln!("{}", for_terminal(&reply.content))?;
                }
            }
            TurnOutcome::Cancelled => {}
            TurnOutcome::Failed(e) => errln!("error: {}", for_terminal(&e.to_string())),
        }
    }
    if let Some(manager) = manager.filter(|m| m.has_running(session)) {
        let n = manager.cancel_session(session);
        errln!("note: {n} subagent(s) still running after [agent.subagents] keep_alive_secs; stopped (use `spawn` with wait=true, or a longer keep_alive_secs, to get their results here)");
    }
    Ok(())
}

fn print_outcome(outcome: TurnOutcome) -> anyhow::Result<std::process::ExitCode> {
    match outcome {
        // The model request failed: the reason on stderr and a failing exit
        // status, so a script can tell; the session kept the user's message.
        TurnOutcome::Done(ctx) if ctx.stop_reason == Some(StopReason::Error) => {
            let reason = ctx.run_error.or(ctx.final_content).unwrap_or_else(|| "the model request failed".into());
            errln!("error: {}", for_terminal(&reason));
            Ok(std::process::ExitCode::FAILURE)
        }
        TurnOutcome::Done(ctx) => {
            if let Some(reply) = ctx.outbound {
                outln!("{}", for_terminal(&reply.content))?;
            }
            Ok(std::process::ExitCode::SUCCESS)
        }
        TurnOutcome::Cancelled => {
            errln!("(stopped)");
            Ok(std::process::ExitCode::FAILURE)
        }
        TurnOutcome::Failed(e) => {
            errln!("error: {}", for_terminal(&e.to_string()));
            Ok(std::process::ExitCode::FAILURE)
        }
    }
}

async fn interactive(agent: &AgentLoop, progress: &Arc<Progress>, session: &str, data: &DataDir) -> anyhow::Result<std::process::ExitCode> {
    let mut editor = DefaultEditor::new().context("starting the line editor")?;
    let history = data.cli_history_file();
    let _ = editor.load_history(&history);
    // Results that come after their turn ended (a background subagent's)
    // are printed above the prompt; without a terminal, straight to stdout.
    // (rustyline's printer hands text to its own line editing, which runs
    // only on a terminal.)
    let printer = match std::io::stdin().is_terminal() {
        true => editor.create_external_printer().ok().map(|p| Box::new(p) as Box<dyn ExternalPrinter + Send>),
        false => None,
    };
    let late = tokio::spawn(late_results(agent.clone(), printer));
    // What a crash left unanswered is queued now; `late_results` answers it.
    agent.recover();
    errln!("chitin — session {}. Type /help for commands, `exit` to leave, Ctrl-C stops a running turn.", for_terminal(session));
    loop {
        let line = match editor.readline("you › ") {
            Ok(line) => line,
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("reading input"),
        };
        let text = line.trim();
        if text.is_empty() {
            continue;
        }
        if matches!(text, "exit" | "quit" | ":q") {
            break;
        }
        let _ = editor.add_history_entry(text);
        progress.start();
        let turn = agent.process_direct(text, session, progress.clone());
        tokio::pin!(turn);
        let outcome = loop {
            tokio::select! {
                outcome = &mut turn => break outcome,
                _ = tokio::signal::ctrl_c() => {
                    // Stop the turn; its finished tool steps are kept.
                    agent.stop(session);
                }
            }
        };
        progress.stop();
        print_sent_messages(&agent.core().bus)?;
        match outcome {
            TurnOutcome::Done(ctx) => {
                if let Some(reply) = ctx.outbound {
                    outln!("chitin › {}\n", for_terminal(&reply.content))?;
                }
            }
            TurnOutcome::Cancelled => errln!("(stopped; finished tool steps are kept)\n"),
            TurnOutcome::Failed(e) => errln!("error: {}\n", for_terminal(&e.to_string())),
        }
        std::io::stdout().flush().context("writing to stdout")?;
    }
    late.abort();
    let _ = editor.save_history(&history);
    if let Some(manager) = &agent.core().subagents {
        manager.cancel_all();
    }
    agent.core().tasks.close();
    agent.core().tasks.wait().await;
    agent.core().sessions.sync().context("syncing the session")?;
    if let Some(inbox) = agent.core().bus.inbox() {
        inbox.sync().context("syncing the inbox")?;
    }
    Ok(std::process::ExitCode::SUCCESS)
}

/// Between turns, what arrives on the bus for this process is a background
/// subagent's result (a `system` message; while a turn runs, that turn
/// takes it instead) or a message a stopped turn left unhandled: each is
/// handled as the gateway handles it, as a turn of its own (under the same
/// session lock as the chat's turns), and its reply is printed as it comes,
/// not only when the user types again.
async fn late_results(agent: AgentLoop, mut printer: Option<Box<dyn ExternalPrinter + Send>>) {
    while let Some(message) = agent.core().bus.consume_inbound().await {
        let outcome = agent.process_accepted(message, chitin::agent::sink::silent()).await;
        let text = match outcome {
            TurnOutcome::Done(ctx) => match ctx.outbound {
                Some(reply) => format!("chitin › {}\n", for_terminal(&reply.content)),
                None => continue,
            },
            TurnOutcome::Cancelled => continue,
            TurnOutcome::Failed(e) => format!("error: {}\n", for_terminal(&e.to_string())),
        };
        match printer.as_mut() {
            Some(printer) => {
                if let Err(e) = printer.print(text) {
                    tracing::warn!("printing a late result failed: {e}");
                }
            }
            None => {
                if outln!("{text}").is_err() {
                    return;
                }
            }
        }
    }
}
