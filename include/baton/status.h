/* baton/status.h: the one status type every fallible baton call returns, and the calling thread's
 * detailed message for the last failure. 0 is success; nothing in the library prints or exits. */
#ifndef BATON_STATUS_H
#define BATON_STATUS_H

#include "baton/api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum bt_status {
    BT_OK = 0,
    BT_ERR_INVALID_ARG = 1, /* a caller passed a bad value (NULL handle, unknown name, ...) */
    BT_ERR_MODEL = 2,       /* the model (YAML or graph) is malformed: parse, key, type, range */
    BT_ERR_SHAPE = 3,       /* shapes or dtypes of a layer's inputs do not fit its op */
    BT_ERR_NOMEM = 4,       /* host or device allocation failed */
    BT_ERR_IO = 5,          /* reading or writing a file failed, or its contents are corrupt */
    BT_ERR_BACKEND = 6,     /* a device library (BLAS, CUDA, cuBLAS, cuDNN) reported an error */
    BT_ERR_UNSUPPORTED = 7, /* valid request this build or device cannot do */
    BT_ERR_TIMEOUT = 8,     /* the watchdog stopped a run that waited too long */
    BT_ERR_SCHEDULE = 9,    /* a schedule failed validation */
    BT_ERR_INTERNAL = 10,   /* a bug in baton */
    BT_ERR_NUMERIC = 11     /* a number that must be finite is not: a gradient, a weight, a loss */
} bt_status;

/* The detailed message of the last failing call on this thread ("" if none). The string is owned
 * by baton and valid until the next failing call on the same thread. */
BT_API const char *bt_last_error(void);

/* A short fixed name for a status code ("invalid argument", ...). Never NULL. */
BT_API const char *bt_status_name(bt_status status);

/* Clears this thread's last error message. */
BT_API void bt_clear_error(void);

#ifdef __cplusplus
}
#endif
#endif
