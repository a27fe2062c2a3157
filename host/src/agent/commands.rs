//! Slash commands (spec §4 COMMAND): parsing, `/help` and `/status` texts.
//!
//! The engine knows its own commands ([`Command`]); a feature adds one by
//! registering a [`CommandHandler`] in the agent's [`CommandRegistry`]
//! (`/goal`, `/dream`, `/dream-log`, `/dream-restore`).

use std::sync::Arc;

use super::hooks::CommandHandler;
use crate::session::{LAST_PROMPT_TOKENS, LAST_PROMPT_TOKENS_BOUND, Session};

/// The engine's own commands.
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
}

/// The engine's commands with their one-line help, in `/help` order; the
/// registered ones come after `/status`, `/help` last.
pub const COMMANDS: &[(&str, Command, &str)] = &[
    ("new", Command::New, "start a new conversation (the old one is archived)"),
    ("stop", Command::Stop, "stop the running task and this chat's subagents; finished tool steps are kept"),
    ("status", Command::Status, "model, token and context use, session size, uptime, active tasks, running subagents, the goal"),
    ("help", Command::Help, "this list"),
];

/// The commands features registered, in registration order.
#[derive(Clone, Default)]
pub struct CommandRegistry {
    handlers: Vec<Arc<dyn CommandHandler>>,
}

impl CommandRegistry {
    /// Adds `handler`. A name the engine or an earlier handler has is
    /// refused (a feature cannot take over `/stop`).
    pub fn register(&mut self, handler: Arc<dyn CommandHandler>) -> Result<(), String> {
        let name = handler.name();
        if COMMANDS.iter().any(|(n, _, _)| *n == name) || self.get(name).is_some() {
            return Err(format!("the command /{name} exists already"));
        }
        self.handlers.push(handler);
        Ok(())
    }

    /// The handler of `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn CommandHandler>> {
        self.handlers.iter().find(|h| h.name() == name)
    }

    /// Every registered handler, in order.
    pub fn handlers(&self) -> impl Iterator<Item = &Arc<dyn CommandHandler>> {
        self.handlers.iter()
    }

    /// What `text` is: [`parse`], with the registered commands known too.
    pub fn parse(&self, text: &str) -> Parsed {
        parse_among(text, self)
    }

    /// The `/help` text.
    pub fn help_text(&self) -> String {
        let mut text = String::from("Commands:\n");
        let (last, first) = COMMANDS.split_last().expect("the engine has commands");
        let lines = first.iter().map(|(n, _, h)| (*n, *h)).chain(self.handlers.iter().map(|h| (h.name(), h.help()))).chain([(last.0, last.2)]);
        for (name, help) in lines {
            text.push_str(&format!("/{name} — {help}\n"));
        }
        text
    }
}

/// What a message is, as far as commands go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not a command: send it to the model.
    NotACommand,
    /// One of the engine's commands.
    Known(Command),
    /// A command a feature registered, by name.
    Registered(&'static str),
    /// `/something` we do not know, with the closest known name.
    Unknown {
        /// The name as typed, without the `/`.
        name: String,
        /// The closest known command, if one is close enough.
        suggestion: Option<&'static str>,
    },
}

/// Parses `/cmd`, `/cmd args` and `/cmd@botname` among the engine's
/// commands only (a registered one is [`Parsed::Unknown`] here: see
/// [`CommandRegistry::parse`]). A leading `/` followed by a path
/// (`/usr/bin ...`) is not a command.
pub fn parse(text: &str) -> Parsed {
    parse_among(text, &CommandRegistry::default())
}

fn parse_among(text: &str, registry: &CommandRegistry) -> Parsed {
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
    if let Some((_, command, _)) = COMMANDS.iter().find(|(n, _, _)| *n == lower) {
        return Parsed::Known(*command);
    }
    if let Some(handler) = registry.get(&lower) {
        return Parsed::Registered(handler.name());
    }
    // In `/help` order, so a tie goes to the command listed first.
    let (last, first) = COMMANDS.split_last().expect("the engine has commands");
    let names = first.iter().map(|(n, _, _)| *n).chain(registry.handlers.iter().map(|h| h.name())).chain([last.0]);
    let suggestion = names.map(|n| (n, strsim::damerau_levenshtein(&lower, n))).filter(|(_, d)| *d <= 2).min_by_key(|(_, d)| *d).map(|(n, _)| n);
    Parsed::Unknown { name: name.to_string(), suggestion }
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
    pub goal: Option<crate::agent::goal::Goal>,
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
        Some(goal) => format!("\n{}", crate::agent::goal::describe(goal)),
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
    use crate::agent::hooks::{CommandCall, CommandReply};

    struct Named(&'static str);

    impl CommandHandler for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn help(&self) -> &'static str {
            "test"
        }
        fn handle(&self, _: CommandCall<'_>) -> Result<CommandReply, crate::agent::turn::TurnError> {
            Ok(CommandReply::Reply(String::new()))
        }
    }

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
        assert_eq!(parse("/goal write the report"), Parsed::Unknown { name: "goal".into(), suggestion: None }, "not an engine command");
        let mut registry = CommandRegistry::default();
        registry.register(Arc::new(Named("goal"))).unwrap();
        assert_eq!(registry.parse("/goal write the report"), Parsed::Registered("goal"));
        assert_eq!(registry.parse("/gaol"), Parsed::Unknown { name: "gaol".into(), suggestion: Some("goal") });
        assert!(registry.register(Arc::new(Named("stop"))).unwrap_err().contains("/stop exists"), "a feature cannot take over /stop");
        assert!(registry.register(Arc::new(Named("goal"))).is_err());
        assert!(registry.help_text().contains("/status — model") && registry.help_text().ends_with("/goal — test\n/help — this list\n"));
        assert_eq!(args("  /goal   write the report \n"), "write the report");
        assert_eq!(args("/goal"), "");
        assert_eq!(args("/goal@bot ship it"), "ship it");
    }
}
