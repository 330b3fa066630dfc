//! `[authorization]`: rules giving principals Kafka's operations on topics, groups and the
//! cluster (checked by [`crate::security::acl`]).

use serde::Deserialize;

use super::{invalid, ConfigError};

/// Kafka's ACL operations (`AclOperation`), by their codes: the bits of `authorized_operations`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Operation {
    All = 2,
    Read = 3,
    Write = 4,
    Create = 5,
    Delete = 6,
    Alter = 7,
    Describe = 8,
    DescribeConfigs = 10,
    AlterConfigs = 11,
    IdempotentWrite = 12,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResourceType {
    Topic,
    Group,
    Cluster,
}

/// One `[[authorization.rules]]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// `User:NAME`, or `User:*` for every principal (authenticated or not).
    pub principal: String,
    pub resource: ResourceType,
    /// Topics or groups whose names start with this; empty: all of them. Not for the cluster.
    #[serde(default)]
    pub prefix: String,
    pub operations: Vec<Operation>,
}

/// `[authorization]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuthorizationConfig {
    /// Principals allowed everything (Kafka's `super.users`), e.g. `User:admin`.
    pub super_users: Vec<String>,
    pub rules: Vec<Rule>,
}

impl AuthorizationConfig {
    pub(crate) fn validate(&self) -> Result<(), ConfigError> {
        for p in self.super_users.iter().chain(self.rules.iter().map(|r| &r.principal)) {
            if !p.starts_with("User:") || p.len() == "User:".len() {
                return Err(invalid("authorization", format!("principal {p:?}: expected User:NAME or User:*")));
            }
        }
        for r in &self.rules {
            if r.operations.is_empty() {
                return Err(invalid("authorization.rules", format!("the rule for {} names no operation", r.principal)));
            }
            if r.resource == ResourceType::Cluster && !r.prefix.is_empty() {
                return Err(invalid("authorization.rules", format!("the cluster rule for {} has a prefix", r.principal)));
            }
        }
        Ok(())
    }
}
