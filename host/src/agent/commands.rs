//! Slash commands (spec §4 COMMAND): parsing, `/help` and `/status` texts.

use crate::session::{LAST_PROMPT_TOKENS, LAST_PROMPT_TOKENS_BOUND, Session};

/// The built-in commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Archive and clear the session.
    New,
    /// Stop the running turn.
    Stop,
    /// Show model, usage and activity.
    Status,
    /// List commands.
    Help,
    /// Set the session's sustained goal (`/goal <task>`) or show it.
    Goal,
    /// Run Dream now (`agent::dream`).
    Dream,
    /// List Dream's recorded edits (`agent::dream::history`).
    DreamLog,
    /// Put back the versions a Dream run replaced (`/dream-restore <n>`).
    DreamRestore,
}

/// Every command with its one-line help.
pub const COMMANDS: &[(&str, Command, &str)] = &[
    ("new", Command::New, "start a new conversation (the old one is archived)"),
    ("stop", Command::Stop, "stop the running task and this chat's subagents; finished tool steps are kept"),
    ("status", Command::Status, "model, token and context use, session size, uptime, active tasks, running subagents, the goal"),
    ("goal", Command::Goal, "<task>: work on a long-running task until it is done; alone: show the goal"),
    ("dream", Command::Dream, "fold the conversation history archived since the last Dream into MEMORY.md, USER.md, SOUL.md and skills/"),
    ("dream-log", Command::DreamLog, "Dream's recorded edits: when, which files, lines added and removed"),
    ("dream-restore", Command::DreamRestore, "<n>: put back the versions Dream run n replaced (see /dream-log)"),
    ("help", Command::Help, "this list"),
];

/// What a message is, as far as commands go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not a command: send it to the model.
    NotACommand,
    /// A known command.
    Known(Command),
    /// `/something` we do not know, with the closest known name.
    Unknown { name: String, suggestion: Option<&'static str> },
}

/// Parses `/cmd`, `/cmd args` and `/cmd@botname`. A leading `/` followed by
/// a path (`/usr/bin ...`) is not a command.
pub fn parse(text: &str) -> Parsed {
    let Some(rest) = text.trim_start().strip_prefix('/') else { return Parsed::NotACommand };
    let word = rest.split_whitespace().next().unwrap_or_default();
    let name = word.split('@').next().unwrap_or_default();
    let looks_like_command = !name.is_empty()
        && name.chars().next().is_some_and(|c| c.is_ascii_alphabetic())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if !looks_like_command {
        return Parsed::NotACommand;
    }
    let lower = name.to_ascii_lowercase();
    match COMMANDS.iter().find(|(n, _, _)| *n == lower) {
        Some((_, command, _)) => Parsed::Known(*command),
        None => {
            let suggestion = COMMANDS
                .iter()
                .map(|(n, _, _)| (*n, strsim::damerau_levenshtein(&lower, n)))
                .filter(|(_, d)| *d <= 2)
                .min_by_key(|(_, d)| *d)
                .map(|(n, _)| n);
            Parsed::Unknown { name: name.to_string(), suggestion }
        }
    }
}

/// The text after the command word (`/goal write the report` → `write
/// the report`), trimmed.
pub fn args(text: &str) -> &str {
    let rest = text.trim_start().strip_prefix('/').unwrap_or_default();
    let word = rest.split_whitespace().next().unwrap_or_default();
    rest[word.len()..].trim()
}

/// True for commands answered without the session lock, even mid-turn.
pub fn is_priority(text: &str) -> bool {
    matches!(parse(text), Parsed::Known(Command::Stop | Command::Status))
}

/// The `/help` text.
pub fn help_text() -> String {
    let mut text = String::from("Commands:\n");
    for (name, _, help) in COMMANDS {
        text.push_str(&format!("/{name} — {help}\n"));
    }
    text
}

