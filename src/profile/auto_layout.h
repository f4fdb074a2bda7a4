/* profile/auto_layout.h: `parallel: auto` and `baton plan --schedule auto`: measure at every point
 * the layout search considers (plan/search.h), search, and apply the choice to a parallel config.
 * Lives in src/profile because it measures; the search itself is plan code. */
#ifndef BT_PROFILE_AUTO_LAYOUT_H
#define BT_PROFILE_AUTO_LAYOUT_H

#include <stddef.h>

#include "baton/profile.h"
#include "plan/search.h"

/* Online CPUs (at least 1). */
int bt_auto_cores(void);
/* The candidate devices: given (a list), or for NULL / "auto" cpu:0..cpu:(cores-1). */
void bt_auto_devices(const char *given, int cores, char *list, size_t size);
/* Measures g (named name) with base's repeats, warm-ups and optimizer at each point of sp, and
 * searches; *n_measured says how many profiles were taken. The caller clears *out
 * (bt_search_result_clear) whatever the status. */
bt_status bt_auto_search(const bt_graph *g, const char *name, const bt_search_params *sp,
                         const bt_profile_params *base, bt_search_result *out, int *n_measured);
/* Writes candidate `which` (r->best: the predicted fastest) into cfg (devices, stages, micro-batches, schedule, layout; auto off),
 * *threads and *recompute (1: every layer). cfg's strings point to *devices and *layout (NULL for
 * one stage), new strings the caller owns (a bt_model's config owns its strings: hand them over). */
bt_status bt_auto_apply(const bt_graph *g, const bt_search_result *r, int which, bt_parallel_config *cfg,
                        int *threads, int *recompute, char **devices, char **layout);

#endif
