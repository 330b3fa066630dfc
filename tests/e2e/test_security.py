"""TLS and SASL on corral's listeners, with confluent-kafka (librdkafka) and kafka-python.

One node listens with PLAINTEXT, SSL, SSL with required client certificates (MTLS),
SASL_PLAINTEXT and SASL_SSL at once (security.py). Each client produces and consumes as a group
through each listener and mechanism; the records come back whole and the group's offsets are
committed. Each is refused with a wrong password, an unknown user, an unknown CA and a missing
client certificate, and the test asserts the error the client reports. Also: a client that skips
authentication is disconnected unanswered; Metadata gives the brokers' addresses on the listener
the client reached; a certificate replaced on disk is served to new connections while open ones
go on; with connections_max_reauth_ms librdkafka authenticates again on the same connection
(KIP-368).
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
import uuid

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from security import USERS, start_secure_corral
from test_admin_http import scrape, total

RECORDS = 30


def metric_sum(server, name: str, **labels) -> float:
    return total(scrape(server), name, **labels) or 0.0


@pytest.fixture
def secure(corral_factory, corral_bin, tmp_path):
    return start_secure_corral(corral_factory, corral_bin, tmp_path)


def confluent_config(secure, listener: str, mechanism: str | None = None, user: str = "alice", password: str | None = None) -> dict:
    config = {"bootstrap.servers": secure.bootstrap(listener)}
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        config["ssl.ca.location"] = str(secure.certs.ca)
    if listener == "MTLS":
        config["ssl.certificate.location"] = str(secure.certs.client_cert)
        config["ssl.key.location"] = str(secure.certs.client_key)
    config["security.protocol"] = {"MTLS": "SSL"}.get(listener, listener)
    if mechanism:
        config.update(
            {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": USERS.get(user, "x") if password is None else password}
        )
    return config


def confluent_roundtrip(config: dict) -> None:
    """Creates a topic, produces RECORDS records, consumes them in a group and commits."""
    topic = f"sec-{uuid.uuid4().hex[:8]}"
    errors: list[str] = []
    on_error = {"error_cb": lambda e: errors.append(e.str())}
    admin = AdminClient({**config, **on_error})
    admin.create_topics([NewTopic(topic, 2, 1)], request_timeout=15)[topic].result(timeout=20)
    producer = Producer({**config, **on_error, "enable.idempotence": True})
    for i in range(RECORDS):
        producer.produce(topic, key=str(i).encode(), value=f"value-{i}".encode())
    assert producer.flush(20) == 0, errors
    consumer = Consumer({**config, **on_error, "group.id": f"g-{topic}", "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe([topic])
    values = set()
    deadline = time.monotonic() + 30
    while len(values) < RECORDS and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.add(message.value().decode())
    assert values == {f"value-{i}" for i in range(RECORDS)}, errors
    committed = consumer.commit(asynchronous=False)
    assert sum(tp.offset for tp in committed) == RECORDS
    consumer.close()


def confluent_refusal(config: dict, seconds: float = 10.0) -> tuple[str, str]:
    """The first error librdkafka reports to a producer that cannot connect: (name, text)."""
    errors: list[KafkaError] = []
    producer = Producer({**config, "error_cb": errors.append})
    deadline = time.monotonic() + seconds
    while not errors and time.monotonic() < deadline:
        producer.poll(0.2)
    assert errors, "the client was not refused"
    return errors[0].name(), errors[0].str()


@pytest.mark.parametrize(
    "listener,mechanism",
    [
        ("SSL", None),
        ("MTLS", None),
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
        ("SASL_SSL", "SCRAM-SHA-512"),
        ("SASL_SSL", "PLAIN"),
    ],
)
def test_confluent_produces_and_consumes_on_every_listener(secure, listener, mechanism):
    confluent_roundtrip(confluent_config(secure, listener, mechanism))
    if mechanism:
        assert metric_sum(secure.server, "corral_sasl_authentications_total", mechanism=mechanism, outcome="ok") >= 3


def test_confluent_refusals(secure):
    scram = "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
    for listener, mechanism, user, password, expected in [
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "wrong", scram.format("SCRAM-SHA-256")),
        ("SASL_SSL", "SCRAM-SHA-512", "mallory", "alice-secret", scram.format("SCRAM-SHA-512")),
        ("SASL_PLAINTEXT", "PLAIN", "alice", "wrong", "Authentication failed: Invalid username or password"),
        ("SASL_PLAINTEXT", "PLAIN", "mallory", "x", "Authentication failed: Invalid username or password"),
    ]:
        name, text = confluent_refusal(confluent_config(secure, listener, mechanism, user, password))
        assert name == "_AUTHENTICATION", (mechanism, user, name, text)
        assert f"SASL authentication error: {expected} (after" in text, text
    assert metric_sum(secure.server, "corral_sasl_authentications_total", outcome="failed") == 4

    name, text = confluent_refusal({**confluent_config(secure, "SSL"), "ssl.ca.location": str(secure.certs.other_ca)})
    # librdkafka names the same failed verification _SSL when its handshake call sees it and
    # _TRANSPORT when a read on the socket does, whichever comes first; the text is the same.
    assert name in ("_SSL", "_TRANSPORT") and "certificate verify failed" in text, (name, text)
    mtls = confluent_config(secure, "MTLS")
    del mtls["ssl.certificate.location"], mtls["ssl.key.location"]
    name, text = confluent_refusal(mtls)
    assert name == "_TRANSPORT" and "certificate required" in text, text
    assert metric_sum(secure.server, "corral_tls_handshakes_failed_total") >= 2


def test_unauthenticated_requests_are_not_answered(secure):
    """On a SASL listener, a Metadata request before SaslHandshake closes the connection with no
    answer, as Kafka does; on a plaintext listener, SaslHandshake gets ILLEGAL_SASL_STATE."""
    metadata_v1 = struct.pack(">hhih", 3, 1, 7, -1) + struct.pack(">i", -1)
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(struct.pack(">i", len(metadata_v1)) + metadata_v1)
        assert s.recv(64) == b"", "the connection was answered instead of closed"
    handshake_v1 = struct.pack(">hhih", 17, 1, 8, -1) + struct.pack(">h", 5) + b"PLAIN"
    with socket.create_connection(("127.0.0.1", secure.ports["PLAINTEXT"]), timeout=10) as s:
        s.sendall(struct.pack(">i", len(handshake_v1)) + handshake_v1)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        body = recv_exact(s, size)
        correlation, error = struct.unpack(">ih", body[:6])
        assert (correlation, error) == (8, 34), body  # ILLEGAL_SASL_STATE


def test_a_large_frame_before_authentication_closes_the_connection(secure):
    """Before SASL authentication a frame may be at most 512 KiB (Kafka's
    sasl.server.max.receive.size): the size prefix alone of a larger one closes the connection.
    Once authenticated, a 700 KiB record is produced as on any listener."""
    with socket.create_connection(("127.0.0.1", secure.ports["SASL_PLAINTEXT"]), timeout=10) as s:
        s.sendall(struct.pack(">i", 512 * 1024 + 1) + b"\0" * 1024)
        assert s.recv(64) == b"", "the connection was answered instead of closed"
    config = {**confluent_config(secure, "SASL_PLAINTEXT", "PLAIN"), "message.max.bytes": 2_000_000}
    topic = f"big-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    producer = Producer(config)
    delivered = []
    producer.produce(topic, b"x" * (700 * 1024), on_delivery=lambda err, _msg: delivered.append(err))
    assert producer.flush(30) == 0 and delivered == [None], delivered


def recv_exact(s: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "connection closed"
        data += chunk
    return data


def test_metadata_names_the_listener_the_client_reached(secure):
    for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
        admin = AdminClient(confluent_config(secure, listener, "SCRAM-SHA-256" if listener.startswith("SASL") else None))
        brokers = admin.list_topics(timeout=15).brokers
        assert [f"{b.host}:{b.port}" for b in brokers.values()] == [secure.bootstrap(listener)], listener


def test_kafka_python_tls_and_sasl(secure):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic as KNewTopic
    from kafka.errors import KafkaTimeoutError

    def options(listener, mechanism=None, password=None):
        o = {"bootstrap_servers": secure.bootstrap(listener), "security_protocol": {"MTLS": "SSL"}.get(listener, listener)}
        if listener in ("SSL", "MTLS", "SASL_SSL"):
            o["ssl_cafile"] = str(secure.certs.ca)
        if listener == "MTLS":
            o.update(ssl_certfile=str(secure.certs.client_cert), ssl_keyfile=str(secure.certs.client_key))
        if mechanism:
            o.update(sasl_mechanism=mechanism, sasl_plain_username="bob", sasl_plain_password=password or USERS["bob"])
        return o

    for listener, mechanism in [("MTLS", None), ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-256"), ("SASL_SSL", "PLAIN")]:
        topic = f"kp-{uuid.uuid4().hex[:8]}"
        admin = KafkaAdminClient(**options(listener, mechanism))
        admin.create_topics([KNewTopic(topic, 1, 1)])
        admin.close()
        producer = KafkaProducer(**options(listener, mechanism), acks="all")
        for i in range(RECORDS):
            producer.send(topic, f"value-{i}".encode())
        producer.flush(20)
        producer.close()
        consumer = KafkaConsumer(
            topic, **options(listener, mechanism), group_id=f"g-{topic}", auto_offset_reset="earliest", enable_auto_commit=False
        )
        values = set()
        deadline = time.monotonic() + 30
        while len(values) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                values.update(r.value.decode() for r in records)
        assert values == {f"value-{i}" for i in range(RECORDS)}, (listener, mechanism)
        consumer.commit()
        consumer.close()

    # kafka-python raises this whatever the cause; it logs SASL_AUTHENTICATION_FAILED only when
    # the answer and the close arrive in separate reads (it drops data that comes with an EOF,
    # kafka/net/transport.py), so the metric shows that the refusal was corral's.
    failed_before = metric_sum(secure.server, "corral_sasl_authentications_total", outcome="failed")
    with pytest.raises(KafkaTimeoutError) as refused:
        KafkaProducer(**options("SASL_PLAINTEXT", "SCRAM-SHA-256", password="wrong"), bootstrap_timeout_ms=3000)
    assert str(refused.value) == f"KafkaTimeoutError: Unable to bootstrap from {secure.bootstrap('SASL_PLAINTEXT')}"
    assert metric_sum(secure.server, "corral_sasl_authentications_total", mechanism="SCRAM-SHA-256", outcome="failed") > failed_before


def peer_certificate_serial(port: int, ca) -> int:
    context = ssl.create_default_context(cafile=str(ca))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as tls:
            der = tls.getpeercert(binary_form=True)
    from cryptography import x509

    return x509.load_der_x509_certificate(der).serial_number


def test_certificate_rotation(secure):
    """New files on disk: new connections get the new certificate within a few seconds; a
    connection opened before goes on working."""
    port = secure.ports["SSL"]
    before = peer_certificate_serial(port, secure.certs.ca)
    producer = Producer({**confluent_config(secure, "SSL"), "enable.idempotence": True})
    topic = f"rot-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(confluent_config(secure, "SSL"))
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    producer.produce(topic, b"before")
    assert producer.flush(20) == 0

    renewed = secure.certs.authority.issue_cert("127.0.0.1", "localhost")
    # The key first, then the certificate: for a moment they do not match, and corral keeps the
    # old pair until they do.
    renewed.private_key_pem.write_to_path(str(secure.certs.server_key))
    time.sleep(1.2)
    renewed.cert_chain_pems[0].write_to_path(str(secure.certs.server_cert))
    deadline = time.monotonic() + 15
    while (after := peer_certificate_serial(port, secure.certs.ca)) == before and time.monotonic() < deadline:
        time.sleep(0.3)
    assert after != before, "the new certificate was not served"
    assert metric_sum(secure.server, "corral_security_files_reloaded_total", what="TLS certificate") >= 1

    producer.produce(topic, b"after")
    assert producer.flush(20) == 0, "the connection opened before the rotation stopped working"


def test_reauthentication(corral_factory, corral_bin, tmp_path):
    """connections_max_reauth_ms = 1500: librdkafka authenticates again on its open connections
    (KIP-368) and goes on consuming; no connection is closed for an expired session."""
    secure = start_secure_corral(corral_factory, corral_bin, tmp_path, extra="connections_max_reauth_ms = 1500")
    config = confluent_config(secure, "SASL_SSL", "SCRAM-SHA-256")
    topic = f"reauth-{uuid.uuid4().hex[:8]}"
    admin = AdminClient(config)
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=20)
    producer = Producer(config)
    consumer = Consumer({**config, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    sent, received = 0, 0
    first: tuple[float, float] | None = None
    deadline = time.monotonic() + 7
    while time.monotonic() < deadline:
        producer.produce(topic, f"r{sent}".encode())
        sent += 1
        producer.poll(0)
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            received += 1
            if first is None:
                # Every connection is open now: counted from here, authentications happen on them.
                first = (
                    metric_sum(secure.server, "corral_sasl_authentications_total", outcome="ok"),
                    metric_sum(secure.server, "corral_connections_accepted_total"),
                )
    assert producer.flush(20) == 0
    while received < sent and time.monotonic() < deadline + 20:
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            received += 1
    assert first is not None and received == sent
    authentications = metric_sum(secure.server, "corral_sasl_authentications_total", outcome="ok")
    accepted = metric_sum(secure.server, "corral_connections_accepted_total")
    consumer.close()
    assert authentications >= first[0] + 3, (first, authentications)
    assert accepted == first[1], "re-authentication opened new connections instead"
    assert metric_sum(secure.server, "corral_connections_closed_total", reason="unauthenticated") == 0


def test_a_client_certificate_is_the_principal_acls_name(corral_factory, corral_bin, tmp_path):
    """On the MTLS listener the principal is the certificate's subject as RFC 4514 writes it (the
    form Kafka's default principal builder gives, e.g. User:CN=app1,OU=...,O=...): a rule naming
    it lets the client write its topics and nothing else."""
    from cryptography import x509

    from security import make_certificates

    certs = make_certificates(tmp_path / "tls")
    subject = x509.load_pem_x509_certificate(certs.client_cert.read_bytes()).subject.rfc4514_string()
    rules = f"""
[authorization]
rules = [{{ principal = 'User:{subject}', resource = "topic", prefix = "app1-", operations = ["all"] }}]
"""
    secure = start_secure_corral(corral_factory, corral_bin, tmp_path, extra=rules, certs=certs)
    mtls = confluent_config(secure, "MTLS")

    def produce(config: dict, topic: str):
        results = []
        producer = Producer({**config, "message.timeout.ms": 10000})
        producer.produce(topic, b"v", on_delivery=lambda err, msg: results.append(err))
        producer.flush(20)
        return results

    assert produce(mtls, f"app1-{uuid.uuid4().hex[:8]}") == [None]
    [denied] = produce(mtls, f"other-{uuid.uuid4().hex[:8]}")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
    # The same topics over SASL as alice, whom no rule names: refused.
    [denied] = produce(confluent_config(secure, "SASL_SSL", "SCRAM-SHA-256"), f"app1-{uuid.uuid4().hex[:8]}")
    assert denied is not None and denied.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, denied
