//! Authorization: which principal may do what to which topic, group or the cluster.
//!
//! Rules come from `[authorization]`; each gives a principal operations on the topics or groups
//! whose names start with a prefix, or on the cluster. Kafka's implications hold: READ, WRITE,
//! DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL is everything.
//! With no rules and no super users every request is allowed, as before authorization existed.
//!
//! `__consumer_offsets` holds every group's members, client ids and hosts: it may be read and
//! described only by principals allowed to describe every group (a group rule with an empty
//! prefix), and written, altered or deleted by no one but super users.

use super::Principal;
pub use crate::config::authorization::{AuthorizationConfig, Operation, ResourceType, Rule};

impl Operation {
    /// Whether holding `self` grants `wanted`.
    fn grants(self, wanted: Operation) -> bool {
        use Operation::*;
        self == wanted
            || self == All
            || (wanted == Describe && matches!(self, Read | Write | Delete | Alter))
            || (wanted == DescribeConfigs && self == AlterConfigs)
    }

    /// The operations `__consumer_offsets` allows to whoever may describe every group.
    fn grants_reading(self) -> bool {
        matches!(self, Operation::Read | Operation::Describe | Operation::DescribeConfigs)
    }
}

/// What a request acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    Topic(&'a str),
    Group(&'a str),
    Cluster,
}

impl Resource<'_> {
    fn kind(&self) -> ResourceType {
        match self {
            Resource::Topic(_) => ResourceType::Topic,
            Resource::Group(_) => ResourceType::Group,
            Resource::Cluster => ResourceType::Cluster,
        }
    }

    /// The operations Kafka reports in `authorized_operations` for this kind of resource.
    fn reported(&self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Resource::Topic(_) => &[Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs],
            Resource::Group(_) => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            Resource::Cluster => &[Create, Alter, Describe, DescribeConfigs, AlterConfigs, IdempotentWrite],
        }
    }
}

/// The rules, ready to check requests against.
#[derive(Debug, Default)]
pub struct Authorizer {
    config: AuthorizationConfig,
}

impl Authorizer {
    pub fn new(config: &AuthorizationConfig) -> Authorizer {
        Authorizer { config: config.clone() }
    }

    /// No rules: every request is allowed.
    pub fn is_open(&self) -> bool {
        self.config.rules.is_empty() && self.config.super_users.is_empty()
    }

    pub fn allows(&self, principal: &Principal, operation: Operation, resource: Resource<'_>) -> bool {
        if self.is_open() || self.is_super_user(principal) {
            return true;
        }
        if let Resource::Topic(name) = resource {
            if name == crate::cluster::OFFSETS_TOPIC {
                return operation.grants_reading() && self.granted(principal, Operation::Describe, Resource::Group(""));
            }
        }
        self.granted(principal, operation, resource)
    }

    /// Whether the principal may perform `operation` on some resource of this kind (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs WRITE on any topic).
    pub fn allows_some(&self, principal: &Principal, operation: Operation, kind: ResourceType) -> bool {
        let name = principal.to_string();
        self.is_open()
            || self.is_super_user(principal)
            || self.config.rules.iter().any(|rule| {
                (rule.principal == name || rule.principal == "User:*")
                    && rule.resource == kind
                    && rule.operations.iter().any(|held| held.grants(operation))
            })
    }

    /// `authorized_operations` as Kafka encodes it: a bit per allowed operation.
    pub fn operations(&self, principal: &Principal, resource: Resource<'_>) -> i32 {
        resource.reported().iter().filter(|op| self.allows(principal, **op, resource)).fold(0, |bits, op| bits | (1 << *op as i32))
    }

    fn is_super_user(&self, principal: &Principal) -> bool {
        let name = principal.to_string();
        self.config.super_users.contains(&name)
    }

