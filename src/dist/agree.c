/* dist/agree.c: the ranks' agreement records (dist/agree.h). A record is field NUL value NUL ...;
 * its hash is FNV-1a over those bytes. Only when the hashes differ does any rank see another's
 * record: the lengths are all-gathered, then every record padded to the longest, and every rank
 * walks them in step to the first pair where they part (the same walk, so the same message, on
 * every rank). A file's digest reads a bounded sample of it (agree.h says which bytes). */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/crc32c.h"
#include "core/error.h"
#include "core/strutil.h"
#include "dist/agree.h"

#define HEAD_MIN ((size_t)64 << 10)
#define HEAD_MAX ((size_t)64 << 20)
#define TAIL ((size_t)64 << 10)
#define BLOCK ((size_t)4 << 10)
#define BLOCKS 32
#define SHOWN 96     /* characters of a value a message shows before cutting it */
#define MAX_GROUPS 8 /* distinct values a message lists */

void bt_agree_init(bt_agree *a) { memset(a, 0, sizeof *a); }

void bt_agree_free(bt_agree *a)
{
    free(a->buf);
    memset(a, 0, sizeof *a);
}

static void put(bt_agree *a, const char *s)
{
    size_t n = strlen(s) + 1;
    if (a->failed) return;
    if (a->len + n > a->cap) {
        size_t cap = a->cap ? 2 * a->cap : 1024;
        while (cap < a->len + n) cap *= 2;
        char *b = realloc(a->buf, cap);
        if (!b) {
            a->failed = 1;
            return;
        }
        a->buf = b;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, s, n);
    a->len += n;
}

void bt_agree_str(bt_agree *a, const char *field, const char *value)
{
    put(a, field);
    put(a, value ? value : "(none)");
}

void bt_agree_fmt(bt_agree *a, const char *field, const char *fmt, ...)
{
    char stack[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(stack, sizeof stack, fmt, ap);
    va_end(ap);
    if (n < 0) {
        a->failed = 1;
        return;
    }
    if ((size_t)n < sizeof stack) {
        bt_agree_str(a, field, stack);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        a->failed = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    bt_agree_str(a, field, big);
    free(big);
}

void bt_agree_int(bt_agree *a, const char *field, long long v) { bt_agree_fmt(a, field, "%lld", v); }

char *bt_agree_num_text(double v, char *buf, size_t size)
{
    for (int digits = 1; digits <= 17; digits++) {
        snprintf(buf, size, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break; /* NaN never reads back: it ends at 17 digits, "nan" */
    }
    return buf;
}

void bt_agree_num(bt_agree *a, const char *field, double v)
{
    char text[40];
    bt_agree_str(a, field, bt_agree_num_text(v, text, sizeof text));
}

/* CRC-32C of bytes [off, off + len) of fd, continuing crc; 0 or an errno. */
static int crc_range(int fd, off_t off, size_t len, unsigned char *buf, size_t cap, uint32_t *crc)
{
    while (len > 0) {
        size_t want = len < cap ? len : cap;
        ssize_t got = pread(fd, buf, want, off);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) return errno;
        if (got == 0) return EIO; /* shorter than fstat said: changing under us */
        *crc = bt_crc32c(*crc, buf, (size_t)got);
        off += got;
        len -= (size_t)got;
    }
    return 0;
}

static int digest_fd(int fd, size_t size, size_t head, uint32_t *crc)
{
    unsigned char buf[16384];
    unsigned char sz[8];
    for (int i = 0; i < 8; i++) sz[i] = (unsigned char)((uint64_t)size >> (8 * i));
    *crc = bt_crc32c(0, sz, sizeof sz);
    if (head < HEAD_MIN) head = HEAD_MIN;
    if (head > HEAD_MAX) head = HEAD_MAX;
    if (head > size) head = size;
    size_t tail_at = size - head > TAIL ? size - TAIL : head;
    int err = crc_range(fd, 0, head, buf, sizeof buf, crc);
    size_t mid = tail_at - head;
    if (!err && mid <= (size_t)BLOCKS * BLOCK) err = crc_range(fd, (off_t)head, mid, buf, sizeof buf, crc);
    for (int k = 0; !err && mid > (size_t)BLOCKS * BLOCK && k < BLOCKS; k++)
        err = crc_range(fd, (off_t)(head + (size_t)((double)mid * k / BLOCKS)), BLOCK, buf, sizeof buf, crc);
    if (!err) err = crc_range(fd, (off_t)tail_at, size - tail_at, buf, sizeof buf, crc);
    return err;
}

void bt_agree_file(bt_agree *a, const char *field, const char *path, size_t head)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        bt_agree_fmt(a, field, "(cannot be read: %s)", strerror(errno));
        return;
    }
    struct stat sb;
    uint32_t crc = 0;
    int err = fstat(fd, &sb) != 0 ? errno : 0;
    if (!err && S_ISDIR(sb.st_mode)) bt_agree_str(a, field, "(a directory)");
    else if (!err && !S_ISREG(sb.st_mode)) bt_agree_str(a, field, "(not a regular file)");
    else if (!err && (err = digest_fd(fd, (size_t)sb.st_size, head, &crc)) == 0)
        bt_agree_fmt(a, field, "%lld bytes, crc32c %08x", (long long)sb.st_size, crc);
    if (err) bt_agree_fmt(a, field, "(cannot be read: %s)", strerror(err));
    close(fd);
}

