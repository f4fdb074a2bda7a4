/* trace/svg.h: the small SVG writer the pictures share (the timeline, timeline_svg.c, and the run
 * report, report_svg.c): a growing text buffer that remembers a failed allocation, XML-escaped
 * text, hex colours from HSL (SVG 1.1 renderers know no CSS3 colour functions), round tick steps,
 * and writing the result atomically. */
#ifndef BT_TRACE_SVG_H
#define BT_TRACE_SVG_H

#include <stddef.h>

#include "baton/status.h"

typedef struct bt_svg {
    char *s;
    size_t len, cap;
    int failed;   /* an allocation failed: later appends do nothing, bt_svg_write reports it */
} bt_svg;

void bt_svg_out(bt_svg *b, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* Appends text with &, <, >, " and ' escaped. */
void bt_svg_text(bt_svg *b, const char *text);
/* "#rrggbb" of hue h (degrees), saturation s and lightness l (0..1). */
void bt_svg_hsl(double h, double s, double l, char hex[8]);
/* A tick step of 1, 2 or 5 x 10^k giving at most about 10 ticks over span. */
double bt_svg_tick_step(double span);
/* Writes the buffer to path atomically and frees it (also when it failed: BT_ERR_NOMEM naming what). */
bt_status bt_svg_write(bt_svg *b, const char *what, const char *path);

#endif
