//! Exactly one reply per accepted message: the durable inbox and outbox.
//!
//! Every message the host accepts (a channel's, the web chat's, an API
//! request's, a cron job's, a subagent's result) gets an id and a row in
//! [`Inbox`] **before** it is published on the bus: `accepted → running →
//! done`. The reply is recorded in the same log line that marks the row done
//! (the *outbox*), before it is handed to delivery; a channel marks it
//! delivered once the platform took it. On start the gateway (and the
//! interactive `chitin agent`) resumes every row not done and re-sends every
//! reply not delivered (`AgentLoop::recover`).
//!
//! # Shape, and what the cluster maps it onto
//! This is the embedded implementation of the seam in
//! `../shared/spec/SCALE_OUT.md` §6 and §9: an [`InboxRef`] rides on the
//! inbound message (`_inbox_id`), the turn commits with
//! `AgentCore::commit_turn(session, Option<InboxRef>, Option<&OutboundMessage>)`,
//! which saves the session (`SessionStore::commit_turn`) and then writes the
//! inbox row `done` with its outbox reply. PostgreSQL makes both one
//! transaction; here they are two writes, made safe by stamping the reply
//! into the session first (`answered_inbox`): a crash between the two is
//! finished on start from the session, without running the turn again.
//!
//! # Why an append-only log
//! A transition is one `write(2)` of one short JSON line to a file opened
//! with `O_APPEND` (measured in `--bench agent`: a few microseconds), not a
//! file rewrite per transition. The log is folded and compacted (temp file,
//! `fsync`, rename, `fsync` of the directory) when it is opened, and again
//! when it grows past [`COMPACT_AFTER_BYTES`]. A torn last line (a crash in
//! the middle of a write) is skipped on load like any unreadable line.
//!
//! # fsync policy
//! [`FsyncPolicy::Batch`] (the default): each transition reaches the kernel
//! before the step that depends on it goes on (publish, delivery), so it
//! survives the death of the process (`kill -9`, a panic, the OOM killer);
//! a background thread `fdatasync`s the log at most [`BATCH_SYNC`] after a
//! write, and shutdown syncs it, so a power loss or kernel crash can lose
//! at most the last second of transitions. [`FsyncPolicy::Always`] syncs
//! every transition before returning (power-loss safe, one disk flush per
//! transition).

pub mod crash;
mod inbox;

pub use inbox::{
    Accepted, BATCH_SYNC, COMPACT_AFTER_BYTES, DEDUP_TTL_HOURS, FsyncPolicy, INBOX_ID, Inbox, InboxError, InboxRef, MAX_ATTEMPTS, Row, RowState,
};
