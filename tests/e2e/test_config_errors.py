"""Configuration errors: refused before anything is bound or created, with the key named."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

EXIT_CONFIG = 2


def run(binary, *args, cwd=None, timeout=30) -> subprocess.CompletedProcess:
    return subprocess.run([str(binary), *args], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout, cwd=cwd, text=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def test_check_config_accepts_the_reference_file(corral_bin):
    res = run(corral_bin, "check-config", str(REPO / "config" / "corral.toml"))
    assert res.returncode == 0, res.stderr
    assert "valid" in res.stdout


@pytest.mark.parametrize(
    "text, key",
    [
        ("[kafka]\nlisten_address = \"127.0.0.1:9092\"\n", "listen_address"),
        ("[storage]\nflush_every = 5\n", "flush_every"),
        ("[topics.defaults]\nretention_hours = 24\n", "retention_hours"),
        ("[no_such_section]\nx = 1\n", "no_such_section"),
    ],
    ids=["kafka", "storage", "topics.defaults", "section"],
)
def test_check_config_rejects_unknown_key(corral_bin, tmp_path, text, key):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    res = run(corral_bin, "check-config", str(cfg))
    assert res.returncode == EXIT_CONFIG, f"exit {res.returncode}: {res.stdout}{res.stderr}"
    assert key in res.stderr, f"the message does not name {key!r}: {res.stderr}"


def test_check_config_rejects_out_of_range_value(corral_bin, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[kafka]\nmax_frame_bytes = 10\n")
    res = run(corral_bin, "check-config", str(cfg))
    assert res.returncode == EXIT_CONFIG
    assert "kafka.max_frame_bytes" in res.stderr


def test_serve_with_out_of_range_value_binds_nothing(corral_bin, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[kafka]\nmax_frame_bytes = 10\n")
    kafka_port, admin_port = free_port(), free_port()
    data_dir = tmp_path / "data"
    res = run(
        corral_bin, "serve", "--config", str(cfg), "--data-dir", str(data_dir),
        "--listen", f"127.0.0.1:{kafka_port}", "--admin-listen", f"127.0.0.1:{admin_port}",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == EXIT_CONFIG, f"exit {res.returncode}: {res.stderr}"
    assert "kafka.max_frame_bytes" in res.stderr
    assert "corral is serving" not in res.stderr
    assert port_is_free(kafka_port) and port_is_free(admin_port)
    assert not data_dir.exists(), "the data directory is created only after the config is accepted"


def test_serve_validates_before_binding(corral_bin, tmp_path):
    """With both ports already taken, a bad config is still reported as the config error: corral
    never got as far as binding."""
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[kafka]\nmax_frame_bytes = 10\n")
    with socket.socket() as k, socket.socket() as a:
        k.bind(("127.0.0.1", 0))
        k.listen()
        a.bind(("127.0.0.1", 0))
        a.listen()
        res = run(
            corral_bin, "serve", "--config", str(cfg), "--data-dir", str(tmp_path / "data"),
            "--listen", f"127.0.0.1:{k.getsockname()[1]}", "--admin-listen", f"127.0.0.1:{a.getsockname()[1]}",
            cwd=tmp_path,
        )  # fmt: skip
    assert res.returncode == EXIT_CONFIG, f"exit {res.returncode}: {res.stderr}"
    assert "kafka.max_frame_bytes" in res.stderr
    assert "cannot listen" not in res.stderr


def test_serve_with_unknown_key_exits_2(corral_bin, tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[runtime]\nthreads = 4\n")
    res = run(
        corral_bin, "serve", "--config", str(cfg), "--data-dir", str(tmp_path / "data"),
        "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
        cwd=tmp_path,
    )  # fmt: skip
    assert res.returncode == EXIT_CONFIG, f"exit {res.returncode}: {res.stderr}"
    assert "threads" in res.stderr


def test_serve_with_port_in_use_fails_and_names_the_key(corral_bin, tmp_path):
    with socket.socket() as k:
        k.bind(("127.0.0.1", 0))
        k.listen()
        res = run(
            corral_bin, "serve", "--data-dir", str(tmp_path / "data"),
            "--listen", f"127.0.0.1:{k.getsockname()[1]}", "--admin-listen", "127.0.0.1:0",
            cwd=tmp_path,
        )  # fmt: skip
    assert res.returncode != 0
    assert "kafka.listen" in res.stderr, res.stderr


def test_second_server_on_the_same_data_dir_is_refused(corral, corral_bin):
    res = run(
        corral_bin, "serve", "--data-dir", str(corral.data_dir),
        "--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0",
    )  # fmt: skip
    assert res.returncode != 0
    assert "in use" in res.stderr, res.stderr
    assert corral.alive() and corral.http_get("/health/ready")[0] == 200


@pytest.mark.parametrize(
    "text, key",
    [
        ('[kafka]\nprotocol = "SSL"\n', "tls.cert_file"),
        ('[kafka]\nprotocol = "SASL_SSL"\n[tls]\ncert_file = "c"\nkey_file = "k"\n', "sasl.credentials_file"),
        ('[kafka]\nprotocol = "SSL"\n[tls]\ncert_file = "/nonexistent/c.pem"\nkey_file = "k"\n', "tls.cert_file"),
        ('[kafka]\nprotocol = "SASL_PLAINTEXT"\n[sasl]\ncredentials_file = "/nonexistent/users.toml"\n', "sasl.credentials_file"),
        ('[kafka]\nprotocol = "SASL_PLAINTEXT"\n[sasl]\nmechanisms = ["GSSAPI"]\n', "sasl.mechanisms"),
        ('[kafka]\nclient_auth = "required"\n', "kafka.client_auth"),
        ('[kafka]\nprotocol = "TLS"\n', "protocol"),
        ('[kafka]\nlisteners = [{ protocol = "PLAINTEXT", listen = "127.0.0.1:9192" }]\n', "kafka.listeners"),
        (
            '[kafka]\nlisteners = [{ name = "X", protocol = "SSL", listen = "127.0.0.1:9192", client_auth = "required" }]\n'
            '[tls]\ncert_file = "c"\nkey_file = "k"\n',
            "tls.ca_file",
        ),
        ('[admin]\nclient_auth = "required"\n', "admin.client_auth"),
        ('[admin]\ntls = true\n', "tls.cert_file"),
        (
            '[cluster]\ntls = true\nraft_listen = "127.0.0.1:9194"\nnodes = [\n'
            '  { id = 0, raft = "127.0.0.1:9194", kafka = "127.0.0.1:9092" },\n'
            '  { id = 1, raft = "127.0.0.1:9294", kafka = "127.0.0.1:9192" },\n]\n'
            '[tls]\ncert_file = "c"\nkey_file = "k"\n',
            "tls.ca_file",
        ),
        (
            '[cluster]\nraft_listen = "127.0.0.1:9194"\nnodes = [\n'
            '  { id = 0, raft = "127.0.0.1:9194", kafka = "127.0.0.1:9092" },\n'
            '  { id = 1, raft = "127.0.0.1:9294", kafka = "127.0.0.1:9192" },\n]\n',
            "cluster.secret",
        ),
        (
            '[storage]\nbackend = "upstream"\n[upstream]\nbootstrap = ["127.0.0.1:9092"]\n[upstream.security]\nprotocol = "SSL"\n',
            "upstream.security",
        ),
        (
            '[storage]\nbackend = "upstream"\n[upstream]\nbootstrap = ["127.0.0.1:9092"]\n[upstream.security]\n'
            'protocol = "SASL_PLAINTEXT"\nsasl_mechanism = "SCRAM-SHA-256"\nsasl_username = "corral"\n'
            'sasl_password_file = "/nonexistent/password"\n',
            "upstream.security",
        ),
    ],
    ids=["tls-no-cert", "sasl-no-credentials", "cert-missing", "credentials-missing", "mechanism", "client-auth-plaintext",
         "protocol-name", "listener-name-twice", "client-auth-no-ca", "admin-client-auth-no-tls", "admin-tls-no-cert",
         "raft-tls-no-ca", "cluster-no-secret-no-tls", "upstream-ssl-no-ca", "upstream-password-file-missing"],
)
def test_check_config_names_the_security_key(corral_bin, tmp_path, text, key):
    cfg = tmp_path / "bad.toml"
    cfg.write_text(text)
    res = run(corral_bin, "check-config", str(cfg))
    assert res.returncode == EXIT_CONFIG, f"exit {res.returncode}: {res.stdout}{res.stderr}"
    assert key in res.stderr, f"the message does not name {key!r}: {res.stderr}"


def test_check_config_reads_the_credentials_file(corral_bin, tmp_path):
    users = tmp_path / "users.toml"
    users.write_text('[users.alice]\n"SCRAM-SHA-256" = "salt=AA==,iterations=4096"\n')
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[kafka]\nprotocol = "SASL_PLAINTEXT"\n[sasl]\ncredentials_file = "{users}"\n')
    res = run(corral_bin, "check-config", str(cfg))
    assert res.returncode == EXIT_CONFIG
    assert "sasl.credentials_file" in res.stderr and "users.alice.SCRAM-SHA-256" in res.stderr, res.stderr
