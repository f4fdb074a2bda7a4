/* model/yaml_tree.c: YAML text -> bt_ynode tree, through libyaml's event API (the only place in
 * baton that includes <yaml.h>). Events are folded into the tree with an explicit stack, so the
 * walk is iterative and bounded: nesting deeper than BT_YAML_MAX_DEPTH, more than
 * BT_YAML_MAX_NODES nodes, anchors, aliases (the "billion laughs" attack needs them) and tags are
 * refused as soon as the parser reports them, before anything is expanded. Duplicate keys, which
 * libyaml accepts, are refused when their mapping closes. libyaml marks are 0-based; the tree's
 * positions are 1-based. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "core/error.h"
#include "core/strutil.h"
#include "model/yaml_tree.h"

typedef struct builder {
    const char *name;                        /* labels messages */
    int value_only;                          /* positions relative to a value, not a file */
    bt_ynode *stack[BT_YAML_MAX_DEPTH];      /* open collections, outermost first */
    int depth;
    bt_ynode *root;
    long n_nodes;
    int n_docs;
} builder;

/* ---- nodes ------------------------------------------------------------------------------------ */

bt_ynode *bt_ynode_new(bt_ykind kind, const char *text)
{
    bt_ynode *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->kind = kind;
    if (kind == BT_Y_SCALAR) {
        n->text = bt_strdup(text ? text : "");
        if (!n->text) {
            free(n);
            return NULL;
        }
        n->len = strlen(n->text);
        n->plain = 1;
    }
    return n;
}

void bt_ynode_free(bt_ynode *node)
{
    if (!node) return;
    for (int i = 0; i < node->n; i++) bt_ynode_free(node->kids[i]);
    free(node->kids);
    free(node->text);
    bt_yorigin_release(node->origin);
    free(node);
}

bt_status bt_ynode_append(bt_ynode *coll, bt_ynode *child)
{
    if (coll->n == coll->cap) {
        int cap = coll->cap ? coll->cap * 2 : 4;
        bt_ynode **kids = realloc(coll->kids, (size_t)cap * sizeof *kids);
        if (!kids) return bt_error(BT_ERR_NOMEM, "YAML tree: out of memory");
        coll->kids = kids;
        coll->cap = cap;
    }
    coll->kids[coll->n++] = child;
    return BT_OK;
}

bt_yorigin *bt_yorigin_new(const char *override)
{
    size_t len = strlen(override);
    char shown[BT_YORIGIN_SHOWN + 64];
    if (len > BT_YORIGIN_SHOWN)
        snprintf(shown, sizeof shown, "%.*s... (%zu bytes)", BT_YORIGIN_SHOWN, override, len);
    else
        snprintf(shown, sizeof shown, "%s", override);
    bt_yorigin *o = malloc(sizeof *o + strlen(shown) + 1);
    if (!o) return NULL;
    o->refs = 1;
    memcpy(o->text, shown, strlen(shown) + 1);
    return o;
}

void bt_yorigin_release(bt_yorigin *origin)
{
    if (origin && --origin->refs == 0) free(origin);
}

void bt_ynode_set_origin(bt_ynode *node, bt_yorigin *origin)
{
    if (node->origin != origin) {
        bt_yorigin_release(node->origin);
        origin->refs++;
        node->origin = origin;
    }
    node->line = node->col = 0;
    for (int i = 0; i < node->n; i++) bt_ynode_set_origin(node->kids[i], origin);
}

int bt_ymap_len(const bt_ynode *map)
{
    return (map && map->kind == BT_Y_MAP) ? map->n / 2 : 0;
}

bt_ynode *bt_ymap_key(const bt_ynode *map, int i) { return map->kids[2 * i]; }

bt_ynode *bt_ymap_val(const bt_ynode *map, int i) { return map->kids[2 * i + 1]; }

bt_ynode *bt_ymap_get_key(const bt_ynode *map, const char *key)
{
    size_t len = strlen(key);
    for (int i = 0; i < bt_ymap_len(map); i++) {
        bt_ynode *k = bt_ymap_key(map, i);
        if (k->len == len && memcmp(k->text, key, len) == 0) return k;
    }
    return NULL;
}

bt_ynode *bt_ymap_get(const bt_ynode *map, const char *key)
{
    size_t len = strlen(key);
    for (int i = 0; i < bt_ymap_len(map); i++) {
        bt_ynode *k = bt_ymap_key(map, i);
        if (k->len == len && memcmp(k->text, key, len) == 0) return bt_ymap_val(map, i);
    }
    return NULL;
}

const char *bt_ykind_name(bt_ykind kind)
{
    switch (kind) {
    case BT_Y_SCALAR: return "a scalar";
    case BT_Y_SEQ: return "a sequence";
    case BT_Y_MAP: return "a mapping";
    }
    return "?";
}

/* ---- building from events --------------------------------------------------------------------- */

