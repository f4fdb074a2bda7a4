/* cli/run_conv_record.c: conv2d's per-layer path choices (cpu/conv_onednn.h) kept beside a run's
 * checkpoints, so that `baton run --resume` continues bit for bit under BATON_CPU_CONV=auto.
 *
 * Under auto each process times oneDNN against im2col + GEMM at a shape's first call, and the two
 * paths round differently: a resumed process that chose otherwise would not continue the run
 * exactly. So every process of a training run with a checkpoint directory writes the choices it
 * holds (timed, or preloaded and carried on; never forced ones) to DIR/conv-paths.json, or to
 * DIR/conv-paths.rank<N>.json when it is rank N of a job under a launcher: at each checkpoint
 * rank 0's trainer reports, and on every rank after any step or evaluation that added a choice
 * (the other ranks get no checkpoint event; every choice exists before the checkpoint that
 * follows it). Written atomically (io/atomic_file.h).
 *
 * `--resume DIR` (or a checkpoint file in DIR) reads every such file in DIR before anything is
 * measured, this process's own name first, then conv-paths.json, then the ranks in order; the
 * first record of a shape wins, so a resume on another layout (other ranks, stages or
 * micro-batches) takes what matches and times the rest. A malformed file, or a path this build
 * cannot run, is an error naming the file (and the field, or the shape and path). A forced
 * BATON_CPU_CONV wins over the records and says so in one line. `--init` starts a new run and
 * reads nothing. The format is docs/cli.md's: {"format": 1, "choices": [{...}, ...]}. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jansson.h>

#include "baton.h"
#include "cli/run.h"
#include "core/error.h"
#include "core/strutil.h"
#include "cpu/conv_onednn.h"
#include "dist/dist.h"
#include "io/atomic_file.h"

#define RECORD_PREFIX "conv-paths"
#define FILES_MAX 1024
#define CHOICES_MAX 256

static const char *pass_key(int pass)
{
    switch (pass) {
    case BT_CONV_FORWARD: return "forward";
    case BT_CONV_GRAD_INPUT: return "backward-input";
    case BT_CONV_GRAD_WEIGHTS: return "backward-weights";
    default: return "backward";
    }
}

/* This process's file name: conv-paths.json, or conv-paths.rank<N>.json under a launcher. */
static char *own_name(void)
{
    if (bt_dist_launched(NULL) > 1) return bt_strfmt(RECORD_PREFIX ".rank%d.json", bt_dist_launched_rank());
    return bt_strdup(RECORD_PREFIX ".json");
}

/* -1: not a record's name; 0: conv-paths.json; N + 1: conv-paths.rank<N>.json. */
static long record_order(const char *name)
{
    if (strcmp(name, RECORD_PREFIX ".json") == 0) return 0;
    const char *p = RECORD_PREFIX ".rank";
    if (strncmp(name, p, strlen(p)) != 0) return -1;
    const char *d = name + strlen(p);
    char *end;
    if (*d < '0' || *d > '9') return -1;
    long n = strtol(d, &end, 10);
    return strcmp(end, ".json") == 0 && n >= 0 && n < 1 << 24 ? n + 1 : -1;
}

/* Written: timed choices, and recorded ones carried on (used here or not: a later resume on the
 * first layout still finds them); never forced ones. */
static int entry_wanted(const bt_conv_choice *c) { return !c->forced; }

static int last_written = -1; /* choices in the file this process last wrote */

static int export_count(void)
{
    bt_conv_choice c[CHOICES_MAX];
    int n = bt_conv_choices(c, CHOICES_MAX), k = 0;
    for (int i = 0; i < n && i < CHOICES_MAX; i++) k += entry_wanted(&c[i]);
    return k;
}

static json_t *pair(int64_t a, int64_t b) { return json_pack("[I, I]", (json_int_t)a, (json_int_t)b); }

