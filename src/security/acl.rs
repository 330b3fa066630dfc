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

/// How an ACL binding names its resources (Kafka's `PatternType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatternType {
    /// The name itself; `*` is every resource of the type.
    Literal = 3,
    /// Every resource whose name starts with the name.
    Prefixed = 4,
}

/// `PatternType` codes a filter may hold besides the patterns' own.
const PATTERN_ANY: i8 = 1;
const PATTERN_MATCH: i8 = 2;
/// `ResourceType`, `AclOperation` and `AclPermissionType` code of "any" in a filter.
const ANY: i8 = 1;
/// `AclPermissionType.ALLOW`: the only kind of rule `[authorization]` has.
pub const ALLOW: i8 = 3;
/// The name Kafka gives the cluster resource.
const CLUSTER_NAME: &str = "kafka-cluster";
const WILDCARD: &str = "*";

impl ResourceType {
    /// Kafka's `ResourceType` code.
    pub fn code(self) -> i8 {
        match self {
            ResourceType::Topic => 2,
            ResourceType::Group => 3,
            ResourceType::Cluster => 4,
        }
    }
}

/// One rule's grant of one operation, as Kafka's ACL binding: an ALLOW from any host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding<'a> {
    pub resource_type: ResourceType,
    pub name: &'a str,
    pub pattern: PatternType,
    pub principal: &'a str,
    pub operation: Operation,
}

/// A DescribeAcls filter: each field is a code or a name to match, or "any".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingFilter<'a> {
    pub resource_type: i8,
    pub name: Option<&'a str>,
    pub pattern_type: i8,
    pub principal: Option<&'a str>,
    pub host: Option<&'a str>,
    pub operation: i8,
    pub permission: i8,
}

impl BindingFilter<'_> {
    /// A filter holding a code Kafka does not know (or UNKNOWN, 0) is invalid, as in Kafka.
    pub fn is_valid(&self) -> bool {
        (1..=7).contains(&self.resource_type)
            && (1..=4).contains(&self.pattern_type)
            && (1..=14).contains(&self.operation)
            && (1..=3).contains(&self.permission)
    }

    /// Kafka's `AclBindingFilter.matches`. MATCH with a name: the literal name, the literal
    /// wildcard, and every prefix of the name; ANY or a pattern type with a name: that exact name.
    pub fn matches(&self, b: &Binding<'_>) -> bool {
        let pattern_matches = match self.pattern_type {
            PATTERN_ANY | PATTERN_MATCH => true,
            code => code == b.pattern as i8,
        };
        let name_matches = match self.name {
            None => true,
            Some(name) if self.pattern_type != PATTERN_MATCH => name == b.name,
            Some(name) => match b.pattern {
                PatternType::Literal => name == b.name || b.name == WILDCARD,
                PatternType::Prefixed => name.starts_with(b.name),
            },
        };
        (self.resource_type == ANY || self.resource_type == b.resource_type.code())
            && pattern_matches
            && name_matches
            && self.principal.is_none_or(|p| p == b.principal)
            && self.host.is_none_or(|h| h == WILDCARD)
            && (self.operation == ANY || self.operation == b.operation as i8)
            && (self.permission == ANY || self.permission == ALLOW)
    }
}

impl Authorizer {
    /// The rules as Kafka's ACL bindings, one per rule and operation: a prefix as a PREFIXED
    /// pattern, the empty prefix as the LITERAL wildcard, the cluster as `kafka-cluster`. Super
    /// users are no binding, as in Kafka (`super.users` is not an ACL).
    pub fn bindings(&self) -> impl Iterator<Item = Binding<'_>> {
        self.config.rules.iter().flat_map(|rule| {
            let (name, pattern) = match rule.resource {
                ResourceType::Cluster => (CLUSTER_NAME, PatternType::Literal),
                _ if rule.prefix.is_empty() => (WILDCARD, PatternType::Literal),
                _ => (rule.prefix.as_str(), PatternType::Prefixed),
            };
            rule.operations.iter().map(move |&operation| Binding {
                resource_type: rule.resource,
                name,
                pattern,
                principal: &rule.principal,
                operation,
            })
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

    fn filter(resource_type: i8, name: Option<&str>, pattern_type: i8) -> BindingFilter<'_> {
        BindingFilter { resource_type, name, pattern_type, principal: None, host: None, operation: ANY, permission: ANY }
    }

    fn described(a: &Authorizer, f: &BindingFilter<'_>) -> Vec<String> {
        a.bindings()
            .filter(|b| f.matches(b))
            .map(|b| format!("{:?} {} {:?} {} {:?}", b.resource_type, b.name, b.pattern, b.principal, b.operation))
            .collect()
    }

    #[test]
    fn rules_as_acl_bindings_and_filters() {
        let a = authorizer(RULES);
        assert_eq!(a.bindings().count(), 7, "one binding per rule and operation");
        // MATCH with a name: the prefixes of the name and the wildcard; not other prefixes.
        // (with any resource type, the wildcard of every type).
        assert_eq!(
            described(&a, &filter(ANY, Some("payments.in"), PATTERN_MATCH)),
            ["Topic payments. Prefixed User:alice Read", "Topic payments. Prefixed User:alice Write", "Group * Literal User:ops Describe"]
        );
        assert_eq!(described(&a, &filter(3, Some("anything"), PATTERN_MATCH)), ["Group * Literal User:ops Describe"]);
        // A pattern type with a name: that exact name only.
        assert_eq!(described(&a, &filter(2, Some("payments.in"), PatternType::Prefixed as i8)), Vec::<String>::new());
        assert_eq!(described(&a, &filter(2, Some("payments."), PatternType::Prefixed as i8)).len(), 2);
        assert_eq!(
            described(&a, &filter(ANY, None, PatternType::Literal as i8)).len(),
            3,
            "the wildcard group and the two cluster operations"
        );
        assert_eq!(
            described(&a, &filter(4, Some("kafka-cluster"), PATTERN_ANY)),
            ["Cluster kafka-cluster Literal User:ops Describe", "Cluster kafka-cluster Literal User:ops AlterConfigs"]
        );
        // Principal, host, operation and permission.
        let ops = BindingFilter { principal: Some("User:ops"), operation: Operation::AlterConfigs as i8, ..filter(ANY, None, PATTERN_ANY) };
        assert_eq!(described(&a, &ops), ["Cluster kafka-cluster Literal User:ops AlterConfigs"]);
        assert!(a.bindings().all(|b| !BindingFilter { host: Some("10.0.0.1"), ..filter(ANY, None, PATTERN_ANY) }.matches(&b)));
        assert!(a.bindings().all(|b| !BindingFilter { permission: 2, ..filter(ANY, None, PATTERN_ANY) }.matches(&b)), "no DENY rules");
        assert!(
            !filter(0, None, PATTERN_ANY).is_valid() && !filter(ANY, None, 0).is_valid() && filter(ANY, None, PATTERN_MATCH).is_valid()
        );
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
