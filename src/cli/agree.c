/* cli/agree.c: the CLI's fields of the ranks' agreement record (data sources, weights) and the
 * comparison at start-up (cli/agree.h). A file is named by its content, never its path: each rank
 * may see the same data under another mount point, and two copies of one checkpoint are the same
 * weights. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/agree.h"
#include "core/error.h"
#include "core/strutil.h"
#include "train/ckpt_index.h"
#include "train/ckpt_source.h"

static const char *data_kind_name(bt_data_kind k)
{
    static const char *const names[] = {"none", "synthetic", "idx", "npy", "text", "tokens"};
    return (unsigned)k < sizeof names / sizeof *names ? names[k] : "?";
}

void bt_cli_agree_data(bt_agree *a, const char *prefix, const bt_data_source *d)
{
    char field[256];
#define FIELD(name) (snprintf(field, sizeof field, "%s.%s", prefix, name), field)
    bt_agree_str(a, FIELD("type"), data_kind_name(d->kind));
    switch (d->kind) {
    case BT_DATA_NONE: return;
    case BT_DATA_SYNTHETIC: bt_agree_int(a, FIELD("samples"), (long long)d->samples); break;
    case BT_DATA_IDX:
    case BT_DATA_NPY:
        bt_agree_int(a, FIELD("inputs (count)"), d->n_inputs);
        for (int i = 0; i < d->n_inputs; i++) {
            char name[160];
            snprintf(name, sizeof name, "inputs.%s", d->input_names[i]);
            bt_agree_file(a, FIELD(name), d->input_files[i], 0);
        }
        if (d->n_inputs == 0) {
            bt_agree_file(a, FIELD("images"), d->images, 0);
            bt_agree_file(a, FIELD("labels"), d->labels, 0);
        }
        break;
    case BT_DATA_TEXT:
    case BT_DATA_TOKENS:
        bt_agree_file(a, FIELD("path"), d->path, 0);
        bt_agree_int(a, FIELD("bytes"), d->bytes);
        bt_agree_num(a, FIELD("val_fraction"), d->val_fraction);
        break;
    }
    bt_agree_int(a, FIELD("shuffle"), d->shuffle);
#undef FIELD
}

/* The bytes of a safetensors file's header (its 8-byte length and the JSON), or 0. */
static size_t safetensors_head(const char *path)
{
    unsigned char b[8];
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(b, 1, sizeof b, f) : 0;
    if (f) fclose(f);
    if (got != sizeof b) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | b[i];
    return n < ((uint64_t)1 << 40) ? (size_t)n + 8 : 0;
}

static int ends_with(const char *s, const char *end)
{
    size_t n = strlen(s), k = strlen(end);
    return n >= k && strcmp(s + n - k, end) == 0;
}

void bt_cli_agree_weights(bt_agree *a, const char *field, const char *path)
{
    if (!path) {
        bt_agree_str(a, field, "(none)");
        return;
    }
    char *latest = NULL;
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) { /* its latest checkpoint, as the loaders pick it */
        if (bt_ckpt_source_latest(path, &latest) != BT_OK) {
            a->failed = 1;
            return;
        }
        if (!latest) {
            bt_agree_str(a, field, "(a directory without a checkpoint)");
            return;
        }
        path = latest;
    }
    if (!ends_with(path, BT_CKPT_INDEX_SUFFIX)) {
        bt_agree_file(a, field, path, safetensors_head(path));
        free(latest);
        return;
    }
    struct stat ib;
    bt_agree_file(a, field, path, stat(path, &ib) == 0 ? (size_t)ib.st_size : 0); /* the index, whole */
    bt_ckpt_index x;
    memset(&x, 0, sizeof x);
    char shard_field[300];
    snprintf(shard_field, sizeof shard_field, "%s (its shards)", field);
    if (bt_ckpt_index_read(path, &x) != BT_OK) {
        bt_agree_str(a, shard_field, "(the index cannot be read)");
    } else {
        const char *slash = strrchr(path, '/');
        int dir = slash ? (int)(slash - path) : 0;
        bt_agree_int(a, shard_field, x.n_files);
        for (int i = 0; i < x.n_files; i++) {
            char *shard = slash ? bt_strfmt("%.*s/%s", dir, path, x.files[i]) : bt_strfmt("%s", x.files[i]);
            snprintf(shard_field, sizeof shard_field, "%s (shard %s)", field, x.files[i]);
            if (shard) bt_agree_file(a, shard_field, shard, safetensors_head(shard));
            else a->failed = 1;
            free(shard);
        }
    }
    bt_ckpt_index_free(&x);
    free(latest);
}

int bt_cli_agree(const char *cmd, const bt_agree *a, double timeout_s, int *mpi_up)
{
    bt_comm *world = NULL;
    int differ = 0;
    bt_status st = bt_comm_world(&world);
    if (st == BT_OK) st = bt_agree_check(world, a, timeout_s, &differ);
    int rank = world ? bt_comm_rank(world) : 0;
    bt_comm_free(world);
    if (st == BT_OK) return BT_EXIT_OK;
    if (!differ) return bt_cli_fail(cmd, st);
    if (rank == 0) { /* every rank found the same: one message */
        char msg[2100];
        snprintf(msg, sizeof msg, "%s (start every rank with the same command, model file, options and inputs)",
                 bt_last_error());
        bt_error(BT_ERR_INVALID_ARG, "%s", msg);
        bt_cli_print_error(cmd);
    }
    bt_dist_finalize();
    *mpi_up = 0;
    return BT_EXIT_USAGE;
}
