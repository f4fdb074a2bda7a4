/* core/strutil.c: owned string copies, numbers as JSON text, byte counts with their unit. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/strutil.h"

char *bt_strdup(const char *s)
{
    if (!s) return NULL;
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p) memcpy(p, s, n);
    return p;
}

char *bt_strfmt(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) return NULL;
    char *p = malloc((size_t)n + 1);
    if (!p) return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

bt_json_text bt_json_num(double v, char conv, int digits)
{
    bt_json_text t;
    if (!isfinite(v)) snprintf(t.s, sizeof t.s, "null");
    else if (conv == 'f' && fabs(v) < 1e15) snprintf(t.s, sizeof t.s, "%.*f", digits, v);
    else snprintf(t.s, sizeof t.s, "%.*g", conv == 'f' ? 17 : digits, v);
    return t;
}

bt_bytes_text bt_bytes_text_of(double bytes)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    bt_bytes_text t;
    int u = 0;
    while (bytes >= 1024 && u < 5) bytes /= 1024, u++;
    snprintf(t.s, sizeof t.s, u ? "%.1f %s" : "%.0f %s", bytes, unit[u]);
    return t;
}
