"""Kernel TLS (kTLS) on the Kafka listeners, on a kernel that offers it.

This machine's kernel has no `tls` TCP upper-layer protocol, so each test boots a User-mode Linux
guest that has one (tests/e2e/uml.py; scripts/uml.sh installs its kernel). Inside it, the corral
binary under test runs with a plaintext, an SSL and a mutual-TLS listener, and real clients
(tests/e2e/kernel_tls_clients.py: confluent-kafka, kafka-python, bare TLS sockets) produce and
consume through the TLS listeners, end a session with close_notify, are sent one when the node
closes, and forge a record. What the node did is read from its metrics and from the
guest kernel's /proc/net/tls_stat.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from security import make_certificates
from uml import REPO, run_guest

RECORDS = 3000
PLAINTEXT, SSL, MTLS, ADMIN = 9092, 9093, 9094, 9095


def node_config(workdir: Path, certs, ktls: bool) -> str:
    return f"""
[kafka]
listen = "127.0.0.1:{PLAINTEXT}"
listeners = [
  {{ protocol = "SSL", listen = "127.0.0.1:{SSL}" }},
  {{ name = "MTLS", protocol = "SSL", listen = "127.0.0.1:{MTLS}", client_auth = "required" }},
]
[admin]
listen = "127.0.0.1:{ADMIN}"
[storage]
data_dir = "{workdir / 'data'}"
[tls]
cert_file = "{certs.server_cert}"
key_file = "{certs.server_key}"
ca_file = "{certs.ca}"
ktls = {str(ktls).lower()}
"""


def run_clients_in_guest(corral_bin: Path, workdir: Path, ktls: bool) -> tuple[dict, dict[str, float], dict[str, int], str]:
    """Boots a guest that starts the node and runs the clients; returns what the clients read,
    the node's metrics, the guest kernel's TLS counters and the node's log."""
    certs = make_certificates(workdir / "tls")
    (workdir / "corral.toml").write_text(node_config(workdir, certs, ktls))
    python = REPO / ".venv" / "bin" / "python"
    clients = Path(__file__).with_name("kernel_tls_clients.py")
    script = f"""
{corral_bin} serve --config {workdir}/corral.toml > {workdir}/corral.log 2>&1 &
node=$!
for i in $(seq 1 300); do
    {python} -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:{ADMIN}/health/ready')" 2>/dev/null && break
    sleep 0.2
done
{python} {clients} --ssl {SSL} --mtls {MTLS} --certs {workdir}/tls --records {RECORDS} > {workdir}/clients.json
clients=$?
{python} -c "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:{ADMIN}/metrics').read().decode())" > {workdir}/metrics.txt
cat /proc/net/tls_stat > {workdir}/tls_stat.txt
kill -TERM $node
wait $node
echo "node exited with $?"
exit $clients
"""
    run = run_guest(script, workdir, timeout=400)
    log = (workdir / "corral.log").read_text(errors="replace") if (workdir / "corral.log").exists() else ""
    assert run.returncode == 0, f"the clients failed in the guest:\n{run.output}\nnode log:\n{log[-4000:]}"
    assert "node exited with 0" in run.output, f"the node did not stop cleanly:\n{run.output}\nnode log:\n{log[-4000:]}"
    assert "panicked" not in log, log
    result = json.loads((workdir / "clients.json").read_text())
    metrics = {}
    for line in (workdir / "metrics.txt").read_text().splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            metrics[name] = float(value)
    tls_stat = {}
    for line in (workdir / "tls_stat.txt").read_text().splitlines():
        name, value = line.split()
        tls_stat[name] = int(value)
    return result, metrics, tls_stat, log


def everything_read(result: dict) -> None:
    for client in ("confluent_kafka", "kafka_python"):
        assert result[client] == {"read": RECORDS, "intact": RECORDS}, result
    # Both ApiVersions answered without error: the node kept serving after a close_notify.
    assert result["close_notify"] == {"error_codes": [0, 0]}, result
    # The node ends the TLS session it closes with its own close_notify.
    assert result["closed_by_the_server"] == {"clean_end": True}, result
    # A record that does not decrypt closes its connection, and only that one.
    assert result["forged_record"] == {"closed": True, "next_error_code": 0}, result


def sent_with_sendfile(metrics: dict[str, float]) -> float:
    return sum(value for name, value in metrics.items() if name.startswith("corral_sendfile_bytes_total"))


def test_tls_clients_are_served_by_the_kernel_with_sendfile(corral_bin, tmp_path):
    result, metrics, tls_stat, log = run_clients_in_guest(corral_bin, tmp_path, ktls=True)
    everything_read(result)
    started = re.search(r"kTLS: the kernel takes the TLS sessions of the Kafka listeners .*", re.sub(r"\x1b\[[0-9;]*m", "", log))
    assert started and "TLS1.3:AES-128-GCM" in started.group(0) and re.search(r"aes_gcm=\"?gcm", started.group(0)), log[-2000:]
    kernel = {
        listener: metrics.get(f'corral_tls_connections_total{{listener="{listener}",encryption="kernel"}}', 0)
        for listener in ("SSL", "MTLS")
    }
    assert kernel["SSL"] >= 2 and kernel["MTLS"] >= 1, metrics
    assert not any('encryption="rustls"' in name for name in metrics), metrics
    # The fetched records left by sendfile(2) through TLS: at least the 3000 KiB of values.
    assert sent_with_sendfile(metrics) >= RECORDS * 1024, metrics
    # The guest kernel encrypted and decrypted those sessions.
    # The guest kernel took both directions of every one of those sessions (the start's probe of
    # the ciphers sets up sending only); it failed to decrypt the one forged record.
    assert tls_stat["TlsRxSw"] == kernel["SSL"] + kernel["MTLS"], tls_stat
    assert tls_stat["TlsTxSw"] >= kernel["SSL"] + kernel["MTLS"], tls_stat
    assert tls_stat["TlsDecryptError"] == 1, tls_stat


def test_with_ktls_off_rustls_encrypts_and_reads_the_segments(corral_bin, tmp_path):
    result, metrics, tls_stat, log = run_clients_in_guest(corral_bin, tmp_path, ktls=False)
    everything_read(result)
    assert "kTLS" not in log, log[-2000:]
    assert metrics.get('corral_tls_connections_total{listener="SSL",encryption="rustls"}', 0) >= 2, metrics
    assert not any('encryption="kernel"' in name for name in metrics), metrics
    assert sent_with_sendfile(metrics) == 0, metrics
    assert tls_stat["TlsTxSw"] == 0 and tls_stat["TlsRxSw"] == 0, tls_stat
