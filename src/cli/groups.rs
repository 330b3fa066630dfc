//! `corral groups`: what a running node's admin API says of its groups, as tables (the
//! `describe` table laid out as `kafka-consumer-groups.sh --describe` lays it out) or as JSON.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

/// How long the node may take to answer.
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, Args)]
pub struct GroupsArgs {
    /// The node's admin listener (`admin.listen`).
    #[arg(long, default_value = "127.0.0.1:9095", global = true)]
    pub admin: String,
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
    /// HTTPS (`admin.tls`): the PEM file of the CAs the node's certificate must chain to.
    #[arg(long, global = true)]
    pub ca_file: Option<std::path::PathBuf>,
    /// A client certificate (PEM) and its key, for a node with `admin.client_auth`.
    #[arg(long, global = true, requires_all = ["key_file", "ca_file"])]
    pub cert_file: Option<std::path::PathBuf>,
    #[arg(long, global = true, requires = "cert_file")]
    pub key_file: Option<std::path::PathBuf>,
    /// A file holding the node's bearer token (`admin.bearer_token_file`).
    #[arg(long, global = true)]
    pub token_file: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub command: GroupsCommand,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum GroupsCommand {
    /// Every group of the cluster: type, state, generation, members, coordinator, lag.
    List,
    /// A group's partitions: committed offset, log end offset, lag and owner.
    Describe { group: String },
    /// A group's last rebalances: what started each, and how long each phase took.
    History { group: String },
}

/// HTTPS toward the node when `--ca-file` is given.
fn tls_connector(args: &GroupsArgs) -> Result<Option<tokio_rustls::TlsConnector>, String> {
    let Some(ca_file) = &args.ca_file else { return Ok(None) };
    let tls = crate::config::TlsConfig {
        cert_file: args.cert_file.clone(),
        key_file: args.key_file.clone(),
        ca_file: Some(ca_file.clone()),
        ..Default::default()
    };
    let certificate = match &args.cert_file {
        Some(_) => Some(crate::security::tls::CertificateFiles::load(&tls).map_err(|e| e.to_string())?),
        None => None,
    };
    let config = crate::security::tls::client_config(&tls, certificate.as_ref()).map_err(|e| e.to_string())?;
    Ok(Some(tokio_rustls::TlsConnector::from(config)))
}

pub fn run(args: GroupsArgs) -> ExitCode {
    let path = match &args.command {
        GroupsCommand::List => "/v1/groups".to_string(),
        GroupsCommand::Describe { group } | GroupsCommand::History { group } => format!("/v1/groups/{}", encode(group)),
    };
    let tls = match tls_connector(&args) {
        Ok(tls) => tls,
        Err(e) => {
            eprintln!("corral: {e}");
            return ExitCode::FAILURE;
        }
    };
    let authorization = match &args.token_file {
        None => None,
        Some(path) => match crate::security::admin_token::AdminToken::load(path.clone()) {
            Ok(token) => Some(token.header()),
            Err((_, reason)) => {
                eprintln!("corral: --token-file: {reason}");
                return ExitCode::FAILURE;
            }
        },
    };
    let access = crate::admin::client::Access { tls: tls.as_ref(), authorization: authorization.as_deref() };
    let answer = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|rt| rt.block_on(crate::admin::client::get(&args.admin, &path, access, TIMEOUT)));
    let (status, body) = match answer {
        Ok(a) => a,
        Err(e) => {
            eprintln!("corral: {e}");
            return ExitCode::FAILURE;
        }
    };
    let json: Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("corral: {} answered {status} with no JSON: {e}", args.admin);
            return ExitCode::FAILURE;
        }
    };
    if !status.is_success() {
        eprintln!("corral: {}", json["error"].as_str().unwrap_or(status.as_str()));
        return ExitCode::FAILURE;
    }
    if args.output == Output::Json {
        let shown = match args.command {
            GroupsCommand::History { .. } => json["rebalances"].clone(),
            _ => json,
        };
        println!("{}", serde_json::to_string_pretty(&shown).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    print!(
        "{}",
        match args.command {
            GroupsCommand::List => list_table(&json),
            GroupsCommand::Describe { .. } => describe_table(&json),
            GroupsCommand::History { .. } => history_table(&json),
        }
    );
    ExitCode::SUCCESS
}

fn encode(group: &str) -> String {
    const SEGMENT: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');
    percent_encoding::utf8_percent_encode(group, SEGMENT).to_string()
}

/// A JSON value as a cell: strings bare, null as `-`.
fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) if s.is_empty() => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn list_table(json: &Value) -> String {
    let rows = json["groups"].as_array().map(Vec::as_slice).unwrap_or_default().iter().map(|g| {
        vec![
            cell(&g["group"]),
            cell(&g["type"]),
            cell(&g["state"]),
            cell(&g["generation"]),
            cell(&g["members"]),
            format!("{}/{}", cell(&g["coordinator_node"]), cell(&g["coordinator_partition"])),
            cell(&g["lag_sum"]),
        ]
    });
    let mut out = table(&["GROUP", "TYPE", "STATE", "GENERATION", "MEMBERS", "COORDINATOR (NODE/PARTITION)", "LAG"], rows);
    for missing in json["missing"].as_array().map(Vec::as_slice).unwrap_or_default() {
        out.push_str(&format!("warning: node {} not asked: {}\n", cell(&missing["node"]), cell(&missing["reason"])));
    }
    out
}