int bt_cli_conv_record_write(const char *dir, int always)
{
    if (!dir) return BT_EXIT_OK;
    const int count = export_count();
    if (count == 0 && last_written < 0) return BT_EXIT_OK; /* no conv2d chose (yet): no file */
    if (!always && count == last_written) return BT_EXIT_OK;
    bt_conv_choice c[CHOICES_MAX];
    const int n = bt_conv_choices(c, CHOICES_MAX);
    /* one choice a line: {"format": 1, "what": "...", "choices": [\n {...},\n {...}\n]} */
    size_t cap = 256, used = 0;
    char *text = malloc(cap);
    int ok = text != NULL, first = 1;
    if (ok)
        used = (size_t)snprintf(text, cap, "{\"format\": 1, \"what\": \"conv2d paths chosen under "
                                           "BATON_CPU_CONV=auto; baton run --resume takes them as recorded "
                                           "(docs/cli.md)\", \"choices\": [");
    for (int i = 0; ok && i < n && i < CHOICES_MAX; i++) {
        if (!entry_wanted(&c[i])) continue;
        const bt_conv_config *f = &c[i].cfg;
        json_t *e = json_pack("{s:[I, I, I], s:[I, I, I], s:o, s:o, s:o, s:b, s:I, s:s, s:i, s:s, s:s}", "input",
                              (json_int_t)f->c, (json_int_t)f->h, (json_int_t)f->w, "output", (json_int_t)f->out,
                              (json_int_t)f->ho, (json_int_t)f->wo, "kernel", pair(f->kh, f->kw), "stride",
                              pair(f->sh, f->sw), "padding", pair(f->ph, f->pw), "bias", f->bias, "batch",
                              (json_int_t)c[i].batch, "precision", c[i].precision == BT_BF16 ? "bf16" : "f32",
                              "threads", c[i].threads, "pass", pass_key(c[i].pass), "path",
                              c[i].path == BT_CONV_ONEDNN ? "onednn" : "im2col");
        if (e && c[i].ms[BT_CONV_IM2COL] >= 0) /* what decided it; informational, not read back */
            json_object_set_new(e, "ms",
                                c[i].ms[BT_CONV_ONEDNN] >= 0
                                    ? json_pack("{s:f, s:f}", "im2col", c[i].ms[BT_CONV_IM2COL], "onednn",
                                                c[i].ms[BT_CONV_ONEDNN])
                                    : json_pack("{s:f}", "im2col", c[i].ms[BT_CONV_IM2COL]));
        char *line = e ? json_dumps(e, JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(4)) : NULL;
        json_decref(e);
        size_t need = used + (line ? strlen(line) : 0) + 8;
        char *grown = line && need > cap ? realloc(text, cap = 2 * need) : text;
        if (!line || !grown) ok = 0;
        else {
            text = grown;
            used += (size_t)snprintf(text + used, cap - used, "%s\n %s", first ? "" : ",", line);
            first = 0;
        }
        free(line);
    }
    if (ok && used + 8 > cap) {
        char *grown = realloc(text, cap = used + 8);
        if (grown) text = grown;
        else ok = 0;
    }
    if (ok) snprintf(text + used, cap - used, "\n]}\n");
    else free(text), text = NULL;
    char *name = own_name(), *path = name ? bt_strfmt("%s/%s", dir, name) : NULL;
    bt_status st = !text || !path ? bt_error(BT_ERR_NOMEM, "out of memory")
                                  : bt_atomic_file_write_all(path, text, strlen(text));
    if (st != BT_OK) st = bt_error_context(st, "writing the conv2d path record %s", path ? path : dir);
    free(text), free(name), free(path);
    if (st != BT_OK) return bt_cli_fail("run", st);
    last_written = count;
    return BT_EXIT_OK;
}

/* ---- reading ------------------------------------------------------------------------------- */

