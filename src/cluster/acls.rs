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
use crate::security::acl::{AclBinding, AclFilter, BindingFilter, MAX_ACLS};

/// Adds `acls` (each already validated) on every node. ACLs held already count as made. The
/// limit of [`MAX_ACLS`] is checked here against this node's copy; past it, the entry adds none
/// beyond the limit on any node.
pub async fn create(node: &Arc<Node>, acls: Vec<AclBinding>) -> Result<(), TopicError> {
    let held = node.catalog.acls.all();
    let mut seen: HashSet<&AclBinding> = HashSet::new();
    let acls: Vec<AclBinding> = acls.iter().filter(|acl| seen.insert(acl)).cloned().collect();
    let held_set: HashSet<&AclBinding> = held.iter().collect();
    let new = acls.iter().filter(|acl| !held_set.contains(acl)).count();
    if held.len() + new > MAX_ACLS {
        return Err(TopicError::PolicyViolation(format!("the cluster would hold more than {MAX_ACLS} ACLs")));
    }
    propose(node, TopicChange::CreateAcls { acls }).await
}

/// Removes the ACLs each filter matches, on every node; returns them, filter by filter, as the
/// entry's application on this node found them.
pub async fn delete(node: &Arc<Node>, filters: &[BindingFilter<'_>]) -> Result<Vec<Vec<AclBinding>>, TopicError> {
    if filters.is_empty() {
        return Ok(Vec::new());
    }
    let id = Uuid::new_v4();
    let deletions = &node.catalog.acl_deletions;
    deletions.expect(id);
    let outcome = propose(node, TopicChange::DeleteAcls { id, filters: filters.iter().map(AclFilter::of).collect() }).await;
    let matched = deletions.take(id);
    outcome?;
    // Proposed and applied here, so the result is there; an empty one if not, rather than a panic.
    Ok(matched.unwrap_or_else(|| vec![Vec::new(); filters.len()]))
}

/// What the DeleteAcls entries this node proposed removed, from their application here until
/// their handlers take it. Only entries a handler waits for are kept.
#[derive(Debug, Default)]
pub struct Deletions(Mutex<HashMap<Uuid, Option<Vec<Vec<AclBinding>>>>>);

impl Deletions {
    fn expect(&self, id: Uuid) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id, None);
    }

    /// Keeps the result of the entry `id` if a handler waits for it. An entry written twice
    /// (a proposal retried after its answer was lost) keeps the first application's result.
    pub(crate) fn complete(&self, id: Uuid, matched: Vec<Vec<AclBinding>>) {
        if let Some(slot @ None) = self.0.lock().unwrap_or_else(|e| e.into_inner()).get_mut(&id) {
            *slot = Some(matched);
        }
    }

    fn take(&self, id: Uuid) -> Option<Vec<Vec<AclBinding>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(&id).flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deletion_keeps_its_first_result_for_its_handler_only() {
        let deletions = Deletions::default();
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
        deletions.complete(waited, vec![vec![acl.clone()]]);
        deletions.complete(waited, vec![Vec::new()]);
        deletions.complete(unwaited, vec![vec![acl.clone()]]);
        assert_eq!(deletions.take(waited), Some(vec![vec![acl]]), "the entry written again matched nothing");
        assert_eq!(deletions.take(unwaited), None, "another node's entry is not kept");
        assert!(deletions.0.lock().unwrap().is_empty());
    }
}
