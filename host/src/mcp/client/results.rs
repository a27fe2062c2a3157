//! What an MCP tool returns, as text for the model: every content kind
//! described, the whole bounded by the plugin output cap, secret values
//! redacted, control characters made harmless, as plugin output is.

use serde_json::Value;

/// A result's text: the content blocks in order, one per paragraph; the
/// structured content when there is no text. `redact` removes secret values
/// (a server may reflect its token).
pub fn to_text(result: &rmcp::model::CallToolResult, cap: usize, redact: &dyn Fn(&str) -> String) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut size = 0usize;
    for block in &result.content {
        // Past the cap nothing more is read: the rest is named, not kept.
        if size > cap {
            parts.push(format!("[{} more content blocks left out]", result.content.len() - parts.len()));
            break;
        }
        let value = serde_json::to_value(block).unwrap_or(Value::Null);
        let part = describe(&value);
        size += part.len();
        parts.push(part);
    }
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    let text = redact(&parts.join("\n\n"));
    let bounded = crate::text::clip(&text, cap, "MCP tool result");
    crate::text::for_terminal(&bounded).into_owned()
}

/// One content block (`text`, `image`, `audio`, `resource`,
/// `resource_link`), as JSON.
fn describe(block: &Value) -> String {
    let str_of = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    match block.get("type").and_then(Value::as_str).unwrap_or_default() {
        "text" => str_of(block, "text"),
        kind @ ("image" | "audio") => {
            let data = block.get("data").and_then(Value::as_str).map_or(0, |d| d.len() * 3 / 4);
            format!("[{kind}: {}, {data} bytes, not shown]", str_of(block, "mimeType"))
        }
        "resource" => {
            let resource = block.get("resource").cloned().unwrap_or(Value::Null);
            let uri = str_of(&resource, "uri");
            match resource.get("text").and_then(Value::as_str) {
                Some(text) => format!("[resource {uri}]\n{text}"),
                None => {
                    let blob = resource.get("blob").and_then(Value::as_str).map_or(0, |d| d.len() * 3 / 4);
                    format!("[resource {uri}: {}, {blob} bytes, not shown]", str_of(&resource, "mimeType"))
                }
            }
        }
        "resource_link" => format!("[resource link: {} {}]", str_of(block, "uri"), str_of(block, "name")),
        other => format!("[{other} content, not shown]"),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn result(value: Value) -> rmcp::model::CallToolResult {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn every_kind_is_described_bounded_redacted_and_safe() {
        let r = result(json!({"content": [
            {"type": "text", "text": "hello \u{1b}[31mred token-123"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "file:///a", "text": "inside"}},
            {"type": "resource_link", "uri": "file:///b", "name": "b"}
        ]}));
        let text = to_text(&r, 10_000, &|t| t.replace("token-123", "{{secret:token}}"));
        assert!(text.contains("hello") && !text.contains('\u{1b}'), "{text:?}");
        assert!(text.contains("{{secret:token}}") && !text.contains("token-123"));
        assert!(text.contains("[image: image/png, 3 bytes, not shown]"), "{text}");
        assert!(text.contains("[resource file:///a]\ninside") && text.contains("[resource link: file:///b b]"), "{text}");
        let big = result(json!({"content": [{"type": "text", "text": "x".repeat(50_000)}]}));
        assert!(to_text(&big, 1_000, &|t| t.to_string()).len() < 1_200);
        let structured = result(json!({"content": [], "structuredContent": {"sum": 3}}));
        assert_eq!(to_text(&structured, 100, &|t| t.to_string()), "{\"sum\":3}");
    }
}