/* ---- comparing ------------------------------------------------------------------------------ */

/* The next (field, value) of rec from *at, or 0 at its end (a cut-off pair ends it too). */
static int next_pair(const char *rec, size_t len, size_t *at, const char **field, const char **value)
{
    const char *f = rec + *at;
    const char *fe = *at < len ? memchr(f, '\0', len - *at) : NULL;
    if (!fe) return 0;
    const char *v = fe + 1;
    size_t vat = (size_t)(v - rec);
    const char *ve = vat < len ? memchr(v, '\0', len - vat) : NULL;
    if (!ve) return 0;
    *field = f;
    *value = v;
    *at = (size_t)(ve + 1 - rec);
    return 1;
}

static void append(char *msg, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size) return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(msg + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0) *used += (size_t)n;
    if (*used >= size) *used = size - 1;
}

/* A value as a message shows it: control bytes as \xNN, cut after SHOWN characters. */
static void append_value(char *msg, size_t size, size_t *used, const char *v)
{
    size_t n = strlen(v), shown = n > SHOWN ? SHOWN : n;
    for (size_t i = 0; i < shown; i++) {
        unsigned char ch = (unsigned char)v[i];
        if (ch < 0x20 || ch == 0x7f) append(msg, size, used, "\\x%02x", ch);
        else append(msg, size, used, "%c", ch);
    }
    if (n > shown) append(msg, size, used, "... (%zu bytes, crc32c %08x)", n, bt_crc32c(0, v, n));
}

/* "rank 3", "ranks 0-2, 5": the ranks r of group g (of[r] == g). */
static void append_ranks(char *msg, size_t size, size_t *used, const int *of, int n, int g)
{
    int count = 0;
    for (int r = 0; r < n; r++) count += of[r] == g;
    append(msg, size, used, count == 1 ? "rank " : "ranks ");
    int first = 1;
    for (int r = 0; r < n; r++) {
        if (of[r] != g) continue;
        int end = r;
        while (end + 1 < n && of[end + 1] == g) end++;
        append(msg, size, used, first ? "%d" : ", %d", r);
        if (end > r) append(msg, size, used, "-%d", end);
        first = 0;
        r = end;
    }
    append(msg, size, used, count == 1 ? " has " : " have ");
}

/* The first field where the n records differ, as agree.h shows it, into msg; 0 (msg "") when
 * they are equal. */
