//! The publisher's and index operator's side of the marketplace: making a
//! signing key, signing a packed component (the signed comment binds its
//! name, version and digest), and building a static index directory
//! (`index.json`, `artifacts/`, `index.json.minisig`): add a signed
//! component, yank a version, raise the version and sign the index.
//!
//! The binary only glues: `chitin plugin keygen | sign | index` parse their
//! arguments, read the password from [`sign::PASSWORD_VAR`] and print what
//! these functions return.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};

use super::index::{self, Index, IndexPlugin, IndexVersion, PublisherConfig};
use super::install::check_artifact;
use super::{MarketError, audit, sha256_hex, sign};
use crate::plugins::manifest::ManifestError;
use crate::plugins::world::World;
use crate::plugins::Manifest;

/// Why a publisher tool failed. The messages read as the context chain of
/// the failure (`cannot read FILE: <the I/O error>`).
#[derive(Debug, thiserror::Error)]
// Each variant's fields are named and explained by its #[error] message.
#[allow(missing_docs)]
pub enum PublishError {
    /// `keygen` found a key file in its way.
    #[error("{} exists; keygen never overwrites a key", .0.display())]
    KeyExists(PathBuf),
    /// minisign could not make a key pair.
    #[error("cannot generate a key: {0}")]
    Generate(String),
    /// A file could not be read, written or created.
    #[error("{context}")]
    Io {
        context: String,
        #[source]
        error: std::io::Error,
    },
    /// The file is not a packed component.
    #[error("{context}")]
    Component {
        context: String,
        #[source]
        error: ManifestError,
    },
    /// `index.json` does not parse.
    #[error("{context}")]
    IndexFormat {
        context: String,
        #[source]
        error: serde_json::Error,
    },
    /// The index could not be serialised.
    #[error(transparent)]
    Encode(serde_json::Error),
    /// A refusal with its own message (a bad key, a taken name, a failed
    /// write or audit).
    #[error("{0}")]
    Refused(String),
    /// What a user's install would refuse (the signature, the digest).
    #[error(transparent)]
    Market(#[from] MarketError),
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> PublishError {
    move |error| PublishError::Io { context, error }
}

/// A key pair `keygen` wrote.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// `PREFIX.key`, mode 0600.
    pub secret_path: PathBuf,
    /// `PREFIX.pub`.
    pub public_path: PathBuf,
    /// The public key's id (16 hex digits).
    pub id: String,
    /// The public key line (`RW...`), what users pin.
    pub public: String,
}

/// Writes `PREFIX.key` and `PREFIX.pub`, a minisign key pair whose secret
/// key is protected by `password` (unprotected when empty). Never
/// overwrites a key.
pub fn keygen(prefix: &Path, password: &str) -> Result<NewKey, PublishError> {
    let secret_path = prefix.with_extension("key");
    let public_path = prefix.with_extension("pub");
    for path in [&secret_path, &public_path] {
        if path.exists() {
            return Err(PublishError::KeyExists(path.clone()));
        }
    }
    let (public, secret) = sign::generate(password).map_err(PublishError::Generate)?;
    let id = sign::key_id(&public).unwrap_or_default();
    write_private(&secret_path, secret.as_bytes())?;
    std::fs::write(&public_path, format!("untrusted comment: minisign public key {id}\n{public}\n")).map_err(io(format!("cannot write {}", public_path.display())))?;
    Ok(NewKey { secret_path, public_path, id, public })
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PublishError> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(path).map_err(io(format!("cannot create {}", path.display())))?;
    file.write_all(bytes).map_err(io(format!("cannot write {}", path.display())))?;
    Ok(())
}

/// A component `sign_file` signed.
#[derive(Debug, Clone)]
pub struct SignedFile {
    /// The manifest's name and version, bound by the signed comment.
    pub name: String,
    /// The manifest's version.
    pub version: String,
    /// The component's SHA-256, bound too.
    pub sha256: String,
    /// The id of the key that signed.
    pub key_id: String,
    /// Where the signature was written.
    pub signature_path: PathBuf,
}

/// Signs `file` (a packed component) with the secret key `key`: writes
/// `FILE.minisig` (or `output`), whose signed comment binds the manifest's
/// name and version and the digest.
pub fn sign_file(file: &Path, key: &Path, output: Option<&Path>, password: &str) -> Result<SignedFile, PublishError> {
    let bytes = std::fs::read(file).map_err(io(format!("cannot read {}", file.display())))?;
    let manifest = Manifest::from_component(&bytes).map_err(|error| PublishError::Component { context: format!("{} (pack it first: `chitin plugin pack`)", file.display()), error })?;
    let sha256 = sha256_hex(&bytes);
    let comment = sign::artifact_comment(&manifest.name, &manifest.version, &sha256);
    let signature = sign::sign(key, password, &bytes, &comment)?;
    let out = output.map(Path::to_path_buf).unwrap_or_else(|| signature_path(file));
    std::fs::write(&out, &signature).map_err(io(format!("cannot write {}", out.display())))?;
    Ok(SignedFile { name: manifest.name, version: manifest.version, sha256, key_id: sign::signature_key_id(&signature).unwrap_or_default(), signature_path: out })
}

/// Where a component's signature is kept: `FILE.minisig`.
pub fn signature_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".minisig");
    PathBuf::from(name)
}

