/* core/strutil.h: small string helpers shared across modules (owned copies, formatted copies). */
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

#endif
