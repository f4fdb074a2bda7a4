/* auto_record.c: the layout `parallel: auto` chose, kept beside a run's checkpoints.
 *
 * Two searches need not choose the same layout (they measure a busy machine), and the layout fixes
 * bits: the micro-batch count sets the order in which gradients and the mean loss are summed. So a
 * resumed run of an auto model must take the layout its first run took, or it would not continue
 * bit for bit. `baton run --checkpoint-dir DIR` on an auto model writes DIR/auto-layout.txt once the
 * layout is chosen (before step 1); `--resume DIR` (or a checkpoint file in DIR) reads it instead of
 * searching again and says so. A resume without the file (a checkpoint from before this record)
 * searches anew and says that the continuation may differ in rounding. Layout flags given to the
 * resumed run replace `auto` before any of this, as they always do.
 *
 * The file is text, one "key value" pair a line: stages, microbatches, schedule, virtual, threads,
 * recompute, devices, layout (written atomically). It is read strictly, since what it says fixes
 * the run: each key once (virtual may be missing: older records), no other key, integers as plain
 * decimals in their range (stages 1..64, microbatches 1..4096, virtual 1..64, threads 1..256,
 * recompute -1..1) with nothing after them, a known schedule, and a final newline; anything else
 * is refused (exit 2) naming file:line and the key or value (`threads 0` once ran 1000x slower). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "cli/run.h"
#include "core/error.h"
#include "core/strutil.h"
#include "io/atomic_file.h"
#include "io/text.h"
#include "train/checkpoint.h"

#define RECORD_NAME "auto-layout.txt"

/* The record's path for a --resume argument: DIR/auto-layout.txt, or beside a checkpoint file. */
static char *record_path(const char *where)
{
    struct stat sb;
    if (stat(where, &sb) == 0 && S_ISDIR(sb.st_mode)) return bt_strfmt("%s/" RECORD_NAME, where);
    const char *slash = strrchr(where, '/');
    if (!slash) return bt_strdup(RECORD_NAME);
    return bt_strfmt("%.*s/" RECORD_NAME, (int)(slash - where), where);
}

int bt_cli_auto_record(const char *dir, const bt_parallel_config *cfg, int threads, int recompute)
{
    /* creates DIR like mkdir -p and tests it for writing, as the trainer will before step 1 */
    bt_status st = bt_checkpoint_dir_prepare(dir, 0, NULL);
    if (st != BT_OK) return bt_cli_fail("run", st);
    char *path = bt_strfmt("%s/" RECORD_NAME, dir);
    char *text = bt_strfmt("stages %d\nmicrobatches %d\nschedule %s\nvirtual %d\nthreads %d\nrecompute %d\ndevices %s\n"
                           "layout %s\n",
                           cfg->stages, cfg->microbatches, bt_schedule_name(cfg->schedule),
                           cfg->virtual_stages > 1 ? cfg->virtual_stages : 1, threads, recompute,
                           cfg->devices ? cfg->devices : "-", cfg->layout ? cfg->layout : "-");
    if (!path || !text) st = bt_error(BT_ERR_NOMEM, "out of memory");
    else st = bt_atomic_file_write_all(path, text, strlen(text));
    free(path);
    free(text);
    return st == BT_OK ? BT_EXIT_OK : bt_cli_fail("run", st);
}

/* The record's fields: what each line's key is, and for the integers their range. */
enum { F_STAGES, F_MICROBATCHES, F_SCHEDULE, F_VIRTUAL, F_THREADS, F_RECOMPUTE, F_DEVICES, F_LAYOUT, N_FIELDS };
static const struct {
    const char *key;
    long long lo, hi; /* integers; lo > hi: text */
    int optional;     /* older records have no virtual line */
} fields[N_FIELDS] = {
    [F_STAGES] = {"stages", 1, BT_MAX_STAGES, 0},
    [F_MICROBATCHES] = {"microbatches", 1, BT_MAX_MICROBATCHES, 0},
    [F_SCHEDULE] = {"schedule", 1, 0, 0},
    [F_VIRTUAL] = {"virtual", 1, BT_MAX_STAGES, 1},
    [F_THREADS] = {"threads", 1, BT_CLI_MAX_THREADS, 0},
    [F_RECOMPUTE] = {"recompute", -1, 1, 0},
    [F_DEVICES] = {"devices", 1, 0, 0},
    [F_LAYOUT] = {"layout", 1, 0, 0},
};

