/* io/atomic_file.c: temporary file + fsync + rename + directory fsync (see atomic_file.h).
 * Invariant: while a bt_atomic_file is open, either fd refers to tmp_path, which exists, and the
 * target path (the name a symbolic link finally points at) is touched only by the rename in
 * commit; or the target is a FIFO or device, tmp_path is NULL and fd is the target itself (direct
 * writing). While a temporary file is open its tmp_path is also in pending[] (a slot is FREE,
 * CLAIMED while its path is copied in, or READY), which a signal handler reads with atomics only. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"

struct bt_atomic_file {
    char *path;     /* what is replaced: the caller's path, or the name its symbolic links lead to */
    char *tmp_path; /* NULL when writing directly to a FIFO or device */
    int fd;
    int slot;  /* index in pending[], or -1 */
    uint64_t written;
};

static bt_atomic_write_hook write_hook;

void bt_atomic_file_set_test_hook(bt_atomic_write_hook hook) { write_hook = hook; }

/* ---- temporaries a signal handler may remove ---- */

enum { SLOT_FREE, SLOT_CLAIMED, SLOT_READY };

typedef struct pending_slot {
    atomic_int state;
    char path[PATH_MAX];
} pending_slot;

static pending_slot pending[BT_ATOMIC_MAX_PENDING];

/* The slot now holding tmp_path, or -1 when the table is full or the path too long. */
static int register_pending(const char *tmp_path)
{
    size_t len = strlen(tmp_path);
    if (len >= PATH_MAX) return -1;
    for (int i = 0; i < BT_ATOMIC_MAX_PENDING; i++) {
        int expect = SLOT_FREE;
        if (atomic_compare_exchange_strong(&pending[i].state, &expect, SLOT_CLAIMED)) {
            memcpy(pending[i].path, tmp_path, len + 1);
            atomic_store(&pending[i].state, SLOT_READY);
            return i;
        }
    }
    return -1;
}

static void unregister_pending(bt_atomic_file *f)
{
    if (f->slot >= 0) atomic_store(&pending[f->slot].state, SLOT_FREE);
    f->slot = -1;
}

void bt_atomic_file_remove_temporaries(void)
{
    for (int i = 0; i < BT_ATOMIC_MAX_PENDING; i++)
        if (atomic_load(&pending[i].state) == SLOT_READY) unlink(pending[i].path);
}

static void on_signal(int sig)
{
    int saved = errno;
    struct sigaction dfl;
    bt_atomic_file_remove_temporaries();
    dfl.sa_handler = SIG_DFL;
    dfl.sa_flags = 0;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig); /* blocked until the handler returns, then the default action ends the process */
    errno = saved;
}

void bt_atomic_file_remove_on_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old, sa;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler == SIG_IGN) continue;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

/* "<base>.tmp." followed by exactly six letters or digits. */
static int is_stale_name(const char *name, const char *base)
{
    size_t n = strlen(base);
    if (strncmp(name, base, n) != 0 || strncmp(name + n, ".tmp.", 5) != 0) return 0;
    const char *x = name + n + 5;
    for (int i = 0; i < 6; i++)
        if (!isalnum((unsigned char)x[i])) return 0;
    return x[6] == '\0';
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return bt_strdup(".");
    if (slash == path) return bt_strdup("/");
    return bt_strfmt("%.*s", (int)(slash - path), path);
}

bt_status bt_atomic_file_remove_stale(const char *path, int *removed)
{
    bt_status st = BT_OK;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char *dir = dir_of(path);
    DIR *d = NULL;
    int count = 0;
    if (!dir) return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    d = opendir(dir);
    if (!d) {
        st = bt_error(BT_ERR_IO, "%s: cannot list the directory: %s", dir, strerror(errno));
        goto done;
    }
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!is_stale_name(e->d_name, base)) continue;
        char *full = bt_strfmt("%s/%s", dir, e->d_name);
        struct stat sb;
        if (!full) {
            st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
            goto done;
        }
        if (lstat(full, &sb) == 0 && S_ISREG(sb.st_mode)) {
            if (unlink(full) == 0) count++;
            else if (errno != ENOENT)
                st = bt_error(BT_ERR_IO, "%s: cannot remove a stale temporary file: %s", full, strerror(errno));
        }
        free(full);
        if (st != BT_OK) goto done;
    }
done:
    if (d) closedir(d);
    free(dir);
    if (removed) *removed = count;
    return st;
}

/* ---- where the bytes go ---- */

#define MAX_LINK_HOPS 40 /* as the kernel's own limit on following symbolic links */

/* The name path's symbolic links finally lead to, hop by hop (a relative link is read from the
 * link's directory); path itself when it is no link. The name need not exist: a dangling link
 * leads to the file it names, which the rename then creates. *out is malloc'ed. */
static bt_status follow_links(const char *path, char **out)
{
    char *cur = bt_strdup(path);
    *out = NULL;
    for (int hops = 0; cur; hops++) {
        struct stat sb;
        char target[PATH_MAX];
        if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) {
            *out = cur;
            return BT_OK;
        }
        if (hops == MAX_LINK_HOPS) {
            free(cur);
            return bt_error(BT_ERR_IO, "%s: more than %d symbolic links to follow", path, MAX_LINK_HOPS);
        }
        ssize_t n = readlink(cur, target, sizeof target - 1);
        if (n < 0) {
            bt_status st = bt_error(BT_ERR_IO, "%s: cannot read the symbolic link %s: %s", path, cur, strerror(errno));
            free(cur);
            return st;
        }
        target[n] = '\0';
        char *next = NULL;
        if (target[0] == '/') {
            next = bt_strdup(target);
        } else {
            char *dir = dir_of(cur);
            next = dir ? bt_strfmt("%s/%s", dir, target) : NULL;
            free(dir);
        }
        free(cur);
        cur = next;
    }
    return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
}

