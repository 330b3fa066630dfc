//! Kafka's ACL bindings: what CreateAcls makes and DescribeAcls and DeleteAcls match with their
//! filters, the set of them a node holds (indexed for the checks), and the resources requests
//! act on. [`super::acl`] checks requests against them and the `[authorization]` rules.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

use crate::config::authorization::{Operation, ResourceType};

/// What a request acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resource<'a> {
    Topic(&'a str),
    Group(&'a str),
    Cluster,
}

impl<'a> Resource<'a> {
    pub(super) fn kind(&self) -> ResourceType {
        match self {
            Resource::Topic(_) => ResourceType::Topic,
            Resource::Group(_) => ResourceType::Group,
            Resource::Cluster => ResourceType::Cluster,
        }
    }

    /// The resource type's code and the name, as ACLs name them.
    fn named(&self) -> (i8, &'a str) {
        match *self {
            Resource::Topic(n) | Resource::Group(n) => (self.kind().code(), n),
            Resource::Cluster => (self.kind().code(), CLUSTER_NAME),
        }
    }

    /// The operations Kafka reports in `authorized_operations` for this kind of resource.
    pub(super) fn reported(&self) -> &'static [Operation] {
        use Operation::*;
        match self {
            Resource::Topic(_) => &[Read, Write, Create, Describe, Delete, Alter, DescribeConfigs, AlterConfigs],
            Resource::Group(_) => &[Read, Describe, Delete, DescribeConfigs, AlterConfigs],
            Resource::Cluster => &[Create, Alter, Describe, DescribeConfigs, AlterConfigs, IdempotentWrite],
        }
    }
}

/// Whether a rule or ACL for `holder` (a principal, or `User:*`) applies to the principal `name`.
pub(super) fn applies_to(holder: &str, name: &str) -> bool {
    holder == name || holder == "User:*"
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
pub(super) const PATTERN_ANY: i8 = 1;
pub(super) const PATTERN_MATCH: i8 = 2;
/// `ResourceType`, `AclOperation` and `AclPermissionType` code of "any" in a filter.
pub(super) const ANY: i8 = 1;
/// `AclPermissionType` codes.
pub const DENY: i8 = 2;
pub const ALLOW: i8 = 3;
/// The name Kafka gives the cluster resource.
pub(super) const CLUSTER_NAME: &str = "kafka-cluster";
pub(super) const WILDCARD: &str = "*";
/// `AclOperation` codes run from ALL (2) to DESCRIBE_TOKENS (14).
const OPERATIONS: std::ops::RangeInclusive<i8> = 2..=14;
/// `ResourceType` codes run from TOPIC (2) to USER (7).
const RESOURCE_TYPES: std::ops::RangeInclusive<i8> = 2..=7;

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

/// Kafka's ACL binding: a pattern of resources, and what one principal from one host (or `*`) is
/// allowed or denied on them. Codes are Kafka's, so ACLs on resources corral does not check
/// (transactional ids, tokens, users) are kept and listed as Kafka keeps them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct AclBinding {
    pub resource_type: i8,
    pub name: String,
    pub pattern: i8,
    pub principal: String,
    pub host: String,
    pub operation: i8,
    pub permission: i8,
}

impl AclBinding {
    /// What its strings take, as [`MAX_ACL_BYTES`] counts them.
    fn text_bytes(&self) -> usize {
        self.name.len() + self.principal.len() + self.host.len()
    }