/* Prints "baton run: FILE: choices[i].FIELD: why" and returns BT_EXIT_USAGE. */
static int bad(const char *file, int i, const char *field, const char *why)
{
    if (i < 0) fprintf(stderr, "baton run: %s: %s: %s (not a conv2d path record baton wrote)\n", file, field, why);
    else
        fprintf(stderr, "baton run: %s: choices[%d].%s: %s (not a conv2d path record baton wrote)\n", file, i, field,
                why);
    return BT_EXIT_USAGE;
}

/* Reads an array of n non-negative integers (n > 1: at least 1 for the shape's sizes). */
static int ints(const char *file, int i, json_t *o, const char *key, int64_t *out, int n, int64_t min)
{
    json_t *a = json_object_get(o, key);
    if (!json_is_array(a) || (int)json_array_size(a) != n) {
        char why[64];
        snprintf(why, sizeof why, "expected an array of %d integers", n);
        return bad(file, i, key, why);
    }
    for (int k = 0; k < n; k++) {
        json_t *v = json_array_get(a, (size_t)k);
        if (!json_is_integer(v) || json_integer_value(v) < min) return bad(file, i, key, "expected integers in range");
        out[k] = json_integer_value(v);
    }
    return BT_EXIT_OK;
}

static const char *const known_keys[] = {"input", "output", "kernel", "stride", "padding", "bias", "batch",
                                         "precision", "threads", "pass", "path", "ms", NULL};

/* One entry of "choices" into *c. */
static int parse_choice(const char *file, int i, json_t *o, bt_conv_choice *c)
{
    if (!json_is_object(o)) return bad(file, i, "", "expected an object");
    const char *k;
    json_t *v;
    json_object_foreach(o, k, v) {
        int known = 0;
        for (int j = 0; known_keys[j]; j++) known |= strcmp(k, known_keys[j]) == 0;
        if (!known) return bad(file, i, k, "unknown key");
    }
    memset(c, 0, sizeof *c);
    int64_t in[3], out[3], two[2];
    int rc;
    bt_conv_config *f = &c->cfg;
    if ((rc = ints(file, i, o, "input", in, 3, 1)) != BT_EXIT_OK) return rc;
    if ((rc = ints(file, i, o, "output", out, 3, 1)) != BT_EXIT_OK) return rc;
    f->c = in[0], f->h = in[1], f->w = in[2], f->out = out[0], f->ho = out[1], f->wo = out[2];
    if ((rc = ints(file, i, o, "kernel", two, 2, 1)) != BT_EXIT_OK) return rc;
    f->kh = two[0], f->kw = two[1];
    if ((rc = ints(file, i, o, "stride", two, 2, 1)) != BT_EXIT_OK) return rc;
    f->sh = two[0], f->sw = two[1];
    if ((rc = ints(file, i, o, "padding", two, 2, 0)) != BT_EXIT_OK) return rc;
    f->ph = two[0], f->pw = two[1];
    f->pointwise = f->kh == 1 && f->kw == 1 && f->sh == 1 && f->sw == 1 && f->ph == 0 && f->pw == 0;
    json_t *b = json_object_get(o, "bias");
    if (!json_is_boolean(b)) return bad(file, i, "bias", "expected true or false");
    f->bias = json_is_true(b);
    json_t *batch = json_object_get(o, "batch"), *threads = json_object_get(o, "threads");
    if (!json_is_integer(batch) || json_integer_value(batch) < 1)
        return bad(file, i, "batch", "expected an integer >= 1");
    if (!json_is_integer(threads) || json_integer_value(threads) < 1 || json_integer_value(threads) > 1 << 16)
        return bad(file, i, "threads", "expected an integer >= 1");
    c->batch = json_integer_value(batch);
    c->threads = (int)json_integer_value(threads);
    const char *prec = json_string_value(json_object_get(o, "precision"));
    if (prec && strcmp(prec, "f32") == 0) c->precision = BT_F32;
    else if (prec && strcmp(prec, "bf16") == 0) c->precision = BT_BF16;
    else return bad(file, i, "precision", "expected \"f32\" or \"bf16\"");
    const char *pass = json_string_value(json_object_get(o, "pass"));
    int p = -1;
    for (int q = 0; pass && q < 4; q++)
        if (strcmp(pass, pass_key(q)) == 0) p = q;
    if (p < 0)
        return bad(file, i, "pass", "expected \"forward\", \"backward-input\", \"backward-weights\" or \"backward\"");
    c->pass = p;
    const char *path = json_string_value(json_object_get(o, "path"));
    if (path && strcmp(path, "onednn") == 0) c->path = BT_CONV_ONEDNN;
    else if (path && strcmp(path, "im2col") == 0) c->path = BT_CONV_IM2COL;
    else return bad(file, i, "path", "expected \"onednn\" or \"im2col\"");
    json_t *ms = json_object_get(o, "ms");
    if (ms && !json_is_object(ms)) return bad(file, i, "ms", "expected an object");
    return BT_EXIT_OK;
}

