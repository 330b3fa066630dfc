//! Command line: `corral serve`, `corral check-config`, `corral groups` (`groups.rs`) and
//! `corral sasl-credential` (`sasl_credential.rs`).

pub mod groups;
pub mod sasl_credential;

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use crate::config::{Config, ConfigError};

#[derive(Debug, Parser)]
#[command(name = "corral", version, about = "A Kafka-protocol server that runs consumer groups itself")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Start corral. Without --config it runs on the embedded defaults (config/corral.toml):
    /// one node, local storage in ./data, Kafka on 127.0.0.1:9092, admin HTTP on 127.0.0.1:9095.
    Serve(ServeArgs),
    /// Validate a config file and exit: 0 if valid, 2 with a message naming the key if not.
    CheckConfig {
        /// The TOML file to check.
        file: PathBuf,
    },
    /// Look at a running node's groups (through its admin listener): list, describe, history.
    Groups(groups::GroupsArgs),
    /// Print a user's SCRAM credentials for sasl.credentials_file; the password is read from
    /// standard input.
    SaslCredential(sasl_credential::SaslCredentialArgs),
}

/// Options of `corral serve`; each flag overrides the same key of the config file.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TOML config file (only the keys it sets change; the rest keep their defaults).
    #[arg(short, long)]
    pub config: Option<PathBuf>,
    /// kafka.listen: address the Kafka listener binds.
    #[arg(long)]
    pub listen: Option<SocketAddr>,
    /// kafka.advertised: host:port clients are told to connect to.
    #[arg(long)]
    pub advertised: Option<String>,
    /// admin.listen: address of the HTTP health and metrics listener.
    #[arg(long)]
    pub admin_listen: Option<SocketAddr>,
    /// storage.data_dir: where partitions and metadata live.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// runtime.shards: shard threads (0 = one per core).
    #[arg(long)]
    pub shards: Option<usize>,
    /// node.id: this node's broker id.
    #[arg(long)]
    pub node_id: Option<i32>,
}

impl ServeArgs {
    /// The config file (or the defaults) with the command-line overrides applied, validated.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let mut config = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        if let Some(v) = self.listen {
            config.kafka.listen = v;
        }
        if let Some(v) = &self.advertised {
            config.kafka.advertised = v.clone();
        }
        if let Some(v) = self.admin_listen {
            config.admin.listen = v;
        }
        if let Some(v) = &self.data_dir {
            config.storage.data_dir = v.clone();
        }
        if let Some(v) = self.shards {
            config.runtime.shards = v;
        }
        if let Some(v) = self.node_id {
            config.node.id = v;
        }
        config.validate()?;
        Ok(config)
    }
}