    /// Refuses what Kafka refuses in CreateAcls, with its messages.
    pub fn validate(&self) -> Result<(), String> {
        if self.resource_type == ResourceType::Cluster.code() && self.name != CLUSTER_NAME {
            return Err(format!("The only valid name for the CLUSTER resource is {CLUSTER_NAME}"));
        }
        if self.name.is_empty() {
            return Err("Invalid empty resource name".to_string());
        }
        if !RESOURCE_TYPES.contains(&self.resource_type) {
            return Err(format!("Invalid resourceType {}", resource_type_name(self.resource_type)));
        }
        if self.pattern != PatternType::Literal as i8 && self.pattern != PatternType::Prefixed as i8 {
            return Err(format!("Invalid patternType {}", pattern_type_name(self.pattern)));
        }
        if !OPERATIONS.contains(&self.operation) {
            return Err(format!("Invalid operation {}", if self.operation == ANY { "ANY" } else { "UNKNOWN" }));
        }
        if self.permission != ALLOW && self.permission != DENY {
            return Err(format!("Invalid permissionType {}", if self.permission == ANY { "ANY" } else { "UNKNOWN" }));
        }
        match self.principal.split_once(':') {
            Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
            _ => Err(format!("Invalid principal {:?}: expected a type and a name, such as User:alice", self.principal)),
        }
    }

    /// Whether this is an ACL of `permission` for the principal named `name` connected from
    /// `host`. An unknown host matches only ACLs for any host, but every DENY. Addresses are
    /// compared as addresses: `10.0.0.1` is the client `::ffff:10.0.0.1` of a dual-stack
    /// listener, and `0:0:0:0:0:0:0:1` (as Java writes it) is `::1`.
    pub(super) fn applies(&self, permission: i8, name: &str, host: Option<IpAddr>) -> bool {
        let from_host = || match host {
            None => permission == DENY,
            Some(ip) => self.host.parse::<IpAddr>().is_ok_and(|acl| acl.to_canonical() == ip.to_canonical()),
        };
        self.permission == permission && applies_to(&self.principal, name) && (self.host == WILDCARD || from_host())
    }

    /// Whether the pattern covers the resource. `Group("")` is covered only by the wildcard.
    /// Checks find these through [`AclSet::covering`], without reading every ACL; this plain
    /// reading is what the index is tested and measured against.
    pub fn covers(&self, resource: Resource<'_>) -> bool {
        let (kind, name) = resource.named();
        if self.resource_type != kind {
            return false;
        }
        match self.pattern {
            p if p == PatternType::Literal as i8 => self.name == name || self.name == WILDCARD,
            p if p == PatternType::Prefixed as i8 => name.starts_with(&self.name),
            _ => false,
        }
    }
}

pub(super) fn resource_type_name(code: i8) -> &'static str {
    ["UNKNOWN", "ANY", "TOPIC", "GROUP", "CLUSTER", "TRANSACTIONAL_ID", "DELEGATION_TOKEN", "USER"]
        .get(code.max(0) as usize)
        .unwrap_or(&"UNKNOWN")
}

pub(super) fn pattern_type_name(code: i8) -> &'static str {
    ["UNKNOWN", "ANY", "MATCH", "LITERAL", "PREFIXED"].get(code.max(0) as usize).unwrap_or(&"UNKNOWN")
}

/// The ACLs made with CreateAcls, as the metadata group has applied them on this node: read by
/// every request's check, changed only by the metadata group. A change publishes a new set: a
/// check in progress keeps the one it started with.
#[derive(Debug, Default)]
pub struct Acls(RwLock<Arc<AclSet>>);

/// How many ACLs the cluster keeps: enough for any deployment, and a bound on what CreateAcls
/// can make every node hold.
pub const MAX_ACLS: usize = 100_000;

/// Bytes the cluster's ACLs may take in names, principals and hosts: a bound on what every node
/// holds for them (a name may be megabytes long), far above what 100,000 ordinary ACLs take.
pub const MAX_ACL_BYTES: usize = 64 << 20;

/// ACLs one request may make or remove, as Kafka's controller bounds what one user operation
/// writes; past it the whole request is refused, with Kafka's messages.
pub const MAX_ACLS_PER_REQUEST: usize = 10_000;

/// Kafka's answer to a CreateAcls that would make more than [`MAX_ACLS_PER_REQUEST`] ACLs.
pub const TOO_MANY_CREATED: &str = "Unable to perform excessively large batch operation.";

