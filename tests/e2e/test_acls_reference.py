"""CreateAcls, DescribeAcls and DeleteAcls sent alike to Apache Kafka 4.4 and to corral.

Kafka here is one broker of its own with the StandardAuthorizer (the session's clusters have no
authorizer), and `User:ANONYMOUS` a super user on both, so each side takes the requests on a
PLAINTEXT connection. The requests are raw v1 frames: what is compared is each side's error codes
and messages as sent, binding by binding, and the bindings listed and removed.
"""

from __future__ import annotations

import uuid

import pytest

import kafkawire as kw
from conftest import _LIVE

API_CREATE_ACLS, API_DELETE_ACLS, API_DESCRIBE_ACLS = 30, 31, 29
TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID = 2, 3, 4, 5
ANY, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
READ, WRITE, ALTER, DESCRIBE = 3, 4, 7, 8
DENY, ALLOW = 2, 3


@pytest.fixture(scope="module")
def kafka_with_authorizer(tmp_path_factory):
    from apache_kafka import ApacheKafkaCluster

    settings = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer", "super.users": "User:ANONYMOUS"}
    cluster = ApacheKafkaCluster(tmp_path_factory.mktemp("kafka_acls"), live=_LIVE, size=1, extra=settings)
    try:
        cluster.start_all()
        yield cluster.bootstrap
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def sides(kafka_with_authorizer, corral_module_server) -> dict[str, str]:
    return {"kafka": kafka_with_authorizer, "corral": corral_module_server}


@pytest.fixture(scope="module")
def corral_module_server(corral_bin, tmp_path_factory):
    from conftest import CorralServer

    server = CorralServer(corral_bin, tmp_path_factory.mktemp("corral_acls"), config='[authorization]\nsuper_users = ["User:ANONYMOUS"]\n')
    server.start()
    try:
        yield server.bootstrap
    finally:
        server.teardown()


class Closed(Exception):
    """The server closed the connection instead of answering (the request did not parse)."""


def call(bootstrap: str, api: int, body: bytes) -> kw.Reader:
    conn = kw.Conn(bootstrap)
    try:
        conn.send(kw.request(api, 1, 7, body))
        frame = conn.recv_frame()
    finally:
        conn.close()
    if frame is None:
        raise Closed()
    r = kw.Reader(frame)
    assert r.take("i") == 7
    r.take("i")  # throttle_time_ms
    return r


def create(bootstrap: str, *bindings: tuple) -> list[tuple[int, str | None]]:
    """CreateAcls v1: (error code, message) per binding."""
    body = kw.array([
        kw.i8(kind) + kw.string(name) + kw.i8(pattern) + kw.string(principal) + kw.string(host) + kw.i8(op) + kw.i8(permission)
        for kind, name, pattern, principal, host, op, permission in bindings
    ])  # fmt: skip
    r = call(bootstrap, API_CREATE_ACLS, body)
    results = [(r.take("h"), r.string()) for _ in range(r.take("i"))]
    assert r.done()
    return results


def acl_filter(kind=ANY, name=None, pattern=ANY, principal=None, host=None, op=ANY, permission=ANY) -> bytes:
    return kw.i8(kind) + kw.string(name) + kw.i8(pattern) + kw.string(principal) + kw.string(host) + kw.i8(op) + kw.i8(permission)


def describe(bootstrap: str, f: bytes) -> tuple[int, str | None, list[tuple]]:
    """DescribeAcls v1: error code, message, and the bindings (sorted)."""
    r = call(bootstrap, API_DESCRIBE_ACLS, f)
    error, message = r.take("h"), r.string()
    found = []
    for _ in range(r.take("i")):
        kind, name, pattern = r.take("b"), r.string(), r.take("b")
        for _ in range(r.take("i")):
            found.append((kind, name, pattern, r.string(), r.string(), r.take("b"), r.take("b")))
    assert r.done()
    return error, message, sorted(found)


