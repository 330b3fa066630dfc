#!/usr/bin/env bash
# corral's test command: installs what the tests need, builds, and runs every test.
#
#   bash scripts/test.sh
#
# Idempotent, and meant to work from a clean checkout on a fresh Debian machine (as root, or with
# sudo): it installs missing Debian packages (kcat, Python venv support, Node.js/npm, a C
# compiler, LinkedIn Burrow and the ZooKeeper it needs with a Java runtime, Prometheus, Chromium,
# patchelf and kmod), installs a User-mode Linux kernel with kTLS into .cache/uml (scripts/uml.sh),
# builds kustomize from its Go module, creates .venv with
# the pinned Python packages of tests/e2e/requirements.txt, installs KafkaJS from
# tests/e2e/js/package-lock.json, resolves Apache Kafka 4.4 from Maven Central (tests/kafka/pom.xml,
# into .cache/) and builds the Java client program of tests/e2e/java, builds the Sarama client of
# tests/e2e/sarama against Debian's golang-github-shopify-sarama-dev and the franz-go client of
# tests/e2e/franz from the Go module proxy, then checks `cargo fmt
# --check` and `cargo clippy --all-targets -- -D warnings`, runs `cargo build --bins`, `cargo
# test` and the end-to-end suite (pytest tests/e2e). Anything that cannot be installed fails the
# run: nothing is skipped.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SCRIPT_NAME="scripts/test.sh"
# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"

phase "tools"
need_cargo
need_cmd cc gcc libc6-dev
need_cmd kcat kcat
need_cmd python3 python3 python3-venv
need_cmd node nodejs
need_cmd npm npm
# tests/e2e/test_burrow.py: Burrow, and the standalone ZooKeeper it refuses to start without
# (run from the zookeeper package's jars; the package depends on a Java runtime).
need_cmd Burrow burrow
need_file /usr/share/zookeeper/bin/zkServer.sh zookeeper
need_cmd java default-jre-headless
printf 'cargo: %s\nkcat: %s\npython3: %s\nnode: %s, npm %s\nburrow: %s, zookeeper %s, %s\n' \
    "$(cargo --version)" "$(kcat -V 2>&1 | grep -m1 -o 'Version [^ ]*.*librdkafka [0-9.]*' || echo '?')" \
    "$(python3 --version 2>&1)" "$(node --version)" "$(npm --version)" \
    "$(dpkg-query -W -f '${Version}' burrow 2>/dev/null || echo '?')" \
    "$(dpkg-query -W -f '${Version}' zookeeper 2>/dev/null || echo '?')" \
    "$(java -version 2>&1 | head -n1)" >&2

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

# --- Prometheus, Chromium and Kubernetes manifests ----------------------------------------------

# tests/e2e/test_dashboards.py: a real Prometheus and its promtool; test_groups_page.py: headless
# Chromium; test_deploy.py: kustomize, built from its Go module at a pinned version (Debian ships
# none; it needs Go 1.22.7 or later, which Debian 12's golang-go is not), and kubernetes-validate
# (in .venv, from tests/e2e/requirements.txt).
phase "prometheus, chromium, kustomize"
need_cmd prometheus prometheus
need_cmd promtool prometheus
need_cmd chromium chromium
command -v go >/dev/null 2>&1 || die "go not found: kustomize is built with the Go toolchain (1.22.7 or later)"
KUSTOMIZE_VERSION=v5.7.1
KUSTOMIZE="$(go env GOPATH)/bin/kustomize"
if [ "$("$KUSTOMIZE" version 2>/dev/null || true)" != "$KUSTOMIZE_VERSION" ]; then
    printf 'installing kustomize %s (go install)\n' "$KUSTOMIZE_VERSION" >&2
    GOBIN="$(dirname "$KUSTOMIZE")" GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kustomize/kustomize/v5@$KUSTOMIZE_VERSION" \
        || die "cannot install kustomize $KUSTOMIZE_VERSION with go install"
fi
[ "$("$KUSTOMIZE" version)" = "$KUSTOMIZE_VERSION" ] || die "$KUSTOMIZE is not kustomize $KUSTOMIZE_VERSION"
export KUSTOMIZE
"$VENV/bin/python" -c 'import kubernetes_validate' || die "kubernetes-validate is missing from .venv"
printf 'prometheus: %s\nchromium: %s\nkustomize: %s\n' \
    "$(prometheus --version 2>&1 | head -n1)" "$(chromium --version 2>/dev/null | head -n1)" "$KUSTOMIZE_VERSION" >&2

# --- A kernel with kTLS ---------------------------------------------------------------------------

# tests/e2e/test_kernel_tls.py: this machine's kernel has no kernel TLS, so those tests boot a
# User-mode Linux kernel that has it (scripts/uml.sh: Debian testing's user-mode-linux and the
# glibc it needs, into .cache/uml), with patchelf to point it at that glibc, and kmod's modprobe
# to load its modules; the guest also runs `ip` and `poweroff` of this machine.
phase "user-mode linux with kTLS (.cache/uml)"
need_cmd curl curl
need_cmd xz xz-utils
need_cmd patchelf patchelf
need_cmd modprobe kmod
need_cmd ip iproute2
need_cmd poweroff systemd-sysv
bash scripts/uml.sh

# --- Apache Kafka and the Java client -----------------------------------------------------------

