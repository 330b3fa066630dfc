//! Decompressing a record batch's records with a cap on the bytes it may produce, and
//! compressing the records compaction keeps with the batch's codec again.
//!
//! corral never decompresses on the fetch path, and on the produce path only for a compacted
//! topic (every record must have a key, as Kafka checks); otherwise only the paths that must see
//! inside a batch do (ListOffsets by timestamp, MAX_TIMESTAMP, the cleaner). A batch is a
//! client's bytes, so a few kilobytes may claim gigabytes: every codec here stops at
//! [`MAX_DECOMPRESSED_BYTES`], and the records a batch claims must fit what it decompressed to
//! before any are decoded.

use std::io::Read;

use bytes::{Buf, Bytes};

/// Compression codec of a record batch (the low three bits of its attributes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

/// The most a batch's records may take uncompressed.
pub const MAX_DECOMPRESSED_BYTES: usize = 32 << 20;
/// The smallest record in the v2 format: length, attributes, timestamp and offset deltas, key
/// and value lengths, header count, one byte each.
pub const MIN_RECORD_BYTES: usize = 7;
/// xerial's snappy framing (what Kafka's Java client writes), then raw snappy blocks.
const XERIAL_MAGIC: &[u8] = &[0x82, b'S', b'N', b'A', b'P', b'P', b'Y', 0];
const XERIAL_HEADER_LEN: usize = XERIAL_MAGIC.len() + 8;

/// Why a batch's records could not be decompressed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecompressError {
    #[error("records decompress to more than {MAX_DECOMPRESSED_BYTES} bytes")]
    TooLarge,
    #[error("{claimed} records do not fit in {bytes} decompressed bytes")]
    CountMismatch { claimed: i32, bytes: usize },
    #[error("corrupt {codec:?} data: {reason}")]
    Corrupt { codec: Compression, reason: String },
}

/// Decompresses `data` (a batch's records) with `codec`, at most [`MAX_DECOMPRESSED_BYTES`],
/// and checks that `records` records fit the result.
pub fn decompress(data: &[u8], codec: Compression, records: i32) -> Result<Bytes, DecompressError> {
    let corrupt = |e: std::io::Error| DecompressError::Corrupt { codec, reason: e.to_string() };
    let out = match codec {
        Compression::None => data.to_vec(),
        Compression::Gzip => read_capped(flate2::read::GzDecoder::new(data)).map_err(corrupt)?,
        Compression::Zstd => read_capped(zstd::stream::read::Decoder::new(data).map_err(corrupt)?).map_err(corrupt)?,
        Compression::Lz4 => read_capped(lz4::Decoder::new(data).map_err(corrupt)?).map_err(corrupt)?,
        Compression::Snappy => snappy(data)?,
    };
    if out.len() > MAX_DECOMPRESSED_BYTES {
        return Err(DecompressError::TooLarge);
    }
    if records < 0 || records as usize > out.len() / MIN_RECORD_BYTES {
        return Err(DecompressError::CountMismatch { claimed: records, bytes: out.len() });
    }
    Ok(Bytes::from(out))
}

/// Compresses records as a batch written with `codec` holds them (the framing Kafka's clients
/// write: xerial snappy, LZ4 frames of independent blocks), with kafka-protocol's codecs.
pub fn compress(data: &[u8], codec: Compression) -> Result<Vec<u8>, DecompressError> {
    use kafka_protocol::compression::{Compressor, Gzip, Lz4, Snappy, Zstd};
    let mut out = bytes::BytesMut::with_capacity(data.len() / 2 + 64);
    let fill = |tmp: &mut bytes::BytesMut| {
        tmp.extend_from_slice(data);
        Ok(())
    };
    let done = match codec {
        Compression::None => return Ok(data.to_vec()),
        Compression::Gzip => Gzip::compress(&mut out, fill),
        Compression::Snappy => Snappy::compress(&mut out, fill),
        Compression::Lz4 => Lz4::compress(&mut out, fill),
        Compression::Zstd => Zstd::compress(&mut out, fill),
    };
    done.map_err(|e| DecompressError::Corrupt { codec, reason: e.to_string() })?;
    Ok(out.to_vec())
}