/* A record read strictly: every line "key value" with a key of fields[] (each once), integers
 * in their range with nothing after them, the file ending in a newline. */
typedef struct layout_record {
    const char *text[N_FIELDS]; /* into the file's buffer, NUL-terminated there */
    long long num[N_FIELDS];
    int line[N_FIELDS];         /* 0: absent */
} layout_record;

/* A decimal integer: an optional '-', digits, nothing else; 0 when it is not one or overflows. */
static int read_integer(const char *s, long long *out)
{
    const char *p = s + (*s == '-');
    long long x = 0;
    if (!*p) return 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9' || __builtin_mul_overflow(x, 10, &x) || __builtin_add_overflow(x, *p - '0', &x))
            return 0;
    }
    *out = *s == '-' ? -x : x;
    return 1;
}

/* Parses text[0..n) (text[n] is NUL; the buffer is modified) into rec; errors name path:line. */
static bt_status parse_record(const char *path, char *text, size_t n, layout_record *rec)
{
    memset(rec, 0, sizeof *rec);
    if (memchr(text, '\0', n))
        return bt_error(BT_ERR_INVALID_ARG, "%s: a NUL byte at offset %zu: not a layout record baton wrote", path,
                        (size_t)((char *)memchr(text, '\0', n) - text));
    if (n == 0 || text[n - 1] != '\n') {
        int last = 1;
        for (size_t i = 0; i < n; i++) last += text[i] == '\n';
        return bt_error(BT_ERR_INVALID_ARG, "%s:%d: the record ends without a newline (a truncated file?)", path,
                        last);
    }
    int line = 0;
    for (char *at = text; at < text + n;) {
        char *nl = strchr(at, '\n'), *sp = memchr(at, ' ', (size_t)(nl - at));
        line++;
        *nl = '\0';
        if (!sp)
            return bt_error(BT_ERR_INVALID_ARG, "%s:%d: '%.60s' is not a \"key value\" line", path, line, at);
        *sp = '\0';
        const char *key = at, *value = sp + 1;
        int f = 0;
        while (f < N_FIELDS && strcmp(fields[f].key, key) != 0) f++;
        if (f == N_FIELDS)
            return bt_error(BT_ERR_INVALID_ARG, "%s:%d: unknown key '%.60s' (a record has stages, microbatches, "
                            "schedule, virtual, threads, recompute, devices, layout)", path, line, key);
        if (rec->line[f])
            return bt_error(BT_ERR_INVALID_ARG, "%s:%d: '%s' again (first on line %d)", path, line, key, rec->line[f]);
        if (!*value)
            return bt_error(BT_ERR_INVALID_ARG, "%s:%d: '%s' has no value", path, line, key);
        if (fields[f].lo <= fields[f].hi &&
            (!read_integer(value, &rec->num[f]) || rec->num[f] < fields[f].lo || rec->num[f] > fields[f].hi))
            return bt_error(BT_ERR_INVALID_ARG, "%s:%d: %s '%.60s' is not an integer from %lld to %lld", path, line,
                            key, value, fields[f].lo, fields[f].hi);
        rec->text[f] = value;
        rec->line[f] = line;
        at = nl + 1;
    }
    for (int f = 0; f < N_FIELDS; f++)
        if (!rec->line[f] && !fields[f].optional)
            return bt_error(BT_ERR_INVALID_ARG, "%s: the record has no '%s' line", path, fields[f].key);
    if (!rec->line[F_VIRTUAL]) rec->num[F_VIRTUAL] = 1;
    return BT_OK;
}

