//! minisign keys and signatures (Ed25519, compatible with the `minisign`
//! tool): verifying with `minisign-verify`, making keys and signatures for
//! publishers and index operators with `minisign`.
//!
//! A public key is pinned as its one-line base64 form (`RW...`), the second
//! line of a minisign `.pub` file. An artifact's signature carries the
//! trusted comment [`artifact_comment`], covered by the signature, so a
//! validly signed build cannot be relabelled as another plugin or version.

use std::path::Path;

use base64::Engine as _;

use super::MarketError;

/// The environment variable whose value protects a secret key (`keygen`)
/// and unlocks it (`sign`); unset or empty means an unprotected key.
pub const PASSWORD_VAR: &str = "CHITIN_SIGNING_PASSWORD";

/// The signed comment of an artifact signature.
pub fn artifact_comment(name: &str, version: &str, sha256: &str) -> String {
    format!("chitin-plugin name={name} version={version} sha256={sha256}")
}

/// The signed comment of an index signature.
pub fn index_comment(name: &str, version: u64) -> String {
    format!("chitin-index name={name} version={version}")
}

/// A public key's id, as `minisign` prints it (16 hex digits), or `None`
/// when `key` is not a minisign public key.
pub fn key_id(key: &str) -> Option<String> {
    let bytes = base64::engine::general_purpose::STANDARD.decode(key.trim()).ok()?;
    (bytes.len() == 42 && &bytes[..2] == b"Ed").then(|| id_hex(&bytes[2..10]))
}

/// The id of the key that made `signature` (a minisign signature file's text).
pub fn signature_key_id(signature: &str) -> Option<String> {
    let line = signature.lines().nth(1)?;
    let bytes = base64::engine::general_purpose::STANDARD.decode(line.trim()).ok()?;
    (bytes.len() == 74).then(|| id_hex(&bytes[2..10]))
}

/// minisign prints the 8 key-number bytes as a little-endian u64.
fn id_hex(keynum: &[u8]) -> String {
    keynum.iter().rev().map(|b| format!("{b:02X}")).collect()
}

/// A signature that verified: which key, and the comment it signs.
#[derive(Debug, Clone)]
pub struct Verified {
    /// The id of the pinned key that verified it.
    pub key_id: String,
    /// The pinned key itself.
    pub key: String,
    /// The trusted comment, covered by the signature.
    pub trusted_comment: String,
}

/// Why a signature did not verify with any of the keys.
#[derive(Debug, Clone)]
pub enum VerifyError {
    /// No pinned key has the id of the key that signed.
    NoSuchKey {
        /// The id of the key that signed.
        signed_by: String,
    },
    /// The key matched but the signature does not verify, or is malformed.
    Invalid {
        /// The id of the key tried.
        key_id: String,
        /// Why it did not verify.
        message: String,
    },
}

impl std::fmt::Display for VerifyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            VerifyError::NoSuchKey { signed_by } => write!(f, "it was signed by key {signed_by}"),
            VerifyError::Invalid { key_id, message } => write!(f, "the signature by key {key_id} does not verify ({message})"),
        }
    }
}

/// Verifies `signature` (minisign text) over `data` with whichever of `keys`
/// has the signing key's id. Only prehashed (current minisign) signatures
/// are accepted.
pub fn verify(keys: &[String], data: &[u8], signature: &str) -> Result<Verified, VerifyError> {
    let signed_by = signature_key_id(signature).unwrap_or_else(|| "(unreadable)".into());
    let sig = minisign_verify::Signature::decode(signature)
        .map_err(|e| VerifyError::Invalid { key_id: signed_by.clone(), message: format!("not a minisign signature: {e}") })?;
    let Some(key) = keys.iter().find(|k| key_id(k).as_deref() == Some(signed_by.as_str())) else {
        return Err(VerifyError::NoSuchKey { signed_by });
    };
    let public = minisign_verify::PublicKey::from_base64(key.trim())
        .map_err(|e| VerifyError::Invalid { key_id: signed_by.clone(), message: format!("pinned key is not a minisign public key: {e}") })?;
    public.verify(data, &sig, false).map_err(|e| VerifyError::Invalid { key_id: signed_by.clone(), message: e.to_string() })?;
    Ok(Verified { key_id: signed_by, key: key.trim().to_string(), trusted_comment: sig.trusted_comment().to_string() })
}

