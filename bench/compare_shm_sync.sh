#!/bin/sh
# bench/compare_shm_sync.sh: the shm path's transport against MPI's on this machine (bench/shm_sync.c):
# per-bucket synchronisation (flags in a shared window against MPI_Barrier) and the reduction of
# the MLP's 7.4 MB of gradients (loads through the window against MPI_Allreduce), two ranks,
# alternating in one run. Usage: bench/compare_shm_sync.sh [FLOATS] [ROUNDS]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
mpicc -O3 -std=gnu11 -o "$tmp/shm_sync" "$here/shm_sync.c"
echo "cpu: $(sed -n 's/^model name\t: //p' /proc/cpuinfo | head -1), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
mpirun --bind-to none -np 2 "$tmp/shm_sync" "${1:-1863690}" "${2:-40}"
