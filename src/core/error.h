/* core/error.h: setting the calling thread's error message and propagating statuses.
 * bt_error() formats a message, stores it for bt_last_error() and returns the status, so a failing
 * path reads `return bt_error(BT_ERR_IO, "%s: %s", path, strerror(errno));`. BT_TRY propagates a
 * failure from a callee unchanged (its message already says what happened); bt_error_context adds
 * where it happened in front of it. The arguments may point into the current message itself
 * (bt_last_error()): it is read whole before it is replaced. Never prints. */
#ifndef BT_CORE_ERROR_H
#define BT_CORE_ERROR_H

#include <stdarg.h>

#include "baton/status.h"

#ifdef __cplusplus
extern "C" {
#endif

bt_status bt_error(bt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
bt_status bt_verror(bt_status status, const char *fmt, va_list ap);
/* Prepends "prefix: " to the current message (adds context on the way up) and returns status. */
bt_status bt_error_context(bt_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define BT_TRY(expr)                       \
    do {                                   \
        bt_status bt_try_s_ = (expr);      \
        if (bt_try_s_ != BT_OK) return bt_try_s_; \
    } while (0)

/* For goto-cleanup functions: `BT_TRY_GOTO(st, f(x), fail);` */
#define BT_TRY_GOTO(st, expr, label) \
    do {                             \
        (st) = (expr);               \
        if ((st) != BT_OK) goto label; \
    } while (0)

#ifdef __cplusplus
}
#endif

#endif
