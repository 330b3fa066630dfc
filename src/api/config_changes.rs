//! What the config APIs share: the resource types (DescribeConfigs too), and for AlterConfigs
//! and IncrementalAlterConfigs which resources a request may change, and where each goes.
//!
//! A topic's configs are changed through the metadata group (every node applies them to the
//! partitions it holds); in front of an upstream cluster they are the upstream's, and the
//! request's topic resources are passed on to it. A consumer group's own configs go through the
//! metadata group too; a sidecar's groups are its group service's, and their resources are
//! passed on to it. corral's own settings come from its config file and are not changed at run
//! time.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::cluster::TopicError;
use crate::node::Node;
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};
use crate::sidecar::GroupService;
use crate::upstream::admin::ConfigKeeper;
use crate::upstream::{Upstream, UpstreamError};

/// Resource types (Kafka's `ConfigResource.Type`), as DescribeConfigs names them too.
pub(super) const TOPIC: i8 = 2;
pub(super) const BROKER: i8 = 4;
pub(super) const GROUP: i8 = 32;

/// A cluster that keeps some of the configs a request names: the upstream its topics', a
/// sidecar's group service its groups'.
#[derive(Clone)]
pub(super) enum Keeper {
    Upstream(Arc<Upstream>),
    Groups(Arc<GroupService>),
}

impl Keeper {
    /// The keeper of `kind`'s resources, when another cluster keeps them.
    pub(super) fn of(node: &Node, kind: i8, name: &str) -> Option<Keeper> {
        match kind {
            TOPIC if name == crate::cluster::OFFSETS_TOPIC => None,
            TOPIC => node.upstream.clone().map(Keeper::Upstream),
            GROUP => node.sidecar.clone().map(Keeper::Groups),
            _ => None,
        }
    }

    fn is(&self, other: &Keeper) -> bool {
        matches!((self, other), (Keeper::Upstream(_), Keeper::Upstream(_)) | (Keeper::Groups(_), Keeper::Groups(_)))
    }
}

impl ConfigKeeper for Keeper {
    async fn ask_configs<R: kafka_protocol::protocol::Request + 'static>(
        &self,
        key: kafka_protocol::messages::ApiKey,
        ours: (i16, i16),
        request: R,
    ) -> Result<R::Response, UpstreamError> {
        match self {
            Keeper::Upstream(upstream) => upstream.ask_configs(key, ours, request).await,
            Keeper::Groups(service) => service.ask_configs(key, ours, request).await,
        }
    }
}

/// The resources of a request passed on to the clusters that keep them, each keeper's in one
/// request, and their answers put in their places; a keeper that did not answer gives each of its
/// resources its error.
pub(super) async fn pass_on_all<R, A>(
    answers: &mut [A],
    asked: Vec<(usize, Keeper, R)>,
    pass_on: impl AsyncFn(&Keeper, Vec<R>) -> Result<Vec<A>, UpstreamError>,
    set_error: impl Fn(&mut A, i16, String),
) {
    let mut asked = asked;
    while let Some((_, first, _)) = asked.first() {
        let keeper = first.clone();
        let (theirs, rest): (Vec<_>, Vec<_>) = asked.into_iter().partition(|(_, k, _)| k.is(&keeper));
        asked = rest;
        let (positions, resources): (Vec<usize>, Vec<R>) = theirs.into_iter().map(|(at, _, r)| (at, r)).unzip();
        match pass_on(&keeper, resources).await {
            Ok(theirs) => positions.into_iter().zip(theirs).for_each(|(at, answer)| answers[at] = answer),
            Err(e) => {
                let message = format!("the cluster that keeps these configs did not answer: {e}");
                let code = TopicError::from(e).error_code().code();
                positions.into_iter().for_each(|at| set_error(&mut answers[at], code, message.clone()));
            }
        }
    }
}

/// One resource's outcome: its error code and message on failure.
pub(super) type Outcome = Result<(), (ResponseError, String)>;

/// One resource of either API's request.
pub(super) trait Asked {
    fn kind(&self) -> i8;
    fn name(&self) -> &StrBytes;
}

/// One resource's answer in either API's response.
pub(super) trait Answer {
    fn new(kind: i8, name: &StrBytes, code: i16, message: Option<StrBytes>) -> Self;
    fn set(&mut self, code: i16, message: Option<StrBytes>);
}

/// [`Asked`] and [`Answer`] for one API's resource and answer types, whose generated structs
/// have the same fields in both APIs.
macro_rules! resource_types {
    ($asked:ty, $answer:ty) => {
        impl super::config_changes::Asked for $asked {
            fn kind(&self) -> i8 {
                self.resource_type
            }

            fn name(&self) -> &kafka_protocol::protocol::StrBytes {
                &self.resource_name
            }
        }

        impl super::config_changes::Answer for $answer {
            fn new(
                kind: i8,
                name: &kafka_protocol::protocol::StrBytes,
                code: i16,
                message: Option<kafka_protocol::protocol::StrBytes>,
            ) -> Self {
                <$answer>::default()
                    .with_resource_type(kind)
                    .with_resource_name(name.clone())
                    .with_error_code(code)
                    .with_error_message(message)
            }

            fn set(&mut self, code: i16, message: Option<kafka_protocol::protocol::StrBytes>) {
                (self.error_code, self.error_message) = (code, message);
            }
        }
    };
}
pub(super) use resource_types;