/// Kafka's answer to a DeleteAcls that would remove more than [`MAX_ACLS_PER_REQUEST`] ACLs.
pub fn too_many_removed() -> String {
    format!("Cannot remove more than {MAX_ACLS_PER_REQUEST} acls in a single delete operation.")
}

/// Filters one DeleteAcls may hold: every filter is matched against every ACL on every node.
pub const MAX_DELETE_FILTERS: usize = 1_000;

/// ACLs one DeleteAcls lists, over all its filters (an ACL is listed under each filter that
/// matches it): many filters matching everything must not list the whole set again and again.
/// One filter alone always fits within it ([`MAX_ACLS_PER_REQUEST`] still applies).
pub const MAX_LISTED_DELETIONS: usize = MAX_ACLS;

/// What a DeleteAcls removed, filter by filter: the ACLs each matched, or `None` for a filter
/// refused because the request would list more than [`MAX_LISTED_DELETIONS`] (it removes none).
pub type Removed = Vec<Option<Vec<AclBinding>>>;

impl Acls {
    pub fn new(all: Vec<AclBinding>) -> Acls {
        Acls(RwLock::new(Arc::new(AclSet::new(all))))
    }

    pub fn all(&self) -> Arc<AclSet> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Adds those of `new` not held yet: all of them, or none and why if the set would then pass
    /// [`MAX_ACLS`] or [`MAX_ACL_BYTES`].
    pub fn add(&self, new: &[AclBinding]) -> Result<(), String> {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        let fresh = current.missing(new);
        if let Some(reason) = current.refuses(&fresh) {
            return Err(reason);
        }
        if !fresh.is_empty() {
            let mut all = current.all.clone();
            all.extend(fresh.into_iter().cloned());
            *current = Arc::new(AclSet::new(all));
        }
        Ok(())
    }

    /// Removes every ACL one of the filters matches; returns what each matched. Each filter is
    /// matched against the set as it was before, as in Kafka. Filters are taken in order; one
    /// that would bring the listing past [`MAX_LISTED_DELETIONS`] is refused and removes none.
    /// If the others would remove more than [`MAX_ACLS_PER_REQUEST`] ACLs, none is removed and
    /// the whole request is refused, as Kafka refuses it.
    pub fn remove_matching(&self, filters: &[AclFilter]) -> Result<Removed, String> {
        let mut current = self.0.write().unwrap_or_else(|e| e.into_inner());
        let all = &current.all;
        let mut gone = vec![false; all.len()];
        let (mut listed, mut removing) = (0, 0);
        let mut matches: Vec<Option<Vec<usize>>> = Vec::with_capacity(filters.len());
        for filter in filters {
            let filter = filter.borrowed();
            let matched: Vec<usize> = (0..all.len()).filter(|&i| filter.matches(&all[i])).collect();
            if listed + matched.len() > MAX_LISTED_DELETIONS {
                matches.push(None);
                continue;
            }
            listed += matched.len();
            for &i in &matched {
                removing += usize::from(!std::mem::replace(&mut gone[i], true));
            }
            matches.push(Some(matched));
        }
        if removing > MAX_ACLS_PER_REQUEST {
            return Err(too_many_removed());
        }
        let removed = matches.into_iter().map(|found| found.map(|at| at.into_iter().map(|i| all[i].clone()).collect())).collect();
        if removing > 0 {
            let kept = all.iter().zip(gone).filter(|(_, gone)| !gone).map(|(acl, _)| acl.clone()).collect();
            *current = Arc::new(AclSet::new(kept));
        }
        Ok(removed)
    }

    /// Makes the ACLs exactly `all` (a metadata snapshot installed).
    pub fn replace(&self, all: Vec<AclBinding>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(AclSet::new(all));
    }
}

