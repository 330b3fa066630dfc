//! The parts of the embedded `consumer` protocol bytes the coordinator reads (spec §8): the topic
//! list of a ConsumerProtocolSubscription, and the partitions of a ConsumerProtocolAssignment (for
//! the admin API). A classic member inside a consumer group (spec §6.10) needs the whole
//! subscription, and its assignment written for it. Everything else stays opaque.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// The newest ConsumerProtocol version (3: rack id); assignments are written at most at it.
const NEWEST_VERSION: i16 = 3;

/// Partitions by topic name, as the embedded protocol lists them.
pub(crate) type NamedPartitions = Vec<(String, Vec<i32>)>;

/// A ConsumerProtocolSubscription as a classic member sends it in JoinGroup.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Subscription {
    pub version: i16,
    pub topics: Vec<String>,
    /// Partitions the member still owns (v1+; empty before).
    pub owned: NamedPartitions,
    pub rack_id: Option<String>,
}

/// Reads a ConsumerProtocolSubscription of any version, or `None` when the bytes are malformed.
pub(crate) fn subscription(mut b: &[u8]) -> Option<Subscription> {
    let version = read_i16(&mut b)?;
    if version < 0 {
        return None;
    }
    let count = read_count(&mut b, 2)?;
    let topics = (0..count).map(|_| read_string(&mut b)).collect::<Option<Vec<_>>>()?;
    read_nullable_bytes(&mut b)?; // user data
    let mut owned = Vec::new();
    let mut rack_id = None;
    if version >= 1 {
        owned = read_topic_partitions(&mut b)?;
    }
    if version >= 2 {
        read_i32(&mut b)?; // generation
    }
    if version >= 3 {
        rack_id = read_nullable_string(&mut b)?;
    }
    Some(Subscription { version, topics, owned, rack_id })
}

/// The version of embedded protocol bytes (their first two bytes), as Kafka's
/// `ConsumerProtocol.deserializeVersion`.
pub(crate) fn version(mut b: &[u8]) -> Option<i16> {
    read_i16(&mut b).filter(|v| *v >= 0)
}

/// A ConsumerProtocolAssignment's partitions, and whether it carries assignor user data.
pub(crate) fn assignment(mut b: &[u8]) -> Option<(NamedPartitions, bool)> {
    let version = read_i16(&mut b)?;
    if version < 0 {
        return None;
    }
    let partitions = read_topic_partitions(&mut b)?;
    let user_data = read_nullable_bytes(&mut b)?;
    Some((partitions, user_data.is_some_and(|d| !d.is_empty())))
}

/// Writes a ConsumerProtocolAssignment of `partitions` without user data, in `version` (capped at
/// the newest), as Kafka writes the server's assignment for a classic member.
pub(crate) fn write_assignment(partitions: &[(String, Vec<i32>)], version: i16) -> Bytes {
    let mut b = BytesMut::with_capacity(16 + partitions.iter().map(|(t, p)| 6 + t.len() + 4 * p.len()).sum::<usize>());
    b.put_i16(version.clamp(0, NEWEST_VERSION));
    b.put_i32(partitions.len() as i32);
    for (topic, ps) in partitions {
        b.put_i16(topic.len() as i16);
        b.put_slice(topic.as_bytes());
        b.put_i32(ps.len() as i32);
        for p in ps {
            b.put_i32(*p);
        }
    }
    b.put_i32(-1); // no user data
    b.freeze()
}

fn read_i16(b: &mut &[u8]) -> Option<i16> {
    (b.remaining() >= 2).then(|| b.get_i16())
}

fn read_i32(b: &mut &[u8]) -> Option<i32> {
    (b.remaining() >= 4).then(|| b.get_i32())
}

/// An array length, checked against the bytes left (each element takes at least `min_bytes`).
fn read_count(b: &mut &[u8], min_bytes: usize) -> Option<usize> {
    let n = read_i32(b)?;
    (n >= 0 && n as usize <= b.remaining() / min_bytes).then_some(n as usize)
}

fn read_nullable_string(b: &mut &[u8]) -> Option<Option<String>> {
    let len = read_i16(b)?;
    if len < 0 {
        return Some(None);
    }
    let len = len as usize;
    if len > b.remaining() {
        return None;
    }
    let s = std::str::from_utf8(&b[..len]).ok()?.to_string();
    b.advance(len);
    Some(Some(s))
}

fn read_string(b: &mut &[u8]) -> Option<String> {
    read_nullable_string(b)?
}

fn read_nullable_bytes(b: &mut &[u8]) -> Option<Option<Bytes>> {
    let len = read_i32(b)?;
    if len < 0 {
        return Some(None);
    }
    let len = len as usize;
    if len > b.remaining() {
        return None;
    }
    let data = Bytes::copy_from_slice(&b[..len]);
    b.advance(len);
    Some(Some(data))
}

fn read_topic_partitions(b: &mut &[u8]) -> Option<NamedPartitions> {
    let topics = read_count(b, 6)?;
    let mut out = Vec::with_capacity(topics);
    for _ in 0..topics {
        let topic = read_string(b)?;
        let count = read_count(b, 4)?;
        out.push((topic, (0..count).map(|_| b.get_i32()).collect()));
    }
    Some(out)
}

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
    fn reads_a_whole_subscription() {
        // v3: topics [t], user data null, owned [t: 1], generation 7, rack "r1".
        let mut b = vec![0, 3, 0, 0, 0, 1, 0, 1, b't', 0xff, 0xff, 0xff, 0xff];
        b.extend_from_slice(&[0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 1, 0, 0, 0, 1]);
        b.extend_from_slice(&[0, 0, 0, 7, 0, 2, b'r', b'1']);
        let s = subscription(&b).unwrap();
        assert_eq!(
            s,
            Subscription { version: 3, topics: vec!["t".into()], owned: vec![("t".into(), vec![1])], rack_id: Some("r1".into()) }
        );
        // v0: topics and user data only.
        let v0 = [0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 9, 9];
        assert_eq!(subscription(&v0).unwrap().owned, vec![]);
        assert_eq!(subscription(&b[..b.len() - 1]), None, "cut inside the rack id");
        assert_eq!(subscription(&[]), None);
    }

    #[test]
    fn writes_an_assignment_readers_take_back() {
        let parts = vec![("t".to_string(), vec![0, 2])];
        let bytes = write_assignment(&parts, 1);
        assert_eq!(&bytes[..], &[0, 1, 0, 0, 0, 1, 0, 1, b't', 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 2, 0xff, 0xff, 0xff, 0xff]);
        assert_eq!(assignment(&bytes), Some((parts.clone(), false)));
        assert_eq!(write_assignment(&parts, 9)[..2], [0, 3], "capped at the newest version");
        let mut with_data = bytes.to_vec();
        with_data.truncate(with_data.len() - 4);
        with_data.extend_from_slice(&[0, 0, 0, 1, 5]);
        assert_eq!(assignment(&with_data), Some((parts, true)));
    }

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
