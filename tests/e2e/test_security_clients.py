"""The Java client (kafka-clients 4.4) and KafkaJS against corral's TLS and SASL listeners.

One node with every kind of listener (security.py: SSL, MTLS = TLS with client certificates
required, SASL_PLAINTEXT, SASL_SSL; users alice and bob). Each client:

- creates a topic, produces, consumes the records in a consumer group and commits, over TLS,
  mutual TLS, and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512) over plaintext and over TLS: every
  record once, the committed offsets at the end of every partition. The Java program
  (java/JavaClient.java `roundtrip --client-config`) runs once per listener kind and each
  mechanism once (a JVM costs seconds); KafkaJS (js/kafkajs_security.js) runs every
  combination.
- is refused with a wrong password (each mechanism), with a CA that did not sign corral's
  certificate, and on the MTLS listener without a client certificate. The tests assert the
  exception (Java: class and message, and its cause for TLS) or error (KafkaJS: name, message,
  and its cause's code for TLS) exactly as the client reports it, and that the refused client
  created no topic.

The Java client reads the PEM CA natively (ssl.truststore.type=PEM); its PEM keystore
(ssl.keystore.location: the key, then the certificate) needs a PKCS#8 key, so trustme's EC key
is rewritten as PKCS#8. corral runs with the short group settings of apache_kafka.CORRAL_GROUP_CONFIG.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

import clients
from apache_kafka import CORRAL_GROUP_CONFIG
from groups import unique
from security import USERS, SecureCorral, start_secure_corral
from test_java_client import JVM, MAIN, RUN_TIMEOUT_S, java_classpath  # noqa: F401 (a fixture)

JS_DIR = Path(__file__).resolve().parent / "js"
PARTITIONS = 2
RECORDS = 100
WRONG_PASSWORD = "not-the-password"

JAAS_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

# What corral answers to a wrong password (SaslAuthenticate error 58's message), per mechanism.
SASL_FAILED = {
    "PLAIN": "Authentication failed: Invalid username or password",
    "SCRAM-SHA-256": "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256",
    "SCRAM-SHA-512": "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512",
}
# KafkaJS's prefix of that message.
KAFKAJS_MECHANISM = {"PLAIN": "SASL PLAIN", "SCRAM-SHA-256": "SASL SCRAM SHA256", "SCRAM-SHA-512": "SASL SCRAM SHA512"}


@pytest.fixture
def secure(corral_factory, corral_bin, tmp_path) -> SecureCorral:
    return start_secure_corral(corral_factory, corral_bin, tmp_path, extra=CORRAL_GROUP_CONFIG)


def topics_on(secure: SecureCorral) -> set[str]:
    """The topics corral has, as its PLAINTEXT listener lists them."""
    return set(clients.admin_client(secure.bootstrap("PLAINTEXT")).list_topics(timeout=30).topics)


# --- the Java client -------------------------------------------------------------------------------


def write_properties(path: Path, entries: dict[str, str]) -> Path:
    escape = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
    path.write_text("".join(f"{k}={''.join(escape.get(ch, ch) for ch in v)}\n" for k, v in entries.items()))
    return path


def java_keystore(secure: SecureCorral, directory: Path) -> Path:
    """The client's key (PKCS#8) and certificate in one PEM file, for ssl.keystore.location."""
    key = serialization.load_pem_private_key(secure.certs.client_key.read_bytes(), password=None)
    pkcs8 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    path = directory / "java-client-keystore.pem"
    path.write_bytes(pkcs8 + secure.certs.client_cert.read_bytes())
    return path


def java_config(secure: SecureCorral, directory: Path, listener: str, mechanism: str | None = None, user: str = "alice",
                password: str | None = None, ca: Path | None = None, client_cert: bool = False) -> dict[str, str]:  # fmt: skip
    """The Java client's security settings for `listener` (its security.protocol: the MTLS
    listener speaks SSL)."""
    protocol = {"MTLS": "SSL"}.get(listener, listener)
    config = {"security.protocol": protocol}
    if protocol in ("SSL", "SASL_SSL"):
        config |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(ca or secure.certs.ca)}
    if client_cert:
        config |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(java_keystore(secure, directory))}
    if mechanism is not None:
        secret = USERS[user] if password is None else password
        config |= {
            "sasl.mechanism": mechanism,
            "sasl.jaas.config": f'{JAAS_MODULES[mechanism]} required username="{user}" password="{secret}";',
        }
    return config