/// One row per partition the group has committed or is assigned, as
/// `kafka-consumer-groups.sh --describe` prints them.
fn describe_table(g: &Value) -> String {
    let group = cell(&g["group"]);
    let empty = Vec::new();
    let members = g["members"].as_array().unwrap_or(&empty);
    let offsets = g["offsets"].as_array().unwrap_or(&empty);
    let owner_of = |topic: &str, partition: i64| {
        members.iter().find(|m| {
            m["assignment"].as_array().unwrap_or(&empty).iter().any(|a| {
                a["topic"] == topic && a["partitions"].as_array().is_some_and(|ps| ps.iter().any(|p| p.as_i64() == Some(partition)))
            })
        })
    };
    let member_cells = |m: Option<&Value>| match m {
        Some(m) => [cell(&m["member_id"]), cell(&m["client_host"]), cell(&m["client_id"])],
        None => ["-".into(), "-".into(), "-".into()],
    };
    let mut rows: Vec<(String, i64, Vec<String>)> = Vec::new();
    for o in offsets {
        let (topic, partition) = (o["topic"].as_str().unwrap_or_default(), o["partition"].as_i64().unwrap_or(-1));
        let mut row = vec![group.clone(), topic.to_string(), partition.to_string(), cell(&o["committed_offset"])];
        row.extend([cell(&o["log_end_offset"]), cell(&o["lag"])]);
        row.extend(member_cells(owner_of(topic, partition)));
        rows.push((topic.to_string(), partition, row));
    }
    // Assigned partitions with nothing committed yet.
    for m in members {
        for a in m["assignment"].as_array().unwrap_or(&empty) {
            let topic = a["topic"].as_str().unwrap_or_default();
            for p in a["partitions"].as_array().unwrap_or(&empty).iter().filter_map(Value::as_i64) {
                if !rows.iter().any(|(t, q, _)| t == topic && *q == p) {
                    let mut row = vec![group.clone(), topic.to_string(), p.to_string(), "-".into(), "-".into(), "-".into()];
                    row.extend(member_cells(Some(m)));
                    rows.push((topic.to_string(), p, row));
                }
            }
        }
    }
    rows.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut out = String::new();
    if members.is_empty() {
        out.push_str(&format!("\nConsumer group '{group}' has no active members.\n"));
    }
    out.push('\n');
    let header = ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "CONSUMER-ID", "HOST", "CLIENT-ID"];
    out.push_str(&table(&header, rows.into_iter().map(|(_, _, r)| r)));
    out
}

