//! ACLs made and removed through the metadata group (CreateAcls, DeleteAcls): every node checks
//! requests against the same set, and it outlives restarts and a controller's failover.
//!
//! The `[authorization]` rules are config, not ACLs: a DeleteAcls filter never removes one.

use std::collections::HashSet;
use std::sync::Arc;

use super::metadata_group::TopicChange;
use super::{propose, TopicError};
use crate::node::Node;
use crate::security::acl::{AclBinding, BindingFilter, MAX_ACLS};

/// Adds `acls` (each already validated) on every node. ACLs held already count as made.
pub async fn create(node: &Arc<Node>, acls: Vec<AclBinding>) -> Result<(), TopicError> {
    let _change = node.catalog.lock().await;
    let held = node.catalog.acls.all();
    let mut seen: HashSet<&AclBinding> = held.iter().collect();
    let mut new: Vec<AclBinding> = Vec::with_capacity(acls.len());
    for acl in &acls {
        if seen.insert(acl) {
            new.push(acl.clone());
        }
    }
    if new.is_empty() {
        return Ok(());
    }
    if held.len() + new.len() > MAX_ACLS {
        return Err(TopicError::PolicyViolation(format!("the cluster would hold more than {MAX_ACLS} ACLs")));
    }
    propose(node, TopicChange::CreateAcls { acls: new }).await
}

/// Removes the ACLs each filter matches, on every node; returns them, filter by filter.
pub async fn delete(node: &Arc<Node>, filters: &[BindingFilter<'_>]) -> Result<Vec<Vec<AclBinding>>, TopicError> {
    let _change = node.catalog.lock().await;
    let held = node.catalog.acls.all();
    let matched: Vec<Vec<AclBinding>> = filters.iter().map(|f| held.iter().filter(|acl| f.matches(acl)).cloned().collect()).collect();
    let mut seen: HashSet<&AclBinding> = HashSet::new();
    let gone: Vec<AclBinding> = matched.iter().flatten().filter(|acl| seen.insert(acl)).cloned().collect();
    if !gone.is_empty() {
        propose(node, TopicChange::DeleteAcls { acls: gone }).await?;
    }
    Ok(matched)
}
