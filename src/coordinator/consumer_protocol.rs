//! The parts of the embedded `consumer` protocol bytes the coordinator reads (spec §8): only the
//! topic list of a ConsumerProtocolSubscription. Everything else stays opaque.

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
}
