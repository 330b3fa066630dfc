//! SASL users and their SCRAM credentials, from `sasl.credentials_file`.
//!
//! ```toml
//! [users.alice]
//! SCRAM-SHA-256 = "salt=<base64>,stored_key=<base64>,server_key=<base64>,iterations=8192"
//! SCRAM-SHA-512 = "salt=…,stored_key=…,server_key=…,iterations=8192"
//! ```
//!
//! The form of each value is Kafka's own (what `kafka-configs --describe` shows for a SCRAM
//! user); `corral sasl-credential` makes them. No password is stored: SCRAM needs only the
//! stored and server keys, and PLAIN checks a password by deriving the stored key from it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use base64::Engine;
use rsasl::mechanisms::scram::tools::{derive_keys, hash_password};
use serde::Deserialize;
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

use super::watched::LoadError;

/// Kafka's bounds on SCRAM iterations (`ScramMechanism`).
pub const MIN_ITERATIONS: u32 = 4096;
pub const MAX_ITERATIONS: u32 = 16384;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScramHash {
    Sha256,
    Sha512,
}

impl ScramHash {
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => "SCRAM-SHA-256",
            ScramHash::Sha512 => "SCRAM-SHA-512",
        }
    }

    pub fn of_mechanism(name: &str) -> Option<ScramHash> {
        match name {
            "SCRAM-SHA-256" => Some(ScramHash::Sha256),
            "SCRAM-SHA-512" => Some(ScramHash::Sha512),
            _ => None,
        }
    }
}

/// One user's credential for one SCRAM mechanism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScramCredential {
    pub salt: Vec<u8>,
    pub stored_key: Vec<u8>,
    pub server_key: Vec<u8>,
    pub iterations: u32,
}

impl ScramCredential {
    /// Derives the credential of `password` with a fresh random salt.
    pub fn new(hash: ScramHash, password: &[u8], iterations: u32) -> Result<ScramCredential, String> {
        let mut salt = vec![0u8; 32];
        getrandom::fill(&mut salt).map_err(|e| e.to_string())?;
        let (stored_key, server_key) = derive(hash, password, &salt, iterations);
        Ok(ScramCredential { salt, stored_key, server_key, iterations })
    }

    /// Whether `password` is the one this credential was made from (SASL/PLAIN).
    pub fn matches(&self, hash: ScramHash, password: &[u8]) -> bool {
        let (stored_key, _) = derive(hash, password, &self.salt, self.iterations);
        bool::from(stored_key.ct_eq(&self.stored_key))
    }

    /// Kafka's text form: `salt=…,stored_key=…,server_key=…,iterations=…`.
    pub fn to_kafka_string(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD;
        format!(
            "salt={},stored_key={},server_key={},iterations={}",
            b64.encode(&self.salt),
            b64.encode(&self.stored_key),
            b64.encode(&self.server_key),
            self.iterations
        )
    }

    pub fn parse(hash: ScramHash, text: &str) -> Result<ScramCredential, String> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut fields = BTreeMap::new();
        for part in text.split(',') {
            let (name, value) = part.split_once('=').ok_or_else(|| format!("expected name=value, got {part:?}"))?;
            fields.insert(name.trim(), value.trim());
        }
        let field = |name: &str| fields.get(name).copied().ok_or_else(|| format!("{name} is missing"));
        let bytes = |name: &str| b64.decode(field(name)?).map_err(|e| format!("{name}: {e}"));
        let credential = ScramCredential {
            salt: bytes("salt")?,
            stored_key: bytes("stored_key")?,
            server_key: bytes("server_key")?,
            iterations: field("iterations")?.parse().map_err(|e| format!("iterations: {e}"))?,
        };
        let len = match hash {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        };
        if credential.stored_key.len() != len || credential.server_key.len() != len {
            return Err(format!("stored_key and server_key must be {len} bytes for {}", hash.mechanism()));
        }
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&credential.iterations) {
            return Err(format!("iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"));
        }
        if credential.salt.is_empty() {
            return Err("salt is empty".into());
        }
        Ok(credential)
    }
}

/// (stored key, server key) of a password, as RFC 5802 defines them.
fn derive(hash: ScramHash, password: &[u8], salt: &[u8], iterations: u32) -> (Vec<u8>, Vec<u8>) {
    match hash {
        ScramHash::Sha256 => {
            let mut salted = Default::default();
            hash_password::<Sha256>(password, iterations, salt, &mut salted);
            let (client_key, server_key) = derive_keys::<Sha256>(&salted);
            (Sha256::digest(client_key).to_vec(), server_key.to_vec())
        }
        ScramHash::Sha512 => {
            let mut salted = Default::default();
            hash_password::<Sha512>(password, iterations, salt, &mut salted);
            let (client_key, server_key) = derive_keys::<Sha512>(&salted);
            (Sha512::digest(client_key).to_vec(), server_key.to_vec())
        }
    }
}