static int compare(const char *const *recs, const size_t *lens, int n, char *msg, size_t size)
{
    if (size) msg[0] = '\0';
    size_t *at = calloc((size_t)n, sizeof *at);
    const char **f = calloc((size_t)n, sizeof *f), **v = calloc((size_t)n, sizeof *v);
    char **shown = calloc((size_t)n, sizeof *shown);
    int *has = calloc((size_t)n, sizeof *has), *of = calloc((size_t)n, sizeof *of);
    int differ = 0;
    if (!at || !f || !v || !shown || !has || !of) {
        snprintf(msg, size, "their records (out of memory to say which field)");
        differ = 1;
        goto done;
    }
    for (;;) {
        int any = 0, same = 1;
        for (int r = 0; r < n; r++) {
            has[r] = next_pair(recs[r], lens[r], &at[r], &f[r], &v[r]);
            any |= has[r];
        }
        if (!any) break;
        for (int r = 1; r < n && same; r++)
            same = has[r] && has[0] && strcmp(f[r], f[0]) == 0 && strcmp(v[r], v[0]) == 0;
        if (same) continue;
        differ = 1;
        int ref = 0;
        while (!has[ref]) ref++;
        const char *field = f[ref];
        for (int r = 0; r < n; r++) /* what each rank says about field */
            shown[r] = !has[r] ? bt_strfmt("(no such field)")
                       : strcmp(f[r], field) != 0 ? bt_strfmt("(no such field; its next is %s)", f[r])
                                                  : bt_strfmt("%s", v[r]);
        int groups = 0;
        for (int r = 0; r < n; r++) {
            of[r] = -1;
            for (int q = 0; q < r && of[r] < 0; q++)
                if (shown[q] && shown[r] && strcmp(shown[q], shown[r]) == 0) of[r] = of[q];
            if (of[r] < 0) of[r] = groups++;
        }
        size_t used = 0;
        append(msg, size, &used, "%s: ", field);
        for (int g = 0; g < groups && g < MAX_GROUPS; g++) {
            int r = 0;
            while (of[r] != g) r++;
            if (g) append(msg, size, &used, ", ");
            append_ranks(msg, size, &used, of, n, g);
            append_value(msg, size, &used, shown[r] ? shown[r] : "(out of memory)");
        }
        if (groups > MAX_GROUPS) append(msg, size, &used, ", and %d more values", groups - MAX_GROUPS);
        for (int r = 0; r < n; r++) free(shown[r]);
        break;
    }
done:
    free(at), free(f), free(v), free(shown), free(has), free(of);
    return differ;
}

/* ---- the exchange --------------------------------------------------------------------------- */

static uint64_t fnv1a(const char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)p[i]) * 0x100000001b3ULL;
    return h;
}

bt_status bt_agree_check(const bt_comm *c, const bt_agree *a, double timeout_s, int *differ)
{
    *differ = 0;
    /* an incomplete record takes part as an empty one, so the others are not left waiting */
    const char *mine = a->failed || !a->buf ? "" : a->buf;
    size_t mine_len = a->failed ? 0 : a->len;
    uint64_t lo = 0, hi = 0;
    BT_TRY(bt_comm_minmax_u64(c, fnv1a(mine, mine_len), &lo, &hi, timeout_s));
    if (lo == hi) return a->failed ? bt_error(BT_ERR_NOMEM, "out of memory for the ranks' agreement record") : BT_OK;
    const int n = bt_comm_size(c);
    uint64_t len = mine_len, *lens = calloc((size_t)n, sizeof *lens);
    size_t *sizes = calloc((size_t)n, sizeof *sizes);
    const char **recs = calloc((size_t)n, sizeof *recs);
    char *pad = NULL, *all = NULL, msg[1800];
    bt_status st = lens && sizes && recs ? BT_OK : bt_error(BT_ERR_NOMEM, "out of memory comparing the ranks");
    if (st == BT_OK) st = bt_comm_allgather_bytes(c, &len, sizeof len, lens, timeout_s);
    size_t longest = 0;
    for (int r = 0; st == BT_OK && r < n; r++)
        if (lens[r] > longest) longest = (size_t)lens[r];
    if (st == BT_OK && (!(pad = calloc(longest + 1, 1)) || !(all = malloc((size_t)n * longest + 1))))
        st = bt_error(BT_ERR_NOMEM, "out of memory comparing the ranks' records (%d x %zu bytes)", n, longest);
    if (st == BT_OK) {
        memcpy(pad, mine, mine_len);
        st = bt_comm_allgather_bytes(c, pad, longest, all, timeout_s);
    }
    if (st == BT_OK) {
        for (int r = 0; r < n; r++) {
            recs[r] = all + (size_t)r * longest;
            sizes[r] = (size_t)lens[r];
        }
        if (compare(recs, sizes, n, msg, sizeof msg)) {
            *differ = 1;
            st = bt_error(BT_ERR_INVALID_ARG, "ranks disagree on %s", msg);
        } else if (a->failed) {
            st = bt_error(BT_ERR_NOMEM, "out of memory for the ranks' agreement record");
        }
    }
    free(lens), free(sizes), free(recs), free(pad), free(all);
    return st;
}
