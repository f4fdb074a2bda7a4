/* cli/run_conv.c: the conv2d path each layer took on the CPU (cpu/conv_onednn.h), printed after a
 * run's summary and by `baton profile`: one line per shape chosen for, naming the layers of the
 * graph that have that shape (a conv2d whose output and weight shapes match; several layers of
 * one shape share one choice), with the times that decided it, or that it came from the resumed
 * checkpoint's record (run_conv_record.c; a recorded shape no call met is not listed). Under
 * --log-format jsonl one
 * record {"conv_choice": ...} per line. Nothing is printed when no conv2d ran on a CPU stage. */
#include <stdio.h>
#include <string.h>

#include "baton.h"
#include "cli/run.h"
#include "cpu/conv_onednn.h"

#define SHOWN_MAX 64

/* The layers of g whose conv2d has c's shape, comma-separated into buf ("?" when none match). */
static const char *layer_names(const bt_graph *g, const bt_conv_choice *c, char *buf, size_t size)
{
    size_t used = 0;
    buf[0] = 0;
    for (int i = 0; g && i < bt_graph_num_layers(g); i++) {
        bt_layer_info li;
        if (bt_graph_layer(g, i, &li) != BT_OK || strcmp(li.op, "conv2d") != 0) continue;
        if (li.shape.ndim != 3 || li.shape.dim[0] != c->cfg.out || li.shape.dim[1] != c->cfg.ho ||
            li.shape.dim[2] != c->cfg.wo)
            continue;
        int match = 0;
        for (int p = 0; p < bt_graph_num_params(g) && !match; p++) {
            bt_param_info pi;
            if (bt_graph_param(g, p, &pi) != BT_OK || pi.layer != i || pi.shape.ndim != 4) continue;
            match = pi.shape.dim[0] == c->cfg.out && pi.shape.dim[1] == c->cfg.c &&
                    pi.shape.dim[2] == c->cfg.kh && pi.shape.dim[3] == c->cfg.kw;
        }
        if (!match) continue;
        int n = snprintf(buf + used, size - used, "%s%s", used ? ", " : "", li.name);
        if (n < 0 || (size_t)n >= size - used) break;
        used += (size_t)n;
    }
    if (!buf[0]) snprintf(buf, size, "?");
    return buf;
}

void bt_cli_print_conv_choices(const bt_run_opts *o, const bt_graph *g)
{
    bt_conv_choice c[SHOWN_MAX];
    int n = bt_conv_choices(c, SHOWN_MAX), kept = 0;
    for (int i = 0; i < n && i < SHOWN_MAX; i++) /* records a call met, and the choices made here */
        if (!c[i].recorded || c[i].used) c[kept++] = c[i];
    n = n > SHOWN_MAX ? kept + (n - SHOWN_MAX) : kept;
    if (n == 0) return;
    if (!o || !o->jsonl) printf("\nconv2d on cpu (%s):\n", bt_cpu_conv_describe());
    for (int i = 0; i < kept; i++) {
        char names[256], text[400];
        layer_names(g, &c[i], names, sizeof names);
        bt_conv_choice_format(&c[i], text, sizeof text);
        if (o)
            bt_cli_record(o, json_pack("{s:b, s:s, s:s, s:b, s:s}", "conv_choice", 1, "layers", names, "path",
                                       c[i].path == BT_CONV_ONEDNN ? "onednn" : "im2col", "recorded",
                                       c[i].recorded, "detail", text));
        if (!o || !o->jsonl) printf("  %-12s %s\n", names, text);
    }
    if (n > kept && (!o || !o->jsonl)) printf("  ... and %d more shapes\n", n - kept);
}
