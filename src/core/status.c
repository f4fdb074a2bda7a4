/* core/status.c: the per-thread error message behind bt_last_error() and the status names.
 * Each thread has its own fixed buffer, so a message is never shared or freed across threads.
 * A new message is formatted into a temporary and only then copied into the buffer, so its
 * arguments may point into the buffer itself (bt_error(st, "%s: %s", path, bt_last_error())
 * reads the old message whole, never one half overwritten). Adding context to the current
 * message is bt_error_context's job; the call sites use it rather than quoting the message. */
#include <stdio.h>
#include <string.h>

#include "baton/op.h" /* bt_op_error is declared there, exported */
#include "core/error.h"

#define BT_ERROR_MAX 2048

static _Thread_local char bt_error_buf[BT_ERROR_MAX];

const char *bt_last_error(void) { return bt_error_buf; }

void bt_clear_error(void) { bt_error_buf[0] = '\0'; }

bt_status bt_verror(bt_status status, const char *fmt, va_list ap)
{
    char msg[BT_ERROR_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    memcpy(bt_error_buf, msg, strlen(msg) + 1);
    return status;
}

bt_status bt_error(bt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bt_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

bt_status bt_error_context(bt_status status, const char *fmt, ...)
{
    char prefix[512], old[BT_ERROR_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, bt_error_buf, sizeof old);
    snprintf(bt_error_buf, sizeof bt_error_buf, "%.500s: %.1500s", prefix, old);
    return status;
}

bt_status bt_op_error(bt_status status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    bt_verror(status, fmt, ap);
    va_end(ap);
    return status;
}

const char *bt_status_name(bt_status status)
{
    switch (status) {
    case BT_OK: return "ok";
    case BT_ERR_INVALID_ARG: return "invalid argument";
    case BT_ERR_MODEL: return "model error";
    case BT_ERR_SHAPE: return "shape error";
    case BT_ERR_NOMEM: return "out of memory";
    case BT_ERR_IO: return "i/o error";
    case BT_ERR_BACKEND: return "backend error";
    case BT_ERR_UNSUPPORTED: return "unsupported";
    case BT_ERR_TIMEOUT: return "timeout";
    case BT_ERR_SCHEDULE: return "invalid schedule";
    case BT_ERR_INTERNAL: return "internal error";
    case BT_ERR_NUMERIC: return "not finite";
    }
    return "unknown status";
}
