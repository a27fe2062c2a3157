//! COMPACT: pick up what background idle compaction left on the session (its
//! last summary) for BUILD. No compaction work happens here.

use super::{TurnContext, TurnError, TurnEvent};
use crate::agent::core::AgentCore;

use crate::compact::last_summary;

pub(super) async fn run(_core: &AgentCore, ctx: &mut TurnContext) -> Result<TurnEvent, TurnError> {
    ctx.pending_summary = last_summary(ctx.session_mut()?);
    Ok(TurnEvent::Ok)
}