/// The index document in `dir`, or an empty one when there is none yet.
pub fn load_index_doc(dir: &Path) -> Result<Index, PublishError> {
    let path = dir.join("index.json");
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|error| PublishError::IndexFormat { context: format!("{} is not a valid index", path.display()), error }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Ok(Index { schema: index::SCHEMA, name: String::new(), version: 0, expires: Utc::now(), publishers: BTreeMap::new(), plugins: BTreeMap::new() })
        }
        Err(e) => Err(io(format!("cannot read {}", path.display()))(e)),
    }
}

/// Writes `index` to `dir/index.json` (atomically); returns the bytes
/// written, which are what the index signature covers.
pub fn save_index_doc(dir: &Path, index: &Index) -> Result<Vec<u8>, PublishError> {
    let path = dir.join("index.json");
    let mut bytes = serde_json::to_vec_pretty(index).map_err(PublishError::Encode)?;
    bytes.push(b'\n');
    crate::fsutil::write_atomic(&path, &bytes).map_err(|(step, e)| PublishError::Refused(format!("cannot write {}: {step}: {e}", path.display())))?;
    Ok(bytes)
}

/// A component `index_add` listed.
#[derive(Debug, Clone)]
pub struct Added {
    /// The plugin's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// Its path under the index directory (`artifacts/NAME-VERSION.wasm`).
    pub artifact: String,
}

