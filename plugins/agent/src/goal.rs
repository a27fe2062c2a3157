//! `create_goal` and `update_goal`: arguments in, `goals` requests out, and
//! the goal worded for the model. The host checks the texts and keeps the
//! goal on the session; this only maps.

use serde::Deserialize;

/// `create_goal` arguments.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct CreateArgs {
    pub objective: String,
    #[serde(default)]
    pub ui_summary: Option<String>,
}

/// `update_goal` actions, as the schema names them.
#[derive(Debug, Deserialize, PartialEq, Eq, Clone, Copy)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    Complete,
    Cancel,
    Block,
    Replace,
}

/// `update_goal` arguments.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct UpdateArgs {
    pub action: Action,
    #[serde(default)]
    pub recap: Option<String>,
    #[serde(default)]
    pub objective: Option<String>,
    #[serde(default)]
    pub ui_summary: Option<String>,
}

impl CreateArgs {
    pub fn parse(args_json: &str) -> Result<CreateArgs, String> {
        serde_json::from_str(args_json).map_err(|e| format!("invalid arguments for create_goal: {e}"))
    }
}

impl UpdateArgs {
    pub fn parse(args_json: &str) -> Result<UpdateArgs, String> {
        let args: UpdateArgs = serde_json::from_str(args_json).map_err(|e| format!("invalid arguments for update_goal: {e}"))?;
        if args.action == Action::Replace && args.objective.as_deref().is_none_or(|o| o.trim().is_empty()) {
            return Err("invalid arguments for update_goal: action `replace` needs `objective`".into());
        }
        Ok(args)
    }
}

/// The tool's answer: the goal as it now stands.
pub fn goal_text(status: &str, objective: &str, recap: Option<&str>) -> String {
    let mut text = match status {
        "active" => format!("Goal active: {objective}\nKeep working on it; call update_goal with action `complete` when it is done."),
        other => format!("Goal {other}: {objective}"),
    };
    if let Some(recap) = recap.filter(|r| !r.is_empty()) {
        text.push_str(&format!("\nRecap: {recap}"));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_and_replace_needs_an_objective() {
        assert_eq!(CreateArgs::parse(r#"{"objective":"x"}"#).unwrap(), CreateArgs { objective: "x".into(), ui_summary: None });
        assert!(CreateArgs::parse("{}").unwrap_err().contains("objective"));
        let u = UpdateArgs::parse(r#"{"action":"complete","recap":"done"}"#).unwrap();
        assert_eq!((u.action, u.recap.as_deref()), (Action::Complete, Some("done")));
        assert!(UpdateArgs::parse(r#"{"action":"replace"}"#).unwrap_err().contains("objective"));
        assert!(UpdateArgs::parse(r#"{"action":"finish"}"#).unwrap_err().contains("update_goal"));
    }

    #[test]
    fn answers_say_where_the_goal_stands() {
        assert!(goal_text("active", "ship", None).contains("update_goal"));
        assert_eq!(goal_text("complete", "ship", Some("shipped")), "Goal complete: ship\nRecap: shipped");
    }
}
