//! Host-side bindings generated from the WIT, one module per package
//! version, side by side (as Zed's `since_v0_x` modules): [`v0_1`] from
//! `wit/chitin.wit`, [`v0_2`] from `wit/v0.2/`. The host links every version
//! it supports at once; which world a component implements is read from its
//! exports ([`super::world`]).
//!
//! Exports are async so a guest call can yield to tokio at every epoch tick;
//! the `host` imports are synchronous because they only record a line.

// Generated items take their docs from the WIT, and the WIT leaves many
// fields and variants undocumented (0.1.0 is released and never edited).
#[allow(missing_docs)]
pub mod v0_1;
#[allow(missing_docs)]
pub mod v0_2;
