//! What an authenticated peer sends on the Raft port, after the handshake: any bytes as a request
//! frame (`id u64 | group u32 | kind u8 | payload`), decoded and checked as the transport does
//! before a group sees it, and any bytes as a replicated topic change, decoded and validated as
//! the metadata group does when it proposes and applies one. Errors, never a panic or an abort.

#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

// As in the server.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fuzz_target!(|data: &[u8]| {
    if data.len() >= 13 {
        let _ = corral::raft::transport::PeerRequest::decode(data[12], &Bytes::copy_from_slice(&data[13..]));
    }
    if let Ok(change) = corral::cluster::metadata_group::TopicChange::decode(data) {
        let limits = corral::cluster::metadata_group::PartitionLimits { per_topic: 10_000, per_node: 100_000 };
        let _ = change.validate(&limits, |node| (0..3).contains(&node), |node| node.clamp(0, 2) as usize * 40_000);
    }
});
