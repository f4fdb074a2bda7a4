/* model/interp.c: typed reading of YAML tree nodes with positioned messages (see interp.h). */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "model/interp.h"

/* ---- scalar typing ---------------------------------------------------------------------------- */

static int is_digit(char c) { return c >= '0' && c <= '9'; }

static int all_of(const char *s, const char *set)
{
    if (!*s) return 0;
    for (; *s; s++)
        if (!strchr(set, *s)) return 0;
    return 1;
}

static int is_int_text(const char *s)
{
    if (strncmp(s, "0x", 2) == 0) return all_of(s + 2, "0123456789abcdefABCDEF");
    if (strncmp(s, "0o", 2) == 0) return all_of(s + 2, "01234567");
    if (*s == '-' || *s == '+') s++;
    return all_of(s, "0123456789");
}

/* [-+]? ( . [0-9]+ | [0-9]+ ( . [0-9]* )? ) ( [eE] [-+]? [0-9]+ )?  or .inf/.nan forms */
static int is_float_text(const char *s)
{
    static const char *const special[] = {".inf", ".Inf", ".INF", "+.inf", "+.Inf", "+.INF",
                                          "-.inf", "-.Inf", "-.INF", ".nan", ".NaN", ".NAN", NULL};
    for (int i = 0; special[i]; i++)
        if (strcmp(s, special[i]) == 0) return 1;
    if (*s == '-' || *s == '+') s++;
    int digits = 0;
    while (is_digit(*s)) s++, digits++;
    if (*s == '.') {
        s++;
        int frac = 0;
        while (is_digit(*s)) s++, frac++;
        if (!digits && !frac) return 0;
    } else if (!digits) {
        return 0;
    }
    if (*s == 'e' || *s == 'E') {
        s++;
        if (*s == '-' || *s == '+') s++;
        if (!is_digit(*s)) return 0;
        while (is_digit(*s)) s++;
    }
    return *s == '\0';
}

bt_ystype bt_yscalar_type(const bt_ynode *n)
{
    if (!n->plain) return BT_YS_STRING;
    const char *s = n->text;
    if (n->len == 0 || strcmp(s, "~") == 0 || strcmp(s, "null") == 0 || strcmp(s, "Null") == 0 ||
        strcmp(s, "NULL") == 0)
        return BT_YS_NULL;
    if (strcmp(s, "true") == 0 || strcmp(s, "True") == 0 || strcmp(s, "TRUE") == 0 ||
        strcmp(s, "false") == 0 || strcmp(s, "False") == 0 || strcmp(s, "FALSE") == 0)
        return BT_YS_BOOL;
    if (is_int_text(s)) return BT_YS_INT;
    if (is_float_text(s)) return BT_YS_FLOAT;
    return BT_YS_STRING;
}

int bt_ynode_is_null(const bt_ynode *node)
{
    return !node || (node->kind == BT_Y_SCALAR && bt_yscalar_type(node) == BT_YS_NULL);
}

/* Parses an integer scalar; 0 ok, -1 out of range. */
static int parse_int(const char *s, int64_t *out)
{
    int base = 10;
    if (strncmp(s, "0x", 2) == 0) {
        base = 16;
        s += 2;
    } else if (strncmp(s, "0o", 2) == 0) {
        base = 8;
        s += 2;
    }
    errno = 0;
    long long v;
    if (base == 10) {
        v = strtoll(s, NULL, 10);
    } else {
        unsigned long long u = strtoull(s, NULL, base);
        if (u > (unsigned long long)INT64_MAX) errno = ERANGE;
        v = (long long)u;
    }
    if (errno == ERANGE) return -1;
    *out = (int64_t)v;
    return 0;
}

static double parse_float(const char *s)
{
    const char *t = (*s == '+' || *s == '-') ? s + 1 : s;
    if (strcmp(t, ".inf") == 0 || strcmp(t, ".Inf") == 0 || strcmp(t, ".INF") == 0)
        return *s == '-' ? -INFINITY : INFINITY;
    if (strcmp(t, ".nan") == 0 || strcmp(t, ".NaN") == 0 || strcmp(t, ".NAN") == 0) return NAN;
    return strtod(s, NULL);
}

/* ---- messages --------------------------------------------------------------------------------- */

bt_status bt_ld_error(const bt_ld *ld, const bt_ynode *at, bt_status status, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at && at->line > 0) return bt_error(status, "%s:%d:%d: %s", ld->file, at->line, at->col, msg);
    if (at && at->origin) return bt_error(status, "%s: override '%s': %s", ld->file, at->origin->text, msg);
    return bt_error(status, "%s: %s", ld->file, msg);
}

void bt_ld_describe(const bt_ynode *node, char *buf, size_t size)
{
    if (!node || bt_ynode_is_null(node))
        snprintf(buf, size, "null");
    else if (node->kind != BT_Y_SCALAR)
        snprintf(buf, size, "%s", bt_ykind_name(node->kind));
    else if (node->len > 60)
        snprintf(buf, size, "'%.57s...'", node->text);
    else
        snprintf(buf, size, "'%s'", node->text);
}

static bt_status type_error(const bt_ld *ld, const bt_ynode *node, const char *expected,
                            const char *what)
{
    char got[80];
    bt_ld_describe(node, got, sizeof got);
    return bt_ld_error(ld, node, BT_ERR_MODEL, "expected %s for %s, got %s", expected, what, got);
}