def java_roundtrip(classpath: str, directory: Path, name: str, bootstrap: str, config: dict[str, str],
                   topic: str, group: str, protocol: str = "classic") -> tuple[int, dict, str]:  # fmt: skip
    """`JavaClient roundtrip --client-config`: its exit status, its last JSON line and its stderr."""
    props = write_properties(directory / f"java-{name}.properties", config)
    stderr_path = directory / f"java-{name}.stderr.log"
    with open(stderr_path, "wb") as err:
        run = subprocess.run(
            [*JVM, "-cp", classpath, MAIN, "roundtrip", "--bootstrap", bootstrap, "--topic", topic,
             "--partitions", str(PARTITIONS), "--count", str(RECORDS), "--group", group, "--protocol", protocol,
             "--client-config", str(props)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, timeout=RUN_TIMEOUT_S,
        )  # fmt: skip
    stderr = stderr_path.read_text(errors="replace")[-6000:]
    lines = run.stdout.decode(errors="replace").strip().splitlines()
    assert lines, f"{name}: java exited {run.returncode} with no output\nstderr:\n{stderr}"
    return run.returncode, json.loads(lines[-1]), stderr


@pytest.mark.parametrize(
    "listener, mechanism, user, protocol",
    [
        ("SSL", None, None, "classic"),
        ("MTLS", None, None, "classic"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "classic"),
        ("SASL_SSL", "PLAIN", "bob", "classic"),
        ("SASL_SSL", "SCRAM-SHA-512", "alice", "consumer"),
    ],
)  # fmt: skip
def test_java_client_produces_and_consumes_in_a_group(java_classpath, secure, tmp_path, listener, mechanism, user, protocol):
    topic, group = unique("java-sec"), unique("java-sec-group")
    config = java_config(secure, tmp_path, listener, mechanism, user=user or "alice", client_cert=listener == "MTLS")
    rc, out, stderr = java_roundtrip(java_classpath, tmp_path, "roundtrip", secure.bootstrap(listener), config, topic, group, protocol)
    assert rc == 0, f"java exited {rc}: {out}\nstderr:\n{stderr}"
    produced, consumed = out["produced"], out["consumed"]
    assert produced["errors"] == [] and produced["acked"] == RECORDS, produced
    assert all(p["dense_from_0"] for p in produced["partitions"].values()), produced
    ends = {f"{topic}-{p}": produced["partitions"].get(str(p), {"count": 0})["count"] for p in range(PARTITIONS)}
    assert out["end_offsets"] == ends and sum(ends.values()) == RECORDS, out
    # Every record once; the commit put each partition's offset at its end.
    assert (consumed["records"], consumed["distinct"], consumed["duplicates"], consumed["missing"]) == (RECORDS, RECORDS, 0, 0), consumed
    assert consumed["assignment"] == sorted(ends), consumed
    assert out["committed"] == ends, out
    after = out["group_after"]
    assert (after["state"], after["type"], after["members"]) == ("Empty", {"classic": "Classic", "consumer": "Consumer"}[protocol], []), after
    # The topic is corral's, whichever listener made it.
    assert topic in topics_on(secure)


# Java's refusals: (listener, settings, exception, message, its first cause or None).
JAVA_REFUSALS = [
    pytest.param(
        "SASL_PLAINTEXT", {"mechanism": "PLAIN", "password": WRONG_PASSWORD},
        "SaslAuthenticationException", SASL_FAILED["PLAIN"], None, id="wrong-password-plain",
    ),
    pytest.param(
        "SASL_PLAINTEXT", {"mechanism": "SCRAM-SHA-256", "password": WRONG_PASSWORD},
        "SaslAuthenticationException", SASL_FAILED["SCRAM-SHA-256"], None, id="wrong-password-scram-sha-256",
    ),
    pytest.param(
        "SASL_SSL", {"mechanism": "SCRAM-SHA-512", "password": WRONG_PASSWORD},
        "SaslAuthenticationException", SASL_FAILED["SCRAM-SHA-512"], None, id="wrong-password-scram-sha-512",
    ),
    pytest.param(
        "SSL", {"ca": "other"},
        "SslAuthenticationException", "SSL handshake failed",
        {"error": "SSLHandshakeException", "message": "PKIX path building failed: sun.security.provider.certpath.SunCertPathBuilderException: unable to find valid certification path to requested target"},
        id="unknown-ca",
    ),
    pytest.param(
        # TLS 1.3: the client's handshake is over when corral, checking its (empty) Certificate,
        # sends the alert; the client reads it as a post-handshake message.
        "MTLS", {},
        "SslAuthenticationException", "Failed to process post-handshake messages",
        {"error": "SSLHandshakeException", "message": "Received fatal alert: certificate_required"},
        id="mtls-without-client-certificate",
    ),
]  # fmt: skip


@pytest.mark.parametrize("listener, settings, error, message, cause", JAVA_REFUSALS)
def test_java_client_is_refused(java_classpath, secure, tmp_path, listener, settings, error, message, cause):
    topic, group = unique("java-refused"), unique("java-refused-group")
    ca = secure.certs.other_ca if settings.get("ca") == "other" else None
    config = java_config(secure, tmp_path, listener, settings.get("mechanism"), password=settings.get("password"), ca=ca)
    rc, out, stderr = java_roundtrip(java_classpath, tmp_path, "refused", secure.bootstrap(listener), config, topic, group)
    assert rc == 1, f"java exited {rc}: {out}\nstderr:\n{stderr}"
    assert (out["error"], out["message"]) == (error, message), f"{out}\nstderr:\n{stderr}"
    if cause is None:
        assert out["causes"] == [], out
    else:
        assert out["causes"][0] == cause, out
    # Refused before any request was served: the Admin's CreateTopics never ran.
    assert topic not in topics_on(secure)


# --- KafkaJS -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def node(kafkajs) -> str:
    return kafkajs


def kafkajs_config(secure: SecureCorral, listener: str, mechanism: str | None = None, user: str = "alice",
                   password: str | None = None, ca: Path | None = None, client_cert: bool = False, retries: int = 5) -> dict:  # fmt: skip
    ssl: dict | bool = False
    if listener in ("SSL", "MTLS", "SASL_SSL"):
        ssl = {"ca": str(ca or secure.certs.ca)}
        if client_cert:
            ssl |= {"cert": str(secure.certs.client_cert), "key": str(secure.certs.client_key)}
    config = {
        "brokers": [secure.bootstrap(listener)],
        "ssl": ssl,
        "topic": unique("kafkajs-sec"),
        "group": unique("kafkajs-sec-group"),
        "partitions": PARTITIONS,
        "count": RECORDS,
        "retries": retries,
    }
    if mechanism is not None:
        config["sasl"] = {"mechanism": mechanism.lower(), "username": user, "password": USERS[user] if password is None else password}
    return config


def run_kafkajs(node: str, config: dict) -> tuple[int, dict, str]:
    run = subprocess.run(
        [node, str(JS_DIR / "kafkajs_security.js"), json.dumps(config)],
        cwd=JS_DIR, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120,
    )  # fmt: skip
    stderr = run.stderr.decode(errors="replace")[-6000:]
    lines = run.stdout.decode(errors="replace").strip().splitlines()
    assert lines, f"kafkajs_security.js exited {run.returncode} with no output\nstderr:\n{stderr}"
    return run.returncode, json.loads(lines[-1]), stderr


@pytest.mark.parametrize(
    "listener, mechanism, user",
    [
        ("SSL", None, "alice"),
        ("MTLS", None, "alice"),
        ("SASL_PLAINTEXT", "PLAIN", "alice"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-512", "alice"),
        ("SASL_SSL", "PLAIN", "bob"),
        ("SASL_SSL", "SCRAM-SHA-256", "alice"),
        ("SASL_SSL", "SCRAM-SHA-512", "bob"),
    ],
)
def test_kafkajs_produces_and_consumes_in_a_group(node, secure, listener, mechanism, user):
    config = kafkajs_config(secure, listener, mechanism, user=user, client_cert=listener == "MTLS")
    rc, out, stderr = run_kafkajs(node, config)
    assert rc == 0, f"kafkajs exited {rc}: {out}\nstderr:\n{stderr}"
    # Every record stored, delivered once to the group's member, and committed.
    assert out == {"produced": RECORDS, "consumed": RECORDS, "distinct": RECORDS, "committed": RECORDS}, out
    assert config["topic"] in topics_on(secure)


def kafkajs_wrong_password(listener: str, mechanism: str, user: str = "alice"):
    return pytest.param(
        listener, {"mechanism": mechanism, "user": user, "password": WRONG_PASSWORD},
        {"error": "KafkaJSSASLAuthenticationError", "message": f"{KAFKAJS_MECHANISM[mechanism]} authentication failed: {SASL_FAILED[mechanism]}", "causes": []},
        id=f"{'unknown-user' if user not in USERS else 'wrong-password'}-{mechanism.lower()}-{listener.lower()}",
    )  # fmt: skip


# KafkaJS's refusals: (listener, settings, what it reports). A TLS failure is a connection error,
# wrapped (retries: 0) in KafkaJSNumberOfRetriesExceeded; the cause's message for the TLS alert
# carries OpenSSL's error queue (a thread address first), matched as a pattern.
KAFKAJS_REFUSALS = [
    *(kafkajs_wrong_password(listener, mechanism) for listener in ("SASL_PLAINTEXT", "SASL_SSL") for mechanism in SASL_FAILED),
    # An unknown user is refused exactly as a wrong password (nothing tells which it was).
    kafkajs_wrong_password("SASL_PLAINTEXT", "PLAIN", user="mallory"),
    kafkajs_wrong_password("SASL_PLAINTEXT", "SCRAM-SHA-256", user="mallory"),
    pytest.param(
        "SSL", {"ca": "other"},
        {"error": "KafkaJSNumberOfRetriesExceeded", "message": "Connection error: unable to verify the first certificate",
         "causes": [{"error": "KafkaJSConnectionError", "message": "Connection error: unable to verify the first certificate", "code": "UNABLE_TO_VERIFY_LEAF_SIGNATURE"}]},
        id="unknown-ca",
    ),
    pytest.param(
        "MTLS", {},
        {"error": "KafkaJSNumberOfRetriesExceeded",
         "message": re.compile(r"Connection error: [0-9A-F]+:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert certificate required:[^:]+:\d+:SSL alert number 116\n"),
         "causes": [{"error": "KafkaJSConnectionError", "code": "ERR_SSL_TLSV13_ALERT_CERTIFICATE_REQUIRED"}]},
        id="mtls-without-client-certificate",
    ),
]  # fmt: skip


@pytest.mark.parametrize("listener, settings, expected", KAFKAJS_REFUSALS)
def test_kafkajs_is_refused(node, secure, listener, settings, expected):
    ca = secure.certs.other_ca if settings.get("ca") == "other" else None
    config = kafkajs_config(
        secure, listener, settings.get("mechanism"), user=settings.get("user", "alice"), password=settings.get("password"), ca=ca, retries=0,
    )  # fmt: skip
    rc, out, stderr = run_kafkajs(node, config)
    assert rc == 1, f"kafkajs exited {rc}: {out}\nstderr:\n{stderr}"
    message = expected["message"]
    if isinstance(message, re.Pattern):
        assert out["error"] == expected["error"] and message.fullmatch(out["message"]), out
        # The cause is the connection error itself, with the same message.
        assert len(out["causes"]) == 1 and out["causes"][0]["message"] == out["message"], out
        assert {k: out["causes"][0][k] for k in ("error", "code")} == expected["causes"][0], out
    else:
        assert out == expected, out
    assert config["topic"] not in topics_on(secure)
