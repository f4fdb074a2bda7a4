#!/usr/bin/env bash
# gpu-kit.sh: prepares .gpu/ (ignored by git) for a lent GPU machine that has CUDA, a compiler and
# PyTorch but no network, no apt, no autotools and none of baton's Debian libraries. Run it HERE
# (Debian 12 with the build dependencies and network), from anywhere in the checkout:
#   .gpu/baton-VERSION.tar.gz   `make dist` of the working tree as it is now (configure included,
#                               so the GPU machine needs no autotools; built in build-gpukit/)
#   .gpu/debs/*.deb             the runtime and -dev packages of libyaml, jansson, CUnit, OpenBLAS
#                               (pthreads) with libgfortran5/libquadmath0, and zlib
#   .gpu/STAMP                  the commit, the date and whether the tree had local changes
# Then carry .gpu to the GPU machine and run scripts/gpu-check.sh there (see docs/gpu.md).
# Re-run it after changing the build system (Makefile.am, Makemodule.am, configure.ac, m4/):
# gpu-check.sh copies changed sources over the tarball's, but cannot regenerate the build files.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
kit="$root/.gpu"
build="$root/build-gpukit"

# Packages the GPU image lacks (libopenblas0 and libopenblas-dev are empty metapackages, kept so
# the list reads like install-deps.sh). Nothing else is pulled in: libc6 and libgcc-s1 exist
# everywhere, and gcc-12-base holds only documentation.
pkgs=(libyaml-0-2 libyaml-dev libjansson4 libjansson-dev libcunit1 libcunit1-dev
      libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libopenblas0
      libgfortran5 libquadmath0 zlib1g zlib1g-dev)

rm -rf "$kit"
mkdir -p "$kit/debs"

echo "== make dist in $build"
# Regenerate the build files from the tree's Makefile.am/configure.ac (under the lock the team
# shares), so the tarball's configure and Makefile.in match the sources it carries.
if ! flock /tmp/baton-autoreconf.lock autoreconf -fi >/tmp/gpu-kit-autoreconf.out 2>&1; then
  cat /tmp/gpu-kit-autoreconf.out
  exit 1
fi
mkdir -p "$build"
( cd "$build"
  "$root/configure" -q >configure.out 2>&1 || { tail -30 configure.out; exit 1; }
  rm -f baton-*.tar.gz
  make -s dist >dist.out 2>&1 || { tail -30 dist.out; exit 1; }
  mv baton-*.tar.gz "$kit/" )

echo "== apt-get download (${#pkgs[@]} packages)"
if ! (cd "$kit/debs" && apt-get download "${pkgs[@]}") >/tmp/gpu-kit-apt.out 2>&1; then
  cat /tmp/gpu-kit-apt.out
  echo "gpu-kit: apt-get download failed (stale package lists? try apt-get update)" >&2
  exit 1
fi
# Plain file names: no '%3a' epoch escapes in what travels.
for f in "$kit"/debs/*%3a*.deb; do
  [ -e "$f" ] && mv "$f" "${f//%3a/_}"
done
n=$(find "$kit/debs" -name '*.deb' | wc -l)
if [ "$n" -ne "${#pkgs[@]}" ]; then
  echo "gpu-kit: expected ${#pkgs[@]} .deb files, got $n" >&2
  exit 1
fi

{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  if [ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    echo "tree had uncommitted changes"
  else
    echo "tree clean"
  fi
} >"$kit/STAMP"

echo "== .gpu"
find "$kit" -type f -printf '  %10s  %P\n' | sort -k2
echo "size of .gpu: $(du -sh "$kit" | cut -f1) ($(du -sb "$kit" | cut -f1) bytes)"
