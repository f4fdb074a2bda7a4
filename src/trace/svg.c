/* trace/svg.c: the SVG writer the pictures share (see svg.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "core/error.h"
#include "io/atomic_file.h"
#include "trace/svg.h"

void bt_svg_out(bt_svg *b, const char *fmt, ...)
{
    if (b->failed) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->s ? b->s + b->len : NULL, b->s ? b->cap - b->len : 0, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = 1;
            return;
        }
        if (b->s && b->len + (size_t)n < b->cap) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = (b->cap ? b->cap * 2 : 16384) + (size_t)n;
        char *s = realloc(b->s, cap);
        if (!s) {
            b->failed = 1;
            return;
        }
        b->s = s;
        b->cap = cap;
    }
}

void bt_svg_text(bt_svg *b, const char *text)
{
    for (const char *c = text; *c; c++) {
        switch (*c) {
        case '&': bt_svg_out(b, "&amp;"); break;
        case '<': bt_svg_out(b, "&lt;"); break;
        case '>': bt_svg_out(b, "&gt;"); break;
        case '"': bt_svg_out(b, "&quot;"); break;
        case '\'': bt_svg_out(b, "&apos;"); break;
        default: bt_svg_out(b, "%c", *c); break;
        }
    }
}

void bt_svg_hsl(double h, double s, double l, char hex[8])
{
    double c = (1 - fabs(2 * l - 1)) * s, hp = fmod(h, 360.0) / 60.0;
    double x = c * (1 - fabs(fmod(hp, 2.0) - 1)), m = l - c / 2, r = 0, g = 0, bl = 0;
    if (hp < 1) r = c, g = x;
    else if (hp < 2) r = x, g = c;
    else if (hp < 3) g = c, bl = x;
    else if (hp < 4) g = x, bl = c;
    else if (hp < 5) r = x, bl = c;
    else r = c, bl = x;
    snprintf(hex, 8, "#%02x%02x%02x", (int)lround((r + m) * 255), (int)lround((g + m) * 255),
             (int)lround((bl + m) * 255));
}

double bt_svg_tick_step(double span)
{
    double raw = span / 10.0, p = pow(10.0, floor(log10(raw > 0 ? raw : 1e-3)));
    if (raw <= p) return p;
    if (raw <= 2 * p) return 2 * p;
    if (raw <= 5 * p) return 5 * p;
    return 10 * p;
}

bt_status bt_svg_write(bt_svg *b, const char *what, const char *path)
{
    if (b->failed) {
        free(b->s);
        b->s = NULL;
        return bt_error(BT_ERR_NOMEM, "%s: out of memory", what);
    }
    bt_status st = bt_atomic_file_write_all(path, b->s, b->len);
    free(b->s);
    b->s = NULL;
    return st;
}