/// Adds the signed component `file` (its signature at `FILE.minisig`) to
/// the index in `dir`: copies it to `dir/artifacts/` and records its
/// digest, size, world, capabilities, imports and signature under
/// `publisher`, whose key (`publisher_key`: a `.pub` file or a key line)
/// is recorded too. The index refuses what its users would refuse.
pub fn index_add(dir: &Path, file: &Path, publisher: &str, publisher_key: &str, description: &str) -> Result<Added, PublishError> {
    let bytes = std::fs::read(file).map_err(io(format!("cannot read {}", file.display())))?;
    let manifest = Manifest::from_component(&bytes).map_err(|error| PublishError::Component { context: format!("{}", file.display()), error })?;
    let world = World::detect(&bytes).map_err(|error| PublishError::Component { context: format!("{}", file.display()), error })?;
    let found = audit::audit(&bytes, &manifest).map_err(|e| PublishError::Refused(format!("{}: import audit failed: {e}", file.display())))?;
    let sig_path = signature_path(file);
    let signature = std::fs::read_to_string(&sig_path).map_err(io(format!("cannot read {} (sign it first: `chitin plugin sign`)", sig_path.display())))?;
    let key = match std::fs::read_to_string(publisher_key) {
        Ok(text) => text.lines().rfind(|l| !l.trim().is_empty()).unwrap_or_default().trim().to_string(),
        Err(_) => publisher_key.trim().to_string(),
    };
    if sign::key_id(&key).is_none() {
        return Err(PublishError::Refused(format!("--publisher-key: `{publisher_key}` is neither a minisign public key file nor a key")));
    }
    let sha256 = sha256_hex(&bytes);
    // The index refuses to list what its users would refuse.
    check_artifact(&manifest.name, &manifest.version, publisher, std::slice::from_ref(&key), &bytes, &sha256, &signature)?;
    std::fs::create_dir_all(dir.join("artifacts")).map_err(io(format!("cannot create {}", dir.join("artifacts").display())))?;
    let artifact = format!("artifacts/{}-{}.wasm", manifest.name, manifest.version);
    std::fs::write(dir.join(&artifact), &bytes).map_err(io(format!("cannot write {}", dir.join(&artifact).display())))?;
    let mut index = load_index_doc(dir)?;
    let keys = &mut index.publishers.entry(publisher.to_string()).or_insert_with(PublisherConfig::default).keys;
    if !keys.contains(&key) {
        keys.push(key);
    }
    let entry = index.plugins.entry(manifest.name.clone()).or_insert_with(|| IndexPlugin { publisher: publisher.into(), description: String::new(), versions: Vec::new() });
    if entry.publisher != publisher {
        return Err(PublishError::Refused(format!("{} is published by `{}` in this index, not `{publisher}`", manifest.name, entry.publisher)));
    }
    if !description.is_empty() || entry.description.is_empty() {
        entry.description = if description.is_empty() { manifest.description.lines().next().unwrap_or("").to_string() } else { description.to_string() };
    }
    entry.versions.retain(|v| v.version != manifest.version);
    entry.versions.push(IndexVersion {
        version: manifest.version.clone(),
        world: format!("chitin:plugin/{world}"),
        artifact: index::Artifact { url: artifact.clone(), sha256, size: bytes.len() as u64 },
        signature,
        capabilities: manifest.capabilities.clone(),
        imports: found.families.into_iter().collect(),
        yanked: false,
    });
    save_index_doc(dir, &index)?;
    Ok(Added { name: manifest.name, version: manifest.version, artifact })
}

/// Marks `name` `version` in the index in `dir` as withdrawn: it is never
/// installed.
pub fn index_yank(dir: &Path, name: &str, version: &str) -> Result<(), PublishError> {
    let mut index = load_index_doc(dir)?;
    let Some(entry) = index.plugins.get_mut(name).and_then(|p| p.versions.iter_mut().find(|v| v.version == version)) else {
        return Err(PublishError::Refused(format!("{name} {version} is not in {}", dir.join("index.json").display())));
    };
    entry.yanked = true;
    save_index_doc(dir, &index)?;
    Ok(())
}

/// An index `index_sign` signed.
#[derive(Debug, Clone)]
pub struct SignedIndex {
    /// Its new version.
    pub version: u64,
    /// When it expires.
    pub expires: DateTime<Utc>,
    /// The id of the key that signed.
    pub key_id: String,
}

/// Names the index in `dir` `name`, raises its version, sets it to expire
/// in `expires_days` and signs `index.json` with `key` (writes
/// `index.json.minisig`).
pub fn index_sign(dir: &Path, key: &Path, name: &str, expires_days: i64, password: &str) -> Result<SignedIndex, PublishError> {
    let mut index = load_index_doc(dir)?;
    index.name = name.to_string();
    index.version += 1;
    index.expires = Utc::now() + chrono::Duration::days(expires_days);
    let bytes = save_index_doc(dir, &index)?;
    let signature = sign::sign(key, password, &bytes, &sign::index_comment(name, index.version))?;
    let sig_path = dir.join("index.json.minisig");
    std::fs::write(&sig_path, &signature).map_err(io(format!("cannot write {}", sig_path.display())))?;
    Ok(SignedIndex { version: index.version, expires: index.expires, key_id: sign::signature_key_id(&signature).unwrap_or_default() })
}
