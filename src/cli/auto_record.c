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
 * recompute, devices, layout (written atomically). */
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

/* Reads one "key value" line's value into buf; 0 when the key is missing. */
static int field(const char *text, const char *key, char *buf, size_t size)
{
    size_t n = strlen(key);
    for (const char *line = text; line && *line; line = strchr(line, '\n') ? strchr(line, '\n') + 1 : NULL) {
        if (strncmp(line, key, n) != 0 || line[n] != ' ') continue;
        const char *v = line + n + 1, *end = strchr(v, '\n');
        size_t len = end ? (size_t)(end - v) : strlen(v);
        if (len + 1 > size) return 0;
        memcpy(buf, v, len);
        buf[len] = '\0';
        return 1;
    }
    return 0;
}

int bt_cli_auto_recall(const char *resume, bt_model *m, int *threads, int *recompute, int *found)
{
    *found = 0;
    char *path = record_path(resume);
    if (!path) return bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
    FILE *fp = fopen(path, "rb");
    if (!fp) {
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
    char text[8192];
    size_t n = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[n] = '\0';
    char stages[32], mb[32], sched[64], th[32], rec[32], devices[2048], layout[4096];
    int ok = field(text, "stages", stages, sizeof stages) && field(text, "microbatches", mb, sizeof mb) &&
             field(text, "schedule", sched, sizeof sched) && field(text, "threads", th, sizeof th) &&
             field(text, "recompute", rec, sizeof rec) && field(text, "devices", devices, sizeof devices) &&
             field(text, "layout", layout, sizeof layout);
    int kind = -1;
    for (int k = 0; ok && k <= (int)BT_SCHEDULE_ZBV; k++)
        if (strcmp(sched, bt_schedule_name((bt_schedule_kind)k)) == 0) kind = k;
    int n_stages = ok ? atoi(stages) : 0, n_mb = ok ? atoi(mb) : 0;
    char virt[32];
    int n_virtual = field(text, "virtual", virt, sizeof virt) ? atoi(virt) : 1; /* older records: none */
    if (!ok || kind < 0 || n_stages < 1 || n_mb < 1 || n_virtual < 1 || strcmp(devices, "-") == 0) {
        fprintf(stderr, "baton run: %s: not a layout record baton wrote (remove it, or give layout flags)\n", path);
        free(path);
        return BT_EXIT_USAGE;
    }
    char *dev = bt_strdup(devices), *lay = strcmp(layout, "-") == 0 ? NULL : bt_strdup(layout);
    if (!dev || (strcmp(layout, "-") != 0 && !lay)) {
        free(dev), free(lay), free(path);
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
    *threads = atoi(th);
    *recompute = atoi(rec);
    *found = 1;
    printf("parallel: auto: resuming with the layout recorded in %s: %d stage%s on %s, %d micro-batches, %s\n", path,
           n_stages, n_stages == 1 ? "" : "s", dev, n_mb, sched);
    free(path);
    return BT_EXIT_OK;
}
