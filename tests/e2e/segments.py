"""Reading corral's segment files (Kafka's own log format) from the tests.

A segment is a sequence of v2 record batches, each `[base_offset i64][batch_length i32][...]`,
where batch_length counts the bytes after the length field.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

LOG_OVERHEAD = 12
HEADER_LEN = 61
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@dataclass(frozen=True)
class Batch:
    position: int
    base_offset: int
    total_len: int
    magic: int
    attributes: int
    last_offset_delta: int
    records_count: int

    @property
    def codec(self) -> int:
        return self.attributes & 0x07

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def read_batches(path: Path) -> tuple[list[Batch], int]:
    """Every complete batch in a segment file, and the number of trailing bytes after them."""
    data = path.read_bytes()
    pos = 0
    batches = []
    while pos + LOG_OVERHEAD <= len(data):
        base_offset, length = struct.unpack_from(">qi", data, pos)
        total = LOG_OVERHEAD + length
        if length < HEADER_LEN - LOG_OVERHEAD or pos + total > len(data):
            break
        (_epoch, magic, _crc, attributes, last_delta) = struct.unpack_from(">ibIhi", data, pos + 12)
        (records_count,) = struct.unpack_from(">i", data, pos + 57)
        batches.append(Batch(pos, base_offset, total, magic, attributes, last_delta, records_count))
        pos += total
    return batches, len(data) - pos


def segment_files(partition_dir: Path) -> list[Path]:
    return sorted(partition_dir.glob("*.log"))
