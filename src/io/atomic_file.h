/* io/atomic_file.h: writing a file so that readers see either the old contents or the new, never
 * a mix. Bytes go to PATH.tmp.XXXXXX in the same directory; commit fsyncs it, renames it over PATH
 * and fsyncs the directory; abort (or any failure) unlinks it. Used by the safetensors and npy
 * writers, so a checkpoint interrupted by a crash leaves the previous checkpoint in place.
 *
 * Tests can install a write hook (bt_atomic_file_set_test_hook) to make writes fail part-way, as
 * a full disk would, or to end a forked child in the middle of a write, as a crash would; the
 * library itself never exits. */
#ifndef BT_IO_ATOMIC_FILE_H
#define BT_IO_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"

/* Called before bytes reach a temporary file: `written` bytes are already there and `want` more
 * are about to be written. Returns how many of them may be written now (at most want); 0 makes
 * the write fail with EIO. A test that simulates a crash calls _exit from its hook. */
typedef size_t (*bt_atomic_write_hook)(uint64_t written, size_t want);

/* Installs hook for every atomic file of the process (NULL removes it). For tests only. */
void bt_atomic_file_set_test_hook(bt_atomic_write_hook hook);

typedef struct bt_atomic_file bt_atomic_file;

/* Creates the temporary file beside path. The caller owns *out: finish it with exactly one of
 * bt_atomic_file_commit or bt_atomic_file_abort. */
bt_status bt_atomic_file_open(const char *path, bt_atomic_file **out);
/* Appends size bytes (loops over short writes). */
bt_status bt_atomic_file_write(bt_atomic_file *f, const void *data, size_t size);
/* fsync, close, rename over the target, fsync the directory; frees f whatever happens (on failure
 * the temporary file is removed and the target keeps its old contents). */
bt_status bt_atomic_file_commit(bt_atomic_file *f);
/* Closes and removes the temporary file and frees f; accepts NULL. */
void bt_atomic_file_abort(bt_atomic_file *f);

#endif
