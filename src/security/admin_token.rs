//! A bearer token for the admin listener (`admin.bearer_token_file`): Prometheus, scripts and
//! other nodes send `Authorization: Bearer <token>`; the health probes need none.
//!
//! The file holds the token alone (a trailing newline is dropped) and is read again when it
//! changes, so a rotated Kubernetes secret takes effect without a restart. Nodes of one cluster
//! share the token: a node asking another's groups API sends its own.

use std::path::PathBuf;
use std::sync::Arc;

use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use super::watched::{LoadError, Watched};

const KEY: &str = "admin.bearer_token_file";

#[derive(Debug)]
pub(crate) struct AdminToken(Watched<Token>);

#[derive(Debug)]
struct Token {
    value: String,
    /// Compared instead of the token, so that neither its bytes nor its length show in the time
    /// a comparison takes.
    digest: [u8; 32],
}

impl AdminToken {
    /// Reads the token file: a missing, unreadable or empty file is a startup error naming the key.
    pub(crate) fn load(path: PathBuf) -> Result<AdminToken, LoadError> {
        Ok(AdminToken(Watched::load("admin bearer token", vec![path], load)?))
    }

    /// Whether an `Authorization` header's value carries the token.
    pub(crate) fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(presented) = authorization.and_then(|value| value.strip_prefix(b"Bearer ")) else { return false };
        let digest: [u8; 32] = Sha256::digest(presented.trim_ascii()).into();
        bool::from(digest.ct_eq(&self.0.get().digest))
    }

    /// The `Authorization` header this node sends to other nodes' admin listeners.
    pub(crate) fn header(&self) -> String {
        format!("Bearer {}", self.0.get().value)
    }
}

fn load(paths: &[PathBuf]) -> Result<Token, LoadError> {
    let path = &paths[0];
    let text = std::fs::read_to_string(path).map_err(|e| (KEY, format!("cannot read {}: {e}", path.display())))?;
    let value = text.trim_end_matches(['\r', '\n']);
    if value.is_empty() {
        return Err((KEY, format!("{} is empty", path.display())));
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err((KEY, format!("the token in {} holds whitespace or a control character", path.display())));
    }
    Ok(Token { value: value.to_string(), digest: Sha256::digest(value.as_bytes()).into() })
}

/// The token from the config, if one is set.
pub(crate) fn for_config(config: &crate::config::Config) -> Result<Option<Arc<AdminToken>>, LoadError> {
    match &config.admin.bearer_token_file {
        Some(path) => AdminToken::load(path.clone()).map(|token| Some(Arc::new(token))),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token_in(dir: &std::path::Path, text: &str) -> Result<AdminToken, LoadError> {
        let path = dir.join("token");
        std::fs::write(&path, text).unwrap();
        AdminToken::load(path)
    }

    #[test]
    fn only_the_bearer_token_is_admitted() {
        let dir = tempfile::tempdir().unwrap();
        let token = token_in(dir.path(), "s3cret-Token\n").unwrap();
        assert!(token.admits(Some(b"Bearer s3cret-Token")));
        assert!(!token.admits(Some(b"Bearer s3cret-Toke")));
        assert!(!token.admits(Some(b"Bearer s3cret-Token2")));
        assert!(!token.admits(Some(b"Basic s3cret-Token")));
        assert!(!token.admits(Some(b"s3cret-Token")));
        assert!(!token.admits(None));
        assert_eq!(token.header(), "Bearer s3cret-Token");
    }

    #[test]
    fn an_empty_or_missing_file_names_the_key() {
        let dir = tempfile::tempdir().unwrap();
        for text in ["", "\n", "two words"] {
            let (key, _) = token_in(dir.path(), text).unwrap_err();
            assert_eq!(key, KEY);
        }
        let (key, why) = AdminToken::load(dir.path().join("absent")).unwrap_err();
        assert_eq!(key, KEY);
        assert!(why.contains("cannot read"), "{why}");
    }
}
