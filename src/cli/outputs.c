/* cli/outputs.c: a command's inputs by (device, inode), and the check of each output against them
 * (see outputs.h). Invariant: every entry of r->in is a regular file that existed when it was
 * added; r->nomem is set when an entry could not be added, and then no check passes. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/outputs.h"
#include "core/strutil.h"
#include "train/ckpt_index.h"
#include "train/ckpt_source.h"

void bt_cli_inputs_init(bt_cli_inputs *r, const char *cmd)
{
    memset(r, 0, sizeof *r);
    r->cmd = cmd;
}

void bt_cli_inputs_free(bt_cli_inputs *r)
{
    for (int i = 0; i < r->n; i++) {
        free(r->in[i].what);
        free(r->in[i].path);
    }
    free(r->in);
    r->in = NULL;
    r->n = r->cap = 0;
}

static void add_input(bt_cli_inputs *r, const char *what, const char *path, int continued)
{
    struct stat sb;
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return;
    if (r->n == r->cap) {
        int cap = r->cap ? 2 * r->cap : 16;
        bt_cli_input *in = realloc(r->in, (size_t)cap * sizeof *in);
        if (!in) {
            r->nomem = 1;
            return;
        }
        r->in = in;
        r->cap = cap;
    }
    bt_cli_input *e = &r->in[r->n];
    e->what = bt_strdup(what);
    e->path = bt_strdup(path);
    e->dev = sb.st_dev;
    e->ino = sb.st_ino;
    e->continued = continued;
    if (!e->what || !e->path) {
        free(e->what);
        free(e->path);
        r->nomem = 1;
        return;
    }
    r->n++;
}

void bt_cli_inputs_add(bt_cli_inputs *r, const char *what, const char *path) { add_input(r, what, path, 0); }

void bt_cli_inputs_add_model(bt_cli_inputs *r, const bt_cli_model_opts *mo)
{
    add_input(r, "the model file", mo->path, 0);
    for (int i = 0; i < mo->n_plugins; i++) add_input(r, "--plugin", mo->plugins[i], 0);
}

/* what is "data.train.images" and the like: the key the file came from. */
static void add_data_file(bt_cli_inputs *r, const char *section, const char *key, const char *path)
{
    char *what = bt_strfmt("%s.%s", section, key);
    if (!what) {
        r->nomem = 1;
        return;
    }
    add_input(r, what, path, 0);
    free(what);
}

void bt_cli_inputs_add_data(bt_cli_inputs *r, const char *section, const bt_data_source *src)
{
    switch (src->kind) {
    case BT_DATA_IDX:
    case BT_DATA_NPY:
        if (src->n_inputs == 0) {
            add_data_file(r, section, "images", src->images);
            add_data_file(r, section, "labels", src->labels);
        }
        for (int i = 0; i < src->n_inputs; i++) {
            char *key = bt_strfmt("inputs.%s", src->input_names[i] ? src->input_names[i] : "?");
            if (!key) {
                r->nomem = 1;
                return;
            }
            add_data_file(r, section, key, src->input_files[i]);
            free(key);
        }
        break;
    case BT_DATA_TEXT:
    case BT_DATA_TOKENS: add_data_file(r, section, "path", src->path); break;
    default: break;
    }
}

static char *dir_of(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (!slash) return bt_strdup(".");
    if (slash == path) return bt_strdup("/");
    return bt_strfmt("%.*s", (int)(slash - path), path);
}

static int ends_with(const char *s, const char *suffix)
{
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The records a resumed run reads beside its checkpoint, the names the run rewrites. */
static int is_record_name(const char *name)
{
    return strcmp(name, "auto-layout.txt") == 0 || strcmp(name, "vocab.txt") == 0 ||
           (strncmp(name, "conv-paths", 10) == 0 && ends_with(name, ".json"));
}

/* Every name a training run writes, replaces or removes in its checkpoint directory
 * (train/checkpoint_dir.c, checkpoint_shards.c, lm.c, the records, io/dir_lock.h). */
static int is_managed_name(const char *name)
{
    return (strncmp(name, "checkpoint", 10) == 0 && strstr(name, ".safetensors")) || is_record_name(name) ||
           strcmp(name, ".lock") == 0 || strncmp(name, ".write-test", 11) == 0;
}

/* what is "OPTION ARG"; file is read as a checkpoint: itself, and an index's shards. */
static void add_checkpoint_file(bt_cli_inputs *r, const char *what, const char *file, int continued)
{
    add_input(r, what, file, continued);
    if (!ends_with(file, BT_CKPT_INDEX_SUFFIX)) return;
    bt_ckpt_index x;
    memset(&x, 0, sizeof x);
    char *dir = dir_of(file);
    if (!dir) r->nomem = 1;
    else if (bt_ckpt_index_read(file, &x) == BT_OK) /* a bad index is its reader's to report */
        for (int i = 0; i < x.n_files; i++) {
            char *shard = bt_strfmt("%s/%s", dir, x.files[i]);
            if (!shard) r->nomem = 1;
            add_input(r, what, shard, continued);
            free(shard);
        }
    bt_ckpt_index_free(&x);
    free(dir);
}

static void add_records(bt_cli_inputs *r, const char *what, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!is_record_name(e->d_name)) continue;
        char *p = bt_strfmt("%s/%s", dir, e->d_name);
        if (!p) r->nomem = 1;
        add_input(r, what, p, 1);
        free(p);
    }
    closedir(d);
}

