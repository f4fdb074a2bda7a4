/* io/atomic_file.h: writing a file so that readers see either the old contents or the new, never
 * a mix. Bytes go to PATH.tmp.XXXXXX in the same directory; commit fsyncs it, renames it over PATH
 * and fsyncs the directory; abort (or any failure) unlinks it. Used by the safetensors and npy
 * writers, so a checkpoint interrupted by a crash leaves the previous checkpoint in place.
 *
 * Signals: every open temporary file is registered in a fixed table that an async-signal-safe
 * function (bt_atomic_file_remove_temporaries) can walk; bt_atomic_file_remove_on_signals, called
 * by a program's main (the baton command does), installs SIGINT/SIGTERM/SIGHUP handlers that remove
 * them and then die of the signal as before. SIGKILL and power loss cannot be caught: the next
 * writer of a directory removes the stale temporaries (bt_atomic_file_remove_stale), which is
 * safe only while nothing else writes that file (the checkpoint directory lock guarantees it).
 * The table holds BT_ATOMIC_MAX_PENDING files; a file opened while it is full is written all the
 * same, and only the stale clean-up removes it after a signal.
 *
 * What PATH already is decides how it is written (docs/cli.md, "Outputs never destroy inputs"):
 * - a symbolic link is followed, hop by hop, to the name it finally points at (which may not
 *   exist yet), and that name is replaced atomically as above: the link stays a link, its target
 *   gets the new contents (a temporary file beside the target, not beside the link);
 * - a FIFO or a character or block device (/dev/stdout on a pipe or a terminal, /dev/null) is
 *   opened and written through, directly: no temporary file and no rename, so the node is never
 *   replaced by a regular file. Nothing is atomic there: abort cannot take back bytes already
 *   written, and commit only closes it (no fsync);
 * - a directory or a socket is refused at open, before anything is written.
 *
 * Every failure names PATH, never the temporary (which is gone by the time anyone reads the
 * message), and leaves PATH as it was.
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

#define BT_ATOMIC_MAX_PENDING 32

/* Unlinks every temporary file now open in this process. Async-signal-safe (atomics and unlink
 * only): for signal handlers. The files stay open and registered; their writers fail later. */
void bt_atomic_file_remove_temporaries(void);
/* Installs handlers for SIGINT, SIGTERM and SIGHUP that call bt_atomic_file_remove_temporaries,
 * restore the default action and raise the signal again, so the process still dies of it. A
 * signal the process ignores stays ignored. For a program's main: the library never calls it. */
void bt_atomic_file_remove_on_signals(void);
/* Removes the temporary files an earlier writer of path left behind when it was killed: regular
 * files in path's directory named exactly "<basename of path>.tmp.XXXXXX" (six letters or
 * digits, as mkstemp makes them); nothing else. Only safe while no other process writes path.
 * *removed (may be NULL) gets how many were removed. */
bt_status bt_atomic_file_remove_stale(const char *path, int *removed);

typedef struct bt_atomic_file bt_atomic_file;

/* Creates the temporary file beside path (beside the target of a symbolic link), or opens a FIFO
 * or device path for writing through (see above; opening a FIFO waits for its reader). The caller
 * owns *out: finish it with exactly one of bt_atomic_file_commit or bt_atomic_file_abort. */
bt_status bt_atomic_file_open(const char *path, bt_atomic_file **out);
/* Appends size bytes (loops over short writes). */
bt_status bt_atomic_file_write(bt_atomic_file *f, const void *data, size_t size);
/* fsync, close, rename over the target, fsync the directory; frees f whatever happens (on failure
 * the temporary file is removed and the target keeps its old contents). */
bt_status bt_atomic_file_commit(bt_atomic_file *f);
/* Closes and removes the temporary file and frees f; accepts NULL. */
void bt_atomic_file_abort(bt_atomic_file *f);
/* path's whole contents replaced by data[0..size) atomically: open, write, commit (abort on a
 * failure, the target keeping its old contents). */
bt_status bt_atomic_file_write_all(const char *path, const void *data, size_t size);

#endif