fn history_table(g: &Value) -> String {
    let empty = Vec::new();
    let rebalances = g["rebalances"].as_array().unwrap_or(&empty);
    if rebalances.is_empty() {
        return format!("Group '{}' has had no rebalance since this node began coordinating it.\n", cell(&g["group"]));
    }
    let rows = rebalances.iter().map(|r| {
        let named: Vec<String> = r["trigger_members"].as_array().unwrap_or(&empty).iter().map(cell).collect();
        let slowest: Vec<String> = r["slowest"]
            .as_array()
            .unwrap_or(&empty)
            .iter()
            .map(|m| format!("{} ({} +{} ms)", cell(&m["member"]), cell(&m["step"]), cell(&m["after_ms"])))
            .collect();
        vec![
            ended(&r["ended_at_ms"]),
            cell(&r["trigger"]),
            if named.is_empty() { "-".into() } else { named.join(",") },
            format!("{} -> {}", cell(&r["generation_before"]), cell(&r["generation_after"])),
            format!("{} -> {}", cell(&r["members_before"]), cell(&r["members_after"])),
            cell(&r["join_ms"]),
            cell(&r["sync_ms"]),
            cell(&r["total_ms"]),
            cell(&r["restarts"]),
            if slowest.is_empty() { "-".into() } else { slowest.join(", ") },
        ]
    });
    let header =
        ["ENDED (UTC)", "TRIGGER", "TRIGGERED BY", "GENERATION", "MEMBERS", "JOIN-MS", "SYNC-MS", "TOTAL-MS", "RESTARTS", "SLOWEST"];
    table(&header, rows)
}

/// Milliseconds since the epoch as `YYYY-MM-DD HH:MM:SS.mmm` (UTC).
fn ended(ms: &Value) -> String {
    ms.as_i64()
        .and_then(chrono::DateTime::from_timestamp_millis)
        .map_or_else(|| "-".into(), |t| t.format("%Y-%m-%d %H:%M:%S%.3f").to_string())
}

/// Columns padded to their widest cell, two spaces apart.
fn table(header: &[&str], rows: impl IntoIterator<Item = Vec<String>>) -> String {
    let rows: Vec<Vec<String>> = rows.into_iter().collect();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut text = String::new();
        for (i, c) in cells.enumerate() {
            text.push_str(c);
            text.extend(std::iter::repeat_n(' ', widths[i].saturating_sub(c.chars().count()) + 2));
        }
        out.push_str(text.trim_end());
        out.push('\n');
    };
    line(&mut header.iter().copied());
    for row in &rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn describe_lays_out_committed_and_assigned_partitions() {
        let g = json!({
            "group": "g",
            "members": [{"member_id": "m-1", "client_host": "/127.0.0.1", "client_id": "c",
                         "assignment": [{"topic": "t", "partitions": [0, 1]}]}],
            "offsets": [{"topic": "t", "partition": 0, "committed_offset": 5, "log_end_offset": 9, "lag": 4}],
        });
        let text = describe_table(&g);
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines[0].split_whitespace().collect::<Vec<_>>()[..3], ["GROUP", "TOPIC", "PARTITION"]);
        assert_eq!(lines[1].split_whitespace().collect::<Vec<_>>(), ["g", "t", "0", "5", "9", "4", "m-1", "/127.0.0.1", "c"]);
        assert_eq!(lines[2].split_whitespace().collect::<Vec<_>>(), ["g", "t", "1", "-", "-", "-", "m-1", "/127.0.0.1", "c"]);
    }

    #[test]
    fn timestamps_print_in_utc() {
        assert_eq!(ended(&json!(0)), "1970-01-01 00:00:00.000");
        assert_eq!(ended(&json!(1_796_181_296_789_i64)), "2026-12-02 03:14:56.789");
        assert_eq!(ended(&json!(951_782_400_000_i64)), "2000-02-29 00:00:00.000");
    }
}
