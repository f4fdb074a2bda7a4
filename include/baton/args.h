/* baton/args.h: named arguments of a layer (`args: {out: 1024}` in YAML) built from C, and the
 * specification an op publishes for the arguments it accepts. A bt_args is a small owned list;
 * the graph copies what it is given, so the caller may destroy its bt_args right after use. */
#ifndef BATON_ARGS_H
#define BATON_ARGS_H

#include <stdint.h>

#include "baton/api.h"
#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bt_arg_type {
    BT_ARG_INT = 0,    /* integer */
    BT_ARG_FLOAT = 1,  /* real number; an integer literal is accepted */
    BT_ARG_BOOL = 2,
    BT_ARG_INTS = 3,   /* a list of up to BT_ARG_MAX_INTS integers; a single integer is accepted */
    BT_ARG_STRING = 4
} bt_arg_type;

#define BT_ARG_MAX_INTS 8

/* What an op accepts: name, type, whether it must be given, and the inclusive range a number (or
 * every element of a list) must fall in. min > max means no range check. */
typedef struct bt_arg_spec {
    const char *name;
    bt_arg_type type;
    int required;
    double min, max;
    const char *help;
} bt_arg_spec;

typedef struct bt_args bt_args;

/* Creates an empty argument list. The caller owns *out and frees it with bt_args_destroy. */
BT_API bt_status bt_args_create(bt_args **out);
/* Frees args; accepts NULL. */
BT_API void bt_args_destroy(bt_args *args);
/* Set an argument, replacing any earlier value of the same name. name is copied. */
BT_API bt_status bt_args_set_int(bt_args *args, const char *name, int64_t value);
BT_API bt_status bt_args_set_float(bt_args *args, const char *name, double value);
BT_API bt_status bt_args_set_bool(bt_args *args, const char *name, int value);
BT_API bt_status bt_args_set_ints(bt_args *args, const char *name, int n, const int64_t *values);
BT_API bt_status bt_args_set_string(bt_args *args, const char *name, const char *value);

#ifdef __cplusplus
}
#endif
#endif