    /// Whether a rule gives `principal` the operation on the resource. For `Group("")` as the
    /// resource: whether one rule covers every group.
    fn granted(&self, principal: &Principal, operation: Operation, resource: Resource<'_>) -> bool {
        let name = principal.to_string();
        self.config.rules.iter().any(|rule| {
            (rule.principal == name || rule.principal == "User:*")
                && rule.resource == resource.kind()
                && match resource {
                    Resource::Topic(n) | Resource::Group(n) => n.starts_with(&rule.prefix),
                    Resource::Cluster => true,
                }
                && rule.operations.iter().any(|held| held.grants(operation))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authorizer(text: &str) -> Authorizer {
        let config: AuthorizationConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        Authorizer::new(&config)
    }

    const RULES: &str = r#"
        super_users = ["User:admin"]
        rules = [
          { principal = "User:alice", resource = "topic", prefix = "payments.", operations = ["read", "write"] },
          { principal = "User:alice", resource = "group", prefix = "payments-", operations = ["read"] },
          { principal = "User:ops", resource = "group", operations = ["describe"] },
          { principal = "User:*", resource = "topic", prefix = "public.", operations = ["describe"] },
          { principal = "User:ops", resource = "cluster", operations = ["describe", "alter_configs"] },
        ]
    "#;

    #[test]
    fn rules_prefixes_and_implied_operations() {
        let a = authorizer(RULES);
        let alice = Principal::user("alice");
        assert!(a.allows(&alice, Operation::Write, Resource::Topic("payments.in")));
        assert!(a.allows(&alice, Operation::Describe, Resource::Topic("payments.in")), "READ implies DESCRIBE");
        assert!(!a.allows(&alice, Operation::Delete, Resource::Topic("payments.in")));
        assert!(!a.allows(&alice, Operation::Read, Resource::Topic("orders")));
        assert!(a.allows(&alice, Operation::Read, Resource::Group("payments-eu")));
        assert!(!a.allows(&alice, Operation::Read, Resource::Group("orders")));
        assert!(a.allows(&alice, Operation::Describe, Resource::Topic("public.news")), "User:* matches everyone");
        assert!(!a.allows(&Principal::anonymous(), Operation::Read, Resource::Topic("public.news")));
        assert!(a.allows(&Principal::user("admin"), Operation::Delete, Resource::Cluster));
        let ops = Principal::user("ops");
        assert!(a.allows(&ops, Operation::DescribeConfigs, Resource::Cluster), "ALTER_CONFIGS implies DESCRIBE_CONFIGS");
        assert!(!a.allows(&ops, Operation::Create, Resource::Cluster));
    }

    #[test]
    fn offsets_topic_needs_every_group() {
        let a = authorizer(RULES);
        let offsets = Resource::Topic(crate::cluster::OFFSETS_TOPIC);
        assert!(!a.allows(&Principal::user("alice"), Operation::Read, offsets), "alice describes some groups only");
        assert!(a.allows(&Principal::user("ops"), Operation::Read, offsets));
        assert!(!a.allows(&Principal::user("ops"), Operation::Write, offsets));
        assert!(a.allows(&Principal::user("admin"), Operation::Write, offsets));
    }

    #[test]
    fn authorized_operations_bits() {
        let a = authorizer(RULES);
        // READ (3) and DESCRIBE (8) on the group; nothing else.
        assert_eq!(a.operations(&Principal::user("alice"), Resource::Group("payments-x")), (1 << 3) | (1 << 8));
        assert_eq!(a.operations(&Principal::user("alice"), Resource::Group("x")), 0);
        let open = Authorizer::default();
        assert_eq!(open.operations(&Principal::anonymous(), Resource::Group("g")), (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11));
    }

    #[test]
    fn bad_rules_are_refused() {
        for text in [
            r#"super_users = ["admin"]"#,
            r#"rules = [{ principal = "User:a", resource = "cluster", prefix = "x", operations = ["describe"] }]"#,
            r#"rules = [{ principal = "User:a", resource = "topic", operations = [] }]"#,
        ] {
            let config: AuthorizationConfig = toml::from_str(text).unwrap();
            assert!(config.validate().is_err(), "{text}");
        }
        assert!(toml::from_str::<AuthorizationConfig>(r#"rules = [{ principal = "User:a", resource = "topic", operations = ["fly"] }]"#)
            .is_err());
    }
}
