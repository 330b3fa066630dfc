"""corral toward a storage tier and a group service that require TLS and SASL
(`[upstream.security]`, `[sidecar.security]`).

The Kafka behind corral (`apache_kafka_classic`) has a SASL_SSL listener: a certificate from its
own CA, the user `corral` for PLAIN and SCRAM. Through corral in front of it, with each mechanism,
records are produced and consumed as a group and read back from Kafka directly. With a wrong
password or a CA that did not sign Kafka's certificate, corral keeps running, stays not ready
and says why. A sidecar whose storage is that listener and whose group service is a corral node
with a SASL listener consumes as a group, authenticating as itself on both sides.
"""

from __future__ import annotations

import time

import pytest
import trustme

import clients
from apache_kafka import SASL_PASSWORD, SASL_USER, corral_upstream_config, sidecar_config
from groups import committed, group_consume, unique, wait_until
from security import make_credentials


def upstream_security(kafka, password_file, mechanism: str = "SCRAM-SHA-512", ca_file=None) -> str:
    return f"""[upstream.security]
protocol = "SASL_SSL"
ca_file = "{ca_file or kafka.ca_file}"
sasl_mechanism = "{mechanism}"
sasl_username = "{SASL_USER}"
sasl_password_file = "{password_file}"
"""


@pytest.fixture
def password_file(tmp_path):
    path = tmp_path / "upstream-password"
    path.write_text(SASL_PASSWORD + "\n")
    return path


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_corral_in_front_of_kafka_over_sasl_ssl(corral_factory, apache_kafka_classic, password_file, mechanism):
    kafka = apache_kafka_classic
    config = corral_upstream_config(kafka.secure_bootstrap) + upstream_security(kafka, password_file, mechanism)
    front = corral_factory(config=config)
    topic, group = unique("up-sasl"), unique("up-sasl-group")
    clients.create_topic(front.bootstrap, topic, partitions=2)
    # Small records, and large ones whose batches go upstream as pieces of their own (over TLS).
    values = [f"{mechanism}-{i}".encode() for i in range(100)] + [f"{mechanism}-large-{i}-".encode() * 4000 for i in range(5)]
    delivered = clients.produce_all(clients.producer(front.bootstrap), topic, [(None, v) for v in values])
    assert sorted(v for _, v, _, _ in delivered) == sorted(values)
    # In Kafka, read over its plaintext listener.
    direct = clients.consume_all(kafka.bootstrap, topic)
    assert sorted(r.value for rs in direct.values() for r in rs) == sorted(values)
    got = group_consume(front.bootstrap, topic, group, len(values))
    assert sorted(v for _, _, v in got) == sorted(values)
    # A partition the sticky partitioner left empty has no commit (-1001).
    ends = {(topic, p): len(direct.get(p, [])) or -1001 for p in range(2)}
    assert committed(front.bootstrap, group, list(ends)) == ends


def not_ready_because(server, words: str) -> None:
    server.start(ready=False)
    wait_until(lambda: words in server.run_log_text(), f"the log to say {words!r}", 30)
    time.sleep(1.0)
    assert server.alive(), "corral exited"
    assert server.http_get("/health/ready")[0] == 503


def test_a_wrong_password_or_an_unknown_ca_leaves_corral_not_ready_and_saying_why(corral_factory, apache_kafka_classic, tmp_path):
    kafka = apache_kafka_classic
    wrong = tmp_path / "wrong-password"
    wrong.write_text("not-the-password")
    config = corral_upstream_config(kafka.secure_bootstrap, connect_timeout_ms=2000) + upstream_security(kafka, wrong)
    not_ready_because(corral_factory(config=config, start=False), "refused corral: SASL SCRAM-SHA-512 as corral")

    other_ca = tmp_path / "other-ca.pem"
    trustme.CA().cert_pem.write_to_path(str(other_ca))
    password = tmp_path / "password"
    password.write_text(SASL_PASSWORD)
    config = corral_upstream_config(kafka.secure_bootstrap, connect_timeout_ms=2000) + upstream_security(kafka, password, ca_file=other_ca)
    not_ready_because(corral_factory(config=config, start=False), "refused corral: TLS: invalid peer certificate: UnknownIssuer")


def test_a_sidecar_authenticates_to_the_storage_tier_and_to_the_group_service(corral_factory, corral_bin, apache_kafka_classic, password_file, tmp_path):
    kafka = apache_kafka_classic
    # The group service: a corral node in front of the same Kafka, whose Kafka listener wants SASL.
    credentials = make_credentials(corral_bin, tmp_path / "users.toml", {"sidecar": "sidecar-secret"})
    groups_config = (
        corral_upstream_config(kafka.secure_bootstrap)
        + upstream_security(kafka, password_file)
        + f"""[kafka]
protocol = "SASL_PLAINTEXT"
[sasl]
credentials_file = "{credentials}"
"""
    )
    group_service = corral_factory(config=groups_config, name="groups")
    sidecar_password = tmp_path / "sidecar-password"
    sidecar_password.write_text("sidecar-secret")
    config = sidecar_config(kafka.secure_bootstrap, group_service.bootstrap) + upstream_security(kafka, password_file) + f"""
[sidecar.security]
protocol = "SASL_PLAINTEXT"
sasl_mechanism = "SCRAM-SHA-256"
sasl_username = "sidecar"
sasl_password_file = "{sidecar_password}"
"""
    sidecar = corral_factory(config=config, name="sidecar")
    topic, group = unique("sc-sasl"), unique("sc-sasl-group")
    clients.create_topic(sidecar.bootstrap, topic, partitions=2)
    values = [f"sc-{i}".encode() for i in range(50)]
    clients.produce_all(clients.producer(sidecar.bootstrap), topic, [(None, v) for v in values])
    got = group_consume(sidecar.bootstrap, topic, group, len(values))
    assert sorted(v for _, _, v in got) == sorted(values)
    # The group lives at the group service, which the sidecar reached as User:sidecar.
    status, body = group_service.http_get(f"/v1/groups/{group}")
    assert status == 200, body
