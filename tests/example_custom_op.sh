#!/bin/sh
# tests/example_custom_op.sh: installs baton into a temporary root, builds
# docs/examples/custom_op.c against it with `pkg-config --cflags --libs baton` (as a user would),
# and runs it: a custom op registered from C trains from the C API and from YAML.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
make -s -C "$builddir" install DESTDIR="$tmp/root" >"$tmp/install.log" 2>&1 || { cat "$tmp/install.log"; exit 1; }
pc=$(find "$tmp/root" -name baton.pc | head -n 1)
lib=$(find "$tmp/root" -name 'libbaton.so' | head -n 1)
[ -n "$pc" ] && [ -n "$lib" ] || { echo "install did not produce baton.pc and libbaton.so"; exit 1; }
PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR="$tmp/root"
export PKG_CONFIG_PATH PKG_CONFIG_SYSROOT_DIR
flags=$(pkg-config --cflags --libs baton)
echo "pkg-config --cflags --libs baton: $flags"
# the build's compiler and link flags (BT_CC, BT_LDFLAGS from make check): a sanitizer build's
# library needs its runtime linked into the program, as a user of such a build would
${BT_CC:-${CC:-cc}} -std=c11 -Wall -o "$tmp/custom_op" "$srcdir/docs/examples/custom_op.c" $flags ${BT_LDFLAGS:-} -lm
LD_LIBRARY_PATH=$(dirname "$lib") "$tmp/custom_op"
