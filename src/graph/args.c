/* graph/args.c: named layer arguments (bt_args). A small array of owned values; setting a name
 * that exists replaces it. The graph deep-copies the bt_args a caller passes. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "graph/graph_internal.h"

const char *bt_arg_type_name(bt_arg_type t)
{
    switch (t) {
    case BT_ARG_INT: return "an integer";
    case BT_ARG_FLOAT: return "a number";
    case BT_ARG_BOOL: return "true or false";
    case BT_ARG_INTS: return "an integer or a list of integers";
    case BT_ARG_STRING: return "a string";
    }
    return "?";
}

bt_status bt_args_create(bt_args **out)
{
    if (!out) return bt_error(BT_ERR_INVALID_ARG, "bt_args_create: out is NULL");
    *out = calloc(1, sizeof **out);
    if (!*out) return bt_error(BT_ERR_NOMEM, "bt_args_create: out of memory");
    return BT_OK;
}

static void arg_value_free(bt_arg_value *v)
{
    free(v->name);
    free(v->s);
}

void bt_args_clear(bt_args *args)
{
    if (!args) return;
    for (int i = 0; i < args->n; i++) arg_value_free(&args->v[i]);
    free(args->v);
    memset(args, 0, sizeof *args);
}

void bt_args_destroy(bt_args *args)
{
    bt_args_clear(args);
    free(args);
}

const bt_arg_value *bt_args_get(const bt_args *args, const char *name)
{
    if (!args) return NULL;
    for (int i = 0; i < args->n; i++)
        if (strcmp(args->v[i].name, name) == 0) return &args->v[i];
    return NULL;
}

/* Returns the slot for name (new or existing, emptied), or NULL on allocation failure. */
static bt_arg_value *args_slot(bt_args *args, const char *name)
{
    for (int i = 0; i < args->n; i++) {
        if (strcmp(args->v[i].name, name) == 0) {
            free(args->v[i].s);
            args->v[i].s = NULL;
            return &args->v[i];
        }
    }
    if (args->n == args->cap) {
        int cap = args->cap ? args->cap * 2 : 4;
        bt_arg_value *v = realloc(args->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        args->v = v;
        args->cap = cap;
    }
    bt_arg_value *slot = &args->v[args->n];
    memset(slot, 0, sizeof *slot);
    slot->name = bt_strdup(name);
    if (!slot->name) return NULL;
    args->n++;
    return slot;
}

static bt_status args_check(bt_args *args, const char *name)
{
    if (!args || !name || !*name)
        return bt_error(BT_ERR_INVALID_ARG, "bt_args_set: NULL args or empty name");
    return BT_OK;
}

bt_status bt_args_set_int(bt_args *args, const char *name, int64_t value)
{
    BT_TRY(args_check(args, name));
    bt_arg_value *v = args_slot(args, name);
    if (!v) return bt_error(BT_ERR_NOMEM, "bt_args_set_int: out of memory");
    v->type = BT_ARG_INT;
    v->i = value;
    v->f = (double)value;
    v->n = 1;
    v->ints[0] = value;
    return BT_OK;
}

bt_status bt_args_set_float(bt_args *args, const char *name, double value)
{
    BT_TRY(args_check(args, name));
    bt_arg_value *v = args_slot(args, name);
    if (!v) return bt_error(BT_ERR_NOMEM, "bt_args_set_float: out of memory");
    v->type = BT_ARG_FLOAT;
    v->f = value;
    return BT_OK;
}

bt_status bt_args_set_bool(bt_args *args, const char *name, int value)
{
    BT_TRY(args_check(args, name));
    bt_arg_value *v = args_slot(args, name);
    if (!v) return bt_error(BT_ERR_NOMEM, "bt_args_set_bool: out of memory");
    v->type = BT_ARG_BOOL;
    v->i = value != 0;
    return BT_OK;
}

bt_status bt_args_set_ints(bt_args *args, const char *name, int n, const int64_t *values)
{
    BT_TRY(args_check(args, name));
    if (n < 1 || n > BT_ARG_MAX_INTS || !values)
        return bt_error(BT_ERR_INVALID_ARG, "argument '%s': a list needs 1 to %d integers, got %d",
                        name, BT_ARG_MAX_INTS, n);
    bt_arg_value *v = args_slot(args, name);
    if (!v) return bt_error(BT_ERR_NOMEM, "bt_args_set_ints: out of memory");
    v->type = BT_ARG_INTS;
    v->n = n;
    memcpy(v->ints, values, (size_t)n * sizeof *values);
    v->i = values[0];
    return BT_OK;
}

bt_status bt_args_set_string(bt_args *args, const char *name, const char *value)
{
    BT_TRY(args_check(args, name));
    bt_arg_value *v = args_slot(args, name);
    if (!v) return bt_error(BT_ERR_NOMEM, "bt_args_set_string: out of memory");
    v->type = BT_ARG_STRING;
    v->s = bt_strdup(value ? value : "");
    if (!v->s) return bt_error(BT_ERR_NOMEM, "bt_args_set_string: out of memory");
    return BT_OK;
}

bt_status bt_args_copy(bt_args *dst, const bt_args *src)
{
    if (!src) return BT_OK;
    for (int i = 0; i < src->n; i++) {
        const bt_arg_value *s = &src->v[i];
        bt_arg_value *d = args_slot(dst, s->name);
        if (!d) return bt_error(BT_ERR_NOMEM, "copying layer arguments: out of memory");
        char *name = d->name;
        *d = *s;
        d->name = name;
        d->s = NULL;
        if (s->s && !(d->s = bt_strdup(s->s)))
            return bt_error(BT_ERR_NOMEM, "copying layer arguments: out of memory");
    }
    return BT_OK;
}
