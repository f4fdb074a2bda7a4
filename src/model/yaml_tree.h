/* model/yaml_tree.h: a YAML document as a small owned tree with 1-based source positions, the
 * first step of loading a model (text -> tree -> overrides -> interpretation -> graph + config).
 * yaml_tree.c is the only file in baton that includes <yaml.h>; everything after it reads this
 * tree. Invariants of a parsed tree: at most BT_YAML_MAX_DEPTH levels of collections and
 * BT_YAML_MAX_NODES nodes; no anchors, aliases or tags (rejected, so nothing is shared and a walk
 * never expands anything); every mapping key is a scalar and no mapping has a key twice.
 * Scalars keep their text and whether they were plain (unquoted); typing them (int, float, bool,
 * null) is the reader's business (model/interp.h). */
#ifndef BT_MODEL_YAML_TREE_H
#define BT_MODEL_YAML_TREE_H

#include <stddef.h>

#include "baton/status.h"

#define BT_YAML_MAX_DEPTH 64
#define BT_YAML_MAX_NODES (1 << 20)
#define BT_YAML_MAX_BYTES (16 << 20)

typedef enum bt_ykind { BT_Y_SCALAR = 0, BT_Y_SEQ = 1, BT_Y_MAP = 2 } bt_ykind;

/* The override that created nodes, shared by all of them (one counted copy per override, so
 * an override's cost stays linear in its length): text is what messages quote, the override
 * itself, or its first BT_YORIGIN_SHOWN bytes and its length when it is longer. */
#define BT_YORIGIN_SHOWN 80
typedef struct bt_yorigin {
    int refs;
    char text[];
} bt_yorigin;

typedef struct bt_ynode {
    bt_ykind kind;
    int line, col;           /* 1-based; 0 for nodes an override created */
    bt_yorigin *origin;      /* the override ("a.b=1") for nodes it created, else NULL */
    char *text;              /* scalar: NUL-terminated text (may hold NULs; see len) */
    size_t len;
    int plain;               /* scalar: written without quotes or block style */
    int n, cap;              /* seq: n items; map: n/2 pairs stored key, value, key, value... */
    struct bt_ynode **kids;
} bt_ynode;

/* Parses text (a whole YAML stream holding at most one document) into *out; an empty stream
 * gives *out == NULL. name labels messages: "name:line:col: ...". Errors: BT_ERR_MODEL. */
bt_status bt_yaml_parse(const char *text, size_t len, const char *name, bt_ynode **out);
/* The same for a value outside any file (an override's "=..." part): messages read
 * "label: message (at line L, column C of the value)". */
bt_status bt_yaml_parse_value(const char *text, size_t len, const char *label, bt_ynode **out);
/* Frees a node and its subtree; accepts NULL. */
void bt_ynode_free(bt_ynode *node);

/* A fresh node of kind (scalar text copied), positioned nowhere; NULL when out of memory. */
bt_ynode *bt_ynode_new(bt_ykind kind, const char *text);
/* Appends child to a sequence, or a key/value pair to a mapping (takes ownership on success). */
bt_status bt_ynode_append(bt_ynode *coll, bt_ynode *child);
/* A new origin for the override text (refs 1); NULL when out of memory. */
bt_yorigin *bt_yorigin_new(const char *override);
/* Drops one reference; frees at zero. Accepts NULL. */
void bt_yorigin_release(bt_yorigin *origin);
/* Marks node and its subtree as created by origin (each node takes a reference). Never fails. */
void bt_ynode_set_origin(bt_ynode *node, bt_yorigin *origin);

/* Mapping access: number of pairs, i-th key / value, value of key (NULL if absent or not a map). */
int bt_ymap_len(const bt_ynode *map);
bt_ynode *bt_ymap_key(const bt_ynode *map, int i);
bt_ynode *bt_ymap_val(const bt_ynode *map, int i);
bt_ynode *bt_ymap_get(const bt_ynode *map, const char *key);
/* Key node of key (for positions), or NULL. */
bt_ynode *bt_ymap_get_key(const bt_ynode *map, const char *key);

/* "a mapping", "a sequence", "a scalar": for messages. */
const char *bt_ykind_name(bt_ykind kind);

#endif
