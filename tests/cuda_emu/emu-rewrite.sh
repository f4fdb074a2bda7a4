#!/bin/sh
# tests/cuda_emu/emu-rewrite.sh SRC OUT: turns a .cu file into the C++ that g++ compiles for the
# CUDA emulator (emu_kernel.h, force-included, gives the rest): every launch
# `k<<<grid, block, smem, stream>>>(args)` becomes
# `k<< bt_emu_make_cfg(grid, block, smem, stream) >> bt_emu_args(args)`. A token rewrite, so a
# launch may span lines; line numbers are kept and a #line names SRC in messages.
set -e
{ printf '#line 1 "%s"\n' "$1"; sed -e 's/<<</<< bt_emu_make_cfg(/g' -e 's/>>>/) >> bt_emu_args/g' "$1"; } >"$2.tmp"
mv "$2.tmp" "$2"
