#!/usr/bin/env bash
# corral's test command: installs what the tests need, builds, and runs every test.
#
#   bash scripts/test.sh
#
# Idempotent, and meant to work from a clean checkout on a fresh Debian machine (as root, or with
# sudo): it installs missing Debian packages (kcat, Python venv support, Node.js/npm, a C
# compiler), creates .venv with the pinned Python clients of tests/e2e/requirements.txt, installs
# KafkaJS from tests/e2e/js/package-lock.json, then runs `cargo build --bins`, `cargo test` and
# the end-to-end suite (pytest tests/e2e). Anything that cannot be installed fails the run:
# nothing is skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SCRIPT_START=$(date +%s)
PHASES=()
PHASE=""
PHASE_START=0

phase() {
    phase_end
    PHASE="$1"
    PHASE_START=$(date +%s)
    printf '\n==> %s\n' "$PHASE" >&2
}

phase_end() {
    if [ -n "$PHASE" ]; then
        PHASES+=("$(printf '%5ss  %s' "$(($(date +%s) - PHASE_START))" "$PHASE")")
        PHASE=""
    fi
}

on_exit() {
    local rc=$?
    local failed_phase="$PHASE"
    phase_end
    printf '\n==> scripts/test.sh timings\n' >&2
    for line in "${PHASES[@]}"; do
        printf '%s\n' "$line" >&2
    done
    printf '%5ss  total\n' "$(($(date +%s) - SCRIPT_START))" >&2
    if [ "$rc" -ne 0 ]; then
        printf '\nscripts/test.sh: FAILED (exit %s) during: %s\n' "$rc" "${failed_phase:-?}" >&2
    fi
}
trap on_exit EXIT

die() {
    printf 'scripts/test.sh: %s\n' "$*" >&2
    exit 1
}

# --- Debian packages ----------------------------------------------------------------------------

export DEBIAN_FRONTEND=noninteractive
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    SUDO="sudo"
fi
APT_UPDATED=0

# apt_install PKG...: installs Debian packages; runs `apt-get update` only when installing fails
# (a fresh machine may have no package lists yet, or stale ones).
apt_install() {
    command -v apt-get >/dev/null 2>&1 || die "apt-get not found; install by hand: $*"
    if [ -n "$SUDO" ] && ! command -v sudo >/dev/null 2>&1; then
        die "not root and no sudo; install by hand: $*"
    fi
    if $SUDO apt-get install -y --no-install-recommends "$@"; then
        return 0
    fi
    if [ "$APT_UPDATED" -eq 0 ]; then
        $SUDO apt-get update
        APT_UPDATED=1
    fi
    $SUDO apt-get install -y --no-install-recommends "$@" || die "cannot install Debian packages: $*"
}

# need_cmd CMD PKG...: installs PKG... unless CMD is on PATH, and fails if CMD is still missing.
need_cmd() {
    local cmd="$1"
    shift
    if ! command -v "$cmd" >/dev/null 2>&1; then
        printf 'installing %s (for %s)\n' "$*" "$cmd" >&2
        apt_install "$@"
        command -v "$cmd" >/dev/null 2>&1 || die "$cmd is still missing after installing $*"
    fi
}

phase "tools"
# The Rust toolchain comes from rustup, not Debian (Debian's is older than rust-version).
if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || die "cargo not found: install the Rust toolchain with rustup"
need_cmd cc gcc libc6-dev
need_cmd kcat kcat
need_cmd python3 python3 python3-venv
need_cmd node nodejs
need_cmd npm npm
printf 'cargo: %s\nkcat: %s\npython3: %s\nnode: %s, npm %s\n' \
    "$(cargo --version)" "$(kcat -V 2>&1 | grep -m1 -o 'Version [^ ]*.*librdkafka [0-9.]*' || echo '?')" \
    "$(python3 --version 2>&1)" "$(node --version)" "$(npm --version)" >&2

# --- Python clients -----------------------------------------------------------------------------

phase "python venv (.venv) and tests/e2e/requirements.txt"
VENV="$ROOT/.venv"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV"; then
        # Debian's own python3 needs python3-venv for ensurepip.
        rm -rf "$VENV"
        apt_install python3-venv
        python3 -m venv "$VENV" || die "python3 -m venv still fails after installing python3-venv"
    fi
fi
"$VENV/bin/python" -m pip install --disable-pip-version-check --quiet -r tests/e2e/requirements.txt
"$VENV/bin/python" -c 'import confluent_kafka, kafka, pytest; print("confluent-kafka", confluent_kafka.__version__, "librdkafka", confluent_kafka.libversion()[0], "| kafka-python", kafka.__version__, "| pytest", pytest.__version__)' >&2

# --- KafkaJS ------------------------------------------------------------------------------------

phase "npm (tests/e2e/js)"
(
    cd tests/e2e/js
    if [ -f package-lock.json ]; then
        npm ci --no-audit --no-fund --loglevel=error
    else
        npm install --no-audit --no-fund --loglevel=error
    fi
    node -e 'console.error("kafkajs", require("kafkajs/package.json").version)'
)

# --- build and tests ----------------------------------------------------------------------------

phase "cargo build --bins"
cargo build --bins

phase "cargo test"
cargo test

phase "pytest tests/e2e"
CORRAL_BIN="$ROOT/target/debug/corral" "$VENV/bin/python" -m pytest tests/e2e -q

phase_end
printf '\nscripts/test.sh: all tests passed\n' >&2
