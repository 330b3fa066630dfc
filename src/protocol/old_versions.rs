//! Reading request versions the codec has no schema for: those Kafka 4 removed (KIP-896) that
//! clients still send. They predate flexible versions, so four primitives cover them: big-endian
//! integers, `i16`-length strings (-1 for null) and `i32`-length arrays.
//!
//! Every length is checked against the bytes left before anything is read or reserved, as the
//! codec does (see `vendor/README.md`): a hostile length fails the decode, it never allocates.

use bytes::{Buf, Bytes};
use kafka_protocol::protocol::buf::ByteBuf;
use kafka_protocol::protocol::StrBytes;

/// An `i32` array length, refused when negative or when even one-byte items would not fit.
pub fn array_len(buf: &mut Bytes) -> anyhow::Result<usize> {
    let n = buf.try_get_i32()?;
    if n < 0 {
        anyhow::bail!("array length is negative ({n})");
    }
    if n as usize > buf.len() {
        anyhow::bail!("array of {n} items in {} bytes", buf.len());
    }
    Ok(n as usize)
}

/// A non-null `i16`-length UTF-8 string.
pub fn string(buf: &mut Bytes) -> anyhow::Result<StrBytes> {
    nullable_string(buf)?.ok_or_else(|| anyhow::anyhow!("a string that may not be null is null"))
}

/// An `i16`-length UTF-8 string; length -1 is null.
pub fn nullable_string(buf: &mut Bytes) -> anyhow::Result<Option<StrBytes>> {
    match buf.try_get_i16()? {
        -1 => Ok(None),
        n if n < 0 => anyhow::bail!("string length is negative ({n})"),
        n => Ok(Some(StrBytes::try_from(buf.try_get_bytes(n as usize)?)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_are_checked_before_reading() {
        assert!(array_len(&mut Bytes::from_static(&[0xff, 0xff, 0xff, 0xff])).is_err());
        assert!(array_len(&mut Bytes::from_static(&[0x7f, 0, 0, 0, 1, 2])).is_err());
        assert_eq!(array_len(&mut Bytes::from_static(&[0, 0, 0, 2, 1, 2])).unwrap(), 2);
        assert!(nullable_string(&mut Bytes::from_static(&[0xff, 0xff])).unwrap().is_none());
        assert!(string(&mut Bytes::from_static(&[0xff, 0xff])).is_err());
        assert!(string(&mut Bytes::from_static(&[0xff, 0xfe])).is_err());
        assert!(string(&mut Bytes::from_static(&[0, 5, b'a'])).is_err());
        assert_eq!(string(&mut Bytes::from_static(&[0, 2, b'o', b'k'])).unwrap().as_str(), "ok");
        assert!(string(&mut Bytes::from_static(&[0, 1, 0xff])).is_err(), "not UTF-8");
    }
}