static bt_status at_mark(const builder *b, yaml_mark_t mark, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static bt_status at_mark(const builder *b, yaml_mark_t mark, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (b->value_only)
        return bt_error(BT_ERR_MODEL, "%s: %s (at line %zu, column %zu of the value)", b->name, msg,
                        mark.line + 1, mark.column + 1);
    return bt_error(BT_ERR_MODEL, "%s:%zu:%zu: %s", b->name, mark.line + 1, mark.column + 1, msg);
}

/* Orders key nodes by text, then by position. */
static int key_cmp(const void *a, const void *b)
{
    const bt_ynode *x = *(bt_ynode *const *)a, *y = *(bt_ynode *const *)b;
    size_t n = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->text, y->text, n);
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    if (x->line != y->line) return x->line < y->line ? -1 : 1;
    return (x->col > y->col) - (x->col < y->col);
}

static int pos_before(const bt_ynode *x, const bt_ynode *y)
{
    return x->line < y->line || (x->line == y->line && x->col < y->col);
}

/* Refuses a mapping that holds a key twice, naming the earliest repeated occurrence. */
static bt_status check_duplicates(const builder *b, const bt_ynode *map)
{
    int n = map->n / 2;
    if (n < 2) return BT_OK;
    bt_ynode **keys = malloc((size_t)n * sizeof *keys);
    if (!keys) return bt_error(BT_ERR_NOMEM, "YAML tree: out of memory");
    for (int i = 0; i < n; i++) keys[i] = map->kids[2 * i];
    qsort(keys, (size_t)n, sizeof *keys, key_cmp);
    const bt_ynode *dup = NULL, *first = NULL;
    for (int i = 1; i < n; i++) {
        if (keys[i]->len != keys[i - 1]->len ||
            memcmp(keys[i]->text, keys[i - 1]->text, keys[i]->len) != 0)
            continue;
        if (!dup || pos_before(keys[i], dup)) {
            dup = keys[i];
            first = keys[i - 1];
        }
    }
    bt_status st = BT_OK;
    if (dup) {
        yaml_mark_t mark = {.line = (size_t)dup->line - 1, .column = (size_t)dup->col - 1};
        st = at_mark(b, mark, "duplicate key '%s' (first given at line %d, column %d)", dup->text,
                     first->line, first->col);
    }
    free(keys);
    return st;
}

/* Refuses anchors and tags on a node event. */
static bt_status check_properties(const builder *b, const yaml_event_t *ev, const yaml_char_t *anchor,
                                  const yaml_char_t *tag)
{
    if (anchor)
        return at_mark(b, ev->start_mark,
                       "anchor '&%s' is not supported (model files may not use anchors or aliases)",
                       (const char *)anchor);
    if (tag)
        return at_mark(b, ev->start_mark,
                       "tag '%s' is not supported (quote a value to make it a string)",
                       (const char *)tag);
    return BT_OK;
}

/* Hands a new node to its parent (or makes it the root); frees it on failure. */
static bt_status attach(builder *b, bt_ynode *node, yaml_mark_t mark)
{
    bt_status st = BT_OK;
    node->line = (int)mark.line + 1;
    node->col = (int)mark.column + 1;
    if (++b->n_nodes > BT_YAML_MAX_NODES) {
        st = at_mark(b, mark, "the document has more than %d nodes", BT_YAML_MAX_NODES);
        goto fail;
    }
    if (b->depth == 0) {
        b->root = node;
        return BT_OK;
    }
    bt_ynode *parent = b->stack[b->depth - 1];
    if (parent->kind == BT_Y_MAP && parent->n % 2 == 0 && node->kind != BT_Y_SCALAR) {
        st = at_mark(b, mark, "mapping keys must be scalars, not %s", bt_ykind_name(node->kind));
        goto fail;
    }
    BT_TRY_GOTO(st, bt_ynode_append(parent, node), fail);
    return BT_OK;
fail:
    bt_ynode_free(node);
    return st;
}

static bt_status on_scalar(builder *b, const yaml_event_t *ev)
{
    BT_TRY(check_properties(b, ev, ev->data.scalar.anchor, ev->data.scalar.tag));
    bt_ynode *n = calloc(1, sizeof *n);
    if (!n) return bt_error(BT_ERR_NOMEM, "YAML tree: out of memory");
    n->kind = BT_Y_SCALAR;
    n->len = ev->data.scalar.length;
    n->text = malloc(n->len + 1);
    if (!n->text) {
        free(n);
        return bt_error(BT_ERR_NOMEM, "YAML tree: out of memory");
    }
    memcpy(n->text, ev->data.scalar.value, n->len);
    n->text[n->len] = '\0';
    n->plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    return attach(b, n, ev->start_mark);
}

