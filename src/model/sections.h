/* model/sections.h: reading a model document's run-configuration sections (train:, parallel:,
 * data:) into baton/config.h structs. loader.c calls them after the graph is built, in the order
 * train, parallel, data, because parallel: checks against both the graph (partition names and
 * counts) and train: (batch versus micro-batches). Strings stored in the configs are malloc'ed and
 * owned by the model being loaded; on failure whatever was stored is freed with the model. */
#ifndef BT_MODEL_SECTIONS_H
#define BT_MODEL_SECTIONS_H

#include "baton/config.h"
#include "baton/graph.h"
#include "model/interp.h"

/* key is the `train` key node (NULL: no train: section, cfg stays disabled). */
bt_status bt_ld_train(const bt_ld *ld, const bt_ynode *key, const bt_ynode *node,
                      const bt_graph *graph, bt_train_config *cfg);
/* pinned_stages: number of stages per-layer `stage:` values use (0: no layer is pinned).
 * cfg->devices must already hold an owned string. */
bt_status bt_ld_parallel(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph,
                         int pinned_stages, const bt_train_config *train,
                         bt_parallel_config *cfg);
/* graph: the model's inputs, which npy inputs: must name (each of them, none other). */
bt_status bt_ld_data(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph, bt_data_config *cfg);

#endif
