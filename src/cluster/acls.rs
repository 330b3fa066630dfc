//! ACLs made and removed through the metadata group (CreateAcls, DeleteAcls): every node checks
//! requests against the same set, and it outlives restarts and a controller's failover.
//!
//! Neither request is decided on this node's copy of the ACLs, which may lag the log: a creation
//! is proposed whole (adding an ACL held already changes nothing), and a deletion carries its
//! filters, matched when the entry is applied. The `[authorization]` rules are config, not ACLs:
//! a DeleteAcls filter never removes one.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use super::metadata_group::TopicChange;
use super::{propose, TopicError};
use crate::node::Node;
use crate::security::acl::{AclBinding, AclFilter, BindingFilter, Removed, MAX_ACLS_PER_REQUEST, TOO_MANY_CREATED};

/// Adds `acls` (each already validated) on every node. ACLs held already count as made; more
/// than [`MAX_ACLS_PER_REQUEST`] new ones are refused, as Kafka refuses them. Past
/// [`crate::security::acl::MAX_ACLS`] ACLs or [`crate::security::acl::MAX_ACL_BYTES`] the entry
/// adds none, on every node alike: the limits are checked when the entry is applied, since two
/// nodes may each accept a request that alone fits. They are also checked first against this
/// node's copy, to refuse without a write what cannot fit.
pub async fn create(node: &Arc<Node>, acls: Vec<AclBinding>) -> Result<(), TopicError> {
    let acls: Vec<AclBinding> = {
        let held = node.catalog.acls.all();
        let fresh = held.missing(&acls);
        if fresh.len() > MAX_ACLS_PER_REQUEST {
            return Err(TopicError::PolicyViolation(TOO_MANY_CREATED.to_string()));
        }
        if let Some(reason) = held.refuses(&fresh) {
            return Err(TopicError::PolicyViolation(reason));
        }
        let mut seen: HashSet<&AclBinding> = HashSet::new();
        acls.iter().filter(|acl| seen.insert(acl)).cloned().collect()
    };
    let id = Uuid::new_v4();
    let creations = &node.catalog.acl_creations;
    creations.expect(id);
    let outcome = propose(node, TopicChange::CreateAcls { id, acls }).await;
    let added = creations.take(id);
    outcome?;
    // Added, or (not expected: proposed and applied here) no result kept.
    added.unwrap_or(Ok(())).map_err(TopicError::PolicyViolation)
}

/// Removes the ACLs each filter matches, on every node; returns them, filter by filter, as the
/// entry's application on this node found them, or why it removed none (see
/// [`crate::security::acl::Acls::remove_matching`]). The handler has checked that there are at
/// most [`crate::security::acl::MAX_DELETE_FILTERS`].
pub async fn delete(node: &Arc<Node>, filters: &[BindingFilter<'_>]) -> Result<Result<Removed, String>, TopicError> {
    if filters.is_empty() {
        return Ok(Ok(Vec::new()));
    }
    let id = Uuid::new_v4();
    let deletions = &node.catalog.acl_deletions;
    deletions.expect(id);
    let outcome = propose(node, TopicChange::DeleteAcls { id, filters: filters.iter().map(AclFilter::of).collect() }).await;
    let matched = deletions.take(id);
    outcome?;
    // Proposed and applied here, so the result is there; an empty one if not, rather than a panic.
    Ok(matched.unwrap_or_else(|| Ok(vec![Some(Vec::new()); filters.len()])))
}

/// What the ACL entries this node proposed did when applied here (DeleteAcls: what each filter
/// removed; CreateAcls: whether the ACLs were added), from their application until their handlers
/// take it. Only entries a handler waits for are kept.
#[derive(Debug)]
pub struct Outcomes<T>(Mutex<HashMap<Uuid, Option<T>>>);

impl<T> Default for Outcomes<T> {
    fn default() -> Self {
        Outcomes(Mutex::new(HashMap::new()))
    }
}

impl<T> Outcomes<T> {
    fn expect(&self, id: Uuid) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id, None);
    }

    /// Keeps the result of the entry `id` if a handler waits for it. An entry written twice
    /// (a proposal retried after its answer was lost) keeps the first application's result.
    pub(crate) fn complete(&self, id: Uuid, outcome: T) {
        if let Some(slot @ None) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
            *slot = Some(outcome);
        }
    }

    fn take(&self, id: Uuid) -> Option<T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&id).flatten()
    }
}

impl Outcomes<Result<(), String>> {
    /// Whether a CreateAcls entry added its ACLs, or why not: once one copy of an entry written
    /// twice added them, they are there, whatever the other copy found.
    pub(crate) fn complete_added(&self, id: Uuid, added: Result<(), String>) {
        if let Some(slot) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
            if !matches!(slot, Some(Ok(()))) {
                *slot = Some(added);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_keeps_its_first_result_for_its_handler_only() {
        let deletions: Outcomes<Result<Removed, String>> = Outcomes::default();
        let (waited, unwaited) = (Uuid::new_v4(), Uuid::new_v4());
        let acl = AclBinding {
            resource_type: 2,
            name: "t".into(),
            pattern: 3,
            principal: "User:a".into(),
            host: "*".into(),
            operation: 3,
            permission: 3,
        };
        deletions.expect(waited);
        deletions.complete(waited, Ok(vec![Some(vec![acl.clone()])]));
        deletions.complete(waited, Ok(vec![Some(Vec::new())]));
        deletions.complete(unwaited, Ok(vec![Some(vec![acl.clone()])]));
        assert_eq!(deletions.take(waited), Some(Ok(vec![Some(vec![acl])])), "the entry written again matched nothing");
        assert_eq!(deletions.take(unwaited), None, "another node's entry is not kept");
        assert!(deletions.0.lock().unwrap().is_empty());

        // A creation refused, then written again once there was room: the ACLs were added.
        let creations: Outcomes<Result<(), String>> = Outcomes::default();
        creations.expect(waited);
        creations.complete_added(waited, Err("full".into()));
        creations.complete_added(waited, Ok(()));
        creations.complete_added(waited, Err("full".into()));
        creations.complete_added(unwaited, Ok(()));
        assert_eq!((creations.take(waited), creations.take(unwaited)), (Some(Ok(())), None));
    }
}