def delete(bootstrap: str, *filters: bytes) -> list[tuple[int, str | None, list[tuple]]]:
    """DeleteAcls v1: per filter, its error code, message and the bindings it removed (sorted), each
    with its own error code and message."""
    r = call(bootstrap, API_DELETE_ACLS, kw.array(list(filters)))
    results = []
    for _ in range(r.take("i")):
        error, message = r.take("h"), r.string()
        removed = []
        for _ in range(r.take("i")):
            answer = (r.take("h"), r.string())
            removed.append((r.take("b"), r.string(), r.take("b"), r.string(), r.string(), r.take("b"), r.take("b"), answer))
        results.append((error, message, sorted(removed)))
    assert r.done()
    return results


def both(sides: dict[str, str], ask) -> dict[str, object]:
    """Each side's answer, or "closed"."""
    answers = {}
    for side, bootstrap in sides.items():
        try:
            answers[side] = ask(bootstrap)
        except Closed:
            answers[side] = "closed"
    return answers


def test_create_acls_refuses_what_kafka_refuses(sides):
    tag = uuid.uuid4().hex[:6]
    user = f"User:u-{tag}"
    alike = {
        "a topic, literal": (TOPIC, f"t-{tag}", LITERAL, user, "*", READ, ALLOW),
        "a prefix, denied from one host": (TOPIC, f"p-{tag}", PREFIXED, user, "10.0.0.1", WRITE, DENY),
        "a transactional id": (TRANSACTIONAL_ID, f"tx-{tag}", LITERAL, user, "*", WRITE, ALLOW),
        "the cluster": (CLUSTER, "kafka-cluster", LITERAL, user, "*", DESCRIBE, ALLOW),
        "the cluster by another name": (CLUSTER, "other", LITERAL, user, "*", ALTER, ALLOW),
        "an empty name": (TOPIC, "", LITERAL, user, "*", READ, ALLOW),
    }
    answers = {case: both(sides, lambda b, binding=binding: create(b, binding)) for case, binding in alike.items()}
    assert {case: a for case, a in answers.items() if a["kafka"] != a["corral"]} == {}, answers
    assert [a["kafka"][0][0] for a in answers.values()] == [0, 0, 0, 0, 42, 42], answers
    # A filter's codes in a binding. Kafka fails the whole request: UNKNOWN_SERVER_ERROR without a
    # message for ANY or MATCH, and for UNKNOWN (0) it closes the connection. corral refuses the
    # binding with INVALID_REQUEST and says why. (Clients refuse such bindings before sending.)
    otherwise = {
        (ANY, f"t-{tag}", LITERAL, user, "*", READ, ALLOW): ((-1, None), "Invalid resourceType ANY"),
        (0, f"t-{tag}", LITERAL, user, "*", READ, ALLOW): ("closed", "Invalid resourceType UNKNOWN"),
        (TOPIC, f"t-{tag}", MATCH, user, "*", READ, ALLOW): ((-1, None), "Invalid patternType MATCH"),
        (TOPIC, f"t-{tag}", ANY, user, "*", READ, ALLOW): ((-1, None), "Invalid patternType ANY"),
        (TOPIC, f"t-{tag}", LITERAL, user, "*", ANY, ALLOW): ((-1, None), "Invalid operation ANY"),
        (TOPIC, f"t-{tag}", LITERAL, user, "*", 0, ALLOW): ("closed", "Invalid operation UNKNOWN"),
        (TOPIC, f"t-{tag}", LITERAL, user, "*", READ, ANY): ((-1, None), "Invalid permissionType ANY"),
        (TOPIC, f"t-{tag}", LITERAL, user, "*", READ, 0): ("closed", "Invalid permissionType UNKNOWN"),
    }
    for binding, (kafka, message) in otherwise.items():
        got = both(sides, lambda b, binding=binding: create(b, binding))
        assert got == {"kafka": kafka if kafka == "closed" else [kafka], "corral": [(42, message)]}, (binding, got)
    # The ones made are listed alike.
    listed = both(sides, lambda b: describe(b, acl_filter(principal=user)))
    assert listed["kafka"] == listed["corral"], listed
    assert len(listed["kafka"][2]) == 4, listed


