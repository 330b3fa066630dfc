//! Authorization: which principal may do what to which topic, group or the cluster.
//!
//! Rules come from `[authorization]`; each gives a principal operations on the topics or groups
//! whose names start with a prefix, or on the cluster. Kafka's implications hold: READ, WRITE,
//! DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS implies DESCRIBE_CONFIGS; ALL is everything.
//! With no rules and no super users every request is allowed, as before authorization existed.
//!
//! Besides the rules, the ACLs made with CreateAcls ([`Acls`], kept in the metadata group): ALLOW
//! or DENY, for one principal from one host or any, as Kafka's authorizer applies them. A DENY
//! wins over every ALLOW, a rule's too; super users pass all the same.
//!
//! `__consumer_offsets` holds every group's members, client ids and hosts: it may be read and
//! described only by principals allowed to describe every group (a group rule with an empty
//! prefix) or given the operation by an ACL naming the topic (LITERAL `__consumer_offsets`, as
//! Kafka's users grant it to lag monitors), and written, altered or deleted by no one but super
//! users.

use std::collections::HashSet;
use std::net::IpAddr;
use std::sync::Arc;

use super::acl_binding::{applies_to, CLUSTER_NAME, WILDCARD};
pub use super::acl_binding::{
    AclBinding, AclFilter, Acls, BindingFilter, PatternType, Removed, Resource, ALLOW, DENY, INVALID_FILTER, MAX_ACLS,
    MAX_ACLS_PER_REQUEST, MAX_ACL_BYTES, MAX_DELETE_FILTERS, MAX_LISTED_DELETIONS, TOO_MANY_CREATED,
};
use super::Principal;
pub use crate::config::authorization::{AuthorizationConfig, Operation, ResourceType, Rule};

impl Operation {
    /// Whether holding `self` grants `wanted`.
    fn grants(self, wanted: Operation) -> bool {
        grants(self as i8, wanted)
    }

    /// The operations `__consumer_offsets` allows at all (to whoever may describe every group,
    /// or is given them by an ACL naming the topic).
    fn grants_reading(self) -> bool {
        matches!(self, Operation::Read | Operation::Describe | Operation::DescribeConfigs)
    }
}

/// Whether an ALLOW of the operation coded `held` grants `wanted` (Kafka's implications).
fn grants(held: i8, wanted: Operation) -> bool {
    use Operation::*;
    let implies = |op: Operation| held == op as i8;
    held == wanted as i8
        || implies(All)
        || (wanted == Describe && (implies(Read) || implies(Write) || implies(Delete) || implies(Alter)))
        || (wanted == DescribeConfigs && implies(AlterConfigs))
}

/// Whether a DENY of the operation coded `held` denies `wanted`: only the operation itself and
/// ALL, as in Kafka (a denied READ leaves DESCRIBE alone).
fn denies(held: i8, wanted: Operation) -> bool {
    held == wanted as i8 || held == Operation::All as i8
}

/// The rules and the ACLs, ready to check requests against.
#[derive(Debug, Default)]
pub struct Authorizer {
    config: AuthorizationConfig,
    acls: Arc<Acls>,
}

impl Authorizer {
    /// `acls` is the set CreateAcls and DeleteAcls change (the catalog's).
    pub fn new(config: &AuthorizationConfig, acls: Arc<Acls>) -> Authorizer {
        Authorizer { config: config.clone(), acls }
    }

    /// No rules: every request is allowed.
    pub fn is_open(&self) -> bool {
        self.config.rules.is_empty() && self.config.super_users.is_empty()
    }

    /// [`Authorizer::allows_from`] for a request whose client's address is not at hand: only ACLs
    /// for any host allow it, and every DENY applies.
    pub fn allows(&self, principal: &Principal, operation: Operation, resource: Resource<'_>) -> bool {
        self.allows_from(principal, None, operation, resource)
    }

