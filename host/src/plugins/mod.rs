//! Plugins: untrusted WebAssembly components that provide tools and chat
//! channels.
//!
//! This module is the only one that knows wasmtime. Read it in this order:
//! - [`manifest`]: what a component declares (read without running it);
//! - [`grants`]: what the user's config lets it have;
//! - [`configured`]: a tool plugin's secrets, `api_base` and settings from
//!   its `[plugins.<name>]` table;
//! - [`limits`]: per-call resource caps;
//! - [`engine`] and [`cache`]: the shared engine and compiled-component cache;
//! - [`sandbox`] and [`http`]: the per-call store, WASI context and HTTP policy;
//! - [`secrets`] and [`redact`]: placeholders filled in on the way out,
//!   values written back as placeholders on the way in;
//! - [`services`]: the privileged host interfaces (`messaging`, ...) and the
//!   seam the agent serves them through;
//! - [`world`] and [`bindings`]: which world a component implements, and the
//!   bindings of each package version, side by side;
//! - [`runtime`]: loading and preparing, the per-call store and failures;
//! - [`tool`]: calling a tool (0.1.0 and 0.2.0 components);
//! - [`channel`]: calling a channel component, and the bounds on its steps;
//! - [`catalog`]: the set of plugins a process runs with (built-in,
//!   installed, given on the command line).

pub mod bindings;
pub mod channel;
pub mod cache;
pub mod catalog;
pub mod compile;
pub mod configured;
pub mod engine;
mod error;
mod guest_errors;
pub mod grants;
pub mod http;
pub mod limits;
pub mod manifest;
pub mod redact;
pub mod runtime;
pub mod sandbox;
pub mod secrets;
pub mod services;
pub mod tool;
pub mod warn_budget;
pub mod world;

pub use catalog::{BUILTIN_PLUGINS, Builtin, PluginCatalog, builtin};
pub use error::{Call, ChannelFailure, PluginError, ToolFailure};
pub use grants::{Grant, GrantConfig};
pub use limits::Limits;
pub use manifest::{Manifest, ToolSpec, WorkspaceAccess};
pub use runtime::{CallContext, ComponentBytes, LoadedPlugin, PluginRuntime, PluginSource, RuntimeConfig};
pub use sandbox::ProgressSink;
pub use services::{Delivery, GoalAction, GoalStatus, GoalUpdate, GoalView, HostInterface, HostServices, JobRequest, JobView, SendRequest, When};
