/* io/dir_lock.h: one writer per directory. bt_dir_lock_acquire takes an exclusive flock(2) on
 * DIR/.lock without waiting and records "pid N host H" in it; a second acquirer (another process,
 * or another open in this one) is refused with a message naming the holder. The kernel drops the
 * lock when the holder's descriptor closes, so a crashed or killed run (even by SIGKILL) never
 * leaves a lock that blocks the next: the .lock file stays, unlocked, and is simply taken again.
 * The descriptor is close-on-exec, so programs the holder starts do not keep the lock. Used by
 * the trainer for its checkpoint directory (see train/checkpoint.h). */
#ifndef BT_IO_DIR_LOCK_H
#define BT_IO_DIR_LOCK_H

#include "baton/status.h"

#define BT_DIR_LOCK_FILE ".lock"

typedef struct bt_dir_lock bt_dir_lock;

/* Locks dir (which must exist). what names the directory's role in messages ("checkpoint
 * directory"). A directory held by someone else gives BT_ERR_INVALID_ARG: "DIR is in use by
 * another run (pid N on host H) ...". The caller owns *out (free with bt_dir_lock_release). */
bt_status bt_dir_lock_acquire(const char *dir, const char *what, bt_dir_lock **out);
/* Unlocks and frees; accepts NULL. The .lock file is left in place (removing it would let two
 * runs lock two different files of the same name). */
void bt_dir_lock_release(bt_dir_lock *lock);

#endif
