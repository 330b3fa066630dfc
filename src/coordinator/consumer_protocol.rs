//! The parts of the embedded `consumer` protocol bytes the coordinator reads (spec §8): the topic
//! list of a ConsumerProtocolSubscription, and the partitions of a ConsumerProtocolAssignment (for
//! the admin API). Everything else stays opaque.

use bytes::Buf;

/// Topics of a ConsumerProtocolSubscription (any version: all share the v0 prefix), or `None`
/// when the bytes cannot be parsed.
pub(crate) fn subscribed_topics(mut metadata: &[u8]) -> Option<Vec<String>> {
    if metadata.remaining() < 6 {
        return None;
    }
    let _version = metadata.get_i16();
    let count = metadata.get_i32();
    if count < 0 || count as usize > metadata.remaining() / 2 {
        return None;
    }
    let mut topics = Vec::with_capacity(count as usize);
    for _ in 0..count {
        if metadata.remaining() < 2 {
            return None;
        }
        let len = metadata.get_i16();
        if len < 0 || len as usize > metadata.remaining() {
            return None;
        }
        let name = std::str::from_utf8(&metadata[..len as usize]).ok()?.to_string();
        metadata.advance(len as usize);
        topics.push(name);
    }
    Some(topics)
}

/// Partitions of a ConsumerProtocolAssignment (any version: all share the v0 prefix), by topic,
/// or `None` when the bytes cannot be parsed.
pub(crate) fn assigned_partitions(mut assignment: &[u8]) -> Option<Vec<(String, Vec<i32>)>> {
    if assignment.remaining() < 6 {
        return None;
    }
    let _version = assignment.get_i16();
    let topics = assignment.get_i32();
    if topics < 0 || topics as usize > assignment.remaining() / 6 {
        return None;
    }
    let mut out = Vec::with_capacity(topics as usize);
    for _ in 0..topics {
        if assignment.remaining() < 2 {
            return None;
        }
        let len = assignment.get_i16();
        if len < 0 || len as usize + 4 > assignment.remaining() {
            return None;
        }
        let name = std::str::from_utf8(&assignment[..len as usize]).ok()?.to_string();
        assignment.advance(len as usize);
        let count = assignment.get_i32();
        if count < 0 || count as usize > assignment.remaining() / 4 {
            return None;
        }
        out.push((name, (0..count).map(|_| assignment.get_i32()).collect()));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_topic_list() {
        // v3 subscription: topics [a, bc], then fields this reader ignores.
        let mut bytes = vec![0, 3, 0, 0, 0, 2, 0, 1, b'a', 0, 2, b'b', b'c'];
        bytes.extend_from_slice(&[0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]);
        assert_eq!(subscribed_topics(&bytes), Some(vec!["a".to_string(), "bc".to_string()]));
        assert_eq!(subscribed_topics(&[0, 0, 0, 0, 0, 3, 0, 1]), None);
        assert_eq!(subscribed_topics(&[]), None);
    }

    #[test]
    fn reads_the_assigned_partitions() {
        // v1 assignment: t0 [0, 2], u [], then user data this reader ignores.
        let bytes = [0, 1, 0, 0, 0, 2, 0, 2, b't', b'0', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, b'u', 0, 0, 0, 0, 255, 255, 255, 255];
        assert_eq!(assigned_partitions(&bytes), Some(vec![("t0".to_string(), vec![0, 2]), ("u".to_string(), vec![])]));
        assert_eq!(assigned_partitions(&bytes[..12]), None, "cut inside a partition list");
        assert_eq!(assigned_partitions(&[0, 0, 0x7f, 0xff, 0xff, 0xff]), None, "a count beyond the bytes");
        assert_eq!(assigned_partitions(&[]), None);
    }
}
