/* trace/report_svg.c: the run report as one SVG 1.1 file (see report.h). Panels stacked top to
 * bottom, each a chart with ticks and units on both axes: loss, eval accuracy (when a run has
 * one), throughput, bubble, then the stage shares as bars (one bar per run and stage). A legend at
 * the top names each run in its colour. Every curve is one <polyline> whose class names the
 * panel and the run ("loss run0"), so tests can count them. Data flow: bt_report_run (parsed by
 * cli/cmd_plot.c) -> SVG text (svg.h) -> atomic file. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "trace/report.h"
#include "trace/svg.h"

#define WIDTH 960.0
#define LEFT 90.0       /* room for the y tick labels and the axis title */
#define RIGHT 30.0
#define PANEL_H 250.0   /* one chart: title, plot area, x axis */
#define PLOT_TOP 34.0   /* inside a panel */
#define PLOT_H 170.0

static const char *const palette[] = {"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"};
#define N_COLOURS (int)(sizeof palette / sizeof palette[0])

bt_status bt_report_series_add(bt_report_series *s, double x, double y)
{
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 64;
        double *nx = realloc(s->x, (size_t)cap * sizeof *nx);
        if (!nx) return bt_error(BT_ERR_NOMEM, "out of memory");
        s->x = nx;
        double *ny = realloc(s->y, (size_t)cap * sizeof *ny);
        if (!ny) return bt_error(BT_ERR_NOMEM, "out of memory");
        s->y = ny;
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
    return BT_OK;
}

static void series_free(bt_report_series *s)
{
    free(s->x);
    free(s->y);
    memset(s, 0, sizeof *s);
}

void bt_report_run_clear(bt_report_run *r)
{
    if (!r) return;
    free(r->label);
    series_free(&r->loss);
    series_free(&r->eval_loss);
    series_free(&r->eval_accuracy);
    series_free(&r->samples_per_s);
    series_free(&r->bubble);
    free(r->stage);
    memset(r, 0, sizeof *r);
}

/* Which series of a run a chart shows, scaled by factor (100 for percentages). */
typedef struct chart {
    const char *title, *y_label, *cls;
    size_t series[2];   /* offsetof into bt_report_run; [1] dashed (eval), 0 for none */
    double factor;
    int from_zero;      /* the y axis starts at 0 */
} chart;

static const bt_report_series *series_of(const bt_report_run *r, size_t off)
{
    return (const bt_report_series *)((const char *)r + off);
}

typedef struct range {
    double lo, hi;
} range;

static void widen(range *g, double v)
{
    if (!isfinite(v)) return;
    if (v < g->lo) g->lo = v;
    if (v > g->hi) g->hi = v;
}

/* Draws a y or x axis with ticks; returns nothing, the scale comes from the range. */
static void axis_ticks(bt_svg *b, range g, double x0, double y0, int vertical, double len)
{
    double step = bt_svg_tick_step(g.hi - g.lo);
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step) - 1e-9);
    for (double t = ceil(g.lo / step - 1e-9) * step; t <= g.hi + step * 1e-9; t += step) {
        double f = (t - g.lo) / (g.hi - g.lo);
        if (vertical) {
            double y = y0 - f * len;
            bt_svg_out(b, "<line x1=\"%.1f\" y1=\"%.2f\" x2=\"%.1f\" y2=\"%.2f\" stroke=\"#e6e6e6\"/>\n", x0, y,
                       WIDTH - RIGHT, y);
            bt_svg_out(b, "<text x=\"%.1f\" y=\"%.2f\" font-size=\"11\" text-anchor=\"end\">%.*f</text>\n", x0 - 6,
                       y + 4, decimals, fabs(t) < step * 1e-9 ? 0.0 : t);
        } else {
            double x = x0 + f * len;
            bt_svg_out(b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000000\"/>\n", x, y0, x,
                       y0 + 5);
            bt_svg_out(b, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%.*f</text>\n", x,
                       y0 + 18, decimals, t);
        }
    }
}