def test_one_request_answers_each_binding_on_its_own(sides):
    tag = uuid.uuid4().hex[:6]
    user = f"User:u-{tag}"
    bindings = [(TOPIC, f"t-{tag}", LITERAL, user, "*", READ, ALLOW), (TOPIC, "", LITERAL, user, "*", READ, ALLOW), (GROUP, f"g-{tag}", PREFIXED, user, "*", READ, ALLOW)]
    answers = both(sides, lambda b: create(b, *bindings))
    assert answers["kafka"] == answers["corral"], answers
    listed = both(sides, lambda b: describe(b, acl_filter(principal=user)))
    assert listed["kafka"] == listed["corral"] and len(listed["kafka"][2]) == 2, listed


def test_filters_list_and_delete_alike(sides):
    tag = uuid.uuid4().hex[:6]
    user, other = f"User:u-{tag}", f"User:o-{tag}"
    made = [
        (TOPIC, f"orders-{tag}", LITERAL, user, "*", READ, ALLOW),
        (TOPIC, f"orders-{tag}", LITERAL, user, "*", WRITE, ALLOW),
        (TOPIC, f"ord-{tag}"[:3], PREFIXED, other, "*", READ, ALLOW),
        (TOPIC, "*", LITERAL, other, "*", DESCRIBE, ALLOW),
        (TOPIC, f"orders-{tag}", LITERAL, other, "10.1.1.1", WRITE, DENY),
        (GROUP, f"orders-{tag}", LITERAL, user, "*", READ, ALLOW),
    ]
    answers = both(sides, lambda b: create(b, *made))
    assert answers["kafka"] == answers["corral"] and {code for code, _ in answers["kafka"]} == {0}, answers
    filters = {
        "MATCH on the topic": acl_filter(kind=TOPIC, name=f"orders-{tag}", pattern=MATCH),
        "LITERAL with the name": acl_filter(name=f"orders-{tag}", pattern=LITERAL),
        "ANY pattern with the name": acl_filter(name=f"orders-{tag}"),
        "one principal's WRITE": acl_filter(principal=user, op=WRITE),
        "DENY from one host": acl_filter(principal=other, host="10.1.1.1", permission=DENY),
        "a host nobody has": acl_filter(principal=other, host="10.9.9.9"),
    }
    for case, f in filters.items():
        listed = both(sides, lambda b, f=f: describe(b, f))
        # The wildcard and prefix bindings of other tests may be listed by MATCH: only this test's.
        mine = {side: a if a == "closed" else (a[0], a[1], [x for x in a[2] if x[3] in (user, other)]) for side, a in listed.items()}
        assert mine["kafka"] == mine["corral"], (case, mine)
    removed = both(sides, lambda b: delete(b, acl_filter(principal=user, op=WRITE), acl_filter(principal=other, permission=DENY)))
    assert removed["kafka"] == removed["corral"], removed
    assert [len(found) for _, _, found in removed["kafka"]] == [1, 1], removed
    left = both(sides, lambda b: describe(b, acl_filter(principal=user)))
    assert left["kafka"] == left["corral"] and len(left["kafka"][2]) == 2, left


def test_a_filter_with_an_unknown_code(sides):
    """Kafka closes the connection on a filter holding UNKNOWN (0) as it parses the request; corral
    answers INVALID_REQUEST and says why."""
    unknown = acl_filter(pattern=0)
    invalid = "The filter holds an UNKNOWN resource type, pattern type, operation or permission."
    assert both(sides, lambda b: describe(b, unknown)) == {"kafka": "closed", "corral": (42, invalid, [])}
    assert both(sides, lambda b: delete(b, unknown)) == {"kafka": "closed", "corral": [(42, invalid, [])]}