# tests/e2e/apache_kafka.py runs a real Kafka 4.4 cluster (3 KRaft brokers) from Maven Central's
# jars, resolved from tests/kafka/pom.xml into .cache/kafka-4.4.0/libs; tests/e2e/java is the Java
# client program of test_java_client.py (kafka-clients and kafka-tools 4.4.0), built into its
# target/. Both are pinned and redone only when their pom or sources change.
phase "apache kafka 4.4.0 and the java client (maven)"
need_cmd java default-jre-headless
need_cmd javac default-jdk-headless
need_cmd mvn maven
maven_copy_deps tests/kafka/pom.xml "$ROOT/.cache/kafka-4.4.0/libs"
ls "$ROOT"/.cache/kafka-4.4.0/libs/kafka_2.13-4.4.0.jar >/dev/null || die "kafka_2.13-4.4.0.jar missing from .cache/kafka-4.4.0/libs"
# shellcheck disable=SC2046 # the sources are plain paths
maven_package tests/e2e/java/pom.xml $(find tests/e2e/java/src -type f | sort)
[ -f tests/e2e/java/target/corral-e2e-java.jar ] || die "tests/e2e/java did not build target/corral-e2e-java.jar"
printf 'kafka 4.4.0: %s jars in .cache/kafka-4.4.0/libs | java client: tests/e2e/java/target | %s\n' \
    "$(find "$ROOT/.cache/kafka-4.4.0/libs" -name '*.jar' | wc -l)" "$(mvn -v 2>/dev/null | head -n1 | sed 's/\x1b\[[0-9;]*m//g')" >&2

# --- Sarama ---------------------------------------------------------------------------------------

# tests/e2e/test_old_group_versions.py: Debian's Sarama 1.22, a client from before Kafka 4 that
# commits with OffsetCommit v1 and fetches with OffsetFetch v1 (KIP-896 removed both). Its Go
# sources are in GOPATH layout under /usr/share/gocode; tests/e2e/sarama is built against them
# (GOPATH mode, no module download) into tests/e2e/sarama/target, again only when main.go changes.
phase "sarama 1.22 (debian) and its test client (go build)"
need_file /usr/share/gocode/src/github.com/Shopify/sarama/consumer_group.go golang-github-shopify-sarama-dev
SARAMA_TARGET="$ROOT/tests/e2e/sarama/target"
SARAMA_WANT="$(inputs_sha tests/e2e/sarama/main.go /var/lib/dpkg/info/golang-github-shopify-sarama-dev.list)"
if [ ! -x "$SARAMA_TARGET/sarama-client" ] || [ "$(cat "$SARAMA_TARGET/.complete" 2>/dev/null)" != "$SARAMA_WANT" ]; then
    printf 'building tests/e2e/sarama (go build, GOPATH mode)\n' >&2
    rm -rf "$SARAMA_TARGET"
    (cd tests/e2e/sarama && GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS=-buildvcs=false CGO_CFLAGS=-Wno-deprecated-declarations \
        go build -o "$SARAMA_TARGET/sarama-client" .) || die "cannot build tests/e2e/sarama against Debian's Sarama"
    printf '%s\n' "$SARAMA_WANT" >"$SARAMA_TARGET/.complete"
fi
printf 'sarama: %s | test client: tests/e2e/sarama/target/sarama-client\n' "$(dpkg-query -W -f '${Version}' golang-github-shopify-sarama-dev)" >&2

# --- franz-go -----------------------------------------------------------------------------------

# tests/e2e/test_franz_go.py: franz-go (kgo, kadm), a Go client with its own cooperative and
# KIP-848 group code. tests/e2e/franz is a Go module pinned by its go.sum; `go build` fetches the
# modules from the Go module proxy into the module cache, again only when the sources change.
phase "franz-go and its test client (go build)"
FRANZ_TARGET="$ROOT/tests/e2e/franz/target"
FRANZ_WANT="$(inputs_sha tests/e2e/franz/main.go tests/e2e/franz/go.mod tests/e2e/franz/go.sum)"
if [ ! -x "$FRANZ_TARGET/franz-client" ] || [ "$(cat "$FRANZ_TARGET/.complete" 2>/dev/null)" != "$FRANZ_WANT" ]; then
    printf 'building tests/e2e/franz (go build, module mode)\n' >&2
    rm -rf "$FRANZ_TARGET"
    (cd tests/e2e/franz && GOFLAGS="-buildvcs=false -mod=readonly" go build -o "$FRANZ_TARGET/franz-client" .) \
        || die "cannot build tests/e2e/franz (franz-go from the Go module proxy)"
    printf '%s\n' "$FRANZ_WANT" >"$FRANZ_TARGET/.complete"
fi
printf 'franz-go: %s | test client: tests/e2e/franz/target/franz-client\n' \
    "$(cd tests/e2e/franz && go list -m -f '{{.Version}}' github.com/twmb/franz-go)" >&2

# --- build and tests ----------------------------------------------------------------------------

phase "cargo fmt --check"
cargo fmt --check

phase "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets -- -D warnings

phase "cargo build --bins"
cargo build --bins

phase "cargo test"
cargo test

phase "pytest tests/e2e"
CORRAL_BIN="$ROOT/target/debug/corral" "$VENV/bin/python" -m pytest tests/e2e -q

phase_end
printf '\nscripts/test.sh: all tests passed\n' >&2