/// A new key pair: (public key line, secret key file text), the secret key
/// protected by `password` (empty: unprotected).
pub fn generate(password: &str) -> Result<(String, String), String> {
    let pair = minisign::KeyPair::generate_encrypted_keypair(Some(password.to_string())).map_err(|e| e.to_string())?;
    let secret = pair.sk.to_box(Some("chitin signing key (secret)")).map_err(|e| e.to_string())?.to_string();
    Ok((pair.pk.to_base64(), secret))
}

/// Signs `data` with the secret key file at `key_path`, with the trusted
/// comment `comment`; returns the signature file's text.
pub fn sign(key_path: &Path, password: &str, data: &[u8], comment: &str) -> Result<String, MarketError> {
    let text = std::fs::read_to_string(key_path).map_err(MarketError::io(key_path))?;
    let err = |message: String| MarketError::Key { path: key_path.to_path_buf(), message };
    let secret_box = minisign::SecretKeyBox::from_string(&text).map_err(|e| err(format!("not a minisign secret key: {e}")))?;
    let secret = minisign::SecretKey::from_box(secret_box, Some(password.to_string()))
        .map_err(|e| err(format!("cannot unlock the secret key ({e}); is {PASSWORD_VAR} right?")))?;
    let public = minisign::PublicKey::from_secret_key(&secret).map_err(|e| err(e.to_string()))?;
    let signature = minisign::sign(Some(&public), &secret, std::io::Cursor::new(data), Some(comment), Some("chitin signature"))
        .map_err(|e| err(format!("cannot sign: {e}")))?;
    Ok(signature.to_string())
}

/// The public key line of the secret key file at `key_path`.
pub fn public_of(key_path: &Path, password: &str) -> Result<String, MarketError> {
    let text = std::fs::read_to_string(key_path).map_err(MarketError::io(key_path))?;
    let err = |message: String| MarketError::Key { path: key_path.to_path_buf(), message };
    let secret_box = minisign::SecretKeyBox::from_string(&text).map_err(|e| err(format!("not a minisign secret key: {e}")))?;
    let secret = minisign::SecretKey::from_box(secret_box, Some(password.to_string()))
        .map_err(|e| err(format!("cannot unlock the secret key ({e}); is {PASSWORD_VAR} right?")))?;
    Ok(minisign::PublicKey::from_secret_key(&secret).map_err(|e| err(e.to_string()))?.to_base64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signature_verifies_with_its_key_only_and_carries_its_comment() {
        let dir = tempfile::tempdir().unwrap();
        let (public, secret) = generate("").unwrap();
        let (other, _) = generate("").unwrap();
        let key = dir.path().join("k.key");
        std::fs::write(&key, secret).unwrap();
        let sig = sign(&key, "", b"bytes", "chitin-plugin name=a version=1 sha256=00").unwrap();
        let ok = verify(&[other.clone(), public.clone()], b"bytes", &sig).unwrap();
        assert_eq!(ok.trusted_comment, "chitin-plugin name=a version=1 sha256=00");
        assert_eq!(Some(ok.key_id.clone()), key_id(&public));
        assert!(matches!(verify(&[public.clone()], b"bytez", &sig), Err(VerifyError::Invalid { .. })));
        assert!(matches!(verify(&[other], b"bytes", &sig), Err(VerifyError::NoSuchKey { .. })));
        // A signed comment cannot be edited.
        let forged = sig.replace("name=a", "name=b");
        assert!(matches!(verify(&[public], b"bytes", &forged), Err(VerifyError::Invalid { .. })));
    }

    #[test]
    fn a_protected_key_needs_its_password() {
        let dir = tempfile::tempdir().unwrap();
        let (_, secret) = generate("pw").unwrap();
        let key = dir.path().join("k.key");
        std::fs::write(&key, secret).unwrap();
        assert!(sign(&key, "", b"x", "c").is_err());
        assert!(sign(&key, "pw", b"x", "c").is_ok());
    }
}
