#!/bin/sh
# tests/public_symbols.sh: the library boundary is closed. libbaton.so must export (nm -D) exactly
# the functions the installed headers (include/baton.h, include/baton/*.h) mark BT_API: an exported
# symbol of ours that no header declares fails (an internal function leaked: it needs -fvisibility
# or BT_API was put on the wrong declaration), and so does a BT_API function the library does not
# export (declared but missing, or its definition lost the attribute), and so does a function
# declaration in those headers without BT_API (it would be hidden). Any other exported global
# fails too (the linker's own markers such as _init and _end aside). Skips (77) where the build
# has no shared library or the compiler has no -fvisibility.
set -eu
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
lib="$builddir/.libs/libbaton.so"
if [ ! -f "$lib" ]; then echo "SKIP: no $lib (static-only build)"; exit 77; fi
if [ -z "${BT_VISIBILITY_CFLAGS-x}" ]; then echo "SKIP: the compiler has no -fvisibility"; exit 77; fi
command -v nm >/dev/null 2>&1 || { echo "SKIP: no nm"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Declared: every BT_API declaration's function name (declarations may span lines; the name is
# the identifier before the first parenthesis after BT_API).
cat "$srcdir/include/baton.h" "$srcdir"/include/baton/*.h | grep -v '^#' |
  tr '\n' ' ' | grep -o 'BT_API [A-Za-z_][A-Za-z0-9_ *]*(' | sed 's/($//; s/.*[^A-Za-z0-9_]//' | sort -u >"$tmp/declared"
n_declared=$(wc -l <"$tmp/declared")
[ "$n_declared" -gt 0 ] || { echo "FAIL: found no BT_API declaration in the headers"; exit 1; }

# Exported: defined global symbols of the library (code, data, read-only data, bss, weak), less
# the markers every linker adds.
nm -D --defined-only "$lib" | awk '$2 ~ /^[TDRBVWiu]$/ {print $3}' | sed 's/@.*//' |
  grep -vxE '_init|_fini|_edata|_end|__bss_start' | sort -u >"$tmp/exported" || true
status=0
# A public declaration must carry BT_API, or the function is hidden and nothing above notices.
for h in "$srcdir/include/baton.h" "$srcdir"/include/baton/*.h; do
  grep -nE '^[A-Za-z_][A-Za-z0-9_ *]*[ *]bt_[A-Za-z0-9_]+\(' "$h" | grep -vE '^[0-9]+:(BT_API|typedef) ' |
    while IFS=: read -r line text; do
      echo "FAIL: $(basename "$h"):$line declares a function without BT_API: $text"
    done
done >"$tmp/unmarked"
if [ -s "$tmp/unmarked" ]; then cat "$tmp/unmarked"; status=1; fi
while read -r sym; do
  if ! grep -qx "$sym" "$tmp/declared"; then
    echo "FAIL: libbaton.so exports $sym, which no public header declares with BT_API"
    status=1
  fi
done <"$tmp/exported"
while read -r sym; do
  if ! grep -qx "$sym" "$tmp/exported"; then
    echo "FAIL: $sym is declared BT_API in a public header but libbaton.so does not export it"
    status=1
  fi
done <"$tmp/declared"
echo "$n_declared public functions declared with BT_API; libbaton.so exports $(wc -l <"$tmp/exported")" \
  "symbols, $(grep -c '^bt_' "$tmp/exported" || true) of them bt_"
exit $status
