"""librdkafka's mock cluster, the reference broker the KIP-848 tests compare corral with.

`Producer({'test.mock.num.brokers': 1, ...})` starts a mock cluster too, but then topics can only
be auto-created (4 partitions: the mock serves no CreateTopics) and the consumer group session
timeout and heartbeat interval stay at the mock's 30 s / 3 s. So the cluster is driven through
librdkafka's own mock API (rd_kafka_mock_*, exported by the librdkafka that confluent-kafka
bundles) with ctypes: a cluster on an ephemeral 127.0.0.1 port, topics with any partition count,
and the KIP-848 session timeout and heartbeat interval the corral tests configure.

The mock lives in threads of this (the test) process; members in other processes connect to it
over TCP like to any broker. It serves Produce, Fetch, ListOffsets, Metadata, FindCoordinator,
OffsetCommit/OffsetFetch and ConsumerGroupHeartbeat, not ListGroups or ConsumerGroupDescribe.
Its target assignment is always its own range-like split in member join order: it ignores
ServerAssignor (group.remote.assignor).
"""

from __future__ import annotations

import ctypes
import glob
import os

import confluent_kafka

RD_KAFKA_PRODUCER = 0


def _librdkafka() -> ctypes.CDLL:
    """The librdkafka that confluent-kafka's extension module is linked with (the wheel bundles
    it in confluent_kafka.libs/); already loaded, so this is the same library instance."""
    pkg = os.path.dirname(confluent_kafka.__file__)
    candidates = sorted(glob.glob(os.path.join(pkg, "..", "confluent_kafka.libs", "librdkafka*.so*")))
    if not candidates:
        raise RuntimeError(f"no bundled librdkafka next to {pkg}: cannot drive the mock cluster")
    lib = ctypes.CDLL(os.path.realpath(candidates[0]))
    vp, cp, ci, sz = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.c_size_t
    sigs = {
        "rd_kafka_conf_new": (vp, []),
        "rd_kafka_conf_set": (ci, [vp, cp, cp, cp, sz]),
        "rd_kafka_new": (vp, [ci, vp, cp, sz]),
        "rd_kafka_destroy": (None, [vp]),
        "rd_kafka_version_str": (cp, []),
        "rd_kafka_mock_cluster_new": (vp, [vp, ci]),
        "rd_kafka_mock_cluster_destroy": (None, [vp]),
        "rd_kafka_mock_cluster_bootstraps": (cp, [vp]),
        "rd_kafka_mock_topic_create": (ci, [vp, cp, ci, ci]),
        "rd_kafka_mock_set_group_consumer_session_timeout_ms": (None, [vp, ci]),
        "rd_kafka_mock_set_group_consumer_heartbeat_interval_ms": (None, [vp, ci]),
    }
    for name, (res, args) in sigs.items():
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    return lib


class MockCluster:
    """A one-broker librdkafka mock cluster: `MockCluster(session_ms, heartbeat_ms)`, then
    `.bootstrap`, `.create_topic(name, partitions)`, `.close()`."""

    def __init__(self, session_timeout_ms: int, heartbeat_interval_ms: int):
        self.lib = _librdkafka()
        self.version = self.lib.rd_kafka_version_str().decode()
        errstr = ctypes.create_string_buffer(512)
        conf = self.lib.rd_kafka_conf_new()
        # The handle only hosts the cluster; keep its own logging quiet.
        self.lib.rd_kafka_conf_set(conf, b"log_level", b"3", errstr, len(errstr))
        self.rk = self.lib.rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, len(errstr))
        if not self.rk:
            raise RuntimeError(f"rd_kafka_new: {errstr.value.decode()}")
        self.mc = self.lib.rd_kafka_mock_cluster_new(self.rk, 1)
        if not self.mc:
            self.lib.rd_kafka_destroy(self.rk)
            raise RuntimeError("rd_kafka_mock_cluster_new failed")
        self.bootstrap = self.lib.rd_kafka_mock_cluster_bootstraps(self.mc).decode()
        self.lib.rd_kafka_mock_set_group_consumer_session_timeout_ms(self.mc, session_timeout_ms)
        self.lib.rd_kafka_mock_set_group_consumer_heartbeat_interval_ms(self.mc, heartbeat_interval_ms)

    def create_topic(self, name: str, partitions: int) -> None:
        err = self.lib.rd_kafka_mock_topic_create(self.mc, name.encode(), partitions, 1)
        if err:
            raise RuntimeError(f"rd_kafka_mock_topic_create({name}): error {err}")

    def close(self) -> None:
        if self.mc:
            self.lib.rd_kafka_mock_cluster_destroy(self.mc)
            self.mc = None
        if self.rk:
            self.lib.rd_kafka_destroy(self.rk)
            self.rk = None