    /// Whether `principal`, connected from `host`, may perform `operation` on `resource`.
    pub fn allows_from(&self, principal: &Principal, host: Option<IpAddr>, operation: Operation, resource: Resource<'_>) -> bool {
        if self.is_open() || self.is_super_user(principal) {
            return true;
        }
        let name = principal.to_string();
        let acls = self.acls.all();
        let covering = acls.covering(resource);
        let denied = covering.iter().any(|acl| acl.applies(DENY, &name, host) && denies(acl.operation, operation));
        if denied {
            return false;
        }
        if let Resource::Topic(topic) = resource {
            if topic == crate::cluster::OFFSETS_TOPIC {
                let every_group = Resource::Group("");
                let naming_it = |acl: &&&AclBinding| acl.pattern == PatternType::Literal as i8 && acl.name == topic;
                return operation.grants_reading()
                    && (self.granted(&name, host, &acls.covering(every_group), Operation::Describe, every_group)
                        || covering
                            .iter()
                            .filter(naming_it)
                            .any(|acl| acl.applies(ALLOW, &name, host) && grants(acl.operation, operation)));
            }
        }
        self.granted(&name, host, &covering, operation, resource)
    }

    /// Whether the principal may perform `operation` on some resource of this kind (Kafka's
    /// `authorizeByResourceType`: an idempotent producer needs WRITE on any topic). As in Kafka,
    /// only the operation itself and ALL count, and a DENY overrides the ALLOWs it dominates: a
    /// DENY on the LITERAL wildcard every one, a DENY on a name the ALLOW on that literal name,
    /// and a DENY on a prefix every ALLOW whose name starts with it. An ALLOW on the wildcard
    /// (or a rule for every name) stands against any DENY but the wildcard's.
    pub fn allows_some(&self, principal: &Principal, host: Option<IpAddr>, operation: Operation, kind: ResourceType) -> bool {
        if self.is_open() || self.is_super_user(principal) {
            return true;
        }
        let name = principal.to_string();
        let acls = self.acls.all();
        let counts = |code: i8| code == operation as i8 || code == Operation::All as i8;
        let (mut denied_names, mut denied_prefixes) = (HashSet::new(), HashSet::new());
        // (LITERAL, name) of each ALLOW; the wildcard apart.
        let mut allowed: Vec<(bool, &str)> = Vec::new();
        let mut allowed_everywhere = false;
        for acl in acls.of_type(kind).filter(|acl| counts(acl.operation)) {
            let literal = acl.pattern == PatternType::Literal as i8;
            if acl.applies(DENY, &name, host) {
                match literal {
                    true if acl.name == WILDCARD => return false,
                    true => denied_names.insert(acl.name.as_str()),
                    false => denied_prefixes.insert(acl.name.as_str()),
                };
            } else if acl.applies(ALLOW, &name, host) {
                allowed_everywhere |= literal && acl.name == WILDCARD;
                allowed.push((literal, acl.name.as_str()));
            }
        }
        for rule in &self.config.rules {
            if applies_to(&rule.principal, &name) && rule.resource == kind && rule.operations.iter().any(|held| counts(*held as i8)) {
                allowed_everywhere |= rule.prefix.is_empty();
                allowed.push((false, rule.prefix.as_str()));
            }
        }
        let dominated = |(literal, allowed): &(bool, &str)| {
            (*literal && denied_names.contains(allowed))
                || (1..=allowed.len()).filter_map(|end| allowed.get(..end)).any(|prefix| denied_prefixes.contains(prefix))
        };
        allowed_everywhere || allowed.iter().any(|a| !dominated(a))
    }

    /// `authorized_operations` as Kafka encodes it: a bit per allowed operation.
    pub fn operations(&self, principal: &Principal, host: Option<IpAddr>, resource: Resource<'_>) -> i32 {
        let allowed = |op: &&Operation| self.allows_from(principal, host, **op, resource);
        resource.reported().iter().filter(allowed).fold(0, |bits, op| bits | (1 << *op as i32))
    }

