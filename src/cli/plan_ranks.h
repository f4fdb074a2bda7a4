/* cli/plan_ranks.h: `baton plan --ranks N` (plan_ranks.c): the D x P split of a job of N ranks,
 * priced with the profile's links between ranks. */
#ifndef BT_CLI_PLAN_RANKS_H
#define BT_CLI_PLAN_RANKS_H

#include "cli/cli.h"
#include "plan/placement.h"
#include "plan/profile.h"

/* Plans every split N = D x P from base (schedule, micro-batches, memory, the model's graph) and
 * prints them with the fastest marked; exit code (BT_EXIT_USAGE without links in the profile or
 * when no split can run). */
int bt_cli_plan_ranks(const bt_model *m, const bt_profile *p, const bt_placement_params *base, int ranks, int json);

#endif
