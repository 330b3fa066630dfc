//! What the group APIs take from a request besides its body.

/// Kafka renders a client's address as Java's `InetAddress.toString()`: `/10.0.0.7`.
pub(crate) fn client_host(ctx: &crate::protocol::RequestContext) -> String {
    ctx.peer.map(|p| format!("/{}", p.ip())).unwrap_or_default()
}

pub(crate) fn client_id(ctx: &crate::protocol::RequestContext) -> String {
    ctx.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default()
}
