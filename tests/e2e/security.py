"""A corral node with every kind of listener, for the security tests.

`SecureCorral` starts one node whose first listener (kafka.listen) is PLAINTEXT and which also
listens with SSL, mutual TLS (client certificates required), SASL_PLAINTEXT and SASL_SSL. The
certificates come from trustme (a CA made for the test, a server certificate for 127.0.0.1, a
client certificate), and a second CA that signed nothing corral trusts. The users' credentials
are made by `corral sasl-credential`, as an operator would.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import trustme

USERS = {"alice": "alice-secret", "bob": "bob-secret"}
LISTENING = re.compile(r"listening listener=(\S+) protocol=\"?(\w+)\"? address=127\.0\.0\.1:(\d+)")


@dataclass
class Certificates:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    # A CA that signed neither corral's certificate nor any client's.
    other_ca: Path
    # trustme's CA, to issue more certificates (rotation).
    authority: trustme.CA


def make_certificates(directory: Path) -> Certificates:
    directory.mkdir(parents=True, exist_ok=True)
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1", "localhost")
    client = ca.issue_cert("app1@example.com", common_name="app1")
    other = trustme.CA()
    paths = Certificates(
        ca=directory / "ca.crt",
        server_cert=directory / "server.crt",
        server_key=directory / "server.key",
        client_cert=directory / "client.crt",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.crt",
        authority=ca,
    )
    ca.cert_pem.write_to_path(str(paths.ca))
    server.cert_chain_pems[0].write_to_path(str(paths.server_cert))
    server.private_key_pem.write_to_path(str(paths.server_key))
    client.cert_chain_pems[0].write_to_path(str(paths.client_cert))
    client.private_key_pem.write_to_path(str(paths.client_key))
    other.cert_pem.write_to_path(str(paths.other_ca))
    return paths


def make_credentials(binary: Path, path: Path, users: dict[str, str] = USERS) -> Path:
    """The credentials file, one `corral sasl-credential` run per user."""
    tables = []
    for user, password in users.items():
        out = subprocess.run(
            [str(binary), "sasl-credential", "--user", user, "--iterations", "4096"],
            input=password + "\n",
            capture_output=True,
            text=True,
            check=True,
        )
        tables.append(out.stdout)
    path.write_text("\n".join(tables))
    return path


def config_text(certs: Certificates, credentials: Path, extra: str = "") -> str:
    # Port 0 everywhere: each listener logs the port it got.
    return f"""
[kafka]
listeners = [
  {{ protocol = "SSL", listen = "127.0.0.1:0" }},
  {{ name = "MTLS", protocol = "SSL", listen = "127.0.0.1:0", client_auth = "required" }},
  {{ protocol = "SASL_PLAINTEXT", listen = "127.0.0.1:0" }},
  {{ protocol = "SASL_SSL", listen = "127.0.0.1:0" }},
]
[tls]
cert_file = "{certs.server_cert}"
key_file = "{certs.server_key}"
ca_file = "{certs.ca}"
[sasl]
credentials_file = "{credentials}"
{extra}
"""


class SecureCorral:
    """A started node and its listeners' addresses by name (PLAINTEXT, SSL, MTLS,
    SASL_PLAINTEXT, SASL_SSL)."""

    def __init__(self, server, certs: Certificates, credentials: Path):
        self.server = server
        self.certs = certs
        self.credentials = credentials
        self.ports = {"PLAINTEXT": server.kafka_port}
        for name, _protocol, port in LISTENING.findall(server.run_log_text()):
            self.ports[name] = int(port)
        assert set(self.ports) == {"PLAINTEXT", "SSL", "MTLS", "SASL_PLAINTEXT", "SASL_SSL"}, self.ports

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"


def start_secure_corral(corral_factory, corral_bin: Path, directory: Path, extra: str = "", certs: Certificates | None = None) -> SecureCorral:
    certs = certs or make_certificates(directory / "tls")
    credentials = make_credentials(corral_bin, directory / "users.toml")
    server = corral_factory(config=config_text(certs, credentials, extra))
    return SecureCorral(server, certs, credentials)


class SaslNode:
    """A node with one SASL_PLAINTEXT listener and users made by `corral sasl-credential`."""

    def __init__(self, corral_factory, corral_bin: Path, directory: Path, users: dict[str, str], extra: str):
        self.users = users
        credentials = make_credentials(corral_bin, directory / "users.toml", users)
        config = f"""
[kafka]
listeners = [{{ protocol = "SASL_PLAINTEXT", listen = "127.0.0.1:0" }}]
[sasl]
credentials_file = "{credentials}"
{extra}
"""
        self.server = corral_factory(config=config)
        ports = {name: int(port) for name, _, port in LISTENING.findall(self.server.run_log_text())}
        self.sasl_bootstrap = f"127.0.0.1:{ports['SASL_PLAINTEXT']}"

    def as_user(self, user: str) -> dict:
        """confluent-kafka settings that log in as `user` with SCRAM-SHA-256."""
        return {
            "bootstrap.servers": self.sasl_bootstrap,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": user,
            "sasl.password": self.users[user],
        }