/* One line chart at vertical offset top. Returns 0 when no run has data for it (nothing drawn). */
static int draw_chart(bt_svg *b, const bt_report_run *runs, int n, const chart *c, double top)
{
    range gx = {INFINITY, -INFINITY}, gy = {c->from_zero ? 0 : INFINITY, -INFINITY};
    int points = 0;
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 2 && c->series[k]; k++) {
            const bt_report_series *s = series_of(&runs[r], c->series[k]);
            for (int i = 0; i < s->n; i++) {
                widen(&gx, s->x[i]);
                widen(&gy, s->y[i] * c->factor);
                points++;
            }
        }
    if (!points) return 0;
    if (gx.hi <= gx.lo) gx.hi = gx.lo + 1;
    if (gy.hi <= gy.lo) gy.hi = gy.lo + (gy.lo != 0 ? fabs(gy.lo) * 0.1 : 1);
    double pad = (gy.hi - gy.lo) * 0.05;
    gy.hi += pad;
    if (!c->from_zero) gy.lo -= pad;
    double step = bt_svg_tick_step(gy.hi - gy.lo);
    gy.hi = ceil(gy.hi / step - 1e-9) * step; /* the axis ends on ticks */
    gy.lo = floor(gy.lo / step + 1e-9) * step;
    if (c->factor == 100 && gy.hi > 100 && gy.lo < 100) gy.hi = 100; /* a percentage tops out at 100 */
    double plot_w = WIDTH - LEFT - RIGHT, y0 = top + PLOT_TOP + PLOT_H;
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\">", LEFT, top + 20);
    bt_svg_text(b, c->title);
    bt_svg_out(b, "</text>\n");
    axis_ticks(b, gy, LEFT, y0, 1, PLOT_H);
    axis_ticks(b, gx, LEFT, y0, 0, plot_w);
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#000000\"/>\n",
               LEFT, top + PLOT_TOP, plot_w, PLOT_H);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">step</text>\n",
               LEFT + plot_w / 2, y0 + 34);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">",
               LEFT - 58, top + PLOT_TOP + PLOT_H / 2, LEFT - 58, top + PLOT_TOP + PLOT_H / 2);
    bt_svg_text(b, c->y_label);
    bt_svg_out(b, "</text>\n");
    for (int r = 0; r < n; r++)
        for (int k = 0; k < 2 && c->series[k]; k++) {
            const bt_report_series *s = series_of(&runs[r], c->series[k]);
            if (!s->n) continue;
            const char *colour = palette[r % N_COLOURS];
            bt_svg_out(b, "<polyline class=\"%s%s run%d\" fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"",
                       c->cls, k ? "-eval" : "", r, colour, k ? "2" : "1.6", k ? " stroke-dasharray=\"6,4\"" : "");
            for (int i = 0; i < s->n; i++)
                bt_svg_out(b, "%.2f,%.2f ", LEFT + (s->x[i] - gx.lo) / (gx.hi - gx.lo) * plot_w,
                           y0 - (s->y[i] * c->factor - gy.lo) / (gy.hi - gy.lo) * PLOT_H);
            bt_svg_out(b, "\"/>\n");
            if (k == 1 || s->n == 1 || c->series[0] == offsetof(bt_report_run, eval_accuracy))
                for (int i = 0; i < s->n; i++)
                    bt_svg_out(b, "<circle cx=\"%.2f\" cy=\"%.2f\" r=\"3.5\" fill=\"%s\"/>\n",
                               LEFT + (s->x[i] - gx.lo) / (gx.hi - gx.lo) * plot_w,
                               y0 - (s->y[i] * c->factor - gy.lo) / (gy.hi - gy.lo) * PLOT_H, colour);
        }
    return 1;
}

