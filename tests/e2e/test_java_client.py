"""The Java client (kafka-clients 4.4) and Kafka's own kafka-consumer-groups tool against corral.

The Java client is the reference client: what Kafka's users run, and what Kafka's operators'
tools are built on. The program tests/e2e/java (JavaClient.java, built by scripts/test.sh) runs
one step per JVM and prints its outcome as JSON, which the tests assert on:

- produce with acks=all and idempotence, consume in a group (classic, then KIP-848's
  group.protocol=consumer), commit, and read the committed offsets back with
  Admin.listConsumerGroupOffsets: every record once, committed offsets at the end of every
  partition. The same program runs against a real Kafka 4.4 cluster (apache_kafka.py) as the
  reference, so a failure on corral alone is visibly corral's.
- Admin.removeMembersFromConsumerGroup of a live static member: corral's groups API then shows an
  `admin_action` rebalance, and Admin.describeConsumerGroups / listConsumerGroups / listGroups
  agree with the groups API before and after.
- kafka-consumer-groups (org.apache.kafka.tools.consumer.group.ConsumerGroupCommand) --list,
  --describe and --describe --state on a group with a live member and lag.

corral runs with the group settings of apache_kafka.CORRAL_GROUP_CONFIG (a 100 ms initial
rebalance delay, KIP-848 heartbeats every second), as the Kafka cluster does.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
from pathlib import Path

import pytest

import clients
from client_process import EventProcess, Started
from apache_kafka import CORRAL_GROUP_CONFIG, TARGETS, target_bootstrap
from groups import unique, wait_until

HERE = Path(__file__).resolve().parent
JAVA_DIR = HERE / "java"
JAR = JAVA_DIR / "target" / "corral-e2e-java.jar"
LIBS = JAVA_DIR / "target" / "libs"
MAIN = "corral.e2e.JavaClient"
CONSUMER_GROUP_COMMAND = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
# C1 only: these JVMs live for seconds, and the machine has two cores.
JVM = ["java", "-Xmx384m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]
RUN_TIMEOUT_S = 180.0
RECORDS = 1000
PARTITIONS = 3


@pytest.fixture(scope="session")
def java_classpath() -> str:
    if not (JAR.is_file() and any(LIBS.glob("kafka-clients-*.jar"))):
        pytest.fail(
            f"the Java client program is not built ({JAR}): scripts/test.sh builds it, "
            f"or run `mvn -q -B -f {JAVA_DIR / 'pom.xml'} package`",
            pytrace=False,
        )
    return f"{JAR}:{LIBS}/*"


def run_java(classpath: str, log_dir: Path, name: str, main: str, *args: str) -> str:
    """Runs one JVM to completion; returns its stdout. Its stderr is kept in `log_dir`."""
    stderr_path = log_dir / f"java-{name}.stderr.log"
    with open(stderr_path, "wb") as err:
        out = subprocess.run([*JVM, "-cp", classpath, main, *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, timeout=RUN_TIMEOUT_S)
    stderr = stderr_path.read_text(errors="replace")
    assert out.returncode == 0, f"{name}: java exited {out.returncode}\nstdout:\n{out.stdout.decode(errors='replace')}\nstderr:\n{stderr[-6000:]}"
    return out.stdout.decode()


def java_json(classpath: str, log_dir: Path, name: str, *args: str) -> dict:
    stdout = run_java(classpath, log_dir, name, MAIN, *args)
    lines = stdout.strip().splitlines()
    assert lines, f"{name}: no output"
    return json.loads(lines[-1])


def group_detail(server, group: str) -> dict | None:
    status, body = server.http_get("/v1/groups/" + urllib.parse.quote(group, safe=""))
    if status == 404:
        return None
    assert status == 200, body
    return json.loads(body)


# --- a. and b.: produce, consume in a group, commit; corral and Kafka -----------------------------


@pytest.fixture(params=TARGETS)
def target(request, corral_factory, apache_kafka, apache_kafka_classic):
    return target_bootstrap(request.param, corral_factory, apache_kafka, apache_kafka_classic)


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_produce_idempotent_consume_in_a_group_and_commit(java_classpath, target, protocol, tmp_path):
    topic, group = unique(f"java-{protocol}"), unique(f"java-{protocol}-group")
    out = java_json(
        java_classpath, tmp_path, "roundtrip",
        "roundtrip", "--bootstrap", target, "--topic", topic, "--partitions", str(PARTITIONS),
        "--count", str(RECORDS), "--group", group, "--protocol", protocol,
    )  # fmt: skip
    produced, consumed = out["produced"], out["consumed"]
    # Every record acknowledged once, at offsets 0..n-1 of its partition (no duplicate write).
    assert produced["errors"] == [] and produced["acked"] == RECORDS, produced
    assert all(p["dense_from_0"] for p in produced["partitions"].values()), produced
    ends = {f"{topic}-{p}": produced["partitions"].get(str(p), {"count": 0})["count"] for p in range(PARTITIONS)}
    assert out["end_offsets"] == ends, out
    # Every record consumed exactly once, by the group's only member, which owned every partition.
    assert (consumed["records"], consumed["distinct"], consumed["duplicates"], consumed["missing"]) == (RECORDS, RECORDS, 0, 0), consumed
    assert consumed["assignment"] == sorted(ends), consumed
    # The commit put every partition's committed offset at its end, as the consumer and the
    # admin client both read it back.
    assert out["committed"] == ends, out
    assert consumed["committed_by_consumer"] == {str(p): ends[f"{topic}-{p}"] for p in range(PARTITIONS)}, consumed
    # After close the group is Empty, of the protocol's type.
    after = out["group_after"]
    assert (after["group"], after["state"], after["type"], after["members"]) == (group, "Empty", {"classic": "Classic", "consumer": "Consumer"}[protocol], []), after


# --- c.: removeMembersFromConsumerGroup of a live static member -----------------------------------


class JavaMember(EventProcess):
    """A `JavaClient member` process and the events it printed (one JSON object per line)."""

    def __init__(self, classpath: str, log_dir: Path, name: str, *args: str):
        super().__init__(name, [*JVM, "-cp", classpath, MAIN, "member", *args], log_dir / f"java-member-{name}.stderr.log")


@pytest.fixture
def java_members():
    started = Started(JavaMember)
    yield started
    started.cleanup()


def admin_view(d: dict) -> dict:
    """Admin.describeConsumerGroups' description in the groups API's terms."""
    return {
        "state": d["state"],
        "type": d["type"].lower(),
        "protocol": d["assignor"],
        "members": sorted((m["member_id"], m["instance_id"], m["client_id"], m["host"], tuple(m["assignment"])) for m in d["members"]),
    }


def api_view(g: dict) -> dict:
    """The groups API's detail (/v1/groups/{id}) in the same terms."""
    return {
        "state": g["state"],
        "type": g["type"],
        "protocol": g["protocol"],
        "members": sorted(
            (m["member_id"], m["instance_id"], m["client_id"], m["client_host"], tuple(sorted(f"{a['topic']}-{p}" for a in m["assignment"] for p in a["partitions"])))
            for m in g["members"]
        ),
    }


