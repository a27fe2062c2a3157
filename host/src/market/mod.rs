//! The plugin marketplace: installing third-party plugins from signed static
//! indexes without trusting them (see `../shared/spec/MARKETPLACE.md`).
//!
//! Read in this order:
//! - [`sign`]: minisign keys and signatures, and the signed comment that
//!   binds an artifact to its name, version and digest;
//! - [`index`]: the signed `index.json` (monotonic `version`, `expires`) and
//!   the last version seen of each index, which must never go down;
//! - [`fetch`]: reading an index or artifact from `https://`, `file://` (or
//!   plain `http://` on a loopback address), bounded in size and time;
//! - [`audit`]: what a component imports, mapped to capabilities and checked
//!   against its manifest, without running it;
//! - [`snapshot`]: the capabilities a user approves, in words, and what an
//!   update adds to them (an escalation);
//! - [`lock`]: `chitin.lock`, what is installed and what was approved;
//! - [`store`]: the content-addressed files `plugins/<name>/<sha256>.wasm`
//!   and loading them at start-up against the lock;
//! - [`install`]: the install pipeline, from a name to a locked component;
//! - [`publish`]: the publisher's tools: keys, signing, building an index.

pub mod audit;
mod error;
pub mod fetch;
pub mod index;
pub mod install;
pub mod lock;
pub mod publish;
pub mod sign;
pub mod snapshot;
pub mod store;

pub use error::MarketError;

/// The hex SHA-256 of `bytes`: the digest the index, the signed comment and
/// the lock name an artifact by.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}
