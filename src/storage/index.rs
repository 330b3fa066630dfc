//! Sparse offset and time indexes, in Kafka's file formats.
//!
//! - `.index`: 8-byte entries `(relative offset: u32, position: u32)`, big-endian. An entry says
//!   "the batch whose last offset is `base + relative` starts at `position`".
//! - `.timeindex`: 12-byte entries `(timestamp: i64, relative offset: u32)`: the largest timestamp
//!   seen so far and the offset where it was seen.
//!
//! Entries are added as the segment grows (every `index.interval.bytes` of log) and kept in
//! memory for lookups. A file is written whole when its segment is sealed, after a scan rebuilt it,
//! and at a clean shutdown, so a restart loads it instead of scanning the log; no index holds a
//! descriptor in between. They are not memory-mapped: corral's only `unsafe` is for sendfile(2) and splice(2).

use std::io;
use std::path::{Path, PathBuf};

/// Why an index file on disk cannot be trusted (it is then rebuilt from the log).
#[derive(Debug)]
pub(crate) enum IndexLoad<T> {
    Loaded(T),
    Corrupt(&'static str),
}

/// One kind of entry: its size in the file and its big-endian form.
trait Entry: Copy {
    const SIZE: usize;
    fn decode(bytes: &[u8]) -> Self;
    fn encode(self, out: &mut Vec<u8>);
    /// Whether the entry may follow `prev` in a file; a file where one does not is refused.
    fn may_follow(self, prev: Self) -> bool;
}

/// `(relative offset, position)`: both strictly increasing.
impl Entry for (u32, u32) {
    const SIZE: usize = 8;

    fn decode(bytes: &[u8]) -> Self {
        (u32::from_be_bytes(bytes[0..4].try_into().expect("4 bytes")), u32::from_be_bytes(bytes[4..8].try_into().expect("4 bytes")))
    }

    fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }

    fn may_follow(self, prev: Self) -> bool {
        self.0 > prev.0 && self.1 > prev.1
    }
}

/// `(timestamp, relative offset)`: neither decreasing.
impl Entry for (i64, u32) {
    const SIZE: usize = 12;

    fn decode(bytes: &[u8]) -> Self {
        (i64::from_be_bytes(bytes[0..8].try_into().expect("8 bytes")), u32::from_be_bytes(bytes[8..12].try_into().expect("4 bytes")))
    }

    fn encode(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.0.to_be_bytes());
        out.extend_from_slice(&self.1.to_be_bytes());
    }

    fn may_follow(self, prev: Self) -> bool {
        self.0 >= prev.0 && self.1 >= prev.1
    }
}

/// What both indexes are: the entries in memory, the file they are written to, and whether the
/// file is behind them.
#[derive(Debug)]
struct IndexFile<E> {
    path: PathBuf,
    base_offset: i64,
    entries: Vec<E>,
    /// Entries were added since the file was last written (or read).
    dirty: bool,
}

impl<E: Entry> IndexFile<E> {
    fn new(path: &Path, base_offset: i64) -> IndexFile<E> {
        IndexFile { path: path.to_path_buf(), base_offset, entries: Vec::new(), dirty: true }
    }

    fn load(path: &Path, base_offset: i64) -> io::Result<IndexLoad<IndexFile<E>>> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(IndexLoad::Corrupt("missing")),
            Err(e) => return Err(e),
        };
        if bytes.len() % E::SIZE != 0 {
            return Ok(IndexLoad::Corrupt("size is not a multiple of the entry size"));
        }
        let mut entries: Vec<E> = Vec::with_capacity(bytes.len() / E::SIZE);
        for chunk in bytes.chunks_exact(E::SIZE) {
            let entry = E::decode(chunk);
            if entries.last().is_some_and(|&prev| !entry.may_follow(prev)) {
                return Ok(IndexLoad::Corrupt("entries are not increasing"));
            }
            entries.push(entry);
        }
        Ok(IndexLoad::Loaded(IndexFile { path: path.to_path_buf(), base_offset, entries, dirty: false }))
    }

    fn push(&mut self, entry: E) {
        self.entries.push(entry);
        self.dirty = true;
    }

    /// Writes the file if entries changed since it was last written; returns its path then (for
    /// an fsync).
    fn write(&mut self, how: IndexWrite) -> io::Result<Option<&Path>> {
        if !self.dirty {
            return Ok(None);
        }
        let mut bytes = Vec::with_capacity(self.entries.len() * E::SIZE);
        for &entry in &self.entries {
            entry.encode(&mut bytes);
        }
        how.write(&self.path, &bytes)?;
        self.dirty = false;
        Ok(Some(&self.path))
    }
}

