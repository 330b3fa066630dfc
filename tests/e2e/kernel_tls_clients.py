"""The client side of tests/e2e/test_kernel_tls.py, run inside the UML guest:

    python kernel_tls_clients.py --ssl PORT --mtls PORT --certs DIR --records N

- confluent-kafka (librdkafka, OpenSSL) creates a 3-partition topic, produces N records of 1 KiB
  over SSL, and consumes them back as a group;
- kafka-python (Python's ssl module) consumes them as another group over the mutual-TLS listener,
  with a client certificate;
- a bare TLS socket sends ApiVersions, reads the answer and ends the session with close_notify;
  a second one then gets its answer too (the node survived the alert);
- a bare TLS socket sends an application-data record that does not decrypt, after its
  handshake: the node closes that connection, and serves the next one.
Prints one JSON object: what each client read, keyed by client.
"""

import argparse
import json
import os
import socket
import ssl
import struct
import sys
import time

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaConsumer

import kafkawire as kw

TOPIC = "ktls"


def value_of(i: int) -> bytes:
    return (f"record-{i:06d}-" * 64)[:1024].encode()


def confluent(bootstrap: str, ca: str, records: int) -> dict:
    conf = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca}
    admin = AdminClient(conf)
    admin.create_topics([NewTopic(TOPIC, num_partitions=3, replication_factor=1)])[TOPIC].result(30)
    producer = Producer({**conf, "linger.ms": 5})
    for i in range(records):
        producer.produce(TOPIC, key=str(i).encode(), value=value_of(i))
    assert producer.flush(60) == 0, "records left unsent"
    consumer = Consumer({**conf, "group.id": "ktls-confluent", "auto.offset.reset": "earliest", "fetch.max.bytes": 1 << 20})
    consumer.subscribe([TOPIC])
    seen = {}
    deadline = time.time() + 120
    while len(seen) < records and time.time() < deadline:
        message = consumer.poll(1.0)
        if message is None or message.error():
            continue
        seen[int(message.key())] = message.value() == value_of(int(message.key()))
    consumer.close()
    return {"read": len(seen), "intact": sum(seen.values())}


def kafka_python(bootstrap: str, certs: str, records: int) -> dict:
    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        security_protocol="SSL",
        ssl_cafile=f"{certs}/ca.crt",
        ssl_certfile=f"{certs}/client.crt",
        ssl_keyfile=f"{certs}/client.key",
        ssl_check_hostname=False,
        group_id="ktls-kafka-python",
        auto_offset_reset="earliest",
    )
    seen = {}
    deadline = time.time() + 120
    while len(seen) < records and time.time() < deadline:
        for messages in consumer.poll(timeout_ms=1000).values():
            for message in messages:
                seen[int(message.key)] = message.value == value_of(int(message.key))
    consumer.close()
    return {"read": len(seen), "intact": sum(seen.values())}


def api_versions(tls: ssl.SSLSocket, correlation: int) -> int:
    """Sends ApiVersions v0; returns the error code of the answer."""
    tls.sendall(kw.api_versions_v0(correlation))
    size = struct.unpack(">i", read_exactly(tls, 4))[0]
    answered, error, _apis = kw.parse_api_versions_v0(read_exactly(tls, size))
    assert answered == correlation
    return error


def read_exactly(tls: ssl.SSLSocket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = tls.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed by the server")
        data += chunk
    return data


def close_notify(port: int, ca: str) -> dict:
    context = ssl.create_default_context(cafile=ca)
    errors = []
    for correlation in (1, 2):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
            tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
            errors.append(api_versions(tls, correlation))
            try:
                tls.unwrap()
            except (ssl.SSLError, OSError):
                # The close_notify left; the server closes without answering it.
                pass
    return {"error_codes": errors}


def closed_by_the_server(port: int, ca: str) -> dict:
    """A request the node cannot serve makes it close the connection: whether a close_notify
    came before the end of the stream (without one, the read fails as a truncation)."""
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        tls = context.wrap_socket(raw, server_hostname="127.0.0.1", suppress_ragged_eofs=False)
        assert api_versions(tls, 1) == 0
        # API key 32000 exists in no Kafka: the node answers nothing and closes.
        tls.sendall(struct.pack(">ihhi", 10, 32000, 0, 2) + struct.pack(">h", -1))
        try:
            return {"clean_end": tls.recv(1) == b""}
        except ssl.SSLEOFError:
            return {"clean_end": False}


def forged_record(port: int, ca: str) -> dict:
    context = ssl.create_default_context(cafile=ca)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        tls = context.wrap_socket(raw, server_hostname="127.0.0.1")
        assert api_versions(tls, 1) == 0
        # Behind the TLS session's back: a record header and bytes no key encrypted.
        with socket.socket(fileno=os.dup(tls.fileno())) as under:
            under.sendall(b"\x17\x03\x03\x00\x40" + os.urandom(64))
        try:
            closed = tls.recv(1) == b""
        except (ssl.SSLError, OSError):
            closed = True
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        next_error = api_versions(context.wrap_socket(raw, server_hostname="127.0.0.1"), 2)
    return {"closed": closed, "next_error_code": next_error}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ssl", type=int, required=True)
    parser.add_argument("--mtls", type=int, required=True)
    parser.add_argument("--certs", required=True)
    parser.add_argument("--records", type=int, default=3000)
    args = parser.parse_args()
    ca = f"{args.certs}/ca.crt"
    steps = {
        "confluent_kafka": lambda: confluent(f"127.0.0.1:{args.ssl}", ca, args.records),
        "kafka_python": lambda: kafka_python(f"127.0.0.1:{args.mtls}", args.certs, args.records),
        "close_notify": lambda: close_notify(args.ssl, ca),
        "closed_by_the_server": lambda: closed_by_the_server(args.ssl, ca),
        "forged_record": lambda: forged_record(args.ssl, ca),
    }
    result, seconds = {}, {}
    for name, step in steps.items():
        started = time.monotonic()
        result[name] = step()
        seconds[name] = round(time.monotonic() - started, 1)
    # How long each took goes to stderr, for a slow run's diagnosis.
    print(json.dumps(seconds), file=sys.stderr)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