/// The reply to an unknown command.
pub fn unknown_text(name: &str, suggestion: Option<&str>) -> String {
    match suggestion {
        Some(s) => format!("Unknown command /{name}. Did you mean /{s}? Type /help for the list."),
        None => format!("Unknown command /{name}. Type /help for the list."),
    }
}

/// Facts for `/status`.
pub struct StatusFacts<'a> {
    /// Model name.
    pub model: &'a str,
    /// Provider name.
    pub provider: &'a str,
    /// Context window.
    pub context_window: usize,
    /// Seconds since start.
    pub uptime_secs: u64,
    /// Turns running now.
    pub active_tasks: usize,
    /// The session's goal (a running turn's, when one runs).
    pub goal: Option<crate::agent::goals::Goal>,
}

/// The `/status` text for `session`.
pub fn status_text(facts: &StatusFacts<'_>, session: &Session) -> String {
    let usage = session.metadata.get("usage");
    let field = |k: &str| usage.and_then(|u| u.get(k)).and_then(|v| v.as_u64()).unwrap_or(0);
    let last_prompt = session.metadata.get(LAST_PROMPT_TOKENS).and_then(|v| v.as_u64()).unwrap_or(0);
    let at_most = if session.metadata.contains_key(LAST_PROMPT_TOKENS_BOUND) { "at most " } else { "" };
    let percent = if facts.context_window > 0 { last_prompt as f64 * 100.0 / facts.context_window as f64 } else { 0.0 };
    let up = facts.uptime_secs;
    let goal = match &facts.goal {
        Some(goal) => format!("\n{}", crate::agent::goals::describe(goal)),
        None => String::new(),
    };
    format!(
        "Model: {} ({})\nTokens used in this session: {} prompt, {} completion\nContext: {}{} of {} tokens ({:.0}%)\nMessages in session: {} ({} archived)\nUptime: {}h {:02}m {:02}s\nActive tasks: {}{goal}",
        facts.model,
        facts.provider,
        field("prompt_tokens"),
        field("completion_tokens"),
        at_most,
        last_prompt,
        facts.context_window,
        percent,
        session.messages.len(),
        session.last_consolidated,
        up / 3600,
        (up % 3600) / 60,
        up % 60,
        facts.active_tasks,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_says_when_the_prompt_size_is_only_a_bound() {
        let facts = StatusFacts { model: "m", provider: "p", context_window: 1000, uptime_secs: 0, active_tasks: 0, goal: None };
        let mut session = Session::new("t:1");
        session.set_meta(LAST_PROMPT_TOKENS, Some(250.into()));
        assert!(status_text(&facts, &session).contains("Context: 250 of 1000 tokens (25%)"));
        session.set_meta(LAST_PROMPT_TOKENS_BOUND, Some(true.into()));
        assert!(status_text(&facts, &session).contains("Context: at most 250 of 1000 tokens (25%)"));
    }

    #[test]
    fn parsing() {
        assert_eq!(parse("/help"), Parsed::Known(Command::Help));
        assert_eq!(parse("  /STOP now"), Parsed::Known(Command::Stop));
        assert_eq!(parse("/status@chitin_bot"), Parsed::Known(Command::Status));
        assert_eq!(parse("hello /help"), Parsed::NotACommand);
        assert_eq!(parse("/usr/bin/env is where?"), Parsed::NotACommand);
        assert_eq!(parse("/stats"), Parsed::Unknown { name: "stats".into(), suggestion: Some("status") });
        assert_eq!(parse("/deploy"), Parsed::Unknown { name: "deploy".into(), suggestion: None });
        assert!(is_priority("/stop") && is_priority("/status") && !is_priority("/new"));
        assert_eq!(parse("/goal write the report"), Parsed::Known(Command::Goal));
        assert_eq!(args("  /goal   write the report \n"), "write the report");
        assert_eq!(args("/goal"), "");
        assert_eq!(args("/goal@bot ship it"), "ship it");
    }
}
