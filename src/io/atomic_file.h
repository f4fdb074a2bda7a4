/* io/atomic_file.h: writing a file so that readers see either the old contents or the new, never
 * a mix. Bytes go to PATH.tmp.XXXXXX in the same directory; commit fsyncs it, renames it over PATH
 * and fsyncs the directory; abort (or any failure) unlinks it. Used by the safetensors and npy
 * writers, so a checkpoint interrupted by a crash leaves the previous checkpoint in place.
 *
 * Test hooks, read from the environment when the file is opened (the fork-and-crash tests set
 * them in a child process; nothing else should):
 *   BT_TEST_CRASH_AFTER_BYTES=N  after N bytes have reached the temporary file, _exit(3), as a
 *                                crash would (the temporary file stays behind, PATH is untouched);
 *                                the one place the library ends the process, and only on request.
 *   BT_TEST_FAIL_AFTER_BYTES=N   after N bytes, writes fail with EIO (a full disk, say), so the
 *                                error path and its cleanup can be tested in-process. */
#ifndef BT_IO_ATOMIC_FILE_H
#define BT_IO_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"

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
/* Path of the temporary file (valid until commit or abort). */
const char *bt_atomic_file_tmp_path(const bt_atomic_file *f);

#endif
