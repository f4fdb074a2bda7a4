/* model/loader.c: model file -> bt_model (graph + run configuration). The data flow is
 *   text --yaml_tree.c--> tree --overrides.c--> tree --this file--> bt_graph --sections.c--> config
 * This file reads the top level, inputs: and layers:. Layers are first scanned as a whole (names,
 * repeat: expansion, stage: pins) so that a `from:` naming a later layer is told apart from a
 * name that does not exist; then each expanded layer is checked at its own YAML position (op,
 * arguments against the op's specification, references) and handed to bt_graph_add_layer, whose
 * shape errors carry the layer's position through bt_layer_desc.loc.
 * Blocks: an entry with `layers:` (a list of layers) and `repeat: N` is a block repeated N times;
 * copy k of its layer `attn` is named `<block>.k.attn`, and a `from:` inside a copy that names a
 * layer of the block resolves within that copy (relative references count expanded layers, so
 * -5 may reach the block's input). Outside, the block's name means the last layer of its last
 * copy, as a repeat group's name does.
 * Invariants of a returned model: every string in it is malloc'ed and owned by it; the graph has
 * at least one layer; a model with train: ends in a loss. Nothing here prints or exits.
 * Layer arguments (checked against the op's specification) are model/layer_args.c's. Size: about
 * 700 lines, kept in one file because every helper reads the same private loader state (names,
 * expanded layers and blocks, positions; recomputation marks layers and repeat groups by name). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton/model.h"
#include "baton/op.h"
#include "core/error.h"
#include "graph/graph_internal.h"
#include "core/strutil.h"
#include "model/hf_config.h"
#include "model/hf_import.h"
#include "model/interp.h"
#include "model/layer_args.h"
#include "model/overrides.h"
#include "model/sections.h"
#include "model/yaml_tree.h"

#define BT_MAX_LAYERS 10000
#define BT_MAX_REPEAT 10000

typedef struct entry {           /* one item of layers: as written */
    const bt_ynode *node;
    const char *name;            /* points into the tree */
    int repeat;                  /* 0: no repeat: key; else the number of copies */
    int stage;                   /* -1: no stage: key */
    int first;                   /* index of its first expanded layer */
    const bt_ynode *block;       /* a block's `layers:` list, or NULL */
    int per;                     /* expanded layers per copy: 1, or the block's layer count */
} entry;

typedef struct loader {
    bt_ld ld;
    bt_graph *graph;
    int n_entries;
    entry *entries;
    int n_layers;                /* expanded */
    char **names;                /* [n_layers] expanded names, owned */
    int *owner;                  /* [n_layers] entry index of each expanded layer */
    const bt_ynode **lnode;      /* [n_layers] the mapping that describes each expanded layer */
    char **scope;                /* [n_layers] "<block>.k." inside a block copy, else NULL; owned */
    int pinned_stages;           /* 0: no stage: pins */
} loader;

static void loader_clear(loader *L)
{
    for (int i = 0; L->names && i < L->n_layers; i++) free(L->names[i]);
    free(L->names);
    free(L->owner);
    for (int i = 0; L->scope && i < L->n_layers; i++) free(L->scope[i]);
    free(L->scope);
    free(L->lnode);
    free(L->entries);
}

/* ---- files ------------------------------------------------------------------------------------ */