def test_one_request_makes_or_removes_at_most_10000_acls(sides):
    """Kafka's controller bounds what one request writes: more than 10,000 new ACLs in a
    CreateAcls, or ACLs removed by a DeleteAcls, and the whole request is refused."""
    tag = uuid.uuid4().hex[:8]
    many, few = f"User:many-{tag}", f"User:few-{tag}"
    binding = lambda principal, i: (TOPIC, f"t{i}-{tag}", LITERAL, principal, "*", READ, ALLOW)  # noqa: E731
    too_many = both(sides, lambda b: set(create(b, *[binding(many, i) for i in range(10_001)])))
    assert too_many["kafka"] == too_many["corral"] == {(44, "Unable to perform excessively large batch operation.")}, too_many
    for principal, count in [(many, 10_000), (few, 5_000)]:
        made = both(sides, lambda b: {code for code, _ in create(b, *[binding(principal, i) for i in range(count)])})
        assert made == {"kafka": {0}, "corral": {0}}, made
    try:
        # 15,000 removed at once: every filter refused, none removed.
        refused = both(sides, lambda b: delete(b, acl_filter(principal=few), acl_filter(principal=many)))
        bound = "Cannot remove more than 10000 acls in a single delete operation."
        assert refused["kafka"] == refused["corral"] == [(42, bound, [])] * 2, refused
        removed = both(sides, lambda b: [len(found) for _, _, found in delete(b, acl_filter(principal=few), acl_filter(principal=few))])
        assert removed == {"kafka": [5_000, 5_000], "corral": [5_000, 5_000]}, removed
        # Exactly the bound.
        removed = both(sides, lambda b: [(code, len(found)) for code, _, found in delete(b, acl_filter(principal=many))])
        assert removed == {"kafka": [(0, 10_000)], "corral": [(0, 10_000)]}, removed
    finally:
        for bootstrap in sides.values():
            for principal in (many, few):
                delete(bootstrap, acl_filter(principal=principal))


def test_deletions_are_bounded_where_kafka_has_no_bound(corral_module_server):
    """corral only (Kafka lists every filter's matches, however many filters match the same
    ACLs): a DeleteAcls holds at most 1,000 filters, and lists at most 100,000 ACLs over all of
    them, its filters taken in order; a filter past that is refused and removes none, and a later
    one that fits is served. One filter alone always fits. Each filter lists what it matches in
    the set as it was before the request, as in Kafka."""
    bootstrap = corral_module_server
    tag = uuid.uuid4().hex[:8]
    principal = f"User:listed-{tag}"
    made = create(bootstrap, *[(TOPIC, f"t{i}-{tag}", LITERAL, principal, "*", READ, ALLOW) for i in range(10_000)])
    assert {code for code, _ in made} == {0}
    mine = acl_filter(principal=principal)
    try:
        assert [(code, message) for code, message, _ in delete(bootstrap, *[mine] * 1001)] == [
            (42, "at most 1000 filters in one request")
        ] * 1001
        one = acl_filter(name=f"t7-{tag}", principal=principal)
        answers = delete(bootstrap, *[mine] * 9, one, mine, one)
        refused = "with the filters before it, this one would list more than 100000 ACLs; send it alone"
        assert [(code, message, len(found)) for code, message, found in answers] == [(0, None, 10_000)] * 9 + [
            (0, None, 1),
            (42, refused, 0),
            (0, None, 1),
        ]
        code, _, left = describe(bootstrap, mine)
        assert (code, left) == (0, [])
    finally:
        delete(bootstrap, mine)


def test_acls_are_bounded_in_bytes(corral_module_server):
    """corral only: the ACLs' names, principals and hosts take at most 64 MiB on every node. A
    request past it makes none of its ACLs and says why; one that fits is made."""
    bootstrap = corral_module_server
    tag = uuid.uuid4().hex[:8]
    principal = f"User:large-{tag}"
    name = lambda i: f"{i:05}-{tag}-" + "x" * 32_000  # noqa: E731 (about 1/2,097 of the bound each)
    answers = create(bootstrap, *[(TOPIC, name(i), PREFIXED, principal, "*", READ, ALLOW) for i in range(2_100)])
    refused = "the cluster's ACLs would take more than 67108864 bytes of names, principals and hosts"
    assert set(answers) == {(44, refused)}, set(answers)
    code, _, held = describe(bootstrap, acl_filter(principal=principal))
    assert (code, held) == (0, [])
    try:
        made = create(bootstrap, *[(TOPIC, name(i), PREFIXED, principal, "*", READ, ALLOW) for i in range(10)])
        assert {code for code, _ in made} == {0}, made
        code, _, held = describe(bootstrap, acl_filter(principal=principal))
        assert (code, len(held)) == (0, 10)
    finally:
        delete(bootstrap, acl_filter(principal=principal))