/// Reads at most one byte past the cap, so an oversized stream is seen without being read whole.
fn read_capped(reader: impl Read) -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    reader.take(MAX_DECOMPRESSED_BYTES as u64 + 1).read_to_end(&mut out)?;
    Ok(out)
}

/// Snappy, xerial-framed or raw: each block says its decompressed length up front, so the cap
/// is checked before anything is allocated.
fn snappy(data: &[u8]) -> Result<Vec<u8>, DecompressError> {
    let corrupt = |reason: String| DecompressError::Corrupt { codec: Compression::Snappy, reason };
    let mut blocks: Vec<&[u8]> = Vec::new();
    if data.starts_with(XERIAL_MAGIC) {
        let mut rest = data.get(XERIAL_HEADER_LEN..).ok_or_else(|| corrupt("short xerial header".into()))?;
        while rest.has_remaining() {
            let len = rest.try_get_u32().map_err(|e| corrupt(e.to_string()))? as usize;
            let block = rest.get(..len).ok_or_else(|| corrupt("block longer than the data".into()))?;
            blocks.push(block);
            rest.advance(len);
        }
    } else {
        blocks.push(data);
    }
    let mut total = 0usize;
    for block in &blocks {
        total = total.saturating_add(snap::raw::decompress_len(block).map_err(|e| corrupt(e.to_string()))?);
        if total > MAX_DECOMPRESSED_BYTES {
            return Err(DecompressError::TooLarge);
        }
    }
    let mut out = vec![0u8; total];
    let mut at = 0;
    for block in blocks {
        at += snap::raw::Decoder::new().decompress(block, &mut out[at..]).map_err(|e| corrupt(e.to_string()))?;
    }
    out.truncate(at);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    /// A gigabyte of zeros in about a megabyte of gzip: refused after reading just past the cap.
    #[test]
    fn a_decompression_bomb_is_refused() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..(MAX_DECOMPRESSED_BYTES >> 20) + 2 {
            gz.write_all(&zeros).unwrap();
        }
        let bomb = gz.finish().unwrap();
        assert!(bomb.len() < 1 << 20);
        assert!(matches!(decompress(&bomb, Compression::Gzip, 1), Err(DecompressError::TooLarge)));

        let zstd_bomb = zstd::encode_all(&vec![0u8; MAX_DECOMPRESSED_BYTES + 1][..], 3).unwrap();
        assert!(matches!(decompress(&zstd_bomb, Compression::Zstd, 1), Err(DecompressError::TooLarge)));
    }

    #[test]
    fn a_record_count_that_does_not_fit_is_refused() {
        let data = zstd::encode_all(&[1u8; 70][..], 3).unwrap();
        assert_eq!(decompress(&data, Compression::Zstd, 10).unwrap().len(), 70);
        assert!(matches!(decompress(&data, Compression::Zstd, 11), Err(DecompressError::CountMismatch { claimed: 11, bytes: 70 })));
        assert!(matches!(decompress(&data, Compression::Zstd, i32::MAX), Err(DecompressError::CountMismatch { .. })));
    }

    #[test]
    fn snappy_raw_and_xerial_framed() {
        let text = b"corral corral corral corral corral corral corral corral".repeat(10);
        let raw = snap::raw::Encoder::new().compress_vec(&text).unwrap();
        assert_eq!(decompress(&raw, Compression::Snappy, 1).unwrap(), &text[..]);
        let mut framed = XERIAL_MAGIC.to_vec();
        framed.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 1]);
        for half in text.chunks(text.len() / 2) {
            let block = snap::raw::Encoder::new().compress_vec(half).unwrap();
            framed.extend_from_slice(&(block.len() as u32).to_be_bytes());
            framed.extend_from_slice(&block);
        }
        assert_eq!(decompress(&framed, Compression::Snappy, 1).unwrap(), &text[..]);
        // A block claiming more than the cap is refused before anything is allocated.
        let mut claim = Vec::new();
        let mut n = (MAX_DECOMPRESSED_BYTES + 1) as u64;
        while n >= 0x80 {
            claim.push((n as u8) | 0x80);
            n >>= 7;
        }
        claim.push(n as u8);
        assert!(matches!(decompress(&claim, Compression::Snappy, 1), Err(DecompressError::TooLarge)));
    }
}
