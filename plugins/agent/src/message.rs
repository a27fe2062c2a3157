//! The `message` tool: arguments in, `messaging.send` request out, and the
//! result worded for the model (nanobot's `Message sent to …`).

use serde::Deserialize;

/// The tool's arguments (already validated against the schema by the host).
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct MessageArgs {
    pub content: String,
    #[serde(default)]
    pub channel: Option<String>,
    #[serde(default)]
    pub chat_id: Option<String>,
    #[serde(default)]
    pub media: Vec<String>,
}

impl MessageArgs {
    /// Parses `args_json`; the error is for the model.
    pub fn parse(args_json: &str) -> Result<MessageArgs, String> {
        serde_json::from_str(args_json).map_err(|e| format!("invalid arguments for message: {e}"))
    }
}

/// The tool's answer for a delivered message.
pub fn sent_text(channel: &str, chat_id: &str, attachments: u32) -> String {
    match attachments {
        0 => format!("Message sent to {channel}:{chat_id}"),
        1 => format!("Message sent to {channel}:{chat_id} with 1 attachment"),
        n => format!("Message sent to {channel}:{chat_id} with {n} attachments"),
    }
}

/// Whether a refusal from the host is the sandbox saying no (a `denied`
/// tool error) rather than a failed send.
pub fn is_denial(message: &str) -> bool {
    message.starts_with("capability not granted") || message.starts_with("not allowed to send")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_parse_with_defaults() {
        let args = MessageArgs::parse(r#"{"content":"hi"}"#).unwrap();
        assert_eq!(args, MessageArgs { content: "hi".into(), channel: None, chat_id: None, media: vec![] });
        let args = MessageArgs::parse(r#"{"content":"x","channel":"telegram","chat_id":"5","media":["a.png"]}"#).unwrap();
        assert_eq!(args.media, ["a.png"]);
        assert!(MessageArgs::parse(r#"{"media":[]}"#).unwrap_err().contains("content"));
    }

    #[test]
    fn answers_name_the_target_and_attachments() {
        assert_eq!(sent_text("telegram", "1", 0), "Message sent to telegram:1");
        assert_eq!(sent_text("cli", "direct", 1), "Message sent to cli:direct with 1 attachment");
        assert_eq!(sent_text("web", "a", 3), "Message sent to web:a with 3 attachments");
        assert!(is_denial("capability not granted: messaging (…)"));
        assert!(!is_denial("nothing to send"));
    }
}