/* Appends file's choices to c[*n]. */
static int parse_file(const char *file, bt_conv_choice *c, int *n, int max)
{
    json_error_t err;
    json_t *root = json_load_file(file, JSON_REJECT_DUPLICATES, &err);
    if (!root) {
        fprintf(stderr, "baton run: %s:%d:%d: %s (not a conv2d path record baton wrote)\n", file, err.line,
                err.column, err.text);
        return BT_EXIT_USAGE;
    }
    int rc = BT_EXIT_OK;
    json_t *fmt = json_object_get(root, "format"), *list = json_object_get(root, "choices");
    const char *k;
    json_t *v;
    if (!json_is_object(root)) rc = bad(file, -1, "the file", "expected an object");
    else if (!json_is_integer(fmt) || json_integer_value(fmt) != 1) rc = bad(file, -1, "format", "expected 1");
    else if (!json_is_array(list)) rc = bad(file, -1, "choices", "expected an array");
    else
        json_object_foreach(root, k, v) {
            if (strcmp(k, "format") != 0 && strcmp(k, "choices") != 0 && strcmp(k, "what") != 0) {
                rc = bad(file, -1, k, "unknown key");
                break;
            }
        }
    for (size_t i = 0; rc == BT_EXIT_OK && i < json_array_size(list); i++) {
        if (*n == max) {
            rc = bad(file, (int)i, "", "too many choices in the records");
            break;
        }
        rc = parse_choice(file, (int)i, json_array_get(list, i), &c[*n]);
        if (rc == BT_EXIT_OK) ++*n;
    }
    json_decref(root);
    return rc;
}

/* The directory a --resume argument names: DIR itself, or a checkpoint file's directory. */
static char *resume_dir(const char *where)
{
    struct stat sb;
    if (stat(where, &sb) == 0 && S_ISDIR(sb.st_mode)) return bt_strdup(where);
    const char *slash = strrchr(where, '/');
    if (!slash) return bt_strdup(".");
    return bt_strfmt("%.*s", (int)(slash - where), where);
}

typedef struct record_file {
    char *name;
    long order; /* -1: this process's own */
} record_file;

static int by_order(const void *a, const void *b)
{
    const record_file *x = a, *y = b;
    return x->order < y->order ? -1 : x->order > y->order;
}

static int graph_has_conv(const bt_graph *g)
{
    for (int i = 0; g && i < bt_graph_num_layers(g); i++) {
        bt_layer_info li;
        if (bt_graph_layer(g, i, &li) == BT_OK && strcmp(li.op, "conv2d") == 0) return 1;
    }
    return 0;
}

