#!/usr/bin/env bash
# Installs a User-mode Linux kernel that offers kernel TLS (kTLS) into .cache/uml, for the tests
# and the benchmark of corral's kTLS path (tests/e2e/uml.py boots it):
#
#   bash scripts/uml.sh
#
# The machines corral is tested on run a kernel without the `tls` TCP upper-layer protocol. A UML
# kernel is a program: it boots as an ordinary process, with the host's file system as its root
# (hostfs), and its own `tls` module. Debian 12's UML kernel (6.1) cannot run a process on a CPU
# with AMX (its floating-point state is too large for it), so this takes the user-mode-linux of
# Debian testing, and the glibc of Debian stable that it needs (Debian 12's is too old), both
# resolved from the archive's package index and checked against its SHA-256. Idempotent: nothing
# is downloaded once .cache/uml holds them.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
UML="$ROOT/.cache/uml"
ARCHIVE="${DEBIAN_ARCHIVE:-http://deb.debian.org/debian}"

die() {
    printf 'scripts/uml.sh: %s\n' "$*" >&2
    exit 1
}

if [ -x "$UML/linux" ] && [ -f "$UML/.complete" ]; then
    printf 'uml: %s (in .cache/uml)\n' "$(cat "$UML/.complete")" >&2
    exit 0
fi

for tool in curl xz patchelf modprobe dpkg-deb sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is missing (scripts/test.sh installs it)"
done

# fetch_package SUITE PACKAGE DIR: downloads PACKAGE's newest .deb in SUITE, checks it against
# the index's SHA-256 and unpacks it into DIR; prints its version.
fetch_package() {
    local suite="$1" package="$2" dir="$3" fields filename sha version
    fields="$(curl -fsS --retry 3 "$ARCHIVE/dists/$suite/main/binary-amd64/Packages.xz" | xz -dc |
        awk -v p="$package" '!done && $0 == "Package: " p {found=1} found && /^(Version|Filename|SHA256):/ {print $2} found && /^$/ {found=0; done=1}')" ||
        die "cannot read the $suite package index from $ARCHIVE"
    version="$(sed -n 1p <<<"$fields")"
    filename="$(sed -n 2p <<<"$fields")"
    sha="$(sed -n 3p <<<"$fields")"
    [ -n "$filename" ] && [ -n "$sha" ] || die "$package not found in $suite's package index"
    curl -fsS --retry 3 -o "$UML/download.deb" "$ARCHIVE/$filename" || die "cannot download $ARCHIVE/$filename"
    echo "$sha  $UML/download.deb" | sha256sum -c --quiet - || die "$filename does not match the index's SHA-256"
    dpkg-deb -x "$UML/download.deb" "$dir"
    rm -f "$UML/download.deb"
    printf '%s\n' "$version"
}

rm -rf "$UML"
mkdir -p "$UML"
kernel_version="$(fetch_package testing user-mode-linux "$UML/kernel")"
libc_version="$(fetch_package stable libc6 "$UML/libc")"

# The kernel binary, loading Debian stable's glibc instead of the host's.
libdir="$UML/libc/usr/lib/x86_64-linux-gnu"
cp "$UML/kernel/usr/bin/linux.uml" "$UML/linux.tmp"
patchelf --set-interpreter "$libdir/ld-linux-x86-64.so.2" --set-rpath "$libdir" "$UML/linux.tmp"
# Its modules where `modprobe -d .cache/uml/modules` looks for them.
release="$(ls "$UML/kernel/usr/lib/uml/modules")"
[ -f "$UML/kernel/usr/lib/uml/modules/$release/kernel/net/tls/tls.ko" ] || die "user-mode-linux $kernel_version has no tls module"
mkdir -p "$UML/modules/lib/modules"
ln -s "$UML/kernel/usr/lib/uml/modules/$release" "$UML/modules/lib/modules/$release"
mv "$UML/linux.tmp" "$UML/linux"
printf 'user-mode-linux %s (kernel %s) with libc6 %s\n' "$kernel_version" "$release" "$libc_version" >"$UML/.complete"
printf 'uml: %s (in .cache/uml)\n' "$(cat "$UML/.complete")" >&2
