//! `corral sasl-credential`: a user's entry for `sasl.credentials_file`, from a password read on
//! standard input. Only the salted keys are printed; the password is not kept.

use std::io::BufRead;
use std::process::ExitCode;

use clap::Args;

use crate::security::credentials::{ScramCredential, ScramHash, MAX_ITERATIONS, MIN_ITERATIONS};

#[derive(Debug, Args)]
pub struct SaslCredentialArgs {
    /// The user's name.
    #[arg(long)]
    pub user: String,
    /// SCRAM iterations (Kafka's bounds: 4096 to 16384).
    #[arg(long, default_value_t = 8192)]
    pub iterations: u32,
}

/// Reads the password (the first line of standard input) and prints a `[users.NAME]` table with
/// a SCRAM-SHA-256 and a SCRAM-SHA-512 credential.
pub fn run(args: SaslCredentialArgs) -> ExitCode {
    match table(&args) {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("corral sasl-credential: {e}");
            ExitCode::from(2)
        }
    }
}

fn table(args: &SaslCredentialArgs) -> Result<String, String> {
    if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&args.iterations) {
        return Err(format!("--iterations must be between {MIN_ITERATIONS} and {MAX_ITERATIONS}"));
    }
    if args.user.is_empty() {
        return Err("--user must not be empty".into());
    }
    let mut password = String::new();
    std::io::stdin().lock().read_line(&mut password).map_err(|e| format!("cannot read the password: {e}"))?;
    let password = password.trim_end_matches(['\n', '\r']);
    if password.is_empty() {
        return Err("no password on standard input".into());
    }
    let mut text = format!("[users.{}]\n", toml_key(&args.user));
    for hash in [ScramHash::Sha256, ScramHash::Sha512] {
        let credential = ScramCredential::new(hash, password.as_bytes(), args.iterations)?;
        text.push_str(&format!("\"{}\" = \"{}\"\n", hash.mechanism(), credential.to_kafka_string()));
    }
    Ok(text)
}

/// A bare TOML key if the name allows one, else a quoted key.
fn toml_key(name: &str) -> String {
    if name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
        name.to_string()
    } else {
        format!("{:?}", name)
    }
}
