"""HTTPS on the admin listener (`admin.tls`), with client certificates required.

Health, metrics and the groups API answer over TLS to a client whose certificate the CA signed;
a client without one, or speaking plain HTTP, gets nothing. `corral groups` reaches the node
with `--ca-file`, `--cert-file` and `--key-file`.
"""

from __future__ import annotations

import http.client
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from security import make_certificates


@pytest.fixture
def node(corral_factory, tmp_path):
    certs = make_certificates(tmp_path / "tls")
    config = f"""
[admin]
tls = true
client_auth = "required"
[tls]
cert_file = "{certs.server_cert}"
key_file = "{certs.server_key}"
ca_file = "{certs.ca}"
"""
    server = corral_factory(config=config, start=False)
    context = ssl.create_default_context(cafile=str(certs.ca))
    context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
    server.admin_ssl = context
    server.start()
    server.certs = certs
    return server


def test_the_admin_listener_serves_https_to_clients_with_a_certificate(node, corral_bin):
    status, body = node.http_get("/health/ready")
    assert (status, body) == (200, "ready\n")
    status, body = node.http_get("/metrics")
    assert status == 200 and "corral_" in body
    status, body = node.http_get("/v1/groups")
    assert status == 200 and '"groups"' in body

    # No client certificate: the handshake fails.
    anonymous = ssl.create_default_context(cafile=str(node.certs.ca))
    with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionResetError)):
        urllib.request.urlopen(f"https://{node.admin}/health/ready", timeout=10, context=anonymous).read()
    # Plain HTTP: no answer.
    with pytest.raises((urllib.error.URLError, http.client.HTTPException, OSError)):
        urllib.request.urlopen(f"http://{node.admin}/health/ready", timeout=10).read()

    tls_args = ["--ca-file", str(node.certs.ca), "--cert-file", str(node.certs.client_cert), "--key-file", str(node.certs.client_key)]
    listed = subprocess.run(
        [str(corral_bin), "groups", "list", "--admin", node.admin, "--output", "json", *tls_args],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert listed.returncode == 0, listed.stderr
    without = subprocess.run([str(corral_bin), "groups", "list", "--admin", node.admin], capture_output=True, text=True, timeout=30)
    assert without.returncode != 0