/// One published set of ACLs, indexed so that a check reads only the ACLs whose pattern covers
/// its resource: LITERAL ones by resource type and name, PREFIXED ones by resource type and name
/// with the lengths such names have, so a resource's prefixes are looked up only at those lengths.
/// A check stays as cheap with thousands of ACLs (a user operator's) as with a few.
#[derive(Debug, Default)]
pub struct AclSet {
    all: Vec<AclBinding>,
    /// What `all` takes in names, principals and hosts.
    text_bytes: usize,
    /// Indexes into `all`, by resource type code (0 to 7), then name.
    literal: [HashMap<String, Vec<usize>>; 8],
    prefixed: [HashMap<String, Vec<usize>>; 8],
    /// The lengths of the PREFIXED names, by resource type code.
    prefix_lengths: [BTreeSet<usize>; 8],
}

impl AclSet {
    fn new(all: Vec<AclBinding>) -> AclSet {
        let text_bytes = all.iter().map(AclBinding::text_bytes).sum();
        let mut set = AclSet { all, text_bytes, ..AclSet::default() };
        for (at, acl) in set.all.iter().enumerate() {
            let Some(kind) = usize::try_from(acl.resource_type).ok().filter(|&k| k < 8) else {
                continue;
            };
            let by_name = match acl.pattern {
                p if p == PatternType::Literal as i8 => &mut set.literal[kind],
                p if p == PatternType::Prefixed as i8 => {
                    set.prefix_lengths[kind].insert(acl.name.len());
                    &mut set.prefixed[kind]
                }
                _ => continue,
            };
            by_name.entry(acl.name.clone()).or_default().push(at);
        }
        set
    }

    /// Those of `new` this set does not hold, each once.
    pub fn missing<'a>(&self, new: &'a [AclBinding]) -> Vec<&'a AclBinding> {
        let held: HashSet<&AclBinding> = self.all.iter().collect();
        let mut seen: HashSet<&AclBinding> = HashSet::new();
        new.iter().filter(|acl| !held.contains(acl) && seen.insert(acl)).collect()
    }

    /// Why the set cannot take `fresh` (ACLs it does not hold) besides its own; `None` if it can.
    pub fn refuses(&self, fresh: &[&AclBinding]) -> Option<String> {
        if self.all.len() + fresh.len() > MAX_ACLS {
            return Some(format!("the cluster would hold more than {MAX_ACLS} ACLs"));
        }
        let bytes = self.text_bytes + fresh.iter().map(|acl| acl.text_bytes()).sum::<usize>();
        (bytes > MAX_ACL_BYTES)
            .then(|| format!("the cluster's ACLs would take more than {MAX_ACL_BYTES} bytes of names, principals and hosts"))
    }

    /// The ACLs whose pattern covers the resource: its name or the wildcard (LITERAL), or a
    /// prefix of its name (PREFIXED). `Group("")` (every group) is covered by the wildcard alone.
    pub(super) fn covering(&self, resource: Resource<'_>) -> Vec<&AclBinding> {
        let (kind, name) = resource.named();
        let kind = kind as usize;
        let mut found: Vec<usize> = Vec::new();
        let literal = &self.literal[kind];
        found.extend(literal.get(name).into_iter().flatten());
        if name != WILDCARD {
            found.extend(literal.get(WILDCARD).into_iter().flatten());
        }
        // Half-open: `1..=0` would panic for the empty name of `Group("")`.
        for &length in self.prefix_lengths[kind].range(1..name.len() + 1) {
            if let Some(prefix) = name.get(..length) {
                found.extend(self.prefixed[kind].get(prefix).into_iter().flatten());
            }
        }
        found.into_iter().map(|at| &self.all[at]).collect()
    }

    /// The ACLs on resources of one type.
    pub(super) fn of_type(&self, kind: ResourceType) -> impl Iterator<Item = &AclBinding> {
        self.all.iter().filter(move |acl| acl.resource_type == kind.code())
    }
}

impl std::ops::Deref for AclSet {
    type Target = [AclBinding];

    fn deref(&self) -> &[AclBinding] {
        &self.all
    }
}

/// A DescribeAcls or DeleteAcls filter: each field is a code or a name to match, or "any".
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