void bt_cli_inputs_add_checkpoint(bt_cli_inputs *r, const char *option, const char *path, int continued)
{
    struct stat sb;
    char *what = bt_strfmt("%s %s", option, path), *file = NULL, *dir = NULL;
    if (!what) {
        r->nomem = 1;
        return;
    }
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (bt_ckpt_source_latest(path, &file) != BT_OK) r->nomem = 1;
        if (file) add_checkpoint_file(r, what, file, continued);
        if (continued) add_records(r, what, path);
    } else {
        add_checkpoint_file(r, what, path, continued);
        if (continued && (dir = dir_of(path)) != NULL) add_records(r, what, dir);
        else if (continued) r->nomem = 1;
    }
    free(file);
    free(dir);
    free(what);
}

/* The first input (among those not continued, when skip_continued) that is the file sb. */
static const bt_cli_input *find_input(const bt_cli_inputs *r, const struct stat *sb, int skip_continued)
{
    for (int i = 0; i < r->n; i++)
        if (r->in[i].dev == sb->st_dev && r->in[i].ino == sb->st_ino && !(skip_continued && r->in[i].continued))
            return &r->in[i];
    return NULL;
}

static int out_of_memory(const bt_cli_inputs *r)
{
    fprintf(stderr, "baton %s: out of memory while listing the files it reads\n", r->cmd);
    return BT_EXIT_RUNTIME;
}

int bt_cli_outputs_check(const bt_cli_inputs *r, const char *option, const char *path)
{
    struct stat sb;
    if (r->nomem) return out_of_memory(r);
    if (!path || stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return BT_EXIT_OK;
    const bt_cli_input *in = find_input(r, &sb, 0);
    if (!in) return BT_EXIT_OK;
    char out_shown[1024], in_shown[1024], what_shown[1024];
    fprintf(stderr,
            "baton %s: %s %s is the same file as the input %s (%s): writing it would destroy that input; name "
            "another file\n",
            r->cmd, option, bt_cli_escape(path, out_shown, sizeof out_shown),
            bt_cli_escape(in->path, in_shown, sizeof in_shown), bt_cli_escape(in->what, what_shown, sizeof what_shown));
    return BT_EXIT_USAGE;
}

int bt_cli_outputs_check_checkpoint_dir(const bt_cli_inputs *r, const char *option, const char *dir)
{
    int rc = BT_EXIT_OK;
    if (r->nomem) return out_of_memory(r);
    if (!dir) return BT_EXIT_OK;
    DIR *d = opendir(dir);
    if (!d) return BT_EXIT_OK; /* not there yet (it is made later), or not usable: its preparation says */
    for (struct dirent *e; rc == BT_EXIT_OK && (e = readdir(d)) != NULL;) {
        if (!is_managed_name(e->d_name)) continue;
        struct stat sb;
        char *p = bt_strfmt("%s/%s", dir, e->d_name);
        if (!p) {
            rc = out_of_memory(r);
            break;
        }
        const bt_cli_input *in = stat(p, &sb) == 0 && S_ISREG(sb.st_mode) ? find_input(r, &sb, 1) : NULL;
        if (in) {
            char dir_shown[1024], p_shown[1024], in_shown[1024], what_shown[1024];
            fprintf(stderr,
                    "baton %s: %s %s: the run replaces or removes %s there, which is the same file as the input %s "
                    "(%s): that input would be destroyed; give another checkpoint directory\n",
                    r->cmd, option, bt_cli_escape(dir, dir_shown, sizeof dir_shown),
                    bt_cli_escape(p, p_shown, sizeof p_shown), bt_cli_escape(in->path, in_shown, sizeof in_shown),
                    bt_cli_escape(in->what, what_shown, sizeof what_shown));
            rc = BT_EXIT_USAGE;
        }
        free(p);
    }
    closedir(d);
    return rc;
}
