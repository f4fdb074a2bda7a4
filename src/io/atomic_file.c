/* io/atomic_file.c: temporary file + fsync + rename + directory fsync (see atomic_file.h).
 * Invariant: while a bt_atomic_file is open, fd refers to tmp_path, which exists; the target path
 * is touched only by the rename in commit. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"

struct bt_atomic_file {
    char *path;
    char *tmp_path;
    int fd;
    uint64_t written;
};

static bt_atomic_write_hook write_hook;

void bt_atomic_file_set_test_hook(bt_atomic_write_hook hook) { write_hook = hook; }

bt_status bt_atomic_file_open(const char *path, bt_atomic_file **out)
{
    bt_status st = BT_OK;
    bt_atomic_file *f = NULL;
    *out = NULL;
    if (!path || !*path) return bt_error(BT_ERR_INVALID_ARG, "atomic file: empty path");
    f = calloc(1, sizeof *f);
    if (!f) return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    f->fd = -1;
    f->path = bt_strdup(path);
    f->tmp_path = bt_strfmt("%s.tmp.XXXXXX", path);
    if (!f->path || !f->tmp_path) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    f->fd = mkstemp(f->tmp_path);
    if (f->fd < 0) {
        st = bt_error(BT_ERR_IO, "%s: cannot create temporary file %s: %s", path, f->tmp_path,
                      strerror(errno));
        goto fail;
    }
    if (fchmod(f->fd, 0644) != 0) {
        st = bt_error(BT_ERR_IO, "%s: chmod: %s", f->tmp_path, strerror(errno));
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
                return bt_error(BT_ERR_IO, "%s: write: %s (test hook)", f->tmp_path, strerror(EIO));
            if (chunk > room) chunk = room;
        }
        if (chunk > ((size_t)1 << 30)) chunk = (size_t)1 << 30;
        ssize_t n = write(f->fd, p, chunk);
        if (n < 0) {
            if (errno == EINTR) continue;
            return bt_error(BT_ERR_IO, "%s: write: %s", f->tmp_path, strerror(errno));
        }
        p += n;
        size -= (size_t)n;
        f->written += (uint64_t)n;
    }
    return BT_OK;
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return bt_strdup(".");
    if (slash == path) return bt_strdup("/");
    return bt_strfmt("%.*s", (int)(slash - path), path);
}

bt_status bt_atomic_file_commit(bt_atomic_file *f)
{
    bt_status st = BT_OK;
    char *dir = NULL;
    int dfd = -1;
    if (fsync(f->fd) != 0) {
        st = bt_error(BT_ERR_IO, "%s: fsync: %s", f->tmp_path, strerror(errno));
        goto fail;
    }
    int fd = f->fd;
    f->fd = -1;
    if (close(fd) != 0) {
        st = bt_error(BT_ERR_IO, "%s: close: %s", f->tmp_path, strerror(errno));
        goto fail;
    }
    if (rename(f->tmp_path, f->path) != 0) {
        st = bt_error(BT_ERR_IO, "%s: rename from %s: %s", f->path, f->tmp_path, strerror(errno));
        goto fail;
    }
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
done:
    if (dfd >= 0) close(dfd);
    free(dir);
    free(f->path);
    free(f->tmp_path);
    free(f);
    return st;
}

void bt_atomic_file_abort(bt_atomic_file *f)
{
    if (!f) return;
    if (f->fd >= 0) {
        close(f->fd);
        unlink(f->tmp_path);
    }
    free(f->path);
    free(f->tmp_path);
    free(f);
}
