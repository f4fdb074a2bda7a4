/* dist/agree.h: the ranks of one job agree on what they were given, or the job refuses at
 * start-up. Each rank writes what must be the same everywhere as a record: an ordered list of
 * (field, value) pairs in canonical text (a number as the shortest text that reads back as it, a
 * file as its size and a content digest), so adding a field is one call. bt_agree_check compares
 * the records of every rank of a communicator: one 64-bit hash each (a min/max all-reduce); only
 * when they differ do the ranks gather the records and name the first field that differs, with
 * every rank's value, the same message on every rank.
 *
 * The record is plain data (no MPI); the exchange goes through dist.h's collectives, bounded by a
 * timeout, so a rank that never comes fails the others with BT_ERR_TIMEOUT instead of hanging them.
 * Callers: exec/engine_dist.c (the engine's parameters, plan and schedules) and cli/agree.c (each
 * command's options and inputs). Sits in dist (includes core only). */
#ifndef BT_DIST_AGREE_H
#define BT_DIST_AGREE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "dist/dist.h"

typedef struct bt_agree {
    char *buf;                 /* field NUL value NUL, pair after pair */
    size_t len, cap;
    int failed;                /* out of memory while adding: the record is incomplete */
} bt_agree;

void bt_agree_init(bt_agree *a);
void bt_agree_free(bt_agree *a);

/* Adds one pair; value NULL reads "(none)". */
void bt_agree_str(bt_agree *a, const char *field, const char *value);
void bt_agree_fmt(bt_agree *a, const char *field, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
void bt_agree_int(bt_agree *a, const char *field, long long v);
/* v as the shortest %g text that reads back as v exactly (0.001, not 0.0010000000000000000208). */
void bt_agree_num(bt_agree *a, const char *field, double v);
/* That text into buf (32 bytes are enough); returns buf. */
char *bt_agree_num_text(double v, char *buf, size_t size);
/* A file's identity by content, never its name or mtime: "N bytes, crc32c XXXXXXXX" over its
 * size, its first max(head, 64 KiB) bytes (at most 64 MiB), its last 64 KiB and 32 blocks of 4 KiB
 * evenly spread between them (a few hundred KiB beyond the head, whatever the file's size);
 * "(cannot be read: why)" when it cannot be opened or read, so a rank missing the file disagrees
 * instead of failing alone. */
void bt_agree_file(bt_agree *a, const char *field, const char *path, size_t head);

/* Collective over c: *differ = 0 when every rank's record equals this one's. Otherwise *differ =
 * 1 and BT_ERR_INVALID_ARG with the message "ranks disagree on FIELD: rank 0 has V, ranks 1-2 have
 * W" on every rank alike: the first field where the records part, ranks with the same value
 * grouped, a long value cut (its length and CRC-32C shown). Other failures (a rank that does not
 * answer within timeout_s: BT_ERR_TIMEOUT; out of memory) leave *differ = 0. */
bt_status bt_agree_check(const bt_comm *c, const bt_agree *a, double timeout_s, int *differ);

#endif
