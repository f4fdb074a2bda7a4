/* model/interp.h: reading a bt_ynode tree as typed model settings. Scalars are typed the way YAML
 * 1.2's core schema does for plain (unquoted) text: null (~, null, empty), booleans (true, false),
 * integers (123, -4, 0x1f, 0o17), floats (1.5, 1e-3, .5, .inf, .nan); anything else, and every
 * quoted scalar, is a string. Each getter checks a node and reports a failure as
 * "file:line:col: message" (or "file: override 'k=v': message" for nodes an override created),
 * naming the setting by its dotted path ("train.optimizer.lr"). Used by loader.c and sections.c. */
#ifndef BT_MODEL_INTERP_H
#define BT_MODEL_INTERP_H

#include <stdint.h>

#include "baton/status.h"
#include "model/yaml_tree.h"

typedef struct bt_ld {
    const char *file;            /* the model file's path (or name), prefixes every message */
} bt_ld;

typedef enum bt_ystype {
    BT_YS_NULL = 0,
    BT_YS_BOOL = 1,
    BT_YS_INT = 2,
    BT_YS_FLOAT = 3,
    BT_YS_STRING = 4
} bt_ystype;

/* The type of a scalar node (see above). */
bt_ystype bt_yscalar_type(const bt_ynode *scalar);
/* 1 for a node that is absent or a null scalar. */
int bt_ynode_is_null(const bt_ynode *node);

/* Sets the error "<position of at>: <message>" and returns status. at may be NULL (no position). */
bt_status bt_ld_error(const bt_ld *ld, const bt_ynode *at, bt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 4, 5)))
#endif
    ;

/* Typed getters. `what` names the setting in messages. Ranges are inclusive. */
bt_status bt_ld_int(const bt_ld *ld, const bt_ynode *node, const char *what, int64_t min,
                    int64_t max, int64_t *out);
bt_status bt_ld_int32(const bt_ld *ld, const bt_ynode *node, const char *what, int min, int max,
                      int *out);
/* A finite number (integers accepted) in [min, max]; min_open/max_open make a bound exclusive. */
bt_status bt_ld_float(const bt_ld *ld, const bt_ynode *node, const char *what, double min,
                      int min_open, double max, int max_open, double *out);
bt_status bt_ld_bool(const bt_ld *ld, const bt_ynode *node, const char *what, int *out);
/* Any non-null scalar as text without NUL bytes or control characters (below 0x20, 0x7f: a
 * model's strings reach terminals and file names); *out points into the node. */
bt_status bt_ld_string(const bt_ld *ld, const bt_ynode *node, const char *what, const char **out);
/* A string that is one of names (NULL-terminated list); *out is its index. */
bt_status bt_ld_enum(const bt_ld *ld, const bt_ynode *node, const char *what,
                     const char *const *names, int *out);
/* A mapping, or an absent/null node which reads as an empty mapping (*out = NULL). */
bt_status bt_ld_map(const bt_ld *ld, const bt_ynode *node, const char *what,
                    const bt_ynode **out);
/* Refuses any key of map not in allowed (NULL-terminated), listing the accepted ones. */
bt_status bt_ld_keys(const bt_ld *ld, const bt_ynode *map, const char *what,
                     const char *const *allowed);
/* Value of a key that must be present; `at` positions the error when it is missing. */
bt_status bt_ld_require(const bt_ld *ld, const bt_ynode *map, const char *key, const char *what,
                        const bt_ynode *at, const bt_ynode **out);

/* Short description of a node for messages: "'abc'", "a sequence", "a mapping", "null". */
void bt_ld_describe(const bt_ynode *node, char *buf, size_t size);

#endif