int bt_cli_auto_recall(const char *resume, bt_model *m, int *threads, int *recompute, int *found)
{
    *found = 0;
    char *path = record_path(resume);
    if (!path) return bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
    struct stat sb;
    if (stat(path, &sb) != 0) {
        int missing = errno == ENOENT;
        if (missing)
            fprintf(stderr,
                    "baton run: parallel: auto: %s has no record of the layout its run chose; choosing again, so "
                    "the continuation may differ in rounding (give the layout flags of the first run to continue "
                    "bit for bit)\n",
                    resume);
        else
            fprintf(stderr, "baton run: %s: %s\n", path, strerror(errno));
        free(path);
        return missing ? BT_EXIT_OK : BT_EXIT_USAGE;
    }
    unsigned char *raw = NULL;
    size_t n = 0;
    layout_record rec;
    bt_status st = bt_text_read(path, &raw, &n);
    if (st == BT_OK) st = parse_record(path, (char *)raw, n, &rec);
    int kind = -1;
    for (int k = 0; st == BT_OK && k <= (int)BT_SCHEDULE_ZBV; k++)
        if (strcmp(rec.text[F_SCHEDULE], bt_schedule_name((bt_schedule_kind)k)) == 0) kind = k;
    if (st == BT_OK && kind < 0)
        st = bt_error(BT_ERR_INVALID_ARG, "%s:%d: schedule '%.60s' is not one baton knows", path,
                      rec.line[F_SCHEDULE], rec.text[F_SCHEDULE]);
    if (st == BT_OK && strcmp(rec.text[F_DEVICES], "-") == 0)
        st = bt_error(BT_ERR_INVALID_ARG, "%s:%d: devices '-': the record names no devices", path, rec.line[F_DEVICES]);
    if (st != BT_OK) {
        free(raw);
        free(path);
        char detail[640];
        bt_cli_escape(bt_last_error(), detail, sizeof detail);
        fprintf(stderr, "baton run: %s (not a layout record baton wrote: remove it, or give the layout flags)\n",
                detail);
        return BT_EXIT_USAGE;
    }
    const char *devices = rec.text[F_DEVICES], *layout = rec.text[F_LAYOUT];
    const int n_stages = (int)rec.num[F_STAGES], n_mb = (int)rec.num[F_MICROBATCHES],
              n_virtual = (int)rec.num[F_VIRTUAL];
    char *dev = bt_strdup(devices), *lay = strcmp(layout, "-") == 0 ? NULL : bt_strdup(layout);
    if (!dev || (strcmp(layout, "-") != 0 && !lay)) {
        free(dev), free(lay), free(path), free(raw);
        return bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
    }
    bt_parallel_config *cfg = &m->parallel; /* the model owns its config's strings */
    free((char *)cfg->devices);
    free((char *)cfg->layout);
    cfg->auto_layout = 0;
    cfg->devices = dev;
    cfg->layout = lay;
    cfg->stages = n_stages;
    cfg->virtual_stages = n_virtual;
    cfg->microbatches = n_mb;
    cfg->schedule = (bt_schedule_kind)kind;
    cfg->partition = lay ? BT_PARTITION_LAYOUT : BT_PARTITION_UNIFORM;
    cfg->n_balance = 0;
    *threads = (int)rec.num[F_THREADS];
    *recompute = (int)rec.num[F_RECOMPUTE];
    *found = 1;
    printf("parallel: auto: resuming with the layout recorded in %s: %d stage%s on %s, %d micro-batches, %s\n", path,
           n_stages, n_stages == 1 ? "" : "s", dev, n_mb, rec.text[F_SCHEDULE]);
    free(path);
    free(raw);
    return BT_EXIT_OK;
}
