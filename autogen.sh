#!/bin/sh
# autogen.sh: regenerates configure and Makefile.in from a fresh clone.
set -e
cd "$(dirname "$0")"
autoreconf --install --force
