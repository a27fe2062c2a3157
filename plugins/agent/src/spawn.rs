//! The `spawn` tool: arguments in, `agents.spawn` request out, and the
//! answer worded for the model (nanobot's `Subagent [label] started (id: …)`).

use serde::Deserialize;

/// The tool's arguments (already validated against the schema by the host).
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct SpawnArgs {
    pub task: String,
    #[serde(default)]
    pub label: Option<String>,
    #[serde(default)]
    pub wait: bool,
}

impl SpawnArgs {
    /// Parses `args_json`; the error is for the model.
    pub fn parse(args_json: &str) -> Result<SpawnArgs, String> {
        serde_json::from_str(args_json).map_err(|e| format!("invalid arguments for spawn: {e}"))
    }
}

/// The answer for a background spawn.
pub fn started_text(label: &str, id: &str) -> String {
    format!("Subagent [{label}] started (id: {id}). I'll notify you when it completes.")
}

/// How an inline (`wait`) subagent ended, from the host's state name.
pub fn waited_text(label: &str, state: &str, answer: Option<&str>) -> String {
    let answer = answer.unwrap_or("(no answer)");
    match state {
        "completed" => answer.to_string(),
        "cancelled" => format!("Subagent [{label}] was stopped before it finished."),
        _ => format!("Subagent [{label}] failed: {answer}"),
    }
}

/// The answer of the `subagents` tool: `(label, id, elapsed ms)` of each
/// running subagent, one line each (as `/status` shows them).
pub fn status_text(running: &[(String, String, u64)]) -> String {
    if running.is_empty() {
        return "No subagents are running in this conversation.".to_string();
    }
    let mut text = format!("Subagents running: {}", running.len());
    for (label, id, elapsed_ms) in running {
        text.push_str(&format!("\n- [{label}] (id: {id}) running for {} s", elapsed_ms / 1000));
    }
    text
}

/// Whether a refusal from the host is the sandbox saying no (a `denied`
/// tool error) rather than a failed spawn.
pub fn is_denial(message: &str) -> bool {
    message.starts_with("capability not granted") || message.starts_with("a subagent may not spawn")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_with_defaults() {
        assert_eq!(SpawnArgs::parse(r#"{"task":"t"}"#).unwrap(), SpawnArgs { task: "t".into(), label: None, wait: false });
        let args = SpawnArgs::parse(r#"{"task":"t","label":"l","wait":true}"#).unwrap();
        assert!(args.wait && args.label.as_deref() == Some("l"));
        assert!(SpawnArgs::parse(r#"{"wait":true}"#).unwrap_err().contains("task"));
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_text(&[]), "No subagents are running in this conversation.");
        let text = status_text(&[("prices".into(), "ab12".into(), 61_500)]);
        assert_eq!(text, "Subagents running: 1\n- [prices] (id: ab12) running for 61 s");
    }

    #[test]
    fn answers() {
        assert_eq!(started_text("prices", "ab12"), "Subagent [prices] started (id: ab12). I'll notify you when it completes.");
        assert_eq!(waited_text("p", "completed", Some("42")), "42");
        assert!(waited_text("p", "cancelled", None).contains("stopped"));
        assert_eq!(waited_text("p", "failed", Some("boom")), "Subagent [p] failed: boom");
        assert!(is_denial("capability not granted: agents (…)") && !is_denial("Cannot spawn subagent: …"));
    }
}