/// One user's credentials.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct User {
    pub sha256: Option<ScramCredential>,
    pub sha512: Option<ScramCredential>,
}

impl User {
    pub fn scram(&self, hash: ScramHash) -> Option<&ScramCredential> {
        match hash {
            ScramHash::Sha256 => self.sha256.as_ref(),
            ScramHash::Sha512 => self.sha512.as_ref(),
        }
    }

    /// SASL/PLAIN: checks the password against one of the user's credentials, SHA-256's when
    /// there is one: either proves the password, and the PBKDF2 of SHA-256 runs about four times
    /// as fast where the CPU has SHA-256 instructions (4.5 ms of a shard's time per login with
    /// SHA-512 at 4096 iterations, BENCHMARKS.md).
    pub fn password_matches(&self, password: &[u8]) -> bool {
        match (&self.sha256, &self.sha512) {
            (Some(c), _) => c.matches(ScramHash::Sha256, password),
            (None, Some(c)) => c.matches(ScramHash::Sha512, password),
            (None, None) => false,
        }
    }
}

/// Every user, by name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Credentials {
    pub users: BTreeMap<String, User>,
}

impl Credentials {
    pub fn parse(text: &str) -> Result<Credentials, String> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields)]
        struct File {
            #[serde(default)]
            users: BTreeMap<String, BTreeMap<String, String>>,
        }
        let file: File = toml::from_str(text).map_err(|e| e.to_string().trim_end().to_string())?;
        let mut users = BTreeMap::new();
        for (name, mechanisms) in file.users {
            let mut user = User::default();
            for (mechanism, value) in mechanisms {
                let hash = ScramHash::of_mechanism(&mechanism)
                    .ok_or_else(|| format!("users.{name}: {mechanism} is not SCRAM-SHA-256 or SCRAM-SHA-512"))?;
                let credential = ScramCredential::parse(hash, &value).map_err(|e| format!("users.{name}.{mechanism}: {e}"))?;
                match hash {
                    ScramHash::Sha256 => user.sha256 = Some(credential),
                    ScramHash::Sha512 => user.sha512 = Some(credential),
                }
            }
            users.insert(name, user);
        }
        Ok(Credentials { users })
    }

    pub(crate) fn load(paths: &[PathBuf]) -> Result<Credentials, LoadError> {
        let path = &paths[0];
        let text = std::fs::read_to_string(path).map_err(|e| ("sasl.credentials_file", format!("{}: {e}", path.display())))?;
        Credentials::parse(&text).map_err(|e| ("sasl.credentials_file", format!("{}: {e}", path.display())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_round_trip_and_check_passwords() {
        let c256 = ScramCredential::new(ScramHash::Sha256, b"alice-secret", 4096).unwrap();
        let c512 = ScramCredential::new(ScramHash::Sha512, b"alice-secret", 4096).unwrap();
        let text =
            format!("[users.alice]\nSCRAM-SHA-256 = \"{}\"\nSCRAM-SHA-512 = \"{}\"\n", c256.to_kafka_string(), c512.to_kafka_string());
        let parsed = Credentials::parse(&text).unwrap();
        let alice = &parsed.users["alice"];
        assert_eq!(alice.sha256.as_ref(), Some(&c256));
        assert_eq!(alice.sha512.as_ref(), Some(&c512));
        assert!(alice.password_matches(b"alice-secret"));
        assert!(!alice.password_matches(b"alice-secreT"));
        assert!(c256.matches(ScramHash::Sha256, b"alice-secret"));
    }

    /// RFC 7677's test vector: user "user", password "pencil", salt W22ZaJ0SNY7soEsUEjb6gQ==,
    /// 4096 iterations.
    #[test]
    fn sha256_keys_match_rfc_7677() {
        let b64 = base64::engine::general_purpose::STANDARD;
        let salt = b64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let (stored, server) = derive(ScramHash::Sha256, b"pencil", &salt, 4096);
        assert_eq!(b64.encode(stored), "WG5d8oPm3OtcPnkdi4Uo7BkeZkBFzpcXkuLmtbsT4qY=");
        assert_eq!(b64.encode(server), "wfPLwcE6nTWhTAmQ7tl2KeoiWGPlZqQxSrmfPwDl2dU=");
    }

    #[test]
    fn bad_files_name_the_user_and_field() {
        let e = Credentials::parse("[users.bob]\nSCRAM-SHA-1 = \"x\"\n").unwrap_err();
        assert!(e.contains("users.bob") && e.contains("SCRAM-SHA-1"), "{e}");
        let e =
            Credentials::parse("[users.bob]\nSCRAM-SHA-256 = \"salt=AA==,stored_key=AA==,server_key=AA==,iterations=4096\"\n").unwrap_err();
        assert!(e.contains("32 bytes"), "{e}");
        let e = Credentials::parse("[users.bob]\nSCRAM-SHA-256 = \"salt=AA==\"\n").unwrap_err();
        assert!(e.contains("stored_key is missing"), "{e}");
    }
}
