//! `echo-v2`: a tool plugin built against `chitin:plugin@0.2.0`
//! (`wit/v0.2`, world `tool-plugin`), so the host's tests can run a 0.2.0
//! tool beside 0.1.0 ones. Its one tool returns `0.2.0 <args-json>`.

wit_bindgen::generate!({ path: "../../../wit/v0.2", world: "tool-plugin" });

use exports::chitin::plugin::tool::{CallContext, Guest, ToolError};

#[used]
#[unsafe(link_section = "chitin:manifest")]
static MANIFEST: [u8; include_bytes!("../manifest.json").len()] = *include_bytes!("../manifest.json");

struct EchoV2;

impl Guest for EchoV2 {
    fn invoke(name: String, args_json: String, _ctx: CallContext) -> Result<String, ToolError> {
        match name.as_str() {
            "echo_v2" => Ok(format!("0.2.0 {args_json}")),
            other => Err(ToolError::UnknownTool(format!("no tool named {other:?}"))),
        }
    }
}

export!(EchoV2);
