//! Host-side bindings generated from the WIT, one module per package
//! version, side by side (as Zed's `since_v0_x` modules): [`v0_1`] from
//! `wit/chitin.wit`, [`v0_2`] from `wit/v0.2/`. The host links every version
//! it supports at once; which world a component implements is read from its
//! exports ([`super::world`]).
//!
//! Exports are async so a guest call can yield to tokio at every epoch tick;
//! the `host` imports are synchronous because they only record a line.

pub mod v0_1;
pub mod v0_2;
