"""franz-go (kgo and kadm, Go) against corral: a second modern client, with its own cooperative
and KIP-848 group code.

The program tests/e2e/franz (main.go, built by scripts/test.sh from the Go module proxy, pinned by
go.sum) prints each step's outcome as JSON, which the tests assert on:

- `roundtrip`: kadm creates a topic; kgo produces with acks=all and idempotence (franz-go's
  default), consumes in a group (classic with the cooperative-sticky balancer, and KIP-848 with
  the server assigning), commits; kadm describes the group and its lag while the member is in it,
  then reads the committed offsets, the end offsets and the group listing back after it left.
  The same program runs against a real Kafka 4.4 cluster as the reference, in front of a
  classic-only Kafka (corral running the groups), and through a sidecar.
- `member`: two members share a topic's partitions, cooperatively (classic) and by the server's
  assignment (KIP-848); one leaves, the other takes everything; no partition is owned by both at
  once, no record is consumed twice, the commits end at the end of every partition.
- over SASL_SSL (SCRAM-SHA-512), SASL_PLAINTEXT (SCRAM-SHA-256) and mutual TLS; refused with a
  wrong password, a CA that did not sign corral's certificate, and without the rights of
  [authorization] (creating a topic, writing a topic, using a group), each with the error
  franz-go reports.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

import clients
from client_process import EventProcess, Started
from apache_kafka import CORRAL_GROUP_CONFIG, TARGETS, target_bootstrap
from groups import committed, unique, wait_until
from security import USERS, SaslNode, make_certificates, start_secure_corral
from test_authorization import RULES as AUTHZ_RULES
from test_authorization import USERS as AUTHZ_USERS

FRANZ_CLIENT = Path(__file__).resolve().parent / "franz" / "target" / "franz-client"
RUN_TIMEOUT_S = 200.0
RECORDS = 1000
PARTITIONS = 3

# test_authorization's users and rules: alice may write and read the `payments.` topics (not
# create them) and use the `payments-` groups; bob has no right; admin has every one.
TOPIC_DENIED = "TOPIC_AUTHORIZATION_FAILED: Not authorized to access topics: [Topic authorization failed.]"
GROUP_DENIED = "GROUP_AUTHORIZATION_FAILED: Not authorized to access group: Group authorization failed."
# (user, topic, group, whether the topic is made first (by admin), step that fails, franz-go's error)
AUTHZ_REFUSALS = [
    ("bob", "payments.franz", "payments-franz", False, "create-topic", TOPIC_DENIED),
    ("alice", "payments.franz", "payments-franz", False, "create-topic", TOPIC_DENIED),
    ("alice", "orders.franz", "payments-franz", True, "produce", TOPIC_DENIED),
    ("alice", "payments.franz", "orders-franz", True, "consume", "unable to join group session: " + GROUP_DENIED),
]


@pytest.fixture(scope="session")
def franz_client() -> Path:
    if not FRANZ_CLIENT.is_file():
        pytest.fail(f"the franz-go client program is not built ({FRANZ_CLIENT}): scripts/test.sh builds it", pytrace=False)
    return FRANZ_CLIENT


def run_franz(client: Path, log_dir: Path, name: str, *args: str) -> tuple[int, dict]:
    """Runs one `franz-client` step to completion: its exit status and its last JSON line."""
    stderr_path = log_dir / f"franz-{name}.stderr.log"
    with open(stderr_path, "wb") as err:
        out = subprocess.run([str(client), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, timeout=RUN_TIMEOUT_S)
    lines = out.stdout.decode(errors="replace").strip().splitlines()
    assert lines, f"{name}: franz-client exited {out.returncode} with no output\nstderr:\n{stderr_path.read_text(errors='replace')[-6000:]}"
    return out.returncode, json.loads(lines[-1])


def roundtrip(client: Path, log_dir: Path, bootstrap: str, topic: str, group: str, protocol: str, *security: str, count: int = RECORDS) -> dict:
    rc, out = run_franz(
        client, log_dir, f"roundtrip-{protocol}",
        "roundtrip", "-bootstrap", bootstrap, "-topic", topic, "-partitions", str(PARTITIONS),
        "-count", str(count), "-group", group, "-protocol", protocol, *security,
    )  # fmt: skip
    assert rc == 0 and "error" not in out, out
    return out


def assert_roundtrip(out: dict, topic: str, protocol: str, count: int = RECORDS) -> None:
    produced, consumed = out["produced"], out["consumed"]
    # Every record acknowledged once, at offsets 0..n-1 of its partition (no duplicate write).
    assert sum(p["count"] for p in produced.values()) == count, produced
    assert all(p["dense_from_0"] for p in produced.values()), produced
    ends = {f"{topic}-{p}": produced.get(str(p), {"count": 0})["count"] for p in range(PARTITIONS)}
    assert out["end_offsets"] == ends, out
    # Every record consumed exactly once by the group's only member, which owned every partition.
    assert (consumed["records"], consumed["distinct"], consumed["duplicates"]) == (count, count, 0), consumed
    assert consumed["assignment"] == sorted(ends), consumed
    # The commit put every partition's committed offset at its end.
    assert out["committed"] == ends, out
    described = out["described"]
    assert described["state"] == "Stable", described
    assert len(described["members"]) == 1, described
    m = described["members"][0]
    assert (m["client_id"], m["host"], m["assignment"]) == ("franz", "/127.0.0.1", sorted(ends)), described
    if protocol == "classic":
        assert (described["protocol_type"], described["assignor"]) == ("consumer", "cooperative-sticky"), described
        assert out["lag"] == 0, out
    else:
        # The server's assignor; the member reconciled: its assignment is its target.
        assert m["target"] == m["assignment"] and m["subscribed"] == [topic], described
        assert m["epoch"] == described["epoch"] == described["assignment_epoch"], described
        # kadm's Lag describes with DescribeGroups, which a KIP-848 group answers as Kafka does.
        assert out["lag"] == {"error": "GROUP_ID_NOT_FOUND: The group id does not exist."}, out
    # After the member left, the group is Empty, of the protocol's type.
    assert out["listed"] == {"state": "Empty", "type": protocol, "protocol_type": "consumer"}, out


@pytest.fixture(params=TARGETS)
def target(request, corral_factory, apache_kafka, apache_kafka_classic):
    return target_bootstrap(request.param, corral_factory, apache_kafka, apache_kafka_classic)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_produce_consume_in_a_group_commit_and_describe(franz_client, target, protocol, tmp_path):
    topic, group = unique(f"franz-{protocol}"), unique(f"franz-{protocol}-group")
    out = roundtrip(franz_client, tmp_path, target, topic, group, protocol)
    assert_roundtrip(out, topic, protocol)


# --- two members -----------------------------------------------------------------------------------


class FranzMember(EventProcess):
    """A `franz-client member` process and the events it printed (one JSON object per line)."""

    def __init__(self, client: Path, log_dir: Path, name: str, *args: str):
        super().__init__(name, [str(client), "member", "-name", name, *args], log_dir / f"franz-member-{name}.stderr.log")

    def owned(self) -> set[str]:
        """The partitions it owns now: assigned, less revoked and lost, in the order printed."""
        owned: set[str] = set()
        with self.lock:
            for e in self.events:
                if e["event"] == "assigned":
                    owned |= set(e["partitions"])
                elif e["event"] in ("revoked", "lost"):
                    owned -= set(e["partitions"])
        return owned

    def describe(self, leave_out: tuple[str, ...] = ("consumed",)) -> str:
        return super().describe(leave_out)

    def close(self) -> None:
        """Closes stdin: the member commits, leaves the group and exits 0."""
        super().close()
        assert self.of("closed")[0]["commit_error"] is None, self.describe()


@pytest.fixture
def franz_members():
    started = Started(FranzMember)
    yield started
    started.cleanup()


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_two_members_share_then_hand_over_the_partitions(franz_client, corral_factory, franz_members, protocol, tmp_path):
    server = corral_factory(config=CORRAL_GROUP_CONFIG)
    b, topic, group = server.bootstrap, unique(f"franz-pair-{protocol}"), unique(f"franz-pair-{protocol}-group")
    partitions = [f"{topic}-{p}" for p in range(4)]
    clients.create_topic(b, topic, partitions=4)
    producer = clients.producer(b)

    def produce(start: int, n: int) -> None:
        for i in range(start, start + n):
            producer.produce(topic, value=f"v{i}".encode(), partition=i % 4)
        assert producer.flush(30) == 0

    args = ("-bootstrap", b, "-topic", topic, "-group", group, "-protocol", protocol)
    produce(0, 40)
    a = franz_members(franz_client, tmp_path, "a", *args)
    wait_until(lambda: a.owned() == set(partitions), a.describe)
    wait_until(lambda: len(a.of("consumed")) == 40, a.describe)

    # A second member: each ends with two partitions, never one owned by both.
    b_member = franz_members(franz_client, tmp_path, "b", *args)
    wait_until(lambda: len(a.owned()) == 2 and len(b_member.owned()) == 2, lambda: f"{a.describe()}\n{b_member.describe()}")
    assert a.owned() | b_member.owned() == set(partitions), (a.owned(), b_member.owned())
    # Cooperative in both protocols: the first member gave up two partitions and kept the rest
    # (it was never told it lost them, nor had its whole assignment revoked).
    assert not a.of("lost"), a.describe()
    assert sorted(p for e in a.of("revoked") for p in e["partitions"]) == sorted(set(partitions) - a.owned()), a.describe()
    produce(40, 40)
    wait_until(lambda: len(a.of("consumed")) + len(b_member.of("consumed")) == 80, lambda: f"{a.describe()}\n{b_member.describe()}")

    # The first leaves: the second takes its partitions and what arrives on them.
    a.close()
    wait_until(lambda: b_member.owned() == set(partitions), b_member.describe)
    produce(80, 40)
    wait_until(lambda: len(a.of("consumed")) + len(b_member.of("consumed")) == 120, lambda: f"{a.describe()}\n{b_member.describe()}")
    b_member.close()

    values = [e["value"] for m in (a, b_member) for e in m.of("consumed")]
    assert sorted(values) == sorted(f"v{i}" for i in range(120)), "every record consumed once"
    for m in (a, b_member):
        assert not m.of("error") and all(e["error"] is None for e in m.of("committed")), m.describe()
    offsets = committed(b, group, [(topic, p) for p in range(4)])
    assert offsets == {(topic, p): 30 for p in range(4)}, offsets


# --- security -------------------------------------------------------------------------------------


@pytest.fixture
def secure(corral_factory, corral_bin, tmp_path):
    return start_secure_corral(corral_factory, corral_bin, tmp_path, extra=CORRAL_GROUP_CONFIG)


@pytest.mark.parametrize(
    "listener, security, protocol",
    [
        ("SASL_SSL", ("-sasl", "SCRAM-SHA-512", "-user", "alice"), "consumer"),
        ("SASL_PLAINTEXT", ("-sasl", "SCRAM-SHA-256", "-user", "bob"), "classic"),
        ("MTLS", ("-tls-cert", "CLIENT_CERT", "-tls-key", "CLIENT_KEY"), "classic"),
    ],
)  # fmt: skip
def test_over_tls_and_sasl(franz_client, secure, tmp_path, listener, security, protocol):
    flags = list(security)
    if "-user" in flags:
        flags += ["-password", USERS[flags[flags.index("-user") + 1]]]
    flags = [{"CLIENT_CERT": str(secure.certs.client_cert), "CLIENT_KEY": str(secure.certs.client_key)}.get(f, f) for f in flags]
    if listener in ("SASL_SSL", "MTLS"):
        flags += ["-tls-ca", str(secure.certs.ca)]
    topic, group = unique("franz-sec"), unique("franz-sec-group")
    out = roundtrip(franz_client, tmp_path, secure.bootstrap(listener), topic, group, protocol, *flags, count=100)
    assert_roundtrip(out, topic, protocol, count=100)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_is_refused(franz_client, secure, tmp_path, mechanism):
    topic = unique("franz-refused")
    rc, out = run_franz(
        franz_client, tmp_path, f"refused-{mechanism}",
        "roundtrip", "-bootstrap", secure.bootstrap("SASL_SSL"), "-topic", topic, "-group", unique("franz-refused"),
        "-sasl", mechanism, "-user", "alice", "-password", "not-the-password", "-tls-ca", str(secure.certs.ca),
    )  # fmt: skip
    assert rc == 1 and out["step"] == "create-topic", out
    assert out["error"].startswith("SASL_AUTHENTICATION_FAILED: SASL Authentication failed."), out
    assert topic not in clients.admin_client(secure.bootstrap("PLAINTEXT")).list_topics(timeout=30).topics


def test_unknown_ca_is_refused(franz_client, secure, tmp_path):
    other = make_certificates(tmp_path / "other-ca")
    topic = unique("franz-unknown-ca")
    rc, out = run_franz(
        franz_client, tmp_path, "unknown-ca",
        "roundtrip", "-bootstrap", secure.bootstrap("SSL"), "-topic", topic, "-group", unique("franz-unknown-ca"),
        "-tls-ca", str(other.ca),
    )  # fmt: skip
    assert rc == 1 and out["step"] == "create-topic", out
    assert out["error"].endswith("tls: failed to verify certificate: x509: certificate signed by unknown authority"), out
    assert topic not in clients.admin_client(secure.bootstrap("PLAINTEXT")).list_topics(timeout=30).topics


@pytest.fixture
def authorizing(corral_factory, corral_bin, tmp_path):
    return SaslNode(corral_factory, corral_bin, tmp_path, AUTHZ_USERS, CORRAL_GROUP_CONFIG + AUTHZ_RULES)


@pytest.mark.parametrize("user, topic_prefix, group_prefix, made, step, error", AUTHZ_REFUSALS)
def test_missing_rights_are_refused(franz_client, authorizing, tmp_path, user, topic_prefix, group_prefix, made, step, error):
    topic = unique(topic_prefix)
    if made:
        admin = AdminClient(authorizing.as_user("admin"))
        for future in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS)]).values():
            future.result(30)
    rc, out = run_franz(
        franz_client, tmp_path, f"authz-{user}",
        "roundtrip", "-bootstrap", authorizing.sasl_bootstrap, "-topic", topic, "-group", unique(group_prefix),
        "-count", "10", "-sasl", "SCRAM-SHA-256", "-user", user, "-password", AUTHZ_USERS[user],
        *(["-no-create"] if made else []),
    )  # fmt: skip
    assert rc == 1 and (out["step"], out["error"]) == (step, error), out
