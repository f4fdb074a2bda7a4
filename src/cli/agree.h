/* cli/agree.h: the ranks of one job agree, or the job refuses at start-up: the CLI's side of
 * dist/agree.h. Every command that runs under a launcher (run, generate, predict, profile) writes
 * what must be the same on every rank as a record (the command, the model, the resolved options,
 * a content digest of every input file it reads: data, weights, vocabulary, prompts) and compares
 * it as its first collective, right after MPI comes up, before the layout or any engine is built;
 * so ranks started differently, even with different commands, are refused (exit 2) with a message
 * that names the first field that differs and each rank's value, never left to a raw MPI error or
 * the watchdog. The engine compares its plan and schedules again when it is created
 * (exec/engine_dist.c). Per-rank settings are not compared (threads, watchdog, memory limit,
 * device indices): docs/distributed.md lists what is. */
#ifndef BT_CLI_AGREE_H
#define BT_CLI_AGREE_H

#include "cli/cli.h"
#include "dist/agree.h"

/* A data: source's fields under prefix ("data.train"): its type and settings, and each file's
 * content digest (bt_agree_file: size and a sampled CRC-32C; no name, no mtime). */
void bt_cli_agree_data(bt_agree *a, const char *prefix, const bt_data_source *d);
/* The weights path (--init, --resume, --weights) names: a directory's latest checkpoint, a
 * safetensors file or an index and each of its shards, each by content digest (a safetensors
 * header whole: baton's checkpoints keep a CRC-32C of every tensor there). NULL: "(none)". */
void bt_cli_agree_weights(bt_agree *a, const char *field, const char *path);
/* Collective, after bt_dist_init: BT_EXIT_OK when every rank's record equals this one. When they
 * differ, rank 0 prints "baton CMD: ranks disagree on FIELD: rank 0 has ..., rank 1 has ...",
 * every rank finalises MPI (*mpi_up = 0) and returns BT_EXIT_USAGE: the job ends cleanly, exit 2.
 * Other failures (a rank that never answers within timeout_s) print the error and return its exit
 * code with MPI still up (the caller ends the job). */
int bt_cli_agree(const char *cmd, const bt_agree *a, double timeout_s, int *mpi_up);

#endif