// === impl OffsetIndex ===

/// Offset → file position, for one segment. Lives on the shard that owns the partition.
#[derive(Debug)]
pub(crate) struct OffsetIndex(IndexFile<(u32, u32)>);

impl OffsetIndex {
    /// An empty index, to be written to `path` (any file there is replaced when it is).
    pub(crate) fn new(path: &Path, base_offset: i64) -> OffsetIndex {
        OffsetIndex(IndexFile::new(path, base_offset))
    }

    /// Loads an index written earlier and checks that it is usable for a segment of `log_len`
    /// bytes.
    pub(crate) fn load(path: &Path, base_offset: i64, log_len: u64) -> io::Result<IndexLoad<OffsetIndex>> {
        Ok(match IndexFile::load(path, base_offset)? {
            IndexLoad::Loaded(file) if file.entries.last().is_some_and(|&(_, pos)| pos as u64 >= log_len) => {
                IndexLoad::Corrupt("entry points past the end of the log")
            }
            IndexLoad::Loaded(file) => IndexLoad::Loaded(OffsetIndex(file)),
            IndexLoad::Corrupt(why) => IndexLoad::Corrupt(why),
        })
    }

    pub(crate) fn append(&mut self, offset: i64, position: u32) {
        let rel = (offset - self.0.base_offset) as u32;
        if self.0.entries.last().is_some_and(|&(last_rel, _)| rel <= last_rel) {
            return;
        }
        self.0.push((rel, position));
    }

    /// Writes the file if entries changed since it was last written; returns its path then (for
    /// an fsync).
    pub(crate) fn write(&mut self, how: IndexWrite) -> io::Result<Option<&Path>> {
        self.0.write(how)
    }

    /// The last indexed `(offset, position)` at or below `offset`, or the segment start.
    pub(crate) fn lookup(&self, offset: i64) -> (i64, u32) {
        let base = self.0.base_offset;
        let rel = offset - base;
        if rel < 0 {
            return (base, 0);
        }
        match self.0.entries.partition_point(|&(r, _)| (r as i64) <= rel) {
            0 => (base, 0),
            i => {
                let (r, p) = self.0.entries[i - 1];
                (base + r as i64, p)
            }
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0.path
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.0.entries.len()
    }
}

// === impl TimeIndex ===

/// Timestamp → offset, for one segment. Lives on the shard that owns the partition.
#[derive(Debug)]
pub(crate) struct TimeIndex(IndexFile<(i64, u32)>);

impl TimeIndex {
    pub(crate) fn new(path: &Path, base_offset: i64) -> TimeIndex {
        TimeIndex(IndexFile::new(path, base_offset))
    }

    pub(crate) fn load(path: &Path, base_offset: i64) -> io::Result<IndexLoad<TimeIndex>> {
        Ok(match IndexFile::load(path, base_offset)? {
            IndexLoad::Loaded(file) => IndexLoad::Loaded(TimeIndex(file)),
            IndexLoad::Corrupt(why) => IndexLoad::Corrupt(why),
        })
    }

    /// Adds `(timestamp, offset)` if the timestamp is larger than the last entry's.
    pub(crate) fn maybe_append(&mut self, timestamp: i64, offset: i64) {
        if self.0.entries.last().is_some_and(|&(last_ts, _)| timestamp <= last_ts) {
            return;
        }
        self.0.push((timestamp, (offset - self.0.base_offset) as u32));
    }

    /// Writes the file if entries changed since it was last written; returns its path then.
    pub(crate) fn write(&mut self, how: IndexWrite) -> io::Result<Option<&Path>> {
        self.0.write(how)
    }