/* Stacked bars of busy / transfer / idle, one per run and stage. Returns the height used. */
static double draw_stages(bt_svg *b, const bt_report_run *runs, int n, double top)
{
    int bars = 0;
    for (int r = 0; r < n; r++) bars += runs[r].n_stages;
    if (!bars) return 0;
    static const char *const what[3] = {"busy", "transfer", "idle"};
    static const char *const fill[3] = {"#4c9a4c", "#e0a030", "#cfcfcf"};
    double bar_h = 18, gap = 8, x0 = LEFT + 150, w = WIDTH - RIGHT - x0, y = top + PLOT_TOP + 22;
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\">where each stage's time went</text>\n",
               LEFT, top + 20);
    for (int k = 0; k < 3; k++) {
        bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>\n", x0 + k * 110.0,
                   top + PLOT_TOP - 4, fill[k]);
        bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n", x0 + k * 110.0 + 18, top + PLOT_TOP + 7,
                   what[k]);
    }
    for (int r = 0; r < n; r++)
        for (int s = 0; s < runs[r].n_stages; s++) {
            const bt_report_stage *st = &runs[r].stage[s];
            double v[3] = {st->busy, st->transfer, st->idle}, x = x0;
            bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"10\" height=\"%.1f\" fill=\"%s\"/>\n", LEFT - 80, y + 4,
                       bar_h - 8, palette[r % N_COLOURS]);
            bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">run %d, stage %d</text>\n", LEFT - 64, y + 13,
                       r + 1, s);
            for (int k = 0; k < 3; k++) {
                double bw = fmax(0.0, fmin(1.0, v[k])) * w;
                bt_svg_out(b, "<rect class=\"share %s run%d\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" "
                              "fill=\"%s\"><title>%s %.1f%%</title></rect>\n",
                           what[k], r, x, y, bw, bar_h, fill[k], what[k], 100 * v[k]);
                if (bw > 44)
                    bt_svg_out(b, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%.1f%%</text>\n",
                               x + bw / 2, y + 13, 100 * v[k]);
                x += bw;
            }
            y += bar_h + gap;
        }
    for (int t = 0; t <= 100; t += 20) {
        double x = x0 + t / 100.0 * w;
        bt_svg_out(b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000000\"/>\n", x, y, x, y + 5);
        bt_svg_out(b, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%d%%</text>\n", x, y + 18, t);
    }
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">share of the stage's wall time</text>\n",
               x0 + w / 2, y + 34);
    return y + 50 - top;
}

bt_status bt_report_write_svg(const bt_report_run *runs, int n, const char *title, const char *path)
{
    if (!runs || n < 1 || !path) return bt_error(BT_ERR_INVALID_ARG, "bt_report_write_svg: no runs");
    const chart charts[] = {
        {"loss", "loss", "loss", {offsetof(bt_report_run, loss), offsetof(bt_report_run, eval_loss)}, 1, 0},
        {"eval accuracy", "accuracy (%)", "accuracy", {offsetof(bt_report_run, eval_accuracy), 0}, 100, 0},
        {"throughput", "samples/s", "throughput", {offsetof(bt_report_run, samples_per_s), 0}, 1, 1},
        {"pipeline bubble", "bubble (% of stage time)", "bubble", {offsetof(bt_report_run, bubble), 0}, 100, 1},
    };
    bt_svg b = {NULL, 0, 0, 0};
    double legend_h = 30 + 20.0 * n, y = 40 + legend_h;
    /* the height is known only at the end: draw the body first, then the header in front of it */
    bt_svg body = {NULL, 0, 0, 0};
    for (size_t c = 0; c < sizeof charts / sizeof charts[0]; c++)
        if (draw_chart(&body, runs, n, &charts[c], y)) y += PANEL_H;
    y += draw_stages(&body, runs, n, y);
    bt_svg_out(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
                   "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
                   "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
               WIDTH, y + 10, WIDTH, y + 10);
    bt_svg_out(&b, "<title>baton run report</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n",
               WIDTH, y + 10);
    bt_svg_out(&b, "<text x=\"%.1f\" y=\"26\" font-size=\"18\" font-weight=\"bold\">", LEFT);
    bt_svg_text(&b, title ? title : "baton run report");
    bt_svg_out(&b, "</text>\n");
    for (int r = 0; r < n; r++) {
        double ly = 50 + 20.0 * r;
        bt_svg_out(&b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" stroke-width=\"3\"/>\n", LEFT,
                   ly, LEFT + 28, ly, palette[r % N_COLOURS]);
        bt_svg_out(&b, "<text class=\"legend run%d\" x=\"%.1f\" y=\"%.1f\" font-size=\"13\">run %d: ", r, LEFT + 36,
                   ly + 4, r + 1);
        bt_svg_text(&b, runs[r].label ? runs[r].label : "");
        bt_svg_out(&b, "</text>\n");
    }
    bt_svg_out(&b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#444444\">solid: training loss per step; "
                   "dashed with dots: evaluation</text>\n",
               LEFT, 50 + 20.0 * n);
    if (body.failed) b.failed = 1;
    else if (body.s) bt_svg_out(&b, "%s", body.s);
    free(body.s);
    bt_svg_out(&b, "</svg>\n");
    return bt_svg_write(&b, "report", path);
}
