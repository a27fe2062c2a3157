//! COMPACT: pick up what background idle compaction left on the session (its
//! last summary) for BUILD. No compaction work happens here.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;

use crate::compact::LAST_SUMMARY;

pub async fn run(_core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    let session = ctx.session_mut()?;
    let summary = session.metadata.get(LAST_SUMMARY).and_then(|s| s.get("text").or(Some(s))).and_then(|s| s.as_str()).map(str::to_string);
    ctx.pending_summary = summary;
    Ok(TurnEvent::Ok)
}
