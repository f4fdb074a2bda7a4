/* model/layer_args.c: layer arguments (see layer_args.h): unknown names, YAML types against the
 * op's argument types (an integer is accepted where a number or a list of integers is expected),
 * ranges and required arguments, each error at the offending value's line and column. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/graph_internal.h"
#include "model/layer_args.h"

/* Checks a value of YAML type `type` (and its numbers) against spec, at the value's position. */
static bt_status check_arg(const bt_ld *ldp, const char *layer, const bt_op_def *op,
                           const bt_arg_spec *spec, const bt_ynode *val, bt_arg_type type,
                           int n, const double *nums)
{
    int type_ok = type == spec->type || (spec->type == BT_ARG_FLOAT && type == BT_ARG_INT) ||
                  (spec->type == BT_ARG_INTS && type == BT_ARG_INT);
    char got[80];
    bt_ld_describe(val, got, sizeof got);
    if (!type_ok)
        return bt_ld_error(ldp, val, BT_ERR_MODEL, "layer '%s': %s argument '%s' must be %s, got %s",
                           layer, op->name, spec->name, bt_arg_type_name(spec->type), got);
    if (spec->min > spec->max) return BT_OK;
    for (int k = 0; k < n; k++)
        if (!(nums[k] >= spec->min && nums[k] <= spec->max))
            return bt_ld_error(ldp, val, BT_ERR_MODEL,
                               "layer '%s': %s argument '%s' = %g is out of range [%g, %g]",
                               layer, op->name, spec->name, nums[k], spec->min, spec->max);
    return BT_OK;
}

/* Converts one args: entry to bt_args by YAML type, checking it against the op's spec. */
static bt_status add_arg(const bt_ld *ldp, const char *layer, const bt_op_def *op,
                         const bt_ynode *key, const bt_ynode *val, bt_args *args)
{
    const bt_ld *ld = ldp;
    const bt_arg_spec *spec = NULL;
    for (int k = 0; k < op->n_args; k++)
        if (strcmp(op->args[k].name, key->text) == 0) spec = &op->args[k];
    if (!spec) {
        char list[512];
        size_t used = 0;
        list[0] = '\0';
        for (int k = 0; k < op->n_args && used < sizeof list; k++)
            used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", k ? ", " : "",
                                     op->args[k].name);
        return bt_ld_error(ld, key, BT_ERR_MODEL,
                           "layer '%s': op '%s' has no argument '%s' (accepted: %s)", layer,
                           op->name, key->text, op->n_args ? list : "none");
    }
    char what[BT_MAX_NAME + 96];
    snprintf(what, sizeof what, "argument '%s' of layer '%s'", key->text, layer);
    if (val->kind == BT_Y_SEQ) {
        int64_t ints[BT_ARG_MAX_INTS];
        double nums[BT_ARG_MAX_INTS];
        if (val->n == 0 || val->n > BT_ARG_MAX_INTS)
            return bt_ld_error(ld, val, BT_ERR_MODEL,
                               "layer '%s': argument '%s' lists %d integers (1 to %d allowed)",
                               layer, key->text, val->n, BT_ARG_MAX_INTS);
        for (int k = 0; k < val->n; k++) {
            BT_TRY(bt_ld_int(ld, val->kids[k], what, INT64_MIN, INT64_MAX, &ints[k]));
            nums[k] = (double)ints[k];
        }
        BT_TRY(check_arg(ldp, layer, op, spec, val, BT_ARG_INTS, val->n, nums));
        return bt_args_set_ints(args, key->text, val->n, ints);
    }
    if (val->kind != BT_Y_SCALAR || bt_ynode_is_null(val))
        return bt_ld_error(ld, val, BT_ERR_MODEL,
                           "layer '%s': argument '%s' must be a number, true/false, a string or "
                           "a list of integers",
                           layer, key->text);
    switch (bt_yscalar_type(val)) {
    case BT_YS_INT: {
        int64_t v;
        BT_TRY(bt_ld_int(ld, val, what, INT64_MIN, INT64_MAX, &v));
        double d = (double)v;
        BT_TRY(check_arg(ldp, layer, op, spec, val, BT_ARG_INT, 1, &d));
        return bt_args_set_int(args, key->text, v);
    }
    case BT_YS_FLOAT: {
        double v;
        BT_TRY(bt_ld_float(ld, val, what, -INFINITY, 0, INFINITY, 0, &v));
        BT_TRY(check_arg(ldp, layer, op, spec, val, BT_ARG_FLOAT, 1, &v));
        return bt_args_set_float(args, key->text, v);
    }
    case BT_YS_BOOL: {
        int v;
        BT_TRY(bt_ld_bool(ld, val, what, &v));
        BT_TRY(check_arg(ldp, layer, op, spec, val, BT_ARG_BOOL, 0, NULL));
        return bt_args_set_bool(args, key->text, v);
    }
    default: {
        const char *s;
        BT_TRY(bt_ld_string(ld, val, what, &s));
        BT_TRY(check_arg(ldp, layer, op, spec, val, BT_ARG_STRING, 0, NULL));
        return bt_args_set_string(args, key->text, s);
    }
    }
}

bt_status bt_ld_layer_args(const bt_ld *ldp, const char *layer, const bt_op_def *op,
                            const bt_ynode *layer_node, bt_args *args)
{
    const bt_ynode *map;
    char what[BT_MAX_NAME + 64];
    snprintf(what, sizeof what, "args of layer '%s'", layer);
    BT_TRY(bt_ld_map(ldp, bt_ymap_get(layer_node, "args"), what, &map));
    for (int i = 0; i < bt_ymap_len(map); i++)
        BT_TRY(add_arg(ldp, layer, op, bt_ymap_key(map, i), bt_ymap_val(map, i), args));
    for (int k = 0; k < op->n_args; k++) {
        if (!op->args[k].required) continue;
        if (!bt_ymap_get(map, op->args[k].name))
            return bt_ld_error(ldp, map ? map : layer_node, BT_ERR_MODEL,
                               "layer '%s': op '%s' needs argument '%s'", layer, op->name,
                               op->args[k].name);
    }
    return BT_OK;
}