/// A [`BindingFilter`] that owns its names, as a DeleteAcls entry of the metadata log holds it:
/// the filters are matched when the entry is applied, against the ACLs every node then holds.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AclFilter {
    pub resource_type: i8,
    pub name: Option<String>,
    pub pattern_type: i8,
    pub principal: Option<String>,
    pub host: Option<String>,
    pub operation: i8,
    pub permission: i8,
}

impl AclFilter {
    pub fn of(f: &BindingFilter<'_>) -> AclFilter {
        AclFilter {
            resource_type: f.resource_type,
            name: f.name.map(str::to_string),
            pattern_type: f.pattern_type,
            principal: f.principal.map(str::to_string),
            host: f.host.map(str::to_string),
            operation: f.operation,
            permission: f.permission,
        }
    }

    pub fn borrowed(&self) -> BindingFilter<'_> {
        BindingFilter {
            resource_type: self.resource_type,
            name: self.name.as_deref(),
            pattern_type: self.pattern_type,
            principal: self.principal.as_deref(),
            host: self.host.as_deref(),
            operation: self.operation,
            permission: self.permission,
        }
    }
}

/// Why a filter that is not [`BindingFilter::is_valid`] is refused (INVALID_REQUEST). Kafka closes
/// the connection as it parses one.
pub const INVALID_FILTER: &str = "The filter holds an UNKNOWN resource type, pattern type, operation or permission.";

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
    pub fn matches(&self, b: &AclBinding) -> bool {
        let pattern_matches = match self.pattern_type {
            PATTERN_ANY | PATTERN_MATCH => true,
            code => code == b.pattern,
        };
        let name_matches = match self.name {
            None => true,
            Some(name) if self.pattern_type != PATTERN_MATCH => name == b.name,
            Some(name) if b.pattern == PatternType::Literal as i8 => name == b.name || b.name == WILDCARD,
            Some(name) => name.starts_with(&b.name),
        };
        (self.resource_type == ANY || self.resource_type == b.resource_type)
            && pattern_matches
            && name_matches
            && self.principal.is_none_or(|p| p == b.principal)
            && self.host.is_none_or(|h| h == b.host)
            && (self.operation == ANY || self.operation == b.operation)
            && (self.permission == ANY || self.permission == b.permission)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    pub(in crate::security) fn acl(
        resource_type: i8,
        name: &str,
        pattern: PatternType,
        principal: &str,
        operation: Operation,
        permission: i8,
    ) -> AclBinding {
        AclBinding {
            resource_type,
            name: name.to_string(),
            pattern: pattern as i8,
            principal: principal.to_string(),
            host: WILDCARD.to_string(),
            operation: operation as i8,
            permission,
        }
    }

    #[test]
    fn new_acls_are_checked_as_kafka_checks_them() {
        let good = acl(2, "orders", PatternType::Literal, "User:bob", Operation::Read, ALLOW);
        assert_eq!(good.validate(), Ok(()));
        let refused = |b: AclBinding| b.validate().unwrap_err();
        assert_eq!(
            refused(AclBinding { name: "x".into(), ..acl(4, "", PatternType::Literal, "User:b", Operation::Alter, ALLOW) }),
            "The only valid name for the CLUSTER resource is kafka-cluster"
        );
        assert_eq!(refused(AclBinding { name: String::new(), ..good.clone() }), "Invalid empty resource name");
        assert_eq!(refused(AclBinding { resource_type: ANY, ..good.clone() }), "Invalid resourceType ANY");
        assert_eq!(refused(AclBinding { pattern: PATTERN_MATCH, ..good.clone() }), "Invalid patternType MATCH");
        assert_eq!(refused(AclBinding { operation: ANY, ..good.clone() }), "Invalid operation ANY");
        assert_eq!(refused(AclBinding { permission: 0, ..good.clone() }), "Invalid permissionType UNKNOWN");
        assert!(refused(AclBinding { principal: "bob".into(), ..good.clone() }).contains("expected a type and a name"));
    }

    #[test]
    fn acls_past_the_limit_are_all_refused() {
        let topic = |i: usize| acl(2, &format!("t{i}"), PatternType::Literal, "User:a", Operation::Read, ALLOW);
        let acls = Acls::new((0..MAX_ACLS - 1).map(topic).collect());
        let too_many = Err(format!("the cluster would hold more than {MAX_ACLS} ACLs"));
        assert_eq!(acls.add(&[topic(MAX_ACLS), topic(MAX_ACLS + 1)]), too_many, "one too many: none is added");
        assert_eq!(acls.all().len(), MAX_ACLS - 1);
        assert_eq!(acls.add(&[topic(0), topic(MAX_ACLS), topic(MAX_ACLS)]), Ok(()), "held ones and repeats count once");
        assert_eq!(acls.all().len(), MAX_ACLS);
        assert_eq!(acls.add(&[topic(1)]), Ok(()), "adding what is held changes nothing");
        assert_eq!(acls.add(&[topic(MAX_ACLS + 1)]), too_many);

        // Two filters matching everything would list the whole set twice: the second is refused.
        let everything = BindingFilter {
            resource_type: ANY,
            name: None,
            pattern_type: PATTERN_ANY,
            principal: None,
            host: None,
            operation: ANY,
            permission: ANY,
        };
        let first = BindingFilter { name: Some("t0"), ..everything.clone() };
        let last = BindingFilter { name: Some(&format!("t{MAX_ACLS}")), ..everything.clone() };
        let removed = acls.remove_matching(&[first, everything.clone(), last, everything.clone()].map(|f| AclFilter::of(&f))).unwrap();
        let counts: Vec<Option<usize>> = removed.iter().map(|r| r.as_ref().map(Vec::len)).collect();
        assert_eq!(counts, [Some(1), None, Some(1), None]);
        assert_eq!(acls.all().len(), MAX_ACLS - 2, "a refused filter removes none");
        // Past Kafka's bound of one request, the whole request is refused.
        assert_eq!(acls.remove_matching(&[AclFilter::of(&everything)]), Err(too_many_removed()));
        assert_eq!(acls.all().len(), MAX_ACLS - 2);
    }

    #[test]
    fn one_deletion_removes_at_most_kafkas_bound() {
        let of = |who: &str, i: usize| acl(2, &format!("t{i}"), PatternType::Literal, who, Operation::Read, ALLOW);
        let acls = Acls::new((0..=MAX_ACLS_PER_REQUEST).map(|i| of("User:a", i)).chain((0..5).map(|i| of("User:b", i))).collect());
        let whose = |who: &'static str| {
            AclFilter::of(&BindingFilter {
                resource_type: ANY,
                name: None,
                pattern_type: PATTERN_ANY,
                principal: Some(who),
                host: None,
                operation: ANY,
                permission: ANY,
            })
        };
        assert_eq!(acls.remove_matching(&[whose("User:b"), whose("User:a")]), Err(too_many_removed()), "one too many: the whole request");
        assert_eq!(acls.all().len(), MAX_ACLS_PER_REQUEST + 6, "and none removed");
        let removed = acls.remove_matching(&[whose("User:b"), whose("User:b")]).unwrap();
        assert_eq!(
            removed.iter().map(|r| r.as_ref().map(Vec::len)).collect::<Vec<_>>(),
            [Some(5), Some(5)],
            "an ACL removed once counts once"
        );
        assert_eq!(acls.all().len(), MAX_ACLS_PER_REQUEST + 1);
        let one =
            AclFilter::of(&BindingFilter { name: Some("t0"), pattern_type: PatternType::Literal as i8, ..whose("User:a").borrowed() });
        assert_eq!(acls.remove_matching(&[one]).map(|r| r[0].as_ref().map(Vec::len)), Ok(Some(1)));
        assert_eq!(
            acls.remove_matching(&[whose("User:a")]).map(|r| r[0].as_ref().map(Vec::len)),
            Ok(Some(MAX_ACLS_PER_REQUEST)),
            "exactly the bound"
        );
        assert_eq!(acls.all().len(), 0);
    }

    #[test]
    fn acls_past_their_bytes_are_refused() {
        let named = |name: String| acl(2, &name, PatternType::Prefixed, "User:a", Operation::Read, ALLOW);
        let large = |i: usize| named(format!("{i:02}{}", "x".repeat(MAX_ACL_BYTES / 4)));
        let acls = Acls::default();
        assert_eq!(acls.add(&[large(0), large(1), large(2)]), Ok(()));
        let refused = acls.add(&[large(3), named("small".into())]).unwrap_err();
        assert!(refused.contains("bytes of names, principals and hosts"), "{refused}");
        assert_eq!(acls.all().len(), 3);
        assert_eq!(acls.add(&[named("small".into())]), Ok(()), "what fits is still made");
    }

    #[test]
    fn hosts_are_compared_as_addresses() {
        let from =
            |host: &str| AclBinding { host: host.to_string(), ..acl(2, "t", PatternType::Literal, "User:a", Operation::Read, ALLOW) };
        let ip = |text: &str| Some(text.parse::<IpAddr>().unwrap());
        assert!(from("10.0.0.7").applies(ALLOW, "User:a", ip("::ffff:10.0.0.7")), "an IPv4 client of a dual-stack listener");
        assert!(from("0:0:0:0:0:0:0:1").applies(ALLOW, "User:a", ip("::1")), "IPv6 as Java writes it");
        assert!(!from("10.0.0.7").applies(ALLOW, "User:a", ip("10.0.0.8")));
        assert!(!from("not-an-address").applies(ALLOW, "User:a", ip("10.0.0.8")));
        assert!(from("*").applies(ALLOW, "User:a", None) && !from("10.0.0.7").applies(ALLOW, "User:a", None));
        assert!(AclBinding { permission: DENY, ..from("10.0.0.7") }.applies(DENY, "User:a", None), "every DENY applies to an unknown host");
    }

    #[test]
    fn the_index_finds_what_a_scan_finds() {
        let mut all = Vec::new();
        for (kind, name, pattern) in [
            (2, "orders", PatternType::Literal),
            (2, "*", PatternType::Literal),
            (2, "ord", PatternType::Prefixed),
            (2, "orders.", PatternType::Prefixed),
            (2, "o", PatternType::Prefixed),
            (2, "p", PatternType::Prefixed),
            (3, "*", PatternType::Literal),
            (3, "orders", PatternType::Prefixed),
            (3, "app-", PatternType::Prefixed),
            (4, CLUSTER_NAME, PatternType::Literal),
            (5, "orders", PatternType::Literal),
            (2, "é", PatternType::Prefixed),
        ] {
            for permission in [ALLOW, DENY] {
                all.push(acl(kind, name, pattern, "User:a", Operation::Read, permission));
            }
        }
        let set = AclSet::new(all.clone());
        let names = ["orders", "orders.eu", "ord", "or", "o", "p", "*", "app-1", "x", "", "éa", "e"];
        let resources = names.iter().flat_map(|&n| [Resource::Topic(n), Resource::Group(n)]).chain([Resource::Cluster]);
        for resource in resources {
            let mut by_index: Vec<&AclBinding> = set.covering(resource);
            let mut by_scan: Vec<&AclBinding> = all.iter().filter(|acl| acl.covers(resource)).collect();
            by_index.sort_by_key(|acl| (acl.resource_type, acl.name.clone(), acl.pattern, acl.permission));
            by_scan.sort_by_key(|acl| (acl.resource_type, acl.name.clone(), acl.pattern, acl.permission));
            assert_eq!(by_index, by_scan, "{resource:?}");
        }
        assert_eq!(set.covering(Resource::Group("")).len(), 2, "every group: the wildcard's ALLOW and DENY");
        assert_eq!(set.of_type(ResourceType::Group).count(), 6);
        assert_eq!(set.len(), all.len());
    }
}
