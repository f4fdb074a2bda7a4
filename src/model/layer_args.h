/* model/layer_args.h: a layer's `args:` mapping, checked against its op's published argument
 * specification at each value's own position and converted into a bt_args list (model/loader.c
 * calls it for every expanded layer). */
#ifndef BT_MODEL_LAYER_ARGS_H
#define BT_MODEL_LAYER_ARGS_H

#include "baton/args.h"
#include "baton/op.h"
#include "model/interp.h"
#include "model/yaml_tree.h"

/* The longest layer or input name (model files; messages quote names up to it). */
#define BT_MAX_NAME 200

/* Reads layer_node's `args:` (absent: none) for op into args; every required argument present. */
bt_status bt_ld_layer_args(const bt_ld *ld, const char *layer, const bt_op_def *op, const bt_ynode *layer_node,
                           bt_args *args);

#endif