/// The answers to a request's `resources`, in its order: each refused (by the rules here, or by
/// `check`, which looks at the resource's configs as sent), changed here by `change_here`, or
/// (those another cluster keeps) passed on to it by `pass_on`, one request per keeper. What
/// `check` refuses is never passed on.
pub(super) async fn answer_all<R: Asked, A: Answer>(
    node: &Arc<Node>,
    ctx: &RequestContext,
    resources: Vec<R>,
    check: impl Fn(&R) -> Outcome,
    change_here: impl AsyncFn(&R) -> Outcome,
    pass_on: impl AsyncFn(&Keeper, Vec<R>) -> Result<Vec<A>, UpstreamError>,
) -> Vec<A> {
    let twice = duplicated(resources.iter().map(|r| (r.kind(), &**r.name())));
    let mut answers = Vec::with_capacity(resources.len());
    // Resources another cluster keeps: their positions in `answers`, their keeper, the resources.
    let mut passed: Vec<(usize, Keeper, R)> = Vec::new();
    for (i, resource) in resources.into_iter().enumerate() {
        let outcome = match (route(node, ctx, resource.kind(), resource.name(), twice.contains(&i)), check(&resource)) {
            (Route::Refused(code, message), _) => Err((code, message)),
            (_, Err(refused)) => Err(refused),
            (Route::PassOn(keeper), Ok(())) => {
                answers.push(A::new(resource.kind(), resource.name(), 0, None));
                passed.push((i, keeper, resource));
                continue;
            }
            (Route::Here, Ok(())) => change_here(&resource).await,
        };
        let (code, message) = code_and_message(outcome);
        answers.push(A::new(resource.kind(), resource.name(), code, message));
    }
    pass_on_all(&mut answers, passed, pass_on, |a, code, message| a.set(code, Some(StrBytes::from_string(message)))).await;
    answers
}

/// Where one resource of a request goes.
enum Route {
    /// Answered at once with this error.
    Refused(ResponseError, String),
    /// A resource another cluster keeps.
    PassOn(Keeper),
    /// A topic or group of this cluster.
    Here,
}

/// Where the resource `(kind, name)` goes. A resource named twice in one request is refused
/// each time, as Kafka refuses it.
fn route(node: &Node, ctx: &RequestContext, kind: i8, name: &str, duplicated: bool) -> Route {
    let refused = |code: ResponseError, message: &str| Route::Refused(code, message.to_string());
    if duplicated {
        return refused(ResponseError::InvalidRequest, "Duplicate resource.");
    }
    match kind {
        TOPIC if !node.allows(ctx, Operation::AlterConfigs, Resource::Topic(name)) => {
            refused(ResponseError::TopicAuthorizationFailed, "Authorization failed.")
        }
        TOPIC => Keeper::of(node, kind, name).map_or(Route::Here, Route::PassOn),
        BROKER if !node.allows(ctx, Operation::AlterConfigs, Resource::Cluster) => {
            refused(ResponseError::ClusterAuthorizationFailed, "Authorization failed.")
        }
        BROKER => refused(
            ResponseError::InvalidRequest,
            "corral's broker settings come from its config file and cannot be changed at run time (DescribeConfigs names the key of each)",
        ),
        GROUP if !node.allows(ctx, Operation::AlterConfigs, Resource::Group(name)) => {
            refused(ResponseError::GroupAuthorizationFailed, "Authorization failed.")
        }
        GROUP => Keeper::of(node, kind, name).map_or(Route::Here, Route::PassOn),
        other => Route::Refused(ResponseError::InvalidRequest, format!("resource type {other} cannot be changed here")),
    }
}

/// The positions of the resources a request names more than once.
fn duplicated<'a>(resources: impl Iterator<Item = (i8, &'a str)>) -> HashSet<usize> {
    let resources: Vec<_> = resources.collect();
    let mut named: HashMap<(i8, &str), usize> = HashMap::with_capacity(resources.len());
    for resource in &resources {
        *named.entry(*resource).or_default() += 1;
    }
    (0..resources.len()).filter(|&i| named[&resources[i]] > 1).collect()
}

/// INVALID_REQUEST when a resource names a config key twice.
pub(super) fn distinct_keys<'a>(keys: impl Iterator<Item = &'a str>) -> Outcome {
    let mut seen = HashSet::new();
    match keys.into_iter().all(|key| seen.insert(key)) {
        true => Ok(()),
        false => Err((ResponseError::InvalidRequest, "Error due to duplicate config keys".to_string())),
    }
}

pub(super) fn topic_refusal(e: TopicError) -> (ResponseError, String) {
    (e.error_code(), e.to_string())
}

/// The error code and message of a resource's answer.
fn code_and_message(outcome: Outcome) -> (i16, Option<StrBytes>) {
    match outcome {
        Ok(()) => (0, None),
        Err((code, message)) => (code.code(), Some(StrBytes::from_string(message))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_resource_named_twice_is_marked() {
        let resources = [(2, "a"), (2, "b"), (4, "a"), (2, "a"), (2, "c"), (2, "b")];
        let mut twice: Vec<usize> = super::duplicated(resources.into_iter()).into_iter().collect();
        twice.sort();
        assert_eq!(twice, [0, 1, 3, 5]);
    }
}
