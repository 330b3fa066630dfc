//! DescribeCluster (key 60): every node of the cluster as a broker; the metadata group's leader as
//! the controller.

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{ApiKey, BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use super::{api_entry, ApiEntry, Handled, HandlerResult, Services};
use crate::protocol::RequestContext;
use crate::security::acl::{Operation, Resource};

pub(crate) const ENTRY: ApiEntry = api_entry!(ApiKey::DescribeCluster, DescribeClusterRequest, 0, 2);

/// `endpoint_type` values (v1+).
const BROKERS: i8 = 1;

async fn handle(services: Rc<dyn Services>, ctx: RequestContext, body: Bytes) -> HandlerResult {
    let request: DescribeClusterRequest = ctx.decode(body)?;
    let node = services.node();
    let mut response = DescribeClusterResponse::default()
        .with_endpoint_type(request.endpoint_type)
        .with_cluster_id(StrBytes::from_string(node.cluster_id.clone()))
        .with_controller_id(BrokerId(node.controller()));
    if !node.allows(&ctx, Operation::Describe, Resource::Cluster) {
        response = response
            .with_error_code(ResponseError::ClusterAuthorizationFailed.code())
            .with_error_message(Some(StrBytes::from_static_str("Authorization failed.")));
    } else if ctx.api_version >= 1 && request.endpoint_type != BROKERS {
        // Controllers are not reachable through a broker listener, as in Kafka.
        response = response
            .with_error_code(ResponseError::UnsupportedEndpointType.code())
            .with_error_message(Some(StrBytes::from_static_str("only broker endpoints are served here")));
    } else {
        response = response.with_brokers(
            node.brokers_for(&ctx)
                .iter()
                .map(|(id, (host, port))| {
                    DescribeClusterBroker::default()
                        .with_broker_id(BrokerId(*id))
                        .with_host(StrBytes::from_string(host.clone()))
                        .with_port(*port as i32)
                })
                .collect(),
        );
    }
    if request.include_cluster_authorized_operations {
        response.cluster_authorized_operations = node.authorized_operations(&ctx, Resource::Cluster);
    }
    Ok(Handled::Now(ctx.respond(&response)))
}
