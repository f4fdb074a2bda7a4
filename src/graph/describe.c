/* graph/describe.c: the model graph as canonical text (graph/describe.h), what a checkpoint
 * records so that a resume can refuse another model with the same parameter names and shapes.
 *
 * One line per graph input ("input NAME SHAPE DTYPE"), then one per layer:
 *   LAYER: OP(IN, ...){ARG=VALUE, ...} -> SHAPE DTYPE[; OP(...)... for the layer's `act:` node]
 *          [ params NAME SHAPE[ = SOURCE], ...]
 * Arguments are sorted by name, numbers printed exactly (the shortest of %.15g to %.17g that reads
 * back), strings with control characters, backslashes and quotes escaped, so that a line never
 * holds a newline. What does not change the computation stays out: the stage a layer runs on,
 * recomputation, the file position, the parameters' initialisation (a checkpoint never depends on
 * the layout that wrote it). Arguments are described as written: one spelled out at its default
 * differs from one left out. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "graph/describe.h"
#include "graph/graph_internal.h"

typedef struct text_buf {
    char *s;
    size_t n, cap;
    int failed;
} text_buf;

static void put(text_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(text_buf *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap <= b->n + (size_t)k) cap *= 2;
        char *grown = realloc(b->s, cap);
        if (!grown) {
            b->failed = 1;
            return;
        }
        b->s = grown;
        b->cap = cap;
    }
}

static void put_shape(text_buf *b, const bt_shape *shape)
{
    char text[160];
    put(b, "%s", bt_shape_format(shape, text, sizeof text));
}

static void put_string(text_buf *b, const char *s)
{
    put(b, "\"");
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        if (*c < 0x20 || *c == 0x7f || *c == '\\' || *c == '"') put(b, "\\x%02x", *c);
        else put(b, "%c", *c);
    }
    put(b, "\"");
}

/* x in the fewest significant digits that read back as x (0.1, not 0.10000000000000001). */
static void put_number(text_buf *b, double x)
{
    char text[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(text, sizeof text, "%.*g", digits, x);
        if (strtod(text, NULL) == x) break;
    }
    put(b, "%s", text);
}

static int by_name(const void *a, const void *b)
{
    return strcmp((*(const bt_arg_value *const *)a)->name, (*(const bt_arg_value *const *)b)->name);
}

static void put_args(text_buf *b, const bt_args *args)
{
    if (args->n == 0) return;
    const bt_arg_value **sorted = malloc((size_t)args->n * sizeof *sorted);
    if (!sorted) {
        b->failed = 1;
        return;
    }
    for (int i = 0; i < args->n; i++) sorted[i] = &args->v[i];
    qsort(sorted, (size_t)args->n, sizeof *sorted, by_name);
    put(b, "{");
    for (int i = 0; i < args->n; i++) {
        const bt_arg_value *v = sorted[i];
        put(b, "%s%s=", i ? ", " : "", v->name);
        switch (v->type) {
        case BT_ARG_INT: put(b, "%" PRId64, v->i); break;
        case BT_ARG_FLOAT: put_number(b, v->f); break;
        case BT_ARG_BOOL: put(b, "%s", v->i ? "true" : "false"); break;
        case BT_ARG_INTS:
            put(b, "[");
            for (int k = 0; k < v->n; k++) put(b, "%s%" PRId64, k ? "," : "", v->ints[k]);
            put(b, "]");
            break;
        case BT_ARG_STRING: put_string(b, v->s ? v->s : ""); break;
        }
    }
    put(b, "}");
    free(sorted);
}

static void put_node(text_buf *b, const bt_graph *g, const bt_node *n)
{
    put(b, "%s(", n->op->name);
    for (int k = 0; k < n->n_in; k++) put(b, "%s%s", k ? ", " : "", g->values[n->in[k]].name);
    put(b, ")");
    put_args(b, &n->args);
    put(b, " -> ");
    put_shape(b, &g->values[n->out].shape);
    put(b, " %s", bt_dtype_name(g->values[n->out].dtype));
}

static void put_layer(text_buf *b, const bt_graph *g, const bt_layer *l)
{
    put(b, "%s: ", l->name);
    for (int i = 0; i < l->n_nodes; i++) {
        if (i) put(b, "; ");
        put_node(b, g, &g->nodes[l->first_node + i]);
    }
    const char *sep = " params ";
    for (int i = 0; i < l->n_nodes; i++) {
        const bt_node *n = &g->nodes[l->first_node + i];
        for (int k = 0; k < n->n_params; k++) {
            const bt_param *p = &g->params[n->params[k]];
            put(b, "%s%s ", sep, p->name);
            put_shape(b, &p->shape);
            if (p->tied_to >= 0) put(b, " = %s", g->params[p->tied_to].name);
            sep = ", ";
        }
    }
}

bt_status bt_graph_describe(const bt_graph *g, char **out)
{
    text_buf b = {0};
    *out = NULL;
    for (int i = 0; i < g->n_inputs; i++) {
        const bt_value *v = &g->values[g->inputs[i]];
        put(&b, "input %s ", v->name);
        put_shape(&b, &v->shape);
        put(&b, " %s\n", bt_dtype_name(v->dtype));
    }
    for (int i = 0; i < g->n_layers; i++) {
        put_layer(&b, g, &g->layers[i]);
        put(&b, "\n");
    }
    if (b.failed || !b.s) {
        free(b.s);
        return bt_error(BT_ERR_NOMEM, "graph: out of memory");
    }
    *out = b.s;
    return BT_OK;
}

/* The line of text starting at s (without its newline), as length. */
static size_t line_length(const char *s)
{
    const char *nl = strchr(s, '\n');
    return nl ? (size_t)(nl - s) : strlen(s);
}

int bt_graph_describe_diff(const char *a, const char *b, const char **line_a, size_t *len_a, const char **line_b,
                           size_t *len_b)
{
    int line = 1;
    for (;;) {
        const size_t na = *a ? line_length(a) : 0, nb = *b ? line_length(b) : 0;
        if (!*a && !*b) return 0;
        if (!*a || !*b || na != nb || memcmp(a, b, na) != 0) {
            *line_a = *a ? a : NULL;
            *len_a = na;
            *line_b = *b ? b : NULL;
            *len_b = nb;
            return line;
        }
        a += na + (a[na] == '\n');
        b += nb + (b[nb] == '\n');
        line++;
    }
}