static bt_status read_file(const char *path, char **out, size_t *len)
{
    bt_status st = BT_OK;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return bt_error(BT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    for (;;) {
        if (n == cap) {
            if (cap > BT_YAML_MAX_BYTES) {
                st = bt_error(BT_ERR_MODEL, "%s: larger than the %d byte limit for model files",
                              path, BT_YAML_MAX_BYTES);
                goto fail;
            }
            cap = cap ? cap * 2 : 16384;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
                goto fail;
            }
            buf = b;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        st = bt_error(BT_ERR_IO, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return BT_OK;
fail:
    fclose(f);
    free(buf);
    return st;
}

/* ---- names ------------------------------------------------------------------------------------ */

static int valid_name(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > BT_MAX_NAME || s[0] == '.' || s[n - 1] == '.' || strstr(s, ".."))
        return 0;
    for (; *s; s++) {
        char c = *s;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.'))
            return 0;
    }
    return 1;
}

static bt_status check_name(const loader *L, const bt_ynode *node, const char *kind,
                            const char *name)
{
    if (valid_name(name)) return BT_OK;
    return bt_ld_error(&L->ld, node, BT_ERR_MODEL,
                       "%s name '%s' is not valid (1 to %d letters, digits, '_', '-' and '.'; "
                       "no leading, trailing or double '.')",
                       kind, name, BT_MAX_NAME);
}

static int find_input(const loader *L, const char *name)
{
    for (int i = 0; i < bt_graph_num_inputs(L->graph); i++) {
        bt_input_info info;
        if (bt_graph_input(L->graph, i, &info) == BT_OK && strcmp(info.name, name) == 0) return i;
    }
    return -1;
}

static int find_layer(const loader *L, const char *name)
{
    for (int i = 0; i < L->n_layers; i++)
        if (strcmp(L->names[i], name) == 0) return i;
    return -1;
}

/* Entry whose repeat group is called name, or -1. */
static int find_group(const loader *L, const char *name)
{
    for (int e = 0; e < L->n_entries; e++)
        if ((L->entries[e].repeat > 0 || L->entries[e].block) &&
            strcmp(L->entries[e].name, name) == 0)
            return e;
    return -1;
}

/* ---- inputs: ---------------------------------------------------------------------------------- */

static bt_status read_shape(const loader *L, const bt_ynode *node, const char *what, int *ndim,
                            int64_t *dims)
{
    if (!node || node->kind != BT_Y_SEQ)
        return bt_ld_error(&L->ld, node, BT_ERR_MODEL,
                           "expected a list of dimensions for %s (e.g. [784] or [1, 28, 28]; [] "
                           "for a scalar)",
                           what);
    if (node->n > BT_MAX_DIMS)
        return bt_ld_error(&L->ld, node, BT_ERR_MODEL, "%s has %d dimensions (at most %d)", what,
                           node->n, BT_MAX_DIMS);
    for (int i = 0; i < node->n; i++)
        BT_TRY(bt_ld_int(&L->ld, node->kids[i], what, 1, INT32_MAX, &dims[i]));
    *ndim = node->n;
    return BT_OK;
}

static bt_status read_inputs(loader *L, const bt_ynode *node)
{
    static const char *const keys[] = {"shape", "dtype", NULL};
    static const char *const dtypes[] = {"f32", "i32", NULL};
    static const bt_dtype dtype_values[] = {BT_F32, BT_I32};
    if (!node || node->kind != BT_Y_MAP || bt_ymap_len(node) == 0)
        return bt_ld_error(&L->ld, node, BT_ERR_MODEL,
                           "inputs must be a non-empty mapping of name: {shape: [...], dtype: "
                           "f32|i32}");
    for (int i = 0; i < bt_ymap_len(node); i++) {
        const bt_ynode *key = bt_ymap_key(node, i), *spec, *v;
        char what[BT_MAX_NAME + 64];
        BT_TRY(check_name(L, key, "input", key->text));
        snprintf(what, sizeof what, "input '%s'", key->text);
        BT_TRY(bt_ld_map(&L->ld, bt_ymap_val(node, i), what, &spec));
        BT_TRY(bt_ld_keys(&L->ld, spec, what, keys));
        BT_TRY(bt_ld_require(&L->ld, spec, "shape", what, bt_ymap_val(node, i), &v));
        int ndim = 0, dt = 0;
        int64_t dims[BT_MAX_DIMS];
        snprintf(what, sizeof what, "shape of input '%s'", key->text);
        BT_TRY(read_shape(L, v, what, &ndim, dims));
        if ((v = bt_ymap_get(spec, "dtype"))) {
            snprintf(what, sizeof what, "dtype of input '%s'", key->text);
            BT_TRY(bt_ld_enum(&L->ld, v, what, dtypes, &dt));
        }
        bt_status st = bt_graph_add_input(L->graph, key->text, ndim, dims, dtype_values[dt]);
        if (st != BT_OK) return bt_ld_error(&L->ld, key, st, "%s", bt_last_error());
    }
    return BT_OK;
}

/* ---- layers: first pass ----------------------------------------------------------------------- */

static const char *const layer_keys[] = {"name", "op", "args", "act", "from", "repeat", "stage",
                                         "tie", "layers", "recompute", NULL};
static const char *const block_keys[] = {"name", "repeat", "stage", "layers", NULL};
static const char *const block_layer_keys[] = {"name", "op", "args", "act", "from", "tie", NULL};

static bt_status add_expanded(loader *L, const bt_ynode *at, int entry_index, char *name,
                              const bt_ynode *lnode, char *scope)
{
    if (!name) {
        free(scope);
        return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    L->scope[L->n_layers] = scope; /* owned from here, also on failure */
    L->lnode[L->n_layers] = lnode;
    if (!name) return bt_error(BT_ERR_NOMEM, "out of memory");
    if (L->n_layers >= BT_MAX_LAYERS) {
        free(name);
        return bt_ld_error(&L->ld, at, BT_ERR_MODEL, "the model has more than %d layers",
                           BT_MAX_LAYERS);
    }
    int clash = find_input(L, name) >= 0 ? 1 : find_layer(L, name) >= 0 ? 2
                                             : find_group(L, name) >= 0 ? 3 : 0;
    if (clash) {
        bt_status st = bt_ld_error(&L->ld, at, BT_ERR_MODEL,
                                   "layer name '%s' is already used by %s", name,
                                   clash == 1 ? "an input" : clash == 2 ? "an earlier layer"
                                                                        : "a repeat group");
        free(name);
        return st;
    }
    L->names[L->n_layers] = name;
    L->owner[L->n_layers] = entry_index;
    L->n_layers++;
    return BT_OK;
}

/* Expands block entry e (its `layers:` list, `repeat` copies) into the name table. */
static bt_status expand_block(loader *L, int e)
{
    const bt_ld *ld = &L->ld;
    entry *en = &L->entries[e];
    const bt_ynode *list = en->block;
    char what[2 * BT_MAX_NAME + 64];
    if (list->kind != BT_Y_SEQ || list->n == 0)
        return bt_ld_error(ld, list, BT_ERR_MODEL, "block '%s': layers must be a non-empty list",
                           en->name);
    for (int k = 0; k < list->n; k++) {
        const bt_ynode *node = list->kids[k], *v;
        if (node->kind != BT_Y_MAP)
            return bt_ld_error(ld, node, BT_ERR_MODEL,
                               "block '%s': expected a mapping for layer #%d, got %s", en->name,
                               k + 1, bt_ykind_name(node->kind));
        snprintf(what, sizeof what, "layer #%d of block '%s'", k + 1, en->name);
        const char *sub;
        BT_TRY(bt_ld_require(ld, node, "name", what, node, &v));
        BT_TRY(bt_ld_string(ld, v, "name", &sub));
        BT_TRY(check_name(L, v, "layer", sub));
        for (int q = 0; q < k; q++) {
            const bt_ynode *other = bt_ymap_get(list->kids[q], "name");
            if (strcmp(other->text, sub) == 0)
                return bt_ld_error(ld, v, BT_ERR_MODEL,
                                   "block '%s': layer name '%s' appears twice", en->name, sub);
        }
        snprintf(what, sizeof what, "layer '%s' of block '%s'", sub, en->name);
        BT_TRY(bt_ld_keys(ld, node, what, block_layer_keys));
    }
    en->per = list->n;
    const int copies = en->repeat > 0 ? en->repeat : 1;
    for (int c = 0; c < copies; c++)
        for (int k = 0; k < list->n; k++) {
            const char *sub = bt_ymap_get(list->kids[k], "name")->text;
            BT_TRY(add_expanded(L, list->kids[k], e, bt_strfmt("%s.%d.%s", en->name, c, sub),
                                list->kids[k], bt_strfmt("%s.%d.", en->name, c)));
        }
    return BT_OK;
}

/* Reads name, repeat and stage of every entry and builds the expanded name table. */
static bt_status scan_layers(loader *L, const bt_ynode *layers)
{
    const bt_ld *ld = &L->ld;
    if (!layers || layers->kind != BT_Y_SEQ)
        return bt_ld_error(ld, layers, BT_ERR_MODEL, "layers must be a list of layers");
    if (layers->n == 0)
        return bt_ld_error(ld, layers, BT_ERR_MODEL, "layers is empty: a model needs a layer");
    if (layers->n > BT_MAX_LAYERS)
        return bt_ld_error(ld, layers, BT_ERR_MODEL, "the model has more than %d layers",
                           BT_MAX_LAYERS);
    L->entries = calloc((size_t)layers->n, sizeof *L->entries);
    L->names = calloc(BT_MAX_LAYERS, sizeof *L->names);
    L->owner = calloc(BT_MAX_LAYERS, sizeof *L->owner);
    L->lnode = calloc(BT_MAX_LAYERS, sizeof *L->lnode);
    L->scope = calloc(BT_MAX_LAYERS, sizeof *L->scope);
    if (!L->entries || !L->names || !L->owner || !L->lnode || !L->scope)
        return bt_error(BT_ERR_NOMEM, "out of memory");
    int n_pinned = 0;
    for (int e = 0; e < layers->n; e++) {
        const bt_ynode *node = layers->kids[e], *v;
        entry *en = &L->entries[e];
        char what[BT_MAX_NAME + 64];
        snprintf(what, sizeof what, "layer #%d", e + 1);
        if (node->kind != BT_Y_MAP)
            return bt_ld_error(ld, node, BT_ERR_MODEL,
                               "expected a mapping for %s ({name: ..., op: ...}), got %s", what,
                               bt_ykind_name(node->kind));
        en->node = node;
        en->stage = -1;
        L->n_entries = e + 1;
        BT_TRY(bt_ld_require(ld, node, "name", what, node, &v));
        BT_TRY(bt_ld_string(ld, v, "name", &en->name));
        BT_TRY(check_name(L, v, "layer", en->name));
        en->block = bt_ymap_get(node, "layers");
        en->per = 1;
        snprintf(what, sizeof what, "%s '%s'", en->block ? "block" : "layer", en->name);
        BT_TRY(bt_ld_keys(ld, node, what, en->block ? block_keys : layer_keys));
        if ((v = bt_ymap_get(node, "repeat"))) {
            snprintf(what, sizeof what, "repeat of layer '%s'", en->name);
            BT_TRY(bt_ld_int32(ld, v, what, 1, BT_MAX_REPEAT, &en->repeat));
        }
        if ((v = bt_ymap_get(node, "stage"))) {
            snprintf(what, sizeof what, "stage of layer '%s'", en->name);
            BT_TRY(bt_ld_int32(ld, v, what, 0, BT_MAX_STAGES - 1, &en->stage));
            n_pinned++;
        }
        en->first = L->n_layers;
        if (en->repeat == 0 && !en->block) {
            BT_TRY(add_expanded(L, node, e, bt_strdup(en->name), node, NULL));
        } else {
            if (find_input(L, en->name) >= 0 || find_layer(L, en->name) >= 0 ||
                find_group(L, en->name) != e)
                return bt_ld_error(ld, node, BT_ERR_MODEL, "layer name '%s' is already used",
                                   en->name);
            if (en->block)
                BT_TRY(expand_block(L, e));
            else
                for (int k = 0; k < en->repeat; k++)
                    BT_TRY(add_expanded(L, node, e, bt_strfmt("%s.%d", en->name, k), node, NULL));
        }
    }
    if (n_pinned == 0) return BT_OK;
    for (int e = 0; e < L->n_entries; e++) {
        const entry *en = &L->entries[e];
        int prev = e ? L->entries[e - 1].stage : 0;
        if (en->stage < 0)
            return bt_ld_error(ld, en->node, BT_ERR_MODEL,
                               "layer '%s' has no stage:, but other layers do (pin every layer "
                               "to a stage, or none)",
                               en->name);
        if (en->stage != prev && en->stage != prev + 1)
            return bt_ld_error(ld, bt_ymap_get(en->node, "stage"), BT_ERR_MODEL,
                               "layer '%s' is on stage %d after stage %d (stages start at 0 and "
                               "each layer stays on the previous layer's stage or the next one)",
                               en->name, en->stage, prev);
    }
    L->pinned_stages = L->entries[L->n_entries - 1].stage + 1;
    return BT_OK;
}

/* ---- layers: second pass ---------------------------------------------------------------------- */

static bt_status unknown_op(const loader *L, const bt_ynode *at, const char *layer,
                            const char *op)
{
    char list[1024];
    size_t used = 0;
    list[0] = '\0';
    for (int i = 0; i < bt_op_count() && used < sizeof list; i++)
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "",
                                 bt_op_at(i)->name);
    return bt_ld_error(&L->ld, at, BT_ERR_MODEL, "layer '%s': unknown op '%s' (known ops: %s)",
                       layer, op, list);
}

/* Resolves one `from:` reference of expanded layer i to a value name (owned by the loader). */
static bt_status resolve_ref(const loader *L, int i, const bt_ynode *ref, const char **out)
{
    const bt_ld *ld = &L->ld;
    const char *layer = L->names[i];
    if (ref->kind == BT_Y_SCALAR && bt_yscalar_type(ref) == BT_YS_INT) {
        int64_t k;
        char what[BT_MAX_NAME + 64];
        snprintf(what, sizeof what, "from of layer '%s'", layer);
        BT_TRY(bt_ld_int(ld, ref, what, -BT_MAX_LAYERS, BT_MAX_LAYERS, &k));
        if (k >= 0)
            return bt_ld_error(ld, ref, BT_ERR_MODEL,
                               "layer '%s': from: %lld is not a relative reference (-1 is the "
                               "previous layer, -2 the one before; or give a name)",
                               layer, (long long)k);
        if (i + k < 0)
            return bt_ld_error(ld, ref, BT_ERR_MODEL,
                               "layer '%s': from: %lld reaches back past the first layer (this "
                               "is layer %d, so -%d is the furthest back)",
                               layer, (long long)k, i + 1, i);
        *out = L->names[i + k];
        return BT_OK;
    }
    const char *name;
    char what[BT_MAX_NAME + 64];
    snprintf(what, sizeof what, "from of layer '%s' (a layer or input name, or -1, -2, ...)",
             layer);
    BT_TRY(bt_ld_string(ld, ref, what, &name));
    int j = -1, g = -1;
    if (L->scope[i]) { /* a sibling in the same block copy comes first */
        char *full = bt_strfmt("%s%s", L->scope[i], name);
        if (!full) return bt_error(BT_ERR_NOMEM, "out of memory");
        j = find_layer(L, full);
        free(full);
    }
    if (j < 0 && find_input(L, name) >= 0) {
        *out = name;
        return BT_OK;
    }
    if (j < 0) j = find_layer(L, name);
    if (j < 0) g = find_group(L, name);
    if (g >= 0) {
        const entry *ge = &L->entries[g];
        j = ge->first + (ge->repeat > 0 ? ge->repeat : 1) * ge->per - 1;
    }
    if (j < 0)
        return bt_ld_error(ld, ref, BT_ERR_MODEL,
                           "layer '%s': from: unknown name '%s' (not an input or a layer)", layer,
                           name);
    if (j == i || (g >= 0 && g == L->owner[i]))
        return bt_ld_error(ld, ref, BT_ERR_MODEL, "layer '%s': from: '%s' is this layer itself",
                           layer, name);
    if (j > i)
        return bt_ld_error(ld, ref, BT_ERR_MODEL,
                           "layer '%s': from: '%s' is a later layer (line %d); a layer reads "
                           "only inputs and earlier layers",
                           layer, name, L->entries[L->owner[j]].node->line);
    *out = L->names[j];
    return BT_OK;
}

static bt_status resolve_from(const loader *L, int i, const bt_ynode *from, const char **ins,
                              int *n_ins)
{
    if (!from) {
        if (i > 0) {
            ins[0] = L->names[i - 1];
        } else {
            bt_input_info first;
            BT_TRY(bt_graph_input(L->graph, 0, &first));
            ins[0] = first.name;
        }
        *n_ins = 1;
        return BT_OK;
    }
    if (from->kind != BT_Y_SEQ) {
        *n_ins = 1;
        return resolve_ref(L, i, from, &ins[0]);
    }
    if (from->n == 0 || from->n > BT_MAX_INPUTS)
        return bt_ld_error(&L->ld, from, BT_ERR_MODEL,
                           "layer '%s': from: lists %d inputs (1 to %d allowed)", L->names[i],
                           from->n, BT_MAX_INPUTS);
    for (int k = 0; k < from->n; k++) BT_TRY(resolve_ref(L, i, from->kids[k], &ins[k]));
    *n_ins = from->n;
    return BT_OK;
}

/* `tie: <layer>`: expanded layer i's weight is tied to that earlier layer's weight. */
static bt_status tie_layer(const loader *L, int i, const bt_ynode *v)
{
    const char *src;
    BT_TRY(resolve_ref(L, i, v, &src));
    char *pa = bt_strfmt("%s.weight", L->names[i]), *pb = bt_strfmt("%s.weight", src);
    bt_status st = pa && pb ? bt_graph_tie(L->graph, pa, pb) : bt_error(BT_ERR_NOMEM, "out of memory");
    free(pa);
    free(pb);
    if (st != BT_OK) return bt_ld_error(&L->ld, v, st, "layer '%s': %s", L->names[i], bt_last_error());
    return BT_OK;
}

/* Checks and adds expanded layer i (copy of its entry) to the graph. */
static bt_status add_layer(loader *L, int i)
{
    const bt_ld *ld = &L->ld;
    const entry *en = &L->entries[L->owner[i]];
    const char *name = L->names[i];
    const bt_ynode *v;
    bt_args *args = NULL;
    bt_status st = BT_OK;
    bt_layer_desc desc;
    const char *ins[BT_MAX_INPUTS];
    bt_layer_desc_init(&desc);
    desc.name = name;
    desc.stage = en->stage;
    const bt_ynode *node = L->lnode[i];
    desc.loc = (bt_src_loc){ld->file, node->line, node->col};

    char what[BT_MAX_NAME + 64];
    snprintf(what, sizeof what, "layer '%s'", name);
    BT_TRY(bt_ld_require(ld, node, "op", what, node, &v));
    snprintf(what, sizeof what, "op of layer '%s'", name);
    BT_TRY(bt_ld_string(ld, v, what, &desc.op));
    const bt_op_def *op = bt_op_find(desc.op);
    if (!op) return unknown_op(L, v, name, desc.op);
    if ((v = bt_ymap_get(node, "act"))) {
        snprintf(what, sizeof what, "act of layer '%s'", name);
        BT_TRY(bt_ld_string(ld, v, what, &desc.act));
    }
    BT_TRY(resolve_from(L, i, bt_ymap_get(node, "from"), ins, &desc.n_inputs));
    desc.inputs = ins;
    BT_TRY(bt_args_create(&args));
    BT_TRY_GOTO(st, bt_ld_layer_args(&L->ld, name, op, node, args), done);
    desc.args = args;
    st = bt_graph_add_layer(L->graph, &desc);
    if (st == BT_OK && (v = bt_ymap_get(node, "tie"))) st = tie_layer(L, i, v);
    if (st == BT_OK && en->block && (i - en->first) % en->per != 0) bt_graph_join_previous(L->graph);
done:
    bt_args_destroy(args);
    return st;
}

/* ---- recomputation ------------------------------------------------------------------------------ */

/* Marks the layers named by a train.recompute.layers entry: a layer, or a repeat group (all its
 * copies). */
static bt_status mark_recompute_name(loader *L, const bt_ynode *v)
{
    const char *name;
    BT_TRY(bt_ld_string(&L->ld, v, "train.recompute.layers entry", &name));
    int layer = find_layer(L, name), group = find_group(L, name);
    if (layer >= 0) return bt_graph_set_recompute(L->graph, layer, 1);
    if (group < 0)
        return bt_ld_error(&L->ld, v, BT_ERR_MODEL, "train.recompute.layers names '%s', which is no layer",
                           name);
    for (int i = 0; i < L->n_layers; i++)
        if (L->owner[i] == group) BT_TRY(bt_graph_set_recompute(L->graph, i, 1));
    return BT_OK;
}

/* Activation recomputation (docs/recompute.md): a layer's `recompute: true`, and train.recompute:
 * none | stage (every layer) | {layers: [name, ...]}. Explicit none beside a layer marked true is
 * a contradiction, reported. */
static bt_status read_recompute(loader *L, const bt_ynode *train)
{
    const bt_ld *ld = &L->ld;
    const bt_ynode *per_layer_true = NULL;
    for (int i = 0; i < L->n_layers; i++) {
        const bt_ynode *v = bt_ymap_get(L->entries[L->owner[i]].node, "recompute");
        if (!v) continue;
        int on;
        char what[BT_MAX_NAME + 64];
        snprintf(what, sizeof what, "recompute of layer '%s'", L->entries[L->owner[i]].name);
        BT_TRY(bt_ld_bool(ld, v, what, &on));
        BT_TRY(bt_graph_set_recompute(L->graph, i, on));
        if (on && !per_layer_true) per_layer_true = v;
    }
    const bt_ynode *node = train && train->kind == BT_Y_MAP ? bt_ymap_get(train, "recompute") : NULL;
    if (!node) return BT_OK;
    if (node->kind == BT_Y_SCALAR) {
        static const char *const kinds[] = {"none", "stage", NULL};
        int k;
        BT_TRY(bt_ld_enum(ld, node, "train.recompute", kinds, &k));
        if (k == 0 && per_layer_true)
            return bt_ld_error(ld, per_layer_true, BT_ERR_MODEL,
                               "this layer says recompute: true, but train.recompute is none");
        if (k == 1) BT_TRY(bt_graph_set_recompute(L->graph, -1, 1));
        return BT_OK;
    }
    static const char *const keys[] = {"layers", NULL};
    const bt_ynode *list = node->kind == BT_Y_MAP ? bt_ymap_get(node, "layers") : NULL;
    if (node->kind != BT_Y_MAP || !list || list->kind != BT_Y_SEQ || list->n == 0)
        return bt_ld_error(ld, node, BT_ERR_MODEL,
                           "train.recompute must be none, stage or {layers: [name, ...]} (a non-empty list)");
    BT_TRY(bt_ld_keys(ld, node, "train.recompute", keys));
    for (int k = 0; k < list->n; k++) BT_TRY(mark_recompute_name(L, list->kids[k]));
    return BT_OK;
}

/* ---- the model -------------------------------------------------------------------------------- */

static const char *const top_keys[] = {"format", "name", "dtype", "inputs", "layers", "parallel",
                                       "train", "data", NULL};

/* The model's default name: the file name without directories and extension. */
static char *default_name(const char *path)
{
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t n = strlen(base);
    const char *dot = strrchr(base, '.');
    if (dot && dot != base) n = (size_t)(dot - base);
    return bt_strfmt("%.*s", (int)n, base);
}

static bt_status interpret(loader *L, const bt_ynode *root, bt_model *m)
{
    const bt_ld *ld = &L->ld;
    const bt_ynode *v;
    if (!root)
        return bt_error(BT_ERR_MODEL, "%s: the file is empty (a model needs format:, inputs: and "
                                      "layers:)",
                        ld->file);
    if (root->kind != BT_Y_MAP)
        return bt_ld_error(ld, root, BT_ERR_MODEL, "the top level must be a mapping, not %s",
                           bt_ykind_name(root->kind));
    BT_TRY(bt_ld_keys(ld, root, "the model", top_keys));
    BT_TRY(bt_ld_require(ld, root, "format", "the model (format: 1 comes first)", root, &v));
    int format;
    BT_TRY(bt_ld_int32(ld, v, "format", INT32_MIN, INT32_MAX, &format));
    if (format != 1)
        return bt_ld_error(ld, v, BT_ERR_MODEL,
                           "unsupported format %d (this version of baton reads format 1)", format);
    if ((v = bt_ymap_get(root, "name"))) {
        const char *s;
        BT_TRY(bt_ld_string(ld, v, "name", &s));
        m->name = bt_strdup(s);
    } else {
        m->name = default_name(ld->file);
    }
    if (!m->name) return bt_error(BT_ERR_NOMEM, "out of memory");
    m->dtype = BT_F32;
    if ((v = bt_ymap_get(root, "dtype"))) {
        static const char *const dtypes[] = {"f32", "f64", NULL};
        int k;
        BT_TRY(bt_ld_enum(ld, v, "dtype", dtypes, &k));
        m->dtype = k ? BT_F64 : BT_F32;
    }

    BT_TRY(bt_graph_create(&m->graph));
    L->graph = m->graph;
    BT_TRY(bt_ld_require(ld, root, "inputs", "the model", root, &v));
    BT_TRY(read_inputs(L, v));
    BT_TRY(bt_ld_require(ld, root, "layers", "the model", root, &v));
    BT_TRY(scan_layers(L, v));
    for (int i = 0; i < L->n_layers; i++) BT_TRY(add_layer(L, i));

    BT_TRY(bt_ld_train(ld, bt_ymap_get_key(root, "train"), bt_ymap_get(root, "train"), m->graph,
                       &m->train));
    BT_TRY(read_recompute(L, bt_ymap_get(root, "train")));
    BT_TRY(bt_ld_parallel(ld, bt_ymap_get(root, "parallel"), m->graph, L->pinned_stages,
                          &m->train, &m->parallel));
    BT_TRY(bt_ld_data(ld, bt_ymap_get(root, "data"), m->graph, &m->data));
    if (m->dtype == BT_F64 && m->train.precision != BT_F32)
        return bt_ld_error(ld, bt_ymap_get(root, "dtype"), BT_ERR_MODEL,
                           "dtype: f64 computes in float64; train.precision %s needs dtype: f32 (f32 master "
                           "weights)", bt_dtype_name(m->train.precision));
    return BT_OK;
}

bt_status bt_model_load_string(const char *text, size_t len, const char *name,
                               const char *const *overrides, int n_overrides, bt_model **out)
{
    bt_status st = BT_OK;
    bt_ynode *root = NULL;
    bt_model *m = NULL;
    loader L;
    memset(&L, 0, sizeof L);
    if (!out || (!text && len > 0) || n_overrides < 0 || (n_overrides > 0 && !overrides))
        return bt_error(BT_ERR_INVALID_ARG, "bt_model_load_string: invalid arguments");
    *out = NULL;
    if (!name) name = "<string>";
    m = calloc(1, sizeof *m);
    if (!m) return bt_error(BT_ERR_NOMEM, "out of memory");
    bt_parallel_config_init(&m->parallel);
    bt_train_config_init(&m->train);
    bt_data_config_init(&m->data);
    m->parallel.devices = bt_strdup("auto");
    m->path = bt_strdup(name);
    if (!m->parallel.devices || !m->path) {
        st = bt_error(BT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    L.ld.file = m->path;
    BT_TRY_GOTO(st, bt_yaml_parse(text ? text : "", len, m->path, &root), fail);
    for (int i = 0; i < n_overrides; i++)
        BT_TRY_GOTO(st, bt_yaml_apply_override(m->path, &root, overrides[i]), fail);
    BT_TRY_GOTO(st, interpret(&L, root, m), fail);
    loader_clear(&L);
    bt_ynode_free(root);
    *out = m;
    return BT_OK;
fail:
    loader_clear(&L);
    bt_ynode_free(root);
    bt_model_destroy(m);
    return st;
}

/* A Hugging Face directory: its config read strictly, then the model file baton import writes. */
static bt_status load_hf(const char *dir, const char *const *overrides, int n_overrides, bt_model **out)
{
    bt_hf_config c;
    char *text = NULL;
    BT_TRY(bt_hf_config_read(dir, &c));
    BT_TRY(bt_hf_model_yaml(&c, dir, bt_hf_default_context(&c), &text));
    bt_status st = bt_model_load_string(text, strlen(text), dir, overrides, n_overrides, out);
    free(text);
    if (st == BT_OK && !((*out)->hf_dir = strdup(dir))) {
        bt_model_destroy(*out);
        *out = NULL;
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", dir);
    }
    return st;
}

bt_status bt_model_load(const char *path, const char *const *overrides, int n_overrides,
                        bt_model **out)
{
    char *text = NULL;
    size_t len = 0;
    if (!path || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_model_load: NULL argument");
    *out = NULL;
    if (bt_hf_is_dir(path)) return load_hf(path, overrides, n_overrides, out);
    BT_TRY(read_file(path, &text, &len));
    bt_status st = bt_model_load_string(text, len, path, overrides, n_overrides, out);
    free(text);
    return st;
}

static void free_source(bt_data_source *src)
{
    free((char *)src->images);
    free((char *)src->labels);
    for (int i = 0; i < src->n_inputs; i++) {
        free((char *)src->input_names[i]);
        free((char *)src->input_files[i]);
    }
    free((char *)src->path);
}

void bt_model_destroy(bt_model *m)
{
    if (!m) return;
    free((char *)m->name);
    free((char *)m->path);
    free((char *)m->hf_dir);
    bt_graph_destroy(m->graph);
    free((char *)m->parallel.devices);
    free((char *)m->parallel.layout);
    free((char *)m->train.checkpoint_dir);
    free((char *)m->train.tensorboard);
    free_source(&m->data.train);
    free_source(&m->data.eval);
    free(m);
}