def stable_with_instance(server, group: str, instance: str, not_member: str | None = None):
    g = group_detail(server, group)
    if g is None or g["state"] != "Stable" or [m["instance_id"] for m in g["members"]] != [instance]:
        return None
    if not_member is not None and g["members"][0]["member_id"] == not_member:
        return None
    return g


def listing(out: dict, key: str, group: str) -> list[dict]:
    return [entry for entry in out[key] if entry["group"] == group]


def test_admin_removes_a_live_static_member(java_classpath, corral_factory, java_members, tmp_path):
    server = corral_factory(config=CORRAL_GROUP_CONFIG)
    b, topic, group = server.bootstrap, unique("java-static"), unique("java-static-group")
    clients.create_topic(b, topic, partitions=2)
    member = java_members(java_classpath, tmp_path, "static", "--bootstrap", b, "--topic", topic, "--group", group, "--client-id", "e2e-static", "--instance-id", "pod-0")
    before = wait_until(lambda: stable_with_instance(server, group, "pod-0"), lambda: f"a Stable group with the static member; {member.describe()}")
    wait_until(lambda: member.of("assigned") and member.of("assigned")[-1]["partitions"] == [f"{topic}-0", f"{topic}-1"], member.describe)
    old_member_id = before["members"][0]["member_id"]

    out = java_json(java_classpath, tmp_path, "remove", "groups", "--bootstrap", b, "--group", group, "--remove-instance", "pod-0")
    # What the admin client saw before the removal is what the groups API showed.
    assert admin_view(out["described"]) == api_view(before), (out["described"], before)
    assert admin_view(out["described"])["members"][0][1:4] == ("pod-0", "e2e-static", "/127.0.0.1")
    assert listing(out, "listed", group) == [{"group": group, "state": "Stable", "type": "Classic", "simple": False}], out["listed"]
    assert listing(out, "listed_groups", group) == [{"group": group, "state": "Stable", "type": "Classic", "protocol": "consumer", "simple": False}], out["listed_groups"]
    assert out["removed"] == {"instance_id": "pod-0", "error": "null"}, out["removed"]
    # Removed, the member is gone from the group at once (it may already be re-joining).
    assert old_member_id not in [m["member_id"] for m in out["described_after"]["members"]], out["described_after"]

    # The groups API records the removal as an admin action, naming the removed member.
    def admin_rebalance():
        g = group_detail(server, group)
        return [r for r in g["rebalances"] if r["trigger"] == "admin_action"] if g else None

    removal = wait_until(admin_rebalance, lambda: f"an admin_action rebalance in {group_detail(server, group)}")
    assert len(removal) == 1, removal
    assert old_member_id in removal[0]["trigger_members"] or "pod-0" in removal[0]["trigger_members"], removal
    assert removal[0]["members_before"] == 1, removal

    # The member notices at its next heartbeat (UNKNOWN_MEMBER_ID), re-joins under the same
    # instance id with a new member id, and owns both partitions again.
    after = wait_until(lambda: stable_with_instance(server, group, "pod-0", not_member=old_member_id), lambda: f"the static member back; {member.describe()}")
    wait_until(lambda: member.of("assigned") and member.of("assigned")[-1]["partitions"] == [f"{topic}-0", f"{topic}-1"] and len(member.of("assigned")) >= 2, member.describe)
    assert not member.of("error"), member.describe()
    again = java_json(java_classpath, tmp_path, "describe-again", "groups", "--bootstrap", b, "--group", group)
    assert admin_view(again["described"]) == api_view(after), (again["described"], after)
    assert listing(again, "listed", group) == [{"group": group, "state": "Stable", "type": "Classic", "simple": False}], again["listed"]
    member.close()


