/* trace/timeline_svg.c: the last traced step drawn as a standalone SVG 1.1 file (bt_trace_write_svg).
 *
 * One row per stage, time on x. Forward and backward boxes are coloured by micro-batch (the same
 * hue for F and B of one micro-batch; F lighter, B darker) and labelled with the micro-batch; the
 * optimizer step is grey; sends and receives are thin marks under the boxes (sends dark, receives
 * light). Below: a time axis in ms and a legend. Colours are hex (no CSS3 functions) and every
 * piece of text is XML-escaped, so any SVG 1.1 renderer accepts the file.
 *
 * Data flow: bt_trace (trace.c) -> SVG text (svg.h) -> atomic file. Never prints. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "trace/svg.h"
#include "trace/trace.h"

#define SVG_WIDTH 1200.0
#define MARGIN_LEFT 150.0
#define MARGIN_RIGHT 24.0
#define MARGIN_TOP 56.0
#define ROW_HEIGHT 48.0
#define BOX_HEIGHT 28.0
#define MARK_GAP 3.0
#define MARK_HEIGHT 7.0

static double mb_hue(int mb) { return fmod((double)mb * 137.508, 360.0); }

static void draw_compute(bt_svg *b, const bt_trace_ev *ev, int s, double x, double w, double y)
{
    char fill[8] = "#9a9a9a", label[32];
    if (ev->ins.kind == BT_I_FWD) bt_svg_hsl(mb_hue(ev->ins.mb), 0.65, 0.78, fill);
    else if (ev->ins.kind == BT_I_BWD) bt_svg_hsl(mb_hue(ev->ins.mb), 0.65, 0.40, fill);
    else if (ev->ins.kind == BT_I_WGT) bt_svg_hsl(mb_hue(ev->ins.mb), 0.45, 0.60, fill);
    bt_instr_format(s, &ev->ins, label, sizeof label);
    bt_svg_out(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\" stroke=\"#ffffff\" "
           "stroke-width=\"0.5\"><title>%s %.3f ms</title></rect>\n",
        x, y, w, BOX_HEIGHT, fill, label, ev->end_ms - ev->start_ms);
    if (ev->ins.kind == BT_I_STEP || w < 9) return;
    bt_svg_out(b, "<text x=\"%.2f\" y=\"%.2f\" font-size=\"11\" text-anchor=\"middle\" fill=\"%s\">%d</text>\n",
        x + w / 2, y + BOX_HEIGHT / 2 + 4, ev->ins.kind == BT_I_BWD ? "#ffffff" : "#222222", ev->ins.mb);
}

static void draw_row(bt_svg *b, const bt_trace *t, const bt_trace_step *step, int s, double scale)
{
    double y = MARGIN_TOP + s * ROW_HEIGHT;
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"end\">stage %d (", MARGIN_LEFT - 8,
        y + BOX_HEIGHT / 2 + 4, s);
    bt_svg_text(b, t->stage[s].device);
    bt_svg_out(b, ")</text>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" fill=\"#666666\">",
        MARGIN_LEFT - 8, y + BOX_HEIGHT + 8);
    bt_svg_text(b, t->stage[s].layers);
    bt_svg_out(b, "</text>\n<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e4e4e4\"/>\n", MARGIN_LEFT,
        y + BOX_HEIGHT / 2, SVG_WIDTH - MARGIN_RIGHT, y + BOX_HEIGHT / 2);
    for (int i = 0; i < step->n[s]; i++) {
        const bt_trace_ev *ev = &step->ev[s][i];
        double x = MARGIN_LEFT + ev->start_ms * scale, w = (ev->end_ms - ev->start_ms) * scale;
        if (ev->ins.kind == BT_I_FWD || ev->ins.kind == BT_I_BWD || ev->ins.kind == BT_I_STEP ||
            ev->ins.kind == BT_I_WGT) {
            draw_compute(b, ev, s, x, w > 0.5 ? w : 0.5, y);
            continue;
        }
        int send = ev->ins.kind == BT_I_SEND_ACT || ev->ins.kind == BT_I_SEND_GRAD;
        char label[32];
        bt_instr_format(s, &ev->ins, label, sizeof label);
        bt_svg_out(b, "<rect x=\"%.2f\" y=\"%.2f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>%s %.3f ms, %zu "
               "bytes</title></rect>\n",
            x, y + BOX_HEIGHT + MARK_GAP, w > 1 ? w : 1, MARK_HEIGHT, send ? "#333333" : "#b0b0b0", label,
            ev->end_ms - ev->start_ms, ev->bytes);
    }
}

static void draw_axis(bt_svg *b, double wall, double scale, double y)
{
    double step = bt_svg_tick_step(wall);
    int decimals = step >= 1 ? 0 : (int)ceil(-log10(step));
    bt_svg_out(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000000\"/>\n", MARGIN_LEFT, y,
        MARGIN_LEFT + wall * scale, y);
    for (int k = 0; k * step <= wall * (1 + 1e-9); k++) {
        double x = MARGIN_LEFT + k * step * scale;
        bt_svg_out(b, "<line x1=\"%.2f\" y1=\"%.1f\" x2=\"%.2f\" y2=\"%.1f\" stroke=\"#000000\"/>\n", x, y, x, y + 5);
        bt_svg_out(b, "<text x=\"%.2f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"middle\">%.*f</text>\n", x, y + 17,
            decimals, k * step);
    }
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" text-anchor=\"end\">ms</text>\n", MARGIN_LEFT - 8,
        y + 17);
}

static void draw_legend(bt_svg *b, double y)
{
    char f[8], bw[8];
    bt_svg_hsl(mb_hue(0), 0.65, 0.78, f);
    bt_svg_hsl(mb_hue(0), 0.65, 0.40, bw);
    double x = MARGIN_LEFT;
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>\n", x, y, f);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">forward (F)</text>\n", x + 18, y + 10);
    x += 110;
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"%s\"/>\n", x, y, bw);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">backward (B)</text>\n", x + 18, y + 10);
    x += 120;
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"12\" fill=\"#9a9a9a\"/>\n", x, y);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">optimizer step</text>\n", x + 18, y + 10);
    x += 130;
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"%.1f\" fill=\"#333333\"/>\n", x, y + 3, MARK_HEIGHT);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">send</text>\n", x + 18, y + 10);
    x += 70;
    bt_svg_out(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"14\" height=\"%.1f\" fill=\"#b0b0b0\"/>\n", x, y + 3, MARK_HEIGHT);
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\">receive (waiting included)</text>\n", x + 18, y + 10);
    x += 200;
    bt_svg_out(b, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#444444\">colour and label: micro-batch</text>\n",
        x, y + 10);
}

bt_status bt_trace_write_svg(const bt_trace *t, const char *path)
{
    if (!t || !path) return bt_error(BT_ERR_INVALID_ARG, "bt_trace_write_svg: NULL argument");
    if (t->n_steps == 0) return bt_error(BT_ERR_INVALID_ARG, "timeline: no traced step to draw");
    const bt_trace_step *step = &t->steps[t->n_steps - 1];
    double wall = step->wall_ms > 0 ? step->wall_ms : 1e-3;
    double scale = (SVG_WIDTH - MARGIN_LEFT - MARGIN_RIGHT) / wall;
    double axis_y = MARGIN_TOP + t->stages * ROW_HEIGHT + 4;
    double height = axis_y + 60;
    bt_svg b = {NULL, 0, 0, 0};
    bt_svg_out(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n",
        SVG_WIDTH, height, SVG_WIDTH, height);
    bt_svg_out(&b, "<title>baton timeline</title>\n<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n",
        SVG_WIDTH, height);
    bt_svg_out(&b, "<text x=\"%.1f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">step %d: %d stage%s, %d micro-batch%s, "
            "%s, %.3f ms</text>\n",
        MARGIN_LEFT, t->n_steps, t->stages, t->stages == 1 ? "" : "s", step->microbatches,
        step->microbatches == 1 ? "" : "es", bt_schedule_name(step->kind), step->wall_ms);
    for (int s = 0; s < t->stages; s++) draw_row(&b, t, step, s, scale);
    draw_axis(&b, wall, scale, axis_y);
    draw_legend(&b, axis_y + 32);
    bt_svg_out(&b, "</svg>\n");
    return bt_svg_write(&b, "timeline", path);
}