    /// The offset of the last entry whose timestamp is below `timestamp`; scanning from there
    /// finds the first record at or above it. The segment start if there is none.
    pub(crate) fn lookup(&self, timestamp: i64) -> i64 {
        match self.0.entries.partition_point(|&(ts, _)| ts < timestamp) {
            0 => self.0.base_offset,
            i => self.0.base_offset + self.0.entries[i - 1].1 as i64,
        }
    }

    /// Largest timestamp recorded, with its offset.
    pub(crate) fn last_entry(&self) -> Option<(i64, i64)> {
        self.0.entries.last().map(|&(ts, rel)| (ts, self.0.base_offset + rel as i64))
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0.path
    }
}

/// How an index file is replaced.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IndexWrite {
    /// Through a temporary file and a rename, so that a crash leaves the old file or the new one,
    /// never a part of the new one (a shorter time index would lose the segment's max timestamp):
    /// a sealed segment's indexes are trusted once the recovery point passes it.
    Atomic,
    /// Over the old file, at a clean shutdown: the marker written after everything is synced is
    /// what makes a clean start trust it.
    InPlace,
}

impl IndexWrite {
    fn write(self, path: &Path, bytes: &[u8]) -> io::Result<()> {
        match self {
            IndexWrite::InPlace => std::fs::write(path, bytes),
            IndexWrite::Atomic => {
                let mut tmp = path.as_os_str().to_owned();
                tmp.push(".tmp");
                std::fs::write(&tmp, bytes)?;
                std::fs::rename(&tmp, path)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_lookup_and_reload() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        let mut idx = OffsetIndex::new(&path, 100);
        assert_eq!(idx.lookup(150), (100, 0));
        idx.append(109, 4096);
        idx.append(119, 8192);
        idx.append(119, 9000); // not increasing: ignored
        assert_eq!(idx.lookup(99), (100, 0));
        assert_eq!(idx.lookup(108), (100, 0));
        assert_eq!(idx.lookup(109), (109, 4096));
        assert_eq!(idx.lookup(118), (109, 4096));
        assert_eq!(idx.lookup(500), (119, 8192));
        assert!(!path.exists(), "nothing is written before it is asked for");
        assert_eq!(idx.write(IndexWrite::Atomic).unwrap(), Some(path.as_path()));
        assert_eq!(idx.write(IndexWrite::Atomic).unwrap(), None, "unchanged since written");
        let IndexLoad::Loaded(again) = OffsetIndex::load(&path, 100, 10_000).unwrap() else { panic!() };
        assert_eq!(again.len(), 2);
        assert_eq!(again.lookup(130), (119, 8192));
        // An index pointing past the log is refused.
        assert!(matches!(OffsetIndex::load(&path, 100, 5000).unwrap(), IndexLoad::Corrupt(_)));
    }

    #[test]
    fn corrupt_offset_index_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.index");
        std::fs::write(&path, [0u8; 7]).unwrap();
        assert!(matches!(OffsetIndex::load(&path, 0, 100).unwrap(), IndexLoad::Corrupt(_)));
        assert!(matches!(OffsetIndex::load(&dir.path().join("none"), 0, 100).unwrap(), IndexLoad::Corrupt(_)));
    }

    #[test]
    fn time_index_lookup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.timeindex");
        let mut t = TimeIndex::new(&path, 0);
        assert_eq!(t.lookup(5), 0);
        t.maybe_append(1000, 9);
        t.maybe_append(900, 19); // older timestamp: ignored
        t.maybe_append(2000, 29);
        assert_eq!(t.lookup(1000), 0);
        assert_eq!(t.lookup(1001), 9);
        assert_eq!(t.lookup(5000), 29);
        assert_eq!(t.last_entry(), Some((2000, 29)));
        t.write(IndexWrite::InPlace).unwrap();
        let IndexLoad::Loaded(again) = TimeIndex::load(&path, 0).unwrap() else { panic!() };
        assert_eq!(again.last_entry(), Some((2000, 29)));
    }
}
