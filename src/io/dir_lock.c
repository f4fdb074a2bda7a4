/* io/dir_lock.c: the directory lock (see dir_lock.h). Invariant: a bt_dir_lock owns fd, an open
 * descriptor of DIR/.lock on which this open file description holds LOCK_EX. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "io/dir_lock.h"

struct bt_dir_lock {
    int fd;
};

/* The holder as the lock file records it ("pid 123 host node7"), or a note when it is empty (the
 * holder locked it but has not written it yet) or unreadable. */
static void describe_holder(int fd, char *buf, size_t size)
{
    char text[256];
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    if (n <= 0) {
        snprintf(buf, size, "pid not recorded yet");
        return;
    }
    text[n] = '\0';
    /* only printable characters reach the message */
    for (ssize_t i = 0; i < n; i++)
        if (text[i] == '\n') text[i] = '\0';
        else if ((unsigned char)text[i] < 0x20 || (unsigned char)text[i] > 0x7e) text[i] = '?';
    unsigned long long pid = 0;
    char host[128] = "";
    if (sscanf(text, "pid %llu host %127s", &pid, host) >= 1)
        snprintf(buf, size, "pid %llu%s%s", pid, host[0] ? " on host " : "", host);
    else
        snprintf(buf, size, "lock file says '%.100s'", text);
}

bt_status bt_dir_lock_acquire(const char *dir, const char *what, bt_dir_lock **out)
{
    bt_status st = BT_OK;
    bt_dir_lock *l = NULL;
    char *path = bt_strfmt("%s/%s", dir, BT_DIR_LOCK_FILE);
    *out = NULL;
    if (!path) return bt_error(BT_ERR_NOMEM, "%s: out of memory", dir);
    l = calloc(1, sizeof *l);
    if (!l) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", dir);
        goto fail;
    }
    l->fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
    if (l->fd < 0) {
        st = bt_error(BT_ERR_IO, "%s: cannot open the lock file of the %s: %s", path, what, strerror(errno));
        goto fail;
    }
    while (flock(l->fd, LOCK_EX | LOCK_NB) != 0) {
        if (errno == EINTR) continue;
        if (errno == EWOULDBLOCK) {
            char holder[200];
            describe_holder(l->fd, holder, sizeof holder);
            st = bt_error(BT_ERR_INVALID_ARG,
                          "%s: the %s is in use by another run (%s); two runs writing one directory would "
                          "overwrite each other's files: wait for it to end or choose another directory",
                          dir, what, holder);
        } else {
            st = bt_error(BT_ERR_IO, "%s: cannot lock: %s", path, strerror(errno));
        }
        goto fail;
    }
    char host[256] = "", text[400];
    if (gethostname(host, sizeof host) != 0) host[0] = '\0';
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c <= ' ' || *c > '~') *c = '?';
    int n = snprintf(text, sizeof text, "pid %lld host %s\n", (long long)getpid(), host[0] ? host : "unknown");
    if (ftruncate(l->fd, 0) != 0 || pwrite(l->fd, text, (size_t)n, 0) != n) {
        st = bt_error(BT_ERR_IO, "%s: cannot record this process in the lock file: %s", path, strerror(errno));
        goto fail;
    }
    free(path);
    *out = l;
    return BT_OK;
fail:
    free(path);
    bt_dir_lock_release(l);
    return st;
}

void bt_dir_lock_release(bt_dir_lock *l)
{
    if (!l) return;
    if (l->fd >= 0) close(l->fd); /* closing the only descriptor of the description drops the lock */
    free(l);
}
