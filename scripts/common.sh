# shellcheck shell=bash
# Shared by scripts/test.sh and scripts/bench.sh (sourced, after SCRIPT_NAME is set): timed
# phases with a summary on exit, `die`, and idempotent installation of Debian packages.

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
    printf '\n==> %s timings\n' "$SCRIPT_NAME" >&2
    for line in "${PHASES[@]}"; do
        printf '%s\n' "$line" >&2
    done
    printf '%5ss  total\n' "$(($(date +%s) - SCRIPT_START))" >&2
    if [ "$rc" -ne 0 ]; then
        printf '\n%s: FAILED (exit %s) during: %s\n' "$SCRIPT_NAME" "$rc" "${failed_phase:-?}" >&2
    fi
}
trap on_exit EXIT

die() {
    printf '%s: %s\n' "$SCRIPT_NAME" "$*" >&2
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

# need_file PATH PKG...: installs PKG... unless PATH exists (for programs that are not on PATH,
# such as ZooKeeper's scripts), and fails if PATH is still missing.
need_file() {
    local path="$1"
    shift
    if [ ! -e "$path" ]; then
        printf 'installing %s (for %s)\n' "$*" "$path" >&2
        apt_install "$@"
        [ -e "$path" ] || die "$path is still missing after installing $*"
    fi
}

# need_cargo: finds cargo. The Rust toolchain comes from rustup, not Debian (Debian's is older
# than rust-version).
need_cargo() {
    if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    fi
    command -v cargo >/dev/null 2>&1 || die "cargo not found: install the Rust toolchain with rustup"
    # The test command checks formatting and lints: rustup's components.
    if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
        rustup component add rustfmt clippy || die "cannot install rustfmt and clippy with rustup"
    fi
}

# --- Maven Central ------------------------------------------------------------------------------

# sha256 of the files given, as one line: what a cached Maven result was made from.
inputs_sha() {
    cat "$@" | sha256sum | cut -d' ' -f1
}

# maven_copy_deps POM DIR: resolves every dependency of POM (pinned versions) into DIR with
# `mvn dependency:copy-dependencies`, unless DIR/.complete says it already holds them for this
# very POM. Resolves into a fresh directory next to DIR and renames it on success, so an
# interrupted run never leaves a partial DIR behind that looks complete.
maven_copy_deps() {
    local pom="$1" dir="$2" want
    want="$(inputs_sha "$pom")"
    if [ -f "$dir/.complete" ] && [ "$(cat "$dir/.complete")" = "$want" ]; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to install $pom's dependencies"
    printf 'resolving %s into %s (mvn)\n' "$pom" "$dir" >&2
    rm -rf "$dir.partial"
    mvn -q -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies -DoutputDirectory="$dir.partial" \
        || die "cannot resolve the dependencies of $pom from Maven Central"
    printf '%s\n' "$want" >"$dir.partial/.complete"
    rm -rf "$dir"
    mv "$dir.partial" "$dir"
}

# maven_package POM [SOURCE...]: `mvn package` of POM's project unless its target/.complete says
# it was built from these very POM and sources.
maven_package() {
    local pom="$1" target want
    shift
    target="$(dirname "$pom")/target"
    want="$(inputs_sha "$pom" "$@")"
    if [ -f "$target/.complete" ] && [ "$(cat "$target/.complete")" = "$want" ]; then
        return 0
    fi
    command -v mvn >/dev/null 2>&1 || die "mvn not found: Maven is needed to build $pom"
    printf 'building %s (mvn package)\n' "$pom" >&2
    rm -rf "$target"
    mvn -q -B -Dstyle.color=never -f "$pom" package || die "cannot build $pom"
    printf '%s\n' "$want" >"$target/.complete"
}