int bt_cli_conv_record_load(const char *resume, const bt_graph *g, int jsonl)
{
    bt_status st = bt_cpu_conv_init(); /* BATON_CPU_CONV itself is checked where a device opens */
    if (st != BT_OK) return bt_cli_fail("run", st);
    char *dir = resume_dir(resume), *own = own_name();
    record_file files[FILES_MAX];
    int nf = 0, rc = BT_EXIT_OK;
    bt_conv_choice *c = calloc(CHOICES_MAX, sizeof *c);
    DIR *d = dir ? opendir(dir) : NULL;
    if (!dir || !own || !c) {
        rc = bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
        goto done;
    }
    if (!d) { /* the trainer names a missing --resume with its own message */
        rc = BT_EXIT_OK;
        goto done;
    }
    for (struct dirent *de; (de = readdir(d)) && nf < FILES_MAX;) {
        long order = record_order(de->d_name);
        if (order < 0) continue;
        if (!(files[nf].name = bt_strdup(de->d_name))) {
            rc = bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
            goto done;
        }
        files[nf++].order = strcmp(de->d_name, own) == 0 ? -1 : order;
    }
    qsort(files, (size_t)nf, sizeof *files, by_order);
    int n = 0, from[CHOICES_MAX]; /* from[i]: the file choice i came from */
    for (int i = 0; i < nf && rc == BT_EXIT_OK; i++) {
        char *path = bt_strfmt("%s/%s", dir, files[i].name);
        const int before = n;
        rc = path ? parse_file(path, c, &n, CHOICES_MAX) : bt_cli_fail("run", bt_error(BT_ERR_NOMEM, "out of memory"));
        for (int k = before; k < n; k++) from[k] = i;
        free(path);
    }
    if (rc != BT_EXIT_OK) goto done;
    const int forced = bt_cpu_conv_forced();
    const int speaks = bt_dist_launched(NULL) <= 1 || bt_dist_launched_rank() == 0; /* notes: rank 0's */
    if (nf == 0) {
        if (forced < 0 && speaks && graph_has_conv(g))
            fprintf(stderr,
                    "baton run: %s has no record of the conv2d paths its run chose (" RECORD_PREFIX
                    "*.json); timing them again, so the continuation may differ in rounding (BATON_CPU_CONV="
                    "onednn or im2col in both runs continues bit for bit)\n",
                    dir);
        goto done;
    }
    if (forced >= 0) {
        if (speaks)
            fprintf(stderr,
                    "baton run: BATON_CPU_CONV=%s overrides the %d conv2d path choice%s recorded in %s/" RECORD_PREFIX
                    "*.json; the continuation may differ in rounding from the run that wrote them\n",
                    forced == BT_CONV_ONEDNN ? "onednn" : "im2col", n, n == 1 ? "" : "s", dir);
        goto done;
    }
    /* every file's choices can run here, or nothing is preloaded */
    for (int i = 0; i < n; i++) {
        if (c[i].path == BT_CONV_ONEDNN && !bt_cpu_conv_onednn_available()) {
            char text[400];
            bt_conv_choice_format(&c[i], text, sizeof text);
            char *colon = strstr(text, ": ");
            if (colon) *colon = 0;
            fprintf(stderr,
                    "baton run: %s/%s: the conv2d of shape %s is recorded on the path onednn, which this baton "
                    "cannot run (built without oneDNN, libdnnl-dev); resume with a baton built with oneDNN, or "
                    "set BATON_CPU_CONV=im2col to override the record\n",
                    dir, files[from[i]].name, text);
            rc = BT_EXIT_USAGE;
            goto done;
        }
    }
    int added = bt_conv_choices_preload(c, n);
    if (speaks) /* under jsonl stdout holds records only */
        fprintf(jsonl ? stderr : stdout,
                "conv2d: %d path choice%s recorded in %s (" RECORD_PREFIX "*.json: %d file%s) taken as recorded\n",
                added, added == 1 ? "" : "s", dir, nf, nf == 1 ? "" : "s");
done:
    if (d) closedir(d);
    for (int i = 0; i < nf; i++) free(files[i].name);
    free(c), free(dir), free(own);
    return rc;
}
