//! What survives a restart of the node.

use kafka_protocol::messages::InitProducerIdRequest;
use kafka_protocol::records::Compression;

use crate::harness::TestServer;
use crate::requests::{batch, batch_offsets, create_topic, fetch, produce};

#[test]
fn records_topics_and_producer_state_survive_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let small_segments = |c: &mut corral::config::Config| {
        c.topics.defaults.internal_segment_bytes = Some(4096);
        c.storage.flush_messages = 1;
    };
    let server = TestServer::start_in(dir.path(), small_segments);
    let mut c = server.client();
    create_topic(&mut c, "durable", 2);
    let pid = c.call(4, &InitProducerIdRequest::default()).producer_id.0;
    let first = batch(5, 200, Compression::Gzip, Some((pid, 0, 0)));
    c.call(9, &produce("durable", 0, first.clone(), -1));
    for seq in 1..20 {
        let r = c.call(9, &produce("durable", 0, batch(5, 200, Compression::Gzip, Some((pid, 0, seq * 5))), -1));
        assert_eq!(r.responses[0].partition_responses[0].base_offset, seq as i64 * 5);
    }
    server.stop();
    assert!(dir.path().join(".clean_shutdown").exists());

    let server = TestServer::start_in(dir.path(), small_segments);
    let mut c = server.client();
    let mut offsets = Vec::new();
    let mut next = 0;
    while next < 100 {
        let r = c.call(11, &fetch("durable", 0, next, 1 << 20, 0));
        let p = &r.responses[0].partitions[0];
        assert_eq!(p.high_watermark, 100);
        let found = batch_offsets(p.records.as_ref().unwrap());
        next = found.last().unwrap() + 5;
        offsets.extend(found);
    }
    assert_eq!(offsets, (0..20).map(|i| i * 5).collect::<Vec<i64>>());
    // The last batch's retry is still recognised as a duplicate after the restart.
    let r = c.call(9, &produce("durable", 0, batch(5, 200, Compression::Gzip, Some((pid, 0, 95))), -1));
    assert_eq!(r.responses[0].partition_responses[0].base_offset, 95);
    // New producer ids never repeat old ones.
    let again = c.call(4, &InitProducerIdRequest::default()).producer_id.0;
    assert!(again > pid);
}
