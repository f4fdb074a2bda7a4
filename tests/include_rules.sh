#!/bin/sh
# tests/include_rules.sh: the module table in docs/architecture.md is the rule, and the code keeps
# it. Reads the table under "## Modules and their rules" (first column: the directories a row is
# for, in backticks; last column: what they may include, in backticks: a module name such as
# `core`, or one header such as `exec/step_view.h`; anything outside backticks is prose), then
# every `#include "module/..."` in src/, include/ and kernels/, and fails on each include the
# table does not allow, naming the file and line, the include and the row that forbids it.
# Every module may include its own headers and the public ones (`baton/...`). A directory under
# src/ without a row fails too, as does a table that cannot be found. Plain sh and awk.
# Prints "include_rules: N tests, N failed" like the CUnit programs: one test per module (its
# row exists, and every include of its files is allowed), plus one for finding the table.
set -u
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
table="$srcdir/docs/architecture.md"
if [ ! -r "$table" ]; then
  echo "FAIL: cannot read $table"; echo "include_rules: 1 tests, 1 failed"; exit 1
fi
cd "$srcdir" || exit 1
files=$(find src include kernels -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) 2>/dev/null | LC_ALL=C sort)
dirs=$(find src -mindepth 1 -maxdepth 1 -type d | LC_ALL=C sort)

# shellcheck disable=SC2086
LC_ALL=C awk -v dirs="$dirs" '
function module_of(path,   p) {
  n = split(path, p, "/")
  if (p[1] == "src") return p[2]
  return p[1]                        # include, kernels
}
function ticks(text, out,   n, rest, a, b) {  # backticked tokens of text into out[1..n]
  n = 0; rest = text
  while ((a = index(rest, "`")) > 0) {
    rest = substr(rest, a + 1)
    if ((b = index(rest, "`")) == 0) break
    out[++n] = substr(rest, 1, b - 1)
    rest = substr(rest, b + 1)
  }
  return n
}
FNR == 1 { file_no++ }
file_no == 1 {
  if ($0 ~ /^## Modules and their rules/) { in_section = 1; next }
  if (in_section && $0 ~ /^## /) in_section = 0
  if (!in_section || $0 !~ /^\|/ || $0 ~ /^\|[-| ]+$/ || $0 ~ /may include/) next
  ncol = split($0, col, "|")          # col[1] is empty (the line starts with |)
  nd = ticks(col[2], d)
  last = col[ncol] != "" ? col[ncol] : col[ncol - 1]
  nr = ticks(last, r)
  for (i = 1; i <= nd; i++) {
    m = d[i]; sub(/\/$/, "", m)
    mod = module_of(m)
    rows++; has_row[mod] = 1; row_name[mod] = "`" d[i] "`"
    for (j = 1; j <= nr; j++) { allow[mod, r[j]] = 1; allowed_list[mod] = allowed_list[mod] " " r[j] }
  }
  next
}
{
  if (!checked_dirs) {
    checked_dirs = 1
    tests++
    if (rows == 0) {
      print "FAIL: docs/architecture.md: no module table found under \"## Modules and their rules\""
      failed++
    }
    nd = split(dirs, dd, "\n")
    for (i = 1; i <= nd; i++) {
      mod = module_of(dd[i])
      if (!has_row[mod]) { print "FAIL: " dd[i] "/: no row in the module table of docs/architecture.md"; bad[mod] = 1 }
    }
  }
  line = $0
  if (line !~ /^[ \t]*#[ \t]*include[ \t]*"[A-Za-z0-9_]+\//) next
  sub(/^[ \t]*#[ \t]*include[ \t]*"/, "", line)
  hdr = substr(line, 1, index(line, "\"") - 1)
  target = substr(hdr, 1, index(hdr, "/") - 1)
  mod = module_of(FILENAME)
  seen[mod] = 1
  if (target == "baton" || target == mod) next
  if (!has_row[mod]) {
    printf "FAIL: %s:%d: #include \"%s\": module %s has no row in the module table of docs/architecture.md\n", FILENAME, FNR, hdr, mod
    bad[mod] = 1; next
  }
  if (allow[mod, target] || allow[mod, hdr]) next
  printf "FAIL: %s:%d: #include \"%s\" is not allowed: the row %s of the module table in docs/architecture.md (## Modules and their rules) lets %s include only:%s (besides baton/ and %s/)\n", FILENAME, FNR, hdr, row_name[mod], mod, (allowed_list[mod] == "" ? " nothing internal" : allowed_list[mod]), mod
  bad[mod] = 1
}
END {
  for (m in seen) { tests++; if (m in bad) failed++ }
  for (m in bad) if (!(m in seen)) { tests++; failed++ }
  printf "include_rules: %d tests, %d failed\n", tests, failed
  exit (failed > 0)
}' "$table" $files