    fn is_super_user(&self, principal: &Principal) -> bool {
        let name = principal.to_string();
        self.config.super_users.contains(&name)
    }

    /// Whether a rule or an ALLOW among `covering` (the ACLs that cover the resource) gives the
    /// principal named `name` the operation on the resource. For `Group("")` as the resource:
    /// whether one covers every group.
    fn granted(&self, name: &str, host: Option<IpAddr>, covering: &[&AclBinding], operation: Operation, resource: Resource<'_>) -> bool {
        let by_rule = self.config.rules.iter().any(|rule| {
            applies_to(&rule.principal, name)
                && rule.resource == resource.kind()
                && match resource {
                    Resource::Topic(n) | Resource::Group(n) => n.starts_with(&rule.prefix),
                    Resource::Cluster => true,
                }
                && rule.operations.iter().any(|held| held.grants(operation))
        });
        by_rule || covering.iter().any(|acl| acl.applies(ALLOW, name, host) && grants(acl.operation, operation))
    }
}

impl Authorizer {
    /// The rules as Kafka's ACL bindings, one per rule and operation (a prefix as a PREFIXED
    /// pattern, the empty prefix as the LITERAL wildcard, the cluster as `kafka-cluster`, an ALLOW
    /// from any host), then the ACLs. Super users are no binding, as in Kafka (`super.users` is
    /// not an ACL).
    pub fn bindings(&self) -> Vec<AclBinding> {
        let rules = self.config.rules.iter().flat_map(|rule| {
            let (name, pattern) = match rule.resource {
                ResourceType::Cluster => (CLUSTER_NAME, PatternType::Literal),
                _ if rule.prefix.is_empty() => (WILDCARD, PatternType::Literal),
                _ => (rule.prefix.as_str(), PatternType::Prefixed),
            };
            rule.operations.iter().map(move |&operation| AclBinding {
                resource_type: rule.resource.code(),
                name: name.to_string(),
                pattern: pattern as i8,
                principal: rule.principal.clone(),
                host: WILDCARD.to_string(),
                operation: operation as i8,
                permission: ALLOW,
            })
        });
        rules.chain(self.acls.all().iter().cloned()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::acl_binding::tests::acl;
    use super::super::acl_binding::{pattern_type_name, resource_type_name, ANY, PATTERN_ANY, PATTERN_MATCH};
    use super::*;

    fn authorizer(text: &str) -> Authorizer {
        let config: AuthorizationConfig = toml::from_str(text).unwrap();
        config.validate().unwrap();
        Authorizer::new(&config, Default::default())
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
    fn offsets_topic_is_read_with_an_acl_naming_it() {
        let acls = Arc::new(Acls::default());
        let a = Authorizer::new(&toml::from_str(RULES).unwrap(), acls.clone());
        let offsets = Resource::Topic(crate::cluster::OFFSETS_TOPIC);
        let (burrow, carol) = (Principal::user("burrow"), Principal::user("carol"));
        acls.add(&[
            acl(2, crate::cluster::OFFSETS_TOPIC, PatternType::Literal, "User:burrow", Operation::Read, ALLOW),
            acl(2, "*", PatternType::Literal, "User:carol", Operation::Read, ALLOW),
            acl(2, "__", PatternType::Prefixed, "User:carol", Operation::Read, ALLOW),
        ])
        .unwrap();
        assert!(a.allows(&burrow, Operation::Read, offsets));
        assert!(a.allows(&burrow, Operation::Describe, offsets), "READ implies DESCRIBE");
        assert!(!a.allows(&burrow, Operation::Write, offsets));
        assert!(!a.allows(&carol, Operation::Read, offsets), "only an ACL naming the topic opens it");
        acls.add(&[acl(2, crate::cluster::OFFSETS_TOPIC, PatternType::Literal, "User:carol", Operation::Write, ALLOW)]).unwrap();
        assert!(!a.allows(&carol, Operation::Write, offsets), "no one but super users writes it");
        // A PREFIXED ACL of the very name is a prefix all the same; a host's ACL from that host only.
        let dave = Principal::user("dave");
        acls.add(&[
            acl(2, crate::cluster::OFFSETS_TOPIC, PatternType::Prefixed, "User:dave", Operation::Read, ALLOW),
            AclBinding {
                host: "10.0.0.7".into(),
                ..acl(2, crate::cluster::OFFSETS_TOPIC, PatternType::Literal, "User:carol", Operation::Read, ALLOW)
            },
        ])
        .unwrap();
        assert!(!a.allows(&dave, Operation::Read, offsets));
        let from = |ip: &str| Some(ip.parse::<IpAddr>().unwrap());
        assert!(a.allows_from(&carol, from("10.0.0.7"), Operation::Read, offsets));
        assert!(!a.allows_from(&carol, from("10.0.0.8"), Operation::Read, offsets) && !a.allows(&carol, Operation::Read, offsets));
        // A DENY wins: on the name, or on every topic.
        acls.add(&[acl(2, "*", PatternType::Literal, "User:carol", Operation::Read, DENY)]).unwrap();
        assert!(!a.allows_from(&carol, from("10.0.0.7"), Operation::Read, offsets));
        acls.add(&[acl(2, crate::cluster::OFFSETS_TOPIC, PatternType::Literal, "User:burrow", Operation::Read, DENY)]).unwrap();
        assert!(!a.allows(&burrow, Operation::Read, offsets));
    }

    #[test]
    fn authorized_operations_bits() {
        let a = authorizer(RULES);
        // READ (3) and DESCRIBE (8) on the group; nothing else.
        assert_eq!(a.operations(&Principal::user("alice"), None, Resource::Group("payments-x")), (1 << 3) | (1 << 8));
        assert_eq!(a.operations(&Principal::user("alice"), None, Resource::Group("x")), 0);
        let open = Authorizer::default();
        assert_eq!(
            open.operations(&Principal::anonymous(), None, Resource::Group("g")),
            (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
        );
    }

    fn filter(resource_type: i8, name: Option<&str>, pattern_type: i8) -> BindingFilter<'_> {
        BindingFilter { resource_type, name, pattern_type, principal: None, host: None, operation: ANY, permission: ANY }
    }

    fn described(a: &Authorizer, f: &BindingFilter<'_>) -> Vec<String> {
        let operation =
            |code: i8| ["", "", "ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE", "", "", "ALTER_CONFIGS"][code as usize];
        a.bindings()
            .iter()
            .filter(|b| f.matches(b))
            .map(|b| {
                let (kind, pattern) = (resource_type_name(b.resource_type), pattern_type_name(b.pattern));
                format!("{kind} {} {pattern} {} {}", b.name, b.principal, operation(b.operation))
            })
            .collect()
    }

    #[test]
    fn rules_as_acl_bindings_and_filters() {
        let a = authorizer(RULES);
        assert_eq!(a.bindings().len(), 7, "one binding per rule and operation");
        // MATCH with a name: the prefixes of the name and the wildcard; not other prefixes.
        // (with any resource type, the wildcard of every type).
        assert_eq!(
            described(&a, &filter(ANY, Some("payments.in"), PATTERN_MATCH)),
            ["TOPIC payments. PREFIXED User:alice READ", "TOPIC payments. PREFIXED User:alice WRITE", "GROUP * LITERAL User:ops DESCRIBE"]
        );
        assert_eq!(described(&a, &filter(3, Some("anything"), PATTERN_MATCH)), ["GROUP * LITERAL User:ops DESCRIBE"]);
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
            ["CLUSTER kafka-cluster LITERAL User:ops DESCRIBE", "CLUSTER kafka-cluster LITERAL User:ops ALTER_CONFIGS"]
        );
        // Principal, host, operation and permission.
        let ops = BindingFilter { principal: Some("User:ops"), operation: Operation::AlterConfigs as i8, ..filter(ANY, None, PATTERN_ANY) };
        assert_eq!(described(&a, &ops), ["CLUSTER kafka-cluster LITERAL User:ops ALTER_CONFIGS"]);
        assert!(a.bindings().iter().all(|b| !BindingFilter { host: Some("10.0.0.1"), ..filter(ANY, None, PATTERN_ANY) }.matches(b)));
        assert!(
            a.bindings().iter().all(|b| !BindingFilter { permission: 2, ..filter(ANY, None, PATTERN_ANY) }.matches(b)),
            "no DENY rules"
        );
        assert!(
            !filter(0, None, PATTERN_ANY).is_valid() && !filter(ANY, None, 0).is_valid() && filter(ANY, None, PATTERN_MATCH).is_valid()
        );
    }

    #[test]
    fn acls_allow_and_deny_beside_the_rules() {
        let acls = Arc::new(Acls::default());
        let config: AuthorizationConfig = toml::from_str(RULES).unwrap();
        let a = Authorizer::new(&config, acls.clone());
        let (alice, bob) = (Principal::user("alice"), Principal::user("bob"));
        let from = |ip: &str| Some(ip.parse::<IpAddr>().unwrap());
        assert!(!a.allows(&bob, Operation::Read, Resource::Topic("orders")));
        acls.add(&[
            acl(2, "orders", PatternType::Literal, "User:bob", Operation::Read, ALLOW),
            acl(3, "bob-", PatternType::Prefixed, "User:bob", Operation::Read, ALLOW),
            AclBinding { host: "10.0.0.7".to_string(), ..acl(2, "*", PatternType::Literal, "User:bob", Operation::Write, ALLOW) },
        ])
        .unwrap();
        assert!(a.allows(&bob, Operation::Read, Resource::Topic("orders")));
        assert!(a.allows(&bob, Operation::Describe, Resource::Topic("orders")), "READ implies DESCRIBE");
        assert!(!a.allows(&bob, Operation::Read, Resource::Topic("orders2")), "a literal name is that name only");
        assert!(a.allows(&bob, Operation::Read, Resource::Group("bob-app")));
        assert!(!a.allows(&bob, Operation::Read, Resource::Group("app")));
        // An ACL for one host allows only from that host.
        assert!(a.allows_from(&bob, from("10.0.0.7"), Operation::Write, Resource::Topic("any")));
        assert!(!a.allows_from(&bob, from("10.0.0.8"), Operation::Write, Resource::Topic("any")));
        assert!(!a.allows(&bob, Operation::Write, Resource::Topic("any")), "an unknown host is no host");
        assert!(a.allows_some(&bob, from("10.0.0.7"), Operation::Write, ResourceType::Topic));
        // A DENY wins over ACLs and rules alike, for its operation (and ALL) only.
        acls.add(&[
            acl(2, "payments.", PatternType::Prefixed, "User:*", Operation::Write, DENY),
            acl(2, "orders", PatternType::Literal, "User:bob", Operation::Read, DENY),
        ])
        .unwrap();
        assert!(!a.allows(&alice, Operation::Write, Resource::Topic("payments.in")), "the rule's WRITE is denied");
        assert!(a.allows(&alice, Operation::Read, Resource::Topic("payments.in")));
        assert!(!a.allows(&bob, Operation::Read, Resource::Topic("orders")));
        assert!(a.allows(&bob, Operation::Describe, Resource::Topic("orders")), "a denied READ leaves DESCRIBE");
        assert!(a.allows(&Principal::user("admin"), Operation::Write, Resource::Topic("payments.in")), "super users pass");
        assert_eq!(a.operations(&bob, None, Resource::Topic("orders")), 1 << 8);
        // A wildcard DENY of a kind refuses it by type.
        acls.add(&[acl(2, "*", PatternType::Literal, "User:bob", Operation::Write, DENY)]).unwrap();
        assert!(!a.allows_some(&bob, from("10.0.0.7"), Operation::Write, ResourceType::Topic));
        // A group wildcard lets one read __consumer_offsets, as a rule for every group does.
        let offsets = Resource::Topic(crate::cluster::OFFSETS_TOPIC);
        assert!(!a.allows(&bob, Operation::Read, offsets));
        acls.add(&[acl(3, "*", PatternType::Literal, "User:bob", Operation::Describe, ALLOW)]).unwrap();
        assert!(a.allows(&bob, Operation::Read, offsets));
        // Listed after the rules; deleted exactly.
        assert_eq!(a.bindings().len(), 7 + 7);
        let describe_groups = BindingFilter {
            resource_type: 3,
            name: Some("*"),
            pattern_type: PatternType::Literal as i8,
            principal: Some("User:bob"),
            host: None,
            operation: Operation::Describe as i8,
            permission: ALLOW,
        };
        let removed = acls.remove_matching(&[AclFilter::of(&describe_groups)]).unwrap();
        assert_eq!(removed, [Some(vec![acl(3, "*", PatternType::Literal, "User:bob", Operation::Describe, ALLOW)])]);
        assert!(!a.allows(&bob, Operation::Read, offsets));
        acls.add(&[acl(2, "orders", PatternType::Literal, "User:bob", Operation::Read, ALLOW)]).unwrap();
        assert_eq!(acls.all().len(), 6, "an ACL held already is not added twice");
    }

    #[test]
    fn some_resource_of_a_kind_as_kafka_weighs_it() {
        let acls = Arc::new(Acls::default());
        let config: AuthorizationConfig =
            toml::from_str(r#"rules = [{ principal = "User:carol", resource = "topic", prefix = "payments.", operations = ["write"] }]"#)
                .unwrap();
        let a = Authorizer::new(&config, acls.clone());
        let some = |who: &str| a.allows_some(&Principal::user(who), None, Operation::Write, ResourceType::Topic);
        let write = |name: &str, pattern: PatternType, who: &str, permission: i8| acl(2, name, pattern, who, Operation::Write, permission);
        assert!(some("carol"), "a rule's prefix");
        assert!(!some("bob"));
        acls.add(&[write("orders", PatternType::Literal, "User:bob", ALLOW)]).unwrap();
        assert!(some("bob"));
        acls.add(&[write("ord", PatternType::Prefixed, "User:bob", DENY)]).unwrap();
        assert!(!some("bob"), "a DENY on a prefix of the ALLOW's name dominates it");
        acls.add(&[write("queue.", PatternType::Prefixed, "User:bob", ALLOW), write("queue.x", PatternType::Literal, "User:bob", DENY)])
            .unwrap();
        assert!(some("bob"), "a DENY on one name leaves the prefix ALLOW");
        acls.add(&[write("queue", PatternType::Prefixed, "User:bob", DENY)]).unwrap();
        assert!(!some("bob"));
        acls.add(&[write("*", PatternType::Literal, "User:bob", ALLOW)]).unwrap();
        assert!(some("bob"), "the wildcard ALLOW stands against prefix DENYs");
        acls.add(&[write("*", PatternType::Literal, "User:bob", DENY)]).unwrap();
        assert!(!some("bob"), "the wildcard DENY refuses every one");
        acls.add(&[write("pay", PatternType::Prefixed, "User:carol", DENY)]).unwrap();
        assert!(!some("carol"), "a DENY dominates a rule's prefix too");
        acls.add(&[acl(2, "x", PatternType::Literal, "User:dave", Operation::Read, ALLOW)]).unwrap();
        assert!(!some("dave"), "only the operation itself and ALL count");
        acls.add(&[acl(2, "x", PatternType::Literal, "User:dave", Operation::All, ALLOW)]).unwrap();
        assert!(some("dave"));
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
