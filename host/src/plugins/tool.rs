//! The tool world (`tool-plugin` of `chitin:plugin@0.1.0` and 0.2.0): one
//! tool call in a fresh instance, whichever version the component was built
//! against. The two versions' interfaces are identical; each has its own
//! generated types, converted here, so the rest of the host sees one
//! [`CallContext`] and one [`PluginError`].

use super::bindings::{v0_1, v0_2};
use super::engine::TICK;
use super::error::Call;
use super::limits::Limits;
use super::runtime::{Failure, LoadedPlugin, MAX_ERROR_BYTES, PluginRuntime, Prepared};
use super::sandbox::ProgressSink;
use super::{PluginError, ToolFailure};

/// Identifies the conversation a call belongs to (the WIT `call-context`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallContext {
    /// `{channel}:{chat_id}` or an override.
    pub session_key: String,
    /// Channel name.
    pub channel: String,
    /// Chat id on the channel.
    pub chat_id: String,
    /// The model's tool-call id.
    pub call_id: String,
}

impl PluginRuntime {
    /// Runs `tool` of `plugin` with `args_json` in a fresh sandbox. The
    /// arguments must already be validated (see `tools::ToolRegistry`).
    pub async fn call(
        &self,
        plugin: &LoadedPlugin,
        tool: &str,
        args_json: &str,
        ctx: &CallContext,
        progress: Option<ProgressSink>,
    ) -> Result<String, PluginError> {
        self.call_in(plugin, tool, args_json, ctx, progress, None).await
    }

    /// [`PluginRuntime::call`] with `workspace` preopened instead of the
    /// runtime's (under the same grant): the host uses it to let a
    /// first-party component read one staged file, such as an attachment,
    /// without seeing anything else.
    pub async fn call_in(
        &self,
        plugin: &LoadedPlugin,
        tool: &str,
        args_json: &str,
        ctx: &CallContext,
        progress: Option<ProgressSink>,
        workspace: Option<&std::path::Path>,
    ) -> Result<String, PluginError> {
        if plugin.world.is_channel() {
            return Err(PluginError::WrongWorld { plugin: plugin.name().to_string(), world: plugin.world, wanted: "tools" });
        }
        let pre = self.prepared(plugin).await?;
        let _slot = self.slot().await;
        let read_only = plugin.manifest.tools.iter().any(|t| t.name == tool && t.read_only);
        let mut store = self.new_store_in(plugin, progress, read_only, workspace)?;
        store.data_mut().privileged.call = Some(ctx.clone());
        let clock = store.data().clock.clone();
        // Host calls (a sleeping guest, a slow HTTP response) do not advance
        // epochs, so the whole call also runs under a wall-clock timeout.
        let run = async {
            match pre {
                Prepared::ToolV0_1(pre) => {
                    let wit_ctx = v0_1::WitCallContext {
                        session_key: ctx.session_key.clone(),
                        channel: ctx.channel.clone(),
                        chat_id: ctx.chat_id.clone(),
                        call_id: ctx.call_id.clone(),
                    };
                    let instance = pre.instantiate_async(&mut store).await?;
                    let result = instance.chitin_plugin_tool().call_invoke(&mut store, tool, args_json, &wit_ctx).await?;
                    Ok(result.map_err(|e| match e {
                        v0_1::WitToolError::UnknownTool(m) => (ToolFailure::UnknownTool, m),
                        v0_1::WitToolError::InvalidArgs(m) => (ToolFailure::InvalidArgs, m),
                        v0_1::WitToolError::Failed(m) => (ToolFailure::Failed, m),
                        v0_1::WitToolError::Denied(m) => (ToolFailure::Denied, m),
                    }))
                }
                Prepared::ToolV0_2(pre) => {
                    let wit_ctx = v0_2::WitCallContext {
                        session_key: ctx.session_key.clone(),
                        channel: ctx.channel.clone(),
                        chat_id: ctx.chat_id.clone(),
                        call_id: ctx.call_id.clone(),
                    };
                    let instance = pre.instantiate_async(&mut store).await?;
                    let result = instance.chitin_plugin_tool().call_invoke(&mut store, tool, args_json, &wit_ctx).await?;
                    Ok(result.map_err(|e| match e {
                        v0_2::WitToolError::UnknownTool(m) => (ToolFailure::UnknownTool, m),
                        v0_2::WitToolError::InvalidArgs(m) => (ToolFailure::InvalidArgs, m),
                        v0_2::WitToolError::Failed(m) => (ToolFailure::Failed, m),
                        v0_2::WitToolError::Denied(m) => (ToolFailure::Denied, m),
                    }))
                }
                // Refused above; kept as an error, never a panic.
                Prepared::ChannelV0_2(_) => Err(wasmtime::Error::msg("a channel plugin has no tools")),
            }
        };
        let outcome = super::sandbox::timeout_with_pauses(self.limits().timeout() + TICK, &clock, run).await;
        let call = Call::Tool(tool.to_string());
        match self.settle(plugin, &call, outcome, &store)? {
            Err((kind, message)) => Err(guest_error(kind, message, self.limits())),
            Ok(text) if text.len() > self.limits().max_output_bytes() => {
                Err(Failure::OutputTooLarge(text.len()).into_error(plugin.name(), call, self.limits()))
            }
            Ok(text) => Ok(text),
        }
    }

}

/// The guest's own error, cut to [`MAX_ERROR_BYTES`] (and the output cap)
/// with a marker, and made safe to show.
fn guest_error(kind: ToolFailure, message: String, limits: &Limits) -> PluginError {
    let cap = MAX_ERROR_BYTES.min(limits.max_output_bytes());
    let message = crate::text::clip_for_terminal(&message, cap, "error");
    PluginError::Tool { kind, message }
}