static bt_status on_collection_start(builder *b, const yaml_event_t *ev, bt_ykind kind)
{
    const yaml_char_t *anchor = kind == BT_Y_SEQ ? ev->data.sequence_start.anchor
                                                 : ev->data.mapping_start.anchor;
    const yaml_char_t *tag = kind == BT_Y_SEQ ? ev->data.sequence_start.tag
                                              : ev->data.mapping_start.tag;
    BT_TRY(check_properties(b, ev, anchor, tag));
    if (b->depth >= BT_YAML_MAX_DEPTH)
        return at_mark(b, ev->start_mark, "nesting is deeper than %d levels", BT_YAML_MAX_DEPTH);
    bt_ynode *n = bt_ynode_new(kind, NULL);
    if (!n) return bt_error(BT_ERR_NOMEM, "YAML tree: out of memory");
    BT_TRY(attach(b, n, ev->start_mark));
    b->stack[b->depth++] = n;
    return BT_OK;
}

static bt_status on_event(builder *b, const yaml_event_t *ev)
{
    switch (ev->type) {
    case YAML_DOCUMENT_START_EVENT:
        if (b->n_docs++ > 0)
            return at_mark(b, ev->start_mark,
                           "a second YAML document ('---'): a model file holds exactly one");
        return BT_OK;
    case YAML_SCALAR_EVENT: return on_scalar(b, ev);
    case YAML_SEQUENCE_START_EVENT: return on_collection_start(b, ev, BT_Y_SEQ);
    case YAML_MAPPING_START_EVENT: return on_collection_start(b, ev, BT_Y_MAP);
    case YAML_SEQUENCE_END_EVENT: b->depth--; return BT_OK;
    case YAML_MAPPING_END_EVENT: return check_duplicates(b, b->stack[--b->depth]);
    case YAML_ALIAS_EVENT:
        return at_mark(b, ev->start_mark,
                       "alias '*%s' is not supported (model files may not use anchors or aliases)",
                       (const char *)ev->data.alias.anchor);
    default: return BT_OK;
    }
}

/* The position of byte offset in text as libyaml marks count it (0-based line, and column in
 * characters: UTF-8 continuation bytes do not start one), for reader errors, which libyaml
 * reports as a byte offset only. */
static yaml_mark_t mark_at_offset(const char *text, size_t len, size_t offset)
{
    yaml_mark_t m = {0};
    const unsigned char *t = (const unsigned char *)text;
    if (offset > len) offset = len;
    for (size_t i = 0; i < offset; i++) {
        if (t[i] == '\n' || (t[i] == '\r' && (i + 1 >= len || t[i + 1] != '\n'))) {
            m.line++;
            m.column = 0;
        } else if ((t[i] & 0xc0) != 0x80 && t[i] != '\r') {
            m.column++;
        }
    }
    m.index = offset;
    return m;
}

static bt_status syntax_error(const builder *b, const yaml_parser_t *p, const char *text, size_t len)
{
    if (p->error == YAML_MEMORY_ERROR) return bt_error(BT_ERR_NOMEM, "%s: out of memory", b->name);
    const char *problem = p->problem ? p->problem : "unknown problem";
    if (p->error == YAML_READER_ERROR) {
        if (p->problem_value >= 0 && p->problem_value <= 0xff)
            return at_mark(b, mark_at_offset(text, len, p->problem_offset), "invalid text: %s (byte 0x%02x)",
                           problem, (unsigned)p->problem_value);
        return at_mark(b, mark_at_offset(text, len, p->problem_offset), "invalid text: %s", problem);
    }
    if (p->context)
        return at_mark(b, p->problem_mark, "YAML syntax error: %s (%s at line %zu, column %zu)",
                       problem, p->context, p->context_mark.line + 1, p->context_mark.column + 1);
    return at_mark(b, p->problem_mark, "YAML syntax error: %s", problem);
}

static bt_status parse(const char *text, size_t len, const char *name, int value_only,
                       bt_ynode **out)
{
    builder b = {.name = name ? name : "<string>", .value_only = value_only};
    yaml_parser_t parser;
    yaml_event_t ev;
    bt_status st = BT_OK;
    *out = NULL;
    if (len > BT_YAML_MAX_BYTES)
        return bt_error(BT_ERR_MODEL, "%s: %zu bytes is larger than the %d byte limit", b.name,
                        len, BT_YAML_MAX_BYTES);
    if (!yaml_parser_initialize(&parser)) return bt_error(BT_ERR_NOMEM, "%s: out of memory", b.name);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    for (;;) {
        if (!yaml_parser_parse(&parser, &ev)) {
            st = syntax_error(&b, &parser, text, len);
            goto fail;
        }
        yaml_event_type_t type = ev.type;
        st = on_event(&b, &ev);
        yaml_event_delete(&ev);
        if (st != BT_OK) goto fail;
        if (type == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&parser);
    *out = b.root;
    return BT_OK;
fail:
    yaml_parser_delete(&parser);
    bt_ynode_free(b.root);
    return st;
}

bt_status bt_yaml_parse(const char *text, size_t len, const char *name, bt_ynode **out)
{
    return parse(text, len, name, 0, out);
}

bt_status bt_yaml_parse_value(const char *text, size_t len, const char *label, bt_ynode **out)
{
    return parse(text, len, label, 1, out);
}