# --- d.: kafka-consumer-groups --list / --describe ------------------------------------------------


def table(text: str, first_column: str) -> list[dict]:
    """The rows of a kafka-consumer-groups table (header line starting with `first_column`)."""
    lines = [line for line in text.splitlines() if line.strip()]
    rows, header = [], None
    for line in lines:
        cells = line.split()
        if cells[0] == first_column:
            header = cells
            continue
        if header is not None and len(cells) == len(header):
            rows.append(dict(zip(header, cells)))
    return rows


def test_kafka_consumer_groups_lists_and_describes_a_group(java_classpath, corral_factory, java_members, tmp_path):
    server = corral_factory(config=CORRAL_GROUP_CONFIG)
    b, topic, group = server.bootstrap, unique("java-cgc"), unique("java-cgc-group")
    clients.create_topic(b, topic, partitions=2)
    p = clients.producer(b)
    for i in range(10):
        p.produce(topic, key=f"k{i}".encode(), value=f"v{i}".encode(), partition=0 if i < 6 else 1)
    assert p.flush(30) == 0
    # A member that consumes and commits 7 of the 10 records, then stays in the group: lag 3.
    member = java_members(java_classpath, tmp_path, "cgc", "--bootstrap", b, "--topic", topic, "--group", group, "--client-id", "e2e-cgc", "--max-records", "7")
    wait_until(lambda: member.of("committed") and member.of("committed")[-1]["consumed"] == 7, member.describe)

    def settled():
        g = group_detail(server, group)
        if g is None or g["state"] != "Stable" or len(g["members"]) != 1:
            return None
        if sum(o["committed_offset"] for o in g["offsets"]) != 7:
            return None
        return g

    g = wait_until(settled, lambda: f"7 committed offsets in {group_detail(server, group)}")
    member_id = g["members"][0]["member_id"]
    committed = {o["partition"]: o["committed_offset"] for o in g["offsets"]}
    ends = {0: 6, 1: 4}

    describe = run_java(java_classpath, tmp_path, "cgc-describe", CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe", "--group", group)
    rows = table(describe, "GROUP")
    assert sorted(int(r["PARTITION"]) for r in rows) == [0, 1], describe
    for r in rows:
        part = int(r["PARTITION"])
        assert (r["GROUP"], r["TOPIC"]) == (group, topic), describe
        assert (int(r["CURRENT-OFFSET"]), int(r["LOG-END-OFFSET"]), int(r["LAG"])) == (committed[part], ends[part], ends[part] - committed[part]), describe
        assert (r["CONSUMER-ID"], r["HOST"], r["CLIENT-ID"]) == (member_id, "/127.0.0.1", "e2e-cgc"), describe
    assert sum(int(r["LAG"]) for r in rows) == 3, describe

    listed = run_java(java_classpath, tmp_path, "cgc-list", CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--list")
    assert group in listed.split(), listed

    state = run_java(java_classpath, tmp_path, "cgc-state", CONSUMER_GROUP_COMMAND, "--bootstrap-server", b, "--describe", "--group", group, "--state")
    rows = table(state, "GROUP")
    assert len(rows) == 1, state
    assert (rows[0]["GROUP"], rows[0]["ASSIGNMENT-STRATEGY"], rows[0]["STATE"], rows[0]["#MEMBERS"]) == (group, "range", "Stable", "1"), state
    member.close()
