/* core/strutil.h: small string helpers shared across modules (owned copies, formatted copies,
 * numbers as JSON text, byte counts as people read them). */
#ifndef BT_CORE_STRUTIL_H
#define BT_CORE_STRUTIL_H

#include <stddef.h>

/* malloc'ed copy of s (NULL for NULL or on allocation failure). */
char *bt_strdup(const char *s);
/* malloc'ed printf result, or NULL. */
char *bt_strfmt(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* A number as JSON text: v printed "%.*g" (conv 'g') or "%.*f" (conv 'f', which turns to "%.17g"
 * for magnitudes of 1e15 and more), or `null` when v is NaN or infinite: JSON has neither, and a
 * bare `nan` makes the whole record unreadable. The text lives in the returned struct, so
 * printf("%s", bt_json_num(x, 'g', 6).s) is valid until the end of the statement. */
typedef struct bt_json_text {
    char s[32];
} bt_json_text;
bt_json_text bt_json_num(double v, char conv, int digits);

/* A byte count in the binary unit that keeps it readable: "512 B", "1.0 KiB", "12.3 MiB",
 * "1.5 GiB", "2.0 TiB" (a whole number of bytes below 1 KiB, one decimal from there on), so a
 * small figure never reads "0.0 MiB". The text lives in the returned struct, as bt_json_num's:
 * printf("%s and %s", bt_bytes_text_of(a).s, bt_bytes_text_of(b).s) is valid. */
typedef struct bt_bytes_text {
    char s[32];
} bt_bytes_text;
bt_bytes_text bt_bytes_text_of(double bytes);

#endif