/* A FIFO or device at path (the kernel following any links, /dev/stdout's included): opened for
 * writing through, *fd >= 0. A directory or socket: an error. Anything else (a regular file, no
 * file yet): *fd stays -1, for the temporary file and rename. */
static bt_status open_special(const char *path, int *fd)
{
    struct stat sb;
    *fd = -1;
    if (stat(path, &sb) != 0 || S_ISREG(sb.st_mode)) return BT_OK;
    if (S_ISDIR(sb.st_mode)) return bt_error(BT_ERR_IO, "%s: is a directory, not a file to write", path);
    if (!S_ISFIFO(sb.st_mode) && !S_ISCHR(sb.st_mode) && !S_ISBLK(sb.st_mode))
        return bt_error(BT_ERR_IO, "%s: is a socket or other special file, which cannot be written to", path);
    do
        *fd = open(path, O_WRONLY | O_CLOEXEC);
    while (*fd < 0 && errno == EINTR);
    if (*fd < 0) return bt_error(BT_ERR_IO, "%s: cannot open it for writing: %s", path, strerror(errno));
    return BT_OK;
}

/* ---- writing ---- */

bt_status bt_atomic_file_open(const char *path, bt_atomic_file **out)
{
    bt_status st = BT_OK;
    bt_atomic_file *f = NULL;
    *out = NULL;
    if (!path || !*path) return bt_error(BT_ERR_INVALID_ARG, "atomic file: empty path");
    f = calloc(1, sizeof *f);
    if (!f) return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->slot = -1;
    BT_TRY_GOTO(st, open_special(path, &f->fd), fail);
    if (f->fd >= 0) { /* written through: the node stays what it is */
        if (!(f->path = bt_strdup(path))) {
            st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
            goto fail;
        }
        *out = f;
        return BT_OK;
    }
    BT_TRY_GOTO(st, follow_links(path, &f->path), fail);
    f->tmp_path = bt_strfmt("%s.tmp.XXXXXX", f->path);
    if (!f->tmp_path) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    f->fd = mkstemp(f->tmp_path);
    if (f->fd < 0) {
        st = bt_error(BT_ERR_IO, "%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        goto fail;
    }
    f->slot = register_pending(f->tmp_path);
    if (fchmod(f->fd, 0644) != 0) {
        st = bt_error(BT_ERR_IO, "%s: chmod of its temporary file: %s", path, strerror(errno));
        goto fail;
    }
    *out = f;
    return BT_OK;
fail:
    bt_atomic_file_abort(f);
    return st;
}

bt_status bt_atomic_file_write(bt_atomic_file *f, const void *data, size_t size)
{
    const unsigned char *p = data;
    while (size > 0) {
        size_t chunk = size;
        if (write_hook) {
            size_t room = write_hook(f->written, size);
            if (room == 0)
                return bt_error(BT_ERR_IO, "%s: write: %s (test hook)", f->path, strerror(EIO));
            if (chunk > room) chunk = room;
        }
        if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
        ssize_t n = write(f->fd, p, chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            return bt_error(BT_ERR_IO, "%s: write: %s", f->path, strerror(errno));
        }
        p += n;
        size -= (size_t)n;
        f->written += (uint64_t)n;
    }
    return BT_OK;
}

bt_status bt_atomic_file_commit(bt_atomic_file *f)
{
    bt_status st = BT_OK;
    char *dir = NULL;
    int dfd = -1;
    if (!f->tmp_path) { /* a FIFO or device: nothing to sync or rename */
        if (close(f->fd) != 0) st = bt_error(BT_ERR_IO, "%s: close: %s", f->path, strerror(errno));
        goto done;
    }
    if (fsync(f->fd) != 0) {
        st = bt_error(BT_ERR_IO, "%s: fsync: %s", f->path, strerror(errno));
        goto fail;
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) {
        st = bt_error(BT_ERR_IO, "%s: close: %s", f->path, strerror(errno));
        goto fail;
    }
    if (rename(f->tmp_path, f->path) != 0) {
        st = bt_error(BT_ERR_IO, "%s: cannot rename the new file into place: %s", f->path, strerror(errno));
        goto fail;
    }
    unregister_pending(f);
    dir = dir_of(f->path);
    if (!dir) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", f->path);
        goto done;
    }
    dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || fsync(dfd) != 0)
        st = bt_error(BT_ERR_IO, "%s: fsync of directory %s: %s", f->path, dir, strerror(errno));
    goto done;
fail:
    unlink(f->tmp_path);
    unregister_pending(f);
done:
    if (dfd >= 0) close(dfd);
    free(dir);
    free(f->path);
    free(f->tmp_path);
    free(f);
    return st;
}

bt_status bt_atomic_file_write_all(const char *path, const void *data, size_t size)
{
    bt_atomic_file *f = NULL;
    bt_status st = bt_atomic_file_open(path, &f);
    if (st == BT_OK) st = bt_atomic_file_write(f, data, size);
    if (st == BT_OK) return bt_atomic_file_commit(f);
    bt_atomic_file_abort(f);
    return st;
}

void bt_atomic_file_abort(bt_atomic_file *f)
{
    if (!f) return;
    if (f->fd >= 0) {
        close(f->fd);
        if (f->tmp_path) unlink(f->tmp_path);
    }
    unregister_pending(f);
    free(f->path);
    free(f->tmp_path);
    free(f);
}
