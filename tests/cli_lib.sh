# cli_lib.sh: what the shell tests of the baton command share; each sources it first
# (`. "$(dirname "$0")/cli_lib.sh"`). It sets builddir, srcdir and baton (BT_BUILDDIR and BT_SRCDIR
# override them), the counters tests and failed, a temporary directory tmp removed on exit, and:
#   fail MESSAGE                    counts a failure and prints it
#   expect_rc RC WHAT COMMAND...    runs COMMAND with stdout in $tmp/out and stderr in $tmp/err,
#                                   counts a test, and fails (printing the error's head) unless it
#                                   exited RC; returns 0 when it did
# Each script ends by printing its counts and exiting non-zero when anything failed.
set -u
builddir=${BT_BUILDDIR:-$(pwd)}
srcdir=${BT_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
baton="$builddir/baton"
tests=0; failed=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
expect_rc() { # expected-rc description command...
  want=$1; what=$2; shift 2
  tests=$((tests + 1))
  "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
  [ "$rc" = "$want" ] || { fail "$what: exit $rc, expected $want"; sed 's/^/    /' "$tmp/err" | head -5; return 1; }
  return 0
}
