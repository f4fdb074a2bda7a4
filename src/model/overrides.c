/* model/overrides.c: applying "a.b.c=value" to a document tree (see overrides.h). The walk never
 * changes what it does not replace: nodes from the file keep their positions, and everything an
 * override adds (keys, intermediate mappings, the value) is marked with the override's origin,
 * one shared, counted copy per override (a copy per node made an 80 KB override cost gigabytes).
 * Work and memory are linear in the override's length; the key has at most BT_YAML_MAX_DEPTH
 * parts, so what an override builds obeys the depth limit of a parsed file. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "model/interp.h"
#include "model/overrides.h"

static bt_status ov_error(const char *file, const bt_yorigin *ov, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static bt_status ov_error(const char *file, const bt_yorigin *ov, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bt_error(BT_ERR_MODEL, "%s: override '%s': %s", file, ov->text, msg);
}

/* A new node of kind marked with the override; NULL when out of memory. */
static bt_ynode *made_node(bt_ykind kind, const char *text, bt_yorigin *ov)
{
    bt_ynode *n = bt_ynode_new(kind, text);
    if (n) bt_ynode_set_origin(n, ov);
    return n;
}

/* Parses the value text; an empty value is null. */
static bt_status parse_value(const char *file, bt_yorigin *ov, const char *text, bt_ynode **out)
{
    bt_status st = BT_OK;
    char *label = bt_strfmt("%s: override '%s'", file, ov->text);
    if (!label) return bt_error(BT_ERR_NOMEM, "override: out of memory");
    BT_TRY_GOTO(st, bt_yaml_parse_value(text, strlen(text), label, out), done);
    if (!*out && !(*out = bt_ynode_new(BT_Y_SCALAR, ""))) {
        st = bt_error(BT_ERR_NOMEM, "override: out of memory");
        goto done;
    }
    bt_ynode_set_origin(*out, ov);
done:
    free(label);
    return st;
}

/* Index of the item of seq that part names (a number or a `name:` value), or -1. */
static int seq_find(const bt_ynode *seq, const char *part)
{
    int digits = *part != '\0';
    for (const char *p = part; *p; p++) digits = digits && *p >= '0' && *p <= '9';
    if (digits) {
        long i = strtol(part, NULL, 10);
        return (strlen(part) < 9 && i < seq->n) ? (int)i : -1;
    }
    for (int i = 0; i < seq->n; i++) {
        const bt_ynode *name = bt_ymap_get(seq->kids[i], "name");
        if (name && name->kind == BT_Y_SCALAR && strcmp(name->text, part) == 0) return i;
    }
    return -1;
}

/* Index (into kids) of the value slot for part in collection cur (reached through the first
 * walked_len characters of key), creating a mapping key when missing; -1 with an error set when
 * part cannot be addressed. */
static int child_slot(const char *file, bt_yorigin *ov, bt_ynode *cur, const char *part,
                      const char *key, int walked_len)
{
    if (cur->kind == BT_Y_SEQ) {
        int i = seq_find(cur, part);
        if (i < 0)
            ov_error(file, ov, "'%.*s' has no item '%s' (give an index or a layer name)",
                     walked_len, key, part);
        return i;
    }
    if (cur->kind != BT_Y_MAP) {
        ov_error(file, ov, "'%.*s' is a scalar, not a mapping", walked_len, key);
        return -1;
    }
    for (int i = 0; i < bt_ymap_len(cur); i++)
        if (strcmp(bt_ymap_key(cur, i)->text, part) == 0) return 2 * i + 1;
    bt_ynode *knode = made_node(BT_Y_SCALAR, part, ov);
    bt_ynode *val = made_node(BT_Y_SCALAR, "", ov);
    if (!knode || !val || bt_ynode_append(cur, knode) != BT_OK) {
        bt_ynode_free(knode);
        bt_ynode_free(val);
        bt_error(BT_ERR_NOMEM, "override: out of memory");
        return -1;
    }
    if (bt_ynode_append(cur, val) != BT_OK) {
        cur->n--;
        bt_ynode_free(knode);
        bt_ynode_free(val);
        bt_error(BT_ERR_NOMEM, "override: out of memory");
        return -1;
    }
    return cur->n - 1;
}

bt_status bt_yaml_apply_override(const char *file, bt_ynode **root, const char *override)
{
    bt_status st = BT_OK;
    bt_ynode *value = NULL;
    char *key = NULL;
    bt_yorigin *ov = bt_yorigin_new(override ? override : "");
    if (!ov) return bt_error(BT_ERR_NOMEM, "override: out of memory");
    const char *eq = override ? strchr(override, '=') : NULL;
    if (!eq || eq == override) {
        st = ov_error(file, ov, "expected key=value");
        goto done;
    }
    size_t key_len = (size_t)(eq - override), parts = 1;
    for (size_t i = 0; i < key_len; i++) parts += override[i] == '.';
    if (parts > BT_YAML_MAX_DEPTH) {
        st = ov_error(file, ov, "the key has %zu parts; at most %d (the nesting limit of a model file)", parts,
                      BT_YAML_MAX_DEPTH);
        goto done;
    }
    key = malloc(key_len + 1);
    if (!key) {
        st = bt_error(BT_ERR_NOMEM, "override: out of memory");
        goto done;
    }
    memcpy(key, override, key_len);
    key[key_len] = '\0';
    if (key[0] == '.' || key[key_len - 1] == '.' || strstr(key, "..")) {
        st = ov_error(file, ov, "empty part in the key '%.*s'", BT_YORIGIN_SHOWN, key);
        goto done;
    }
    BT_TRY_GOTO(st, parse_value(file, ov, eq + 1, &value), done);
    if (!*root && !(*root = made_node(BT_Y_MAP, NULL, ov))) {
        st = bt_error(BT_ERR_NOMEM, "override: out of memory");
        goto done;
    }
    if ((*root)->kind != BT_Y_MAP) {
        st = ov_error(file, ov, "the document is not a mapping");
        goto done;
    }
    bt_ynode *cur = *root;
    char *part = key;
    for (;;) {
        char *dot = strchr(part, '.');
        if (dot) *dot = '\0';
        int slot = child_slot(file, ov, cur, part, key, part == key ? 0 : (int)(part - key - 1));
        if (slot < 0) {
            st = BT_ERR_MODEL;
            goto done;
        }
        if (!dot) {
            bt_ynode_free(cur->kids[slot]);
            cur->kids[slot] = value;
            value = NULL;
            break;
        }
        if (bt_ynode_is_null(cur->kids[slot])) {
            bt_ynode *map = made_node(BT_Y_MAP, NULL, ov);
            if (!map) {
                st = bt_error(BT_ERR_NOMEM, "override: out of memory");
                goto done;
            }
            bt_ynode_free(cur->kids[slot]);
            cur->kids[slot] = map;
        }
        cur = cur->kids[slot];
        *dot = '.';
        part = dot + 1;
    }
done:
    bt_ynode_free(value);
    free(key);
    bt_yorigin_release(ov);
    return st;
}
