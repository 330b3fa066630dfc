//! ACL checks: what one authorization check costs as the cluster holds more ACLs (made with
//! CreateAcls, as a user operator makes a few per user). corral finds the ACLs that cover a
//! resource through an index; the baseline, in the same run, reads every ACL's pattern, as a
//! check without the index does. No server: the checks run in this process, on one thread.

use std::hint::black_box;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use corral::security::acl::{AclBinding, Acls, AuthorizationConfig, Authorizer, Operation, PatternType, Resource, ResourceType, ALLOW};
use corral::security::Principal;

/// Distinct topics the checks ask about, in turn.
const TOPICS: usize = 100;

/// For `users` users: READ on a topic of their own, WRITE on a prefix of their own, and READ on
/// groups with a prefix of their own.
fn acls_for(users: usize) -> Vec<AclBinding> {
    let acl = |kind: ResourceType, name: String, pattern: PatternType, user: usize, operation: Operation| AclBinding {
        resource_type: kind.code(),
        name,
        pattern: pattern as i8,
        principal: format!("User:u{user}"),
        host: "*".to_string(),
        operation: operation as i8,
        permission: ALLOW,
    };
    (0..users)
        .flat_map(|u| {
            [
                acl(ResourceType::Topic, format!("t{u}"), PatternType::Literal, u, Operation::Read),
                acl(ResourceType::Topic, format!("p{u}."), PatternType::Prefixed, u, Operation::Write),
                acl(ResourceType::Group, format!("g{u}-"), PatternType::Prefixed, u, Operation::Read),
            ]
        })
        .collect()
}

/// Nanoseconds per call of `check` over `checks` calls, after a tenth as many unmeasured.
fn time_per_check(checks: usize, mut check: impl FnMut(usize) -> bool) -> f64 {
    for k in 0..checks / 10 {
        black_box(check(k));
    }
    let began = Instant::now();
    for k in 0..checks {
        black_box(check(k));
    }
    began.elapsed().as_nanos() as f64 / checks as f64
}

pub(crate) fn run(users: &[usize], min_time: Duration) {
    println!("{:>8} {:>8} {:>16} {:>14} {:>14}", "users", "ACLs", "indexed ns", "scan ns", "scan/indexed");
    let config = AuthorizationConfig { super_users: vec!["User:admin".to_string()], rules: Vec::new() };
    let host: Option<IpAddr> = Some([127, 0, 0, 1].into());
    for &count in users {
        let acls = acls_for(count);
        let authorizer = Authorizer::new(&config, Arc::new(Acls::new(acls.clone())));
        let principal = Principal::user(format!("u{}", count / 2));
        let principal_name = principal.to_string();
        let topics: Vec<String> = (0..TOPICS).map(|t| format!("t{}", (count / 2 + t) % count.max(1))).collect();
        // As many checks as take about `min_time` with the slower of the two.
        let mut checks = 1_000;
        let (indexed, scanned) = loop {
            let indexed =
                time_per_check(checks, |k| authorizer.allows_from(&principal, host, Operation::Read, Resource::Topic(&topics[k % TOPICS])));
            let scanned = time_per_check(checks, |k| {
                let resource = Resource::Topic(&topics[k % TOPICS]);
                acls.iter().any(|acl| acl.covers(resource) && acl.principal == principal_name)
            });
            if Duration::from_nanos((indexed.max(scanned) * checks as f64) as u64) >= min_time || checks >= 100_000_000 {
                break (indexed, scanned);
            }
            checks *= 4;
        };
        println!("{count:>8} {:>8} {indexed:>16.0} {scanned:>14.0} {:>14.1}", acls.len(), scanned / indexed);
    }
}