/* ---- getters ---------------------------------------------------------------------------------- */

bt_status bt_ld_int(const bt_ld *ld, const bt_ynode *node, const char *what, int64_t min,
                    int64_t max, int64_t *out)
{
    if (!node || node->kind != BT_Y_SCALAR || bt_yscalar_type(node) != BT_YS_INT)
        return type_error(ld, node, "an integer", what);
    int64_t v;
    if (parse_int(node->text, &v) != 0)
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s: integer %s is out of range", what,
                           node->text);
    if (v < min || v > max) {
        if (max == INT64_MAX)
            return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be >= %lld, got %lld", what,
                               (long long)min, (long long)v);
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be between %lld and %lld, got %lld",
                           what, (long long)min, (long long)max, (long long)v);
    }
    *out = v;
    return BT_OK;
}

bt_status bt_ld_int32(const bt_ld *ld, const bt_ynode *node, const char *what, int min, int max,
                      int *out)
{
    int64_t v = 0; /* set on success; GCC cannot see that once bt_ld_int is inlined */
    BT_TRY(bt_ld_int(ld, node, what, min, max, &v));
    *out = (int)v;
    return BT_OK;
}

bt_status bt_ld_float(const bt_ld *ld, const bt_ynode *node, const char *what, double min,
                      int min_open, double max, int max_open, double *out)
{
    bt_ystype t = (node && node->kind == BT_Y_SCALAR) ? bt_yscalar_type(node) : BT_YS_STRING;
    if (t != BT_YS_INT && t != BT_YS_FLOAT) return type_error(ld, node, "a number", what);
    double v = parse_float(node->text);
    if (!isfinite(v))
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be a finite number, got %s", what,
                           node->text);
    int low_ok = min_open ? v > min : v >= min;
    int high_ok = max_open ? v < max : v <= max;
    if (!low_ok || !high_ok) {
        if (isinf(max))
            return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be %s %g, got %s", what,
                               min_open ? ">" : ">=", min, node->text);
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be in %c%g, %g%c, got %s", what,
                           min_open ? '(' : '[', min, max, max_open ? ')' : ']', node->text);
    }
    *out = v;
    return BT_OK;
}

bt_status bt_ld_bool(const bt_ld *ld, const bt_ynode *node, const char *what, int *out)
{
    if (!node || node->kind != BT_Y_SCALAR || bt_yscalar_type(node) != BT_YS_BOOL)
        return type_error(ld, node, "true or false", what);
    *out = node->text[0] == 't' || node->text[0] == 'T';
    return BT_OK;
}

bt_status bt_ld_string(const bt_ld *ld, const bt_ynode *node, const char *what, const char **out)
{
    if (!node || node->kind != BT_Y_SCALAR || bt_ynode_is_null(node))
        return type_error(ld, node, "a string", what);
    if (strlen(node->text) != node->len)
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s contains a NUL character", what);
    /* names, paths and devices end up on terminals and in file names: no escape sequences */
    for (const unsigned char *p = (const unsigned char *)node->text; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return bt_ld_error(ld, node, BT_ERR_MODEL, "%s contains the control character 0x%02x", what, *p);
    *out = node->text;
    return BT_OK;
}

/* "a, b or c" from a NULL-terminated list. */
static void join_names(const char *const *names, const char *last_sep, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; names[i] && used < size; i++) {
        const char *sep = i == 0 ? "" : names[i + 1] ? ", " : last_sep;
        used += (size_t)snprintf(buf + used, size - used, "%s%s", sep, names[i]);
    }
}

bt_status bt_ld_enum(const bt_ld *ld, const bt_ynode *node, const char *what,
                     const char *const *names, int *out)
{
    const char *s;
    BT_TRY(bt_ld_string(ld, node, what, &s));
    for (int i = 0; names[i]; i++) {
        if (strcmp(names[i], s) == 0) {
            *out = i;
            return BT_OK;
        }
    }
    char list[512];
    join_names(names, " or ", list, sizeof list);
    return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be %s, got '%s'", what, list, s);
}

bt_status bt_ld_map(const bt_ld *ld, const bt_ynode *node, const char *what,
                    const bt_ynode **out)
{
    *out = NULL;
    if (bt_ynode_is_null(node)) return BT_OK;
    if (node->kind != BT_Y_MAP) return type_error(ld, node, "a mapping", what);
    *out = node;
    return BT_OK;
}

bt_status bt_ld_keys(const bt_ld *ld, const bt_ynode *map, const char *what,
                     const char *const *allowed)
{
    for (int i = 0; i < bt_ymap_len(map); i++) {
        const bt_ynode *key = bt_ymap_key(map, i);
        int ok = 0;
        for (int k = 0; allowed[k] && !ok; k++) ok = strcmp(allowed[k], key->text) == 0;
        if (ok) continue;
        char list[512];
        join_names(allowed, ", ", list, sizeof list);
        return bt_ld_error(ld, key, BT_ERR_MODEL, "unknown key '%s' in %s (expected one of: %s)",
                           key->text, what, list);
    }
    return BT_OK;
}

bt_status bt_ld_require(const bt_ld *ld, const bt_ynode *map, const char *key, const char *what,
                        const bt_ynode *at, const bt_ynode **out)
{
    *out = bt_ymap_get(map, key);
    if (!*out)
        return bt_ld_error(ld, map ? map : at, BT_ERR_MODEL, "missing required key '%s' in %s",
                           key, what);
    return BT_OK;
}
