/* model/sections.c: train:, parallel: and data: of a model document -> bt_train_config,
 * bt_parallel_config, bt_data_config (see sections.h). Every key is checked against the keys its
 * mapping accepts, every number against its range, and the cross-section rules (a loss before
 * training, balance/layout against the layers, batch against micro-batches) are enforced here, so
 * a loaded model's configuration is always runnable as far as the file can tell. */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/strutil.h"
#include "model/sections.h"

#define BT_MAX_BATCH (INT64_C(1) << 30)

/* ---- train: ---------------------------------------------------------------------------------- */

static bt_status read_optimizer(const bt_ld *ld, const bt_ynode *node, bt_optimizer_config *opt)
{
    static const char *const types[] = {"sgd", "adamw", NULL};
    static const char *const sgd_keys[] = {"type", "lr", "momentum", "nesterov", "weight_decay",
                                           NULL};
    static const char *const adamw_keys[] = {"type", "lr", "weight_decay", "betas", "eps", NULL};
    const bt_ynode *map, *v;
    BT_TRY(bt_ld_map(ld, node, "train.optimizer", &map));
    int kind = BT_OPT_ADAMW;
    if ((v = bt_ymap_get(map, "type"))) BT_TRY(bt_ld_enum(ld, v, "train.optimizer.type", types, &kind));
    opt->kind = (bt_optimizer_kind)kind;
    if (kind == BT_OPT_SGD) {
        opt->weight_decay = 0.0;
        BT_TRY(bt_ld_keys(ld, map, "train.optimizer (sgd)", sgd_keys));
    } else {
        BT_TRY(bt_ld_keys(ld, map, "train.optimizer (adamw)", adamw_keys));
    }
    if ((v = bt_ymap_get(map, "lr")))
        BT_TRY(bt_ld_float(ld, v, "train.optimizer.lr", 0, 0, INFINITY, 0, &opt->lr));
    if ((v = bt_ymap_get(map, "weight_decay")))
        BT_TRY(bt_ld_float(ld, v, "train.optimizer.weight_decay", 0, 0, INFINITY, 0,
                           &opt->weight_decay));
    if ((v = bt_ymap_get(map, "momentum")))
        BT_TRY(bt_ld_float(ld, v, "train.optimizer.momentum", 0, 0, 1, 1, &opt->momentum));
    if ((v = bt_ymap_get(map, "nesterov"))) {
        BT_TRY(bt_ld_bool(ld, v, "train.optimizer.nesterov", &opt->nesterov));
        if (opt->nesterov && opt->momentum <= 0)
            return bt_ld_error(ld, v, BT_ERR_MODEL,
                               "train.optimizer.nesterov needs momentum > 0");
    }
    if ((v = bt_ymap_get(map, "betas"))) {
        if (v->kind != BT_Y_SEQ || v->n != 2)
            return bt_ld_error(ld, v, BT_ERR_MODEL,
                               "expected a list of two numbers for train.optimizer.betas");
        BT_TRY(bt_ld_float(ld, v->kids[0], "train.optimizer.betas[0]", 0, 0, 1, 1, &opt->beta1));
        BT_TRY(bt_ld_float(ld, v->kids[1], "train.optimizer.betas[1]", 0, 0, 1, 1, &opt->beta2));
    }
    if ((v = bt_ymap_get(map, "eps")))
        BT_TRY(bt_ld_float(ld, v, "train.optimizer.eps", 0, 1, INFINITY, 0, &opt->eps));
    return BT_OK;
}

static bt_status read_lr_schedule(const bt_ld *ld, const bt_ynode *node, double lr,
                                  bt_lr_schedule_config *lrs)
{
    static const char *const types[] = {"constant", "step", "cosine", NULL};
    static const char *const constant_keys[] = {"type", NULL};
    static const char *const step_keys[] = {"type", "step_size", "gamma", "warmup_steps", NULL};
    static const char *const cosine_keys[] = {"type", "warmup_steps", "min_lr", NULL};
    const bt_ynode *map = NULL, *v;
    int kind = BT_LR_CONSTANT;
    if (node && node->kind == BT_Y_SCALAR && !bt_ynode_is_null(node)) {
        BT_TRY(bt_ld_enum(ld, node, "train.lr_schedule", types, &kind));
    } else {
        BT_TRY(bt_ld_map(ld, node, "train.lr_schedule", &map));
        if ((v = bt_ymap_get(map, "type")))
            BT_TRY(bt_ld_enum(ld, v, "train.lr_schedule.type", types, &kind));
    }
    lrs->kind = (bt_lr_kind)kind;
    const char *const *keys = kind == BT_LR_STEP ? step_keys
                              : kind == BT_LR_COSINE ? cosine_keys : constant_keys;
    const char *what = kind == BT_LR_STEP ? "train.lr_schedule (step)"
                       : kind == BT_LR_COSINE ? "train.lr_schedule (cosine)"
                                              : "train.lr_schedule (constant)";
    BT_TRY(bt_ld_keys(ld, map, what, keys));
    if ((v = bt_ymap_get(map, "warmup_steps")))
        BT_TRY(bt_ld_int(ld, v, "train.lr_schedule.warmup_steps", 0, INT64_MAX,
                         &lrs->warmup_steps));
    if (kind == BT_LR_STEP) {
        BT_TRY(bt_ld_require(ld, map, "step_size", "train.lr_schedule (step)", node, &v));
        BT_TRY(bt_ld_int(ld, v, "train.lr_schedule.step_size", 1, INT64_MAX, &lrs->step_size));
        if ((v = bt_ymap_get(map, "gamma")))
            BT_TRY(bt_ld_float(ld, v, "train.lr_schedule.gamma", 0, 1, 1, 0, &lrs->gamma));
    }
    if ((v = bt_ymap_get(map, "min_lr"))) {
        BT_TRY(bt_ld_float(ld, v, "train.lr_schedule.min_lr", 0, 0, INFINITY, 0, &lrs->min_lr));
        if (lrs->min_lr > lr)
            return bt_ld_error(ld, v, BT_ERR_MODEL,
                               "train.lr_schedule.min_lr (%g) is larger than train.optimizer.lr "
                               "(%g)",
                               lrs->min_lr, lr);
    }
    return BT_OK;
}

bt_status bt_ld_train(const bt_ld *ld, const bt_ynode *key, const bt_ynode *node,
                      const bt_graph *graph, bt_train_config *cfg)
{
    static const char *const keys[] = {"batch", "epochs", "steps", "optimizer", "lr_schedule",
                                       "clip_grad_norm", "precision", "loss_scale", "eval_every",
                                       "checkpoint_every", "checkpoint_dir", "checkpoint_keep_last",
                                       "tensorboard", "recompute", NULL};
    static const char *const precisions[] = {"f32", "bf16", "f16", NULL};
    static const bt_dtype precision_types[] = {BT_F32, BT_BF16, BT_F16};
    const bt_ynode *map, *v;
    if (!key) return BT_OK;
    BT_TRY(bt_ld_map(ld, node, "train", &map));
    BT_TRY(bt_ld_keys(ld, map, "train", keys));
    cfg->enabled = 1;
    if ((v = bt_ymap_get(map, "batch")))
        BT_TRY(bt_ld_int(ld, v, "train.batch", 1, BT_MAX_BATCH, &cfg->batch));
    if ((v = bt_ymap_get(map, "epochs")))
        BT_TRY(bt_ld_int32(ld, v, "train.epochs", 0, 1000000, &cfg->epochs));
    if ((v = bt_ymap_get(map, "steps")))
        BT_TRY(bt_ld_int(ld, v, "train.steps", 0, INT64_MAX, &cfg->steps));
    if (cfg->epochs == 0 && cfg->steps == 0)
        return bt_ld_error(ld, map ? map : key, BT_ERR_MODEL,
                           "train.epochs and train.steps are both 0: nothing would be trained");
    BT_TRY(read_optimizer(ld, bt_ymap_get(map, "optimizer"), &cfg->optimizer));
    BT_TRY(read_lr_schedule(ld, bt_ymap_get(map, "lr_schedule"), cfg->optimizer.lr,
                            &cfg->lr_schedule));
    if ((v = bt_ymap_get(map, "clip_grad_norm")))
        BT_TRY(bt_ld_float(ld, v, "train.clip_grad_norm", 0, 0, INFINITY, 0, &cfg->clip_norm));
    if ((v = bt_ymap_get(map, "precision"))) {
        int p;
        BT_TRY(bt_ld_enum(ld, v, "train.precision", precisions, &p));
        cfg->precision = precision_types[p];
    }
    if ((v = bt_ymap_get(map, "loss_scale"))) {
        BT_TRY(bt_ld_float(ld, v, "train.loss_scale", 1, 0, 0x1p64, 0, &cfg->loss_scale));
        if (cfg->precision != BT_F16)
            return bt_ld_error(ld, v, BT_ERR_MODEL, "train.loss_scale only applies to precision: f16");
    }
    if ((v = bt_ymap_get(map, "eval_every")))
        BT_TRY(bt_ld_int(ld, v, "train.eval_every", 0, INT64_MAX, &cfg->eval_every));
    if ((v = bt_ymap_get(map, "checkpoint_every")))
        BT_TRY(bt_ld_int(ld, v, "train.checkpoint_every", 0, INT64_MAX, &cfg->checkpoint_every));
    if ((v = bt_ymap_get(map, "checkpoint_keep_last")))
        BT_TRY(bt_ld_int32(ld, v, "train.checkpoint_keep_last", 0, 1000000, &cfg->checkpoint_keep_last));
    if ((v = bt_ymap_get(map, "checkpoint_dir"))) {
        const char *s;
        BT_TRY(bt_ld_string(ld, v, "train.checkpoint_dir", &s));
        if (!(cfg->checkpoint_dir = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    if ((v = bt_ymap_get(map, "tensorboard"))) {
        const char *s;
        BT_TRY(bt_ld_string(ld, v, "train.tensorboard", &s));
        if (!*s) return bt_ld_error(ld, v, BT_ERR_MODEL, "train.tensorboard: expected a directory, not an empty string");
        if (!(cfg->tensorboard = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    if (!bt_graph_is_trainable(graph)) {
        bt_layer_info last;
        char shape[64];
        BT_TRY(bt_graph_layer(graph, bt_graph_num_layers(graph) - 1, &last));
        bt_shape_format(&last.shape, shape, sizeof shape);
        return bt_ld_error(ld, key, BT_ERR_MODEL,
                           "train: needs a loss as the last layer (one scalar per sample), but "
                           "the last layer '%s' (%s) gives %s %s",
                           last.name, last.op, bt_dtype_name(last.dtype), shape);
    }
    return BT_OK;
}

/* ---- parallel: ------------------------------------------------------------------------------- */

/* Checks one "cpu:N" / "cuda:N" entry (n bytes of s). */
static int valid_device(const char *s, size_t n)
{
    size_t p;
    if (n == 10 && strncmp(s, "cuda:local", 10) == 0) return 1; /* the rank's own GPU (docs/distributed.md) */
    if (n > 4 && strncmp(s, "cpu:", 4) == 0)
        p = 4;
    else if (n > 5 && strncmp(s, "cuda:", 5) == 0)
        p = 5;
    else
        return 0;
    if (n - p > 4) return 0;
    for (; p < n; p++)
        if (!isdigit((unsigned char)s[p])) return 0;
    return 1;
}

/* Reads digits s[0..n) as a count of at most 4 digits; -1 when they are not one. */
static int small_number(const char *s, size_t n)
{
    if (n == 0 || n > 4) return -1;
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i])) return -1;
        v = v * 10 + (s[i] - '0');
    }
    return v;
}

static bt_status add_device(const bt_ld *ld, const bt_ynode *at, const char *s, size_t n, char **joined);

/* Device shorthands: "cpu:0-3" (cpu:0 to cpu:3), "cpu*4" (cpu:0 to cpu:3), "cuda:0*2" (cuda:0
 * twice: two stages sharing one GPU). Sets *done when s[0..n) was one and its devices were added. */
static bt_status add_shorthand(const bt_ld *ld, const bt_ynode *at, const char *s, size_t n, char **joined,
                               int *done)
{
    const char *colon = memchr(s, ':', n), *star = memchr(s, '*', n), *dash = colon ? memchr(colon, '-', n - (size_t)(colon - s)) : NULL;
    size_t kind_len = colon ? (size_t)(colon - s) : star ? (size_t)(star - s) : n;
    int first, count;
    *done = 0;
    if (!(kind_len == 3 && strncmp(s, "cpu", 3) == 0) && !(kind_len == 4 && strncmp(s, "cuda", 4) == 0)) return BT_OK;
    if (star) { /* kind*N or kind:I*N */
        count = small_number(star + 1, n - (size_t)(star + 1 - s));
        int repeat = colon != NULL;
        first = repeat ? small_number(colon + 1, (size_t)(star - colon - 1)) : 0;
        if (count < 1 || count > BT_MAX_STAGES || first < 0)
            return bt_ld_error(ld, at, BT_ERR_MODEL,
                               "parallel.devices: '%.*s' is not a device shorthand (%.*s*N: N devices from %.*s:0; "
                               "%.*s:I*N: device I N times; N from 1 to %d)",
                               (int)n, s, (int)kind_len, s, (int)kind_len, s, (int)kind_len, s, BT_MAX_STAGES);
        for (int i = 0; i < count; i++) {
            char dev[32];
            snprintf(dev, sizeof dev, "%.*s:%d", (int)kind_len, s, repeat ? first : i);
            BT_TRY(add_device(ld, at, dev, strlen(dev), joined));
        }
        *done = 1;
    } else if (colon && dash) { /* kind:A-B */
        first = small_number(colon + 1, (size_t)(dash - colon - 1));
        int last = small_number(dash + 1, n - (size_t)(dash + 1 - s));
        if (first < 0 || last < first || last - first + 1 > BT_MAX_STAGES)
            return bt_ld_error(ld, at, BT_ERR_MODEL,
                               "parallel.devices: '%.*s' is not a device range (%.*s:A-B with A <= B, at most %d "
                               "devices)", (int)n, s, (int)kind_len, s, BT_MAX_STAGES);
        for (int i = first; i <= last; i++) {
            char dev[32];
            snprintf(dev, sizeof dev, "%.*s:%d", (int)kind_len, s, i);
            BT_TRY(add_device(ld, at, dev, strlen(dev), joined));
        }
        *done = 1;
    }
    return BT_OK;
}

/* Appends one device (or the devices of a shorthand) to the comma-joined list in *joined (owned). */
static bt_status add_device(const bt_ld *ld, const bt_ynode *at, const char *s, size_t n,
                            char **joined)
{
    int done = 0;
    BT_TRY(add_shorthand(ld, at, s, n, joined, &done));
    if (done) return BT_OK;
    if (!valid_device(s, n))
        return bt_ld_error(ld, at, BT_ERR_MODEL,
                           "parallel.devices: '%.*s' is not a device (auto, or a list of cpu:N "
                           "and cuda:N or cuda:local; shorthands cpu:0-3, cpu*4, cuda:0*2)",
                           (int)n, s);
    char *next = *joined ? bt_strfmt("%s,%.*s", *joined, (int)n, s) : bt_strfmt("%.*s", (int)n, s);
    if (!next) return bt_error(BT_ERR_NOMEM, "out of memory");
    free(*joined);
    *joined = next;
    return BT_OK;
}

static bt_status read_devices(const bt_ld *ld, const bt_ynode *node, const char **out)
{
    bt_status st = BT_OK;
    char *joined = NULL;
    if (node->kind == BT_Y_SEQ) {
        if (node->n == 0) {
            st = bt_ld_error(ld, node, BT_ERR_MODEL, "parallel.devices is an empty list");
            goto fail;
        }
        for (int i = 0; i < node->n; i++) {
            const char *s;
            BT_TRY_GOTO(st, bt_ld_string(ld, node->kids[i], "parallel.devices", &s), fail);
            BT_TRY_GOTO(st, add_device(ld, node->kids[i], s, strlen(s), &joined), fail);
        }
    } else {
        const char *s;
        BT_TRY_GOTO(st, bt_ld_string(ld, node, "parallel.devices", &s), fail);
        if (strcmp(s, "auto") == 0) {
            joined = bt_strdup("auto");
        } else {
            const char *p = s;
            for (;;) {
                while (*p == ' ') p++;
                size_t n = strcspn(p, ",");
                size_t m = n;
                while (m > 0 && p[m - 1] == ' ') m--;
                BT_TRY_GOTO(st, add_device(ld, node, p, m, &joined), fail);
                if (!p[n]) break;
                p += n + 1;
            }
        }
        if (!joined) {
            st = bt_error(BT_ERR_NOMEM, "out of memory");
            goto fail;
        }
    }
    free((char *)*out);
    *out = joined;
    return BT_OK;
fail:
    free(joined);
    return st;
}

static bt_status read_balance(const bt_ld *ld, const bt_ynode *node, int n_layers,
                              bt_parallel_config *cfg)
{
    if (node->kind != BT_Y_SEQ || node->n == 0)
        return bt_ld_error(ld, node, BT_ERR_MODEL,
                           "expected a non-empty list of layer counts for "
                           "parallel.pipeline.partition.balance");
    if (node->n > BT_MAX_STAGES)
        return bt_ld_error(ld, node, BT_ERR_MODEL,
                           "parallel.pipeline.partition.balance has %d stages (at most %d)",
                           node->n, BT_MAX_STAGES);
    int64_t sum = 0;
    for (int i = 0; i < node->n; i++) {
        BT_TRY(bt_ld_int32(ld, node->kids[i], "each entry of parallel.pipeline.partition.balance",
                           1, 1 << 30, &cfg->balance[i]));
        sum += cfg->balance[i];
    }
    cfg->n_balance = node->n;
    if (sum != n_layers)
        return bt_ld_error(ld, node, BT_ERR_MODEL,
                           "parallel.pipeline.partition.balance sums to %lld layers, but the "
                           "model has %d",
                           (long long)sum, n_layers);
    return BT_OK;
}

/* Checks a layout "a,b|c|d": every layer once, in model order, no empty stage. Stores a copy
 * without spaces in cfg->layout and returns the number of stages in *n_stages. */
static bt_status read_layout(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph,
                             int *n_stages, bt_parallel_config *cfg)
{
    bt_status st = BT_OK;
    const char *s;
    const char *what = "parallel.pipeline.partition.layout";
    BT_TRY(bt_ld_string(ld, node, what, &s));
    char *out = malloc(strlen(s) + 1);
    if (!out) return bt_error(BT_ERR_NOMEM, "out of memory");
    size_t used = 0;
    int next = 0, stages = 1;
    const char *p = s;
    for (;;) {
        while (*p == ' ') p++;
        size_t n = strcspn(p, ",|");
        size_t m = n;
        while (m > 0 && p[m - 1] == ' ') m--;
        char name[256];
        if (m == 0 || m >= sizeof name) {
            st = bt_ld_error(ld, node, BT_ERR_MODEL, "%s: empty layer name in stage %d", what,
                             stages - 1);
            goto fail;
        }
        memcpy(name, p, m);
        name[m] = '\0';
        int idx = bt_graph_find_layer(graph, name), span = 1;
        if (idx < 0) { /* a prefix names the layers under it: "h.3" is h.3.ln_1 .. h.3.res_2 */
            span = 0;
            bt_layer_info li;
            while (next + span < bt_graph_num_layers(graph) && bt_graph_layer(graph, next + span, &li) == BT_OK &&
                   strncmp(li.name, name, m) == 0 && li.name[m] == '.')
                span++;
            if (span > 0) idx = next;
        }
        if (idx < 0) {
            st = bt_ld_error(ld, node, BT_ERR_MODEL, "%s names unknown layer '%s'", what, name);
            goto fail;
        }
        if (idx < next) {
            st = bt_ld_error(ld, node, BT_ERR_MODEL,
                             "%s lists layer '%s' twice or out of model order", what, name);
            goto fail;
        }
        if (idx > next) {
            bt_layer_info skipped;
            BT_TRY_GOTO(st, bt_graph_layer(graph, next, &skipped), fail);
            st = bt_ld_error(ld, node, BT_ERR_MODEL,
                             "%s skips layer '%s' (it must list every layer once, in model order)",
                             what, skipped.name);
            goto fail;
        }
        next += span;
        memcpy(out + used, name, m);
        used += m;
        if (!p[n]) break;
        out[used++] = p[n];
        if (p[n] == '|') stages++;
        p += n + 1;
    }
    out[used] = '\0';
    if (next != bt_graph_num_layers(graph)) {
        bt_layer_info missing;
        BT_TRY_GOTO(st, bt_graph_layer(graph, next, &missing), fail);
        st = bt_ld_error(ld, node, BT_ERR_MODEL, "%s leaves out layer '%s' (and any after it)",
                         what, missing.name);
        goto fail;
    }
    if (stages > BT_MAX_STAGES) {
        st = bt_ld_error(ld, node, BT_ERR_MODEL, "%s has %d stages (at most %d)", what, stages,
                         BT_MAX_STAGES);
        goto fail;
    }
    free((char *)cfg->layout);
    cfg->layout = out;
    *n_stages = stages;
    return BT_OK;
fail:
    free(out);
    return st;
}

static bt_status read_partition(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph,
                                int *n_stages, bt_parallel_config *cfg)
{
    static const char *const kinds[] = {"uniform", "params", "profile", NULL};
    static const char *const keys[] = {"balance", "layout", NULL};
    *n_stages = 0;
    if (node->kind == BT_Y_SCALAR) {
        int k;
        BT_TRY(bt_ld_enum(ld, node, "parallel.pipeline.partition", kinds, &k));
        cfg->partition = (bt_partition_kind)k;
        return BT_OK;
    }
    if (node->kind != BT_Y_MAP || bt_ymap_len(node) != 1)
        return bt_ld_error(ld, node, BT_ERR_MODEL,
                           "parallel.pipeline.partition must be uniform, params, profile, "
                           "{balance: [n, ...]} or {layout: \"a,b|c\"}");
    BT_TRY(bt_ld_keys(ld, node, "parallel.pipeline.partition", keys));
    const bt_ynode *v;
    if ((v = bt_ymap_get(node, "balance"))) {
        BT_TRY(read_balance(ld, v, bt_graph_num_layers(graph), cfg));
        cfg->partition = BT_PARTITION_BALANCE;
        *n_stages = cfg->n_balance;
        return BT_OK;
    }
    BT_TRY(read_layout(ld, bt_ymap_get(node, "layout"), graph, n_stages, cfg));
    cfg->partition = BT_PARTITION_LAYOUT;
    return BT_OK;
}

bt_status bt_ld_parallel(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph,
                         int pinned_stages, const bt_train_config *train,
                         bt_parallel_config *cfg)
{
    static const char *const keys[] = {"devices", "pipeline", "data", "zero", NULL};
    static const char *const pipeline_keys[] = {"stages", "microbatches", "schedule", "partition",
                                                "virtual", NULL};
    /* indexed by bt_schedule_kind */
    static const char *const schedules[] = {"gpipe", "1f1b", "stream", "interleaved-1f1b", "zb-h1", "zbv", NULL};
    const bt_ynode *map, *pipe, *v;
    const bt_ynode *stages_node = NULL, *micro_node = NULL, *schedule_node = NULL;
    const bt_ynode *partition_node = NULL;
    if (node && node->kind == BT_Y_SCALAR) { /* parallel: auto */
        static const char *const only[] = {"auto", NULL};
        int k;
        BT_TRY(bt_ld_enum(ld, node, "parallel", only, &k));
        if (pinned_stages > 0)
            return bt_ld_error(ld, node, BT_ERR_MODEL,
                               "parallel: auto chooses the stages, but layers are pinned with stage:");
        cfg->auto_layout = 1;
        cfg->schedule = train->enabled ? BT_SCHEDULE_1F1B : BT_SCHEDULE_STREAM;
        return BT_OK;
    }
    BT_TRY(bt_ld_map(ld, node, "parallel", &map));
    BT_TRY(bt_ld_keys(ld, map, "parallel", keys));
    if ((v = bt_ymap_get(map, "devices"))) BT_TRY(read_devices(ld, v, &cfg->devices));
    if ((v = bt_ymap_get(map, "data"))) BT_TRY(bt_ld_int32(ld, v, "parallel.data", 1, 4096, &cfg->data));
    if ((v = bt_ymap_get(map, "zero"))) BT_TRY(bt_ld_int32(ld, v, "parallel.zero", 0, 1, &cfg->zero));
    BT_TRY(bt_ld_map(ld, bt_ymap_get(map, "pipeline"), "parallel.pipeline", &pipe));
    BT_TRY(bt_ld_keys(ld, pipe, "parallel.pipeline", pipeline_keys));
    if ((stages_node = bt_ymap_get(pipe, "stages")))
        BT_TRY(bt_ld_int32(ld, stages_node, "parallel.pipeline.stages", 0, BT_MAX_STAGES,
                           &cfg->stages));
    if ((micro_node = bt_ymap_get(pipe, "microbatches")))
        BT_TRY(bt_ld_int32(ld, micro_node, "parallel.pipeline.microbatches", 1,
                           BT_MAX_MICROBATCHES, &cfg->microbatches));
    cfg->schedule = train->enabled ? BT_SCHEDULE_1F1B : BT_SCHEDULE_STREAM;
    if ((schedule_node = bt_ymap_get(pipe, "schedule"))) {
        int k;
        BT_TRY(bt_ld_enum(ld, schedule_node, "parallel.pipeline.schedule", schedules, &k));
        cfg->schedule = (bt_schedule_kind)k;
        if (train->enabled && cfg->schedule == BT_SCHEDULE_STREAM)
            return bt_ld_error(ld, schedule_node, BT_ERR_MODEL,
                               "parallel.pipeline.schedule 'stream' runs forward only; a model "
                               "with train: needs gpipe, 1f1b, interleaved-1f1b, zb-h1 or zbv");
    }
    const bt_ynode *virtual_node = bt_ymap_get(pipe, "virtual");
    if (virtual_node) {
        BT_TRY(bt_ld_int32(ld, virtual_node, "parallel.pipeline.virtual", 1, BT_MAX_STAGES,
                           &cfg->virtual_stages));
        if (cfg->schedule == BT_SCHEDULE_ZBV && cfg->virtual_stages != 2)
            return bt_ld_error(ld, virtual_node, BT_ERR_MODEL,
                               "parallel.pipeline.virtual %d: zbv runs exactly 2 chunks per device "
                               "(device d holds stages d and 2P-1-d; leave virtual out or give 2)",
                               cfg->virtual_stages);
        if (cfg->virtual_stages > 1 && cfg->schedule != BT_SCHEDULE_INTERLEAVED_1F1B &&
            cfg->schedule != BT_SCHEDULE_ZBV)
            return bt_ld_error(ld, virtual_node, BT_ERR_MODEL,
                               "parallel.pipeline.virtual %d needs schedule: interleaved-1f1b (the %s "
                               "schedule runs one chunk per device)",
                               cfg->virtual_stages, bt_schedule_name(cfg->schedule));
    } else if (cfg->schedule == BT_SCHEDULE_ZBV) {
        cfg->virtual_stages = 2; /* zbv's own: two chunks per device */
    }

    int n_layers = bt_graph_num_layers(graph);
    int fixed_stages = 0; /* stages the partition itself fixes (0: free) */
    if ((partition_node = bt_ymap_get(pipe, "partition"))) {
        if (pinned_stages > 0)
            return bt_ld_error(ld, partition_node, BT_ERR_MODEL,
                               "parallel.pipeline.partition cannot be combined with per-layer "
                               "stage: (the layers already fix the stages)");
        BT_TRY(read_partition(ld, partition_node, graph, &fixed_stages, cfg));
    } else if (pinned_stages > 0) {
        cfg->partition = BT_PARTITION_PINNED;
        fixed_stages = pinned_stages;
    }
    if (fixed_stages > 0) {
        if (cfg->stages != 0 && cfg->stages != fixed_stages)
            return bt_ld_error(ld, stages_node, BT_ERR_MODEL,
                               "parallel.pipeline.stages is %d, but the %s gives %d stages",
                               cfg->stages,
                               pinned_stages ? "layers' stage: values" : "partition",
                               fixed_stages);
        cfg->stages = fixed_stages;
    }
    if (cfg->stages > n_layers)
        return bt_ld_error(ld, stages_node, BT_ERR_MODEL,
                           "parallel.pipeline.stages is %d, but the model has only %d layers",
                           cfg->stages, n_layers);
    if (cfg->virtual_stages > 1 && cfg->stages % cfg->virtual_stages != 0)
        return bt_ld_error(ld, stages_node ? stages_node : virtual_node, BT_ERR_MODEL,
                           "parallel.pipeline.stages %d (logical stages) is not a multiple of virtual "
                           "%d: each device runs virtual of them",
                           cfg->stages, cfg->virtual_stages);
    if (cfg->schedule == BT_SCHEDULE_INTERLEAVED_1F1B && cfg->stages > 0) {
        int devices = cfg->stages / (cfg->virtual_stages > 1 ? cfg->virtual_stages : 1);
        if (cfg->microbatches % devices != 0)
            return bt_ld_error(ld, micro_node ? micro_node : schedule_node, BT_ERR_MODEL,
                               "interleaved-1f1b runs micro-batches in groups of the %d devices: "
                               "parallel.pipeline.microbatches %d is not a multiple of %d",
                               devices, cfg->microbatches, devices);
    }
    if (train->enabled && train->batch % cfg->microbatches != 0)
        return bt_ld_error(ld, micro_node, BT_ERR_MODEL,
                           "train.batch %lld is not divisible by parallel.pipeline.microbatches "
                           "%d",
                           (long long)train->batch, cfg->microbatches);
    return BT_OK;
}

/* ---- data: ----------------------------------------------------------------------------------- */

/* Which source a data: entry is: its keys differ. The vocabulary is built from the training text
 * and encodes the eval text too; val_fraction holds out the training file's tail only when there is
 * no eval source. */
typedef enum source_role { ROLE_TRAIN_SPLIT, ROLE_TRAIN, ROLE_EVAL } source_role;

/* A key the source accepts in another role only: an error naming it, never ignored. */
static bt_status refuse_role_keys(const bt_ld *ld, const bt_ynode *map, source_role role)
{
    const bt_ynode *key;
    if (role == ROLE_EVAL && (key = bt_ymap_get_key(map, "vocab")))
        return bt_ld_error(ld, key, BT_ERR_MODEL,
                           "data.eval.vocab: the eval text is encoded with the vocabulary built from data.train "
                           "(give vocab: on data.train)");
    if (role == ROLE_EVAL && (key = bt_ymap_get_key(map, "val_fraction")))
        return bt_ld_error(ld, key, BT_ERR_MODEL,
                           "data.eval.val_fraction: the eval source is evaluated whole; val_fraction holds out "
                           "the tail of data.train, and only when there is no data.eval");
    if (role == ROLE_TRAIN && (key = bt_ymap_get_key(map, "val_fraction")))
        return bt_ld_error(ld, key, BT_ERR_MODEL,
                           "data.train.val_fraction: data.eval is given, so nothing of data.train is held out "
                           "(drop val_fraction, or drop data.eval to evaluate on data.train's tail)");
    return BT_OK;
}

/* type: text (path, vocab: char | byte, val_fraction) or tokens (path, val_fraction): the
 * language-model sources (src/train/lm.c). */
static bt_status read_text_source(const bt_ld *ld, const bt_ynode *node, const bt_ynode *map,
                                  const char *what, source_role role, bt_data_source *src)
{
    static const char *const text_keys[] = {"type", "path", "vocab", "val_fraction", NULL};
    static const char *const token_keys[] = {"type", "path", "val_fraction", NULL};
    static const char *const vocabs[] = {"char", "byte", NULL};
    const bt_ynode *v;
    const char *s;
    char sub[64];
    BT_TRY(bt_ld_keys(ld, map, what, src->kind == BT_DATA_TEXT ? text_keys : token_keys));
    BT_TRY(refuse_role_keys(ld, map, role));
    snprintf(sub, sizeof sub, "%s.path", what);
    BT_TRY(bt_ld_require(ld, map, "path", what, node, &v));
    BT_TRY(bt_ld_string(ld, v, sub, &s));
    if (!(src->path = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "out of memory");
    if ((v = bt_ymap_get(map, "vocab"))) {
        snprintf(sub, sizeof sub, "%s.vocab", what);
        BT_TRY(bt_ld_enum(ld, v, sub, vocabs, &src->bytes));
    }
    src->val_fraction = 0.1;
    if ((v = bt_ymap_get(map, "val_fraction"))) {
        snprintf(sub, sizeof sub, "%s.val_fraction", what);
        BT_TRY(bt_ld_float(ld, v, sub, 0, 0, 0.9, 0, &src->val_fraction));
    }
    return BT_OK;
}

/* npy per input: inputs: {name: file, ...}, naming every model input and nothing else; the files'
 * shapes and values are checked when the data is loaded (io/columns.c). */
static bt_status read_input_files(const bt_ld *ld, const bt_ynode *node, const char *what, const bt_graph *graph,
                                  bt_data_source *src)
{
    char sub[96];
    if (!node || node->kind != BT_Y_MAP || bt_ymap_len(node) == 0)
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s.inputs must be a non-empty mapping of input name: file.npy",
                           what);
    if (bt_ymap_len(node) > BT_DATA_MAX_INPUTS)
        return bt_ld_error(ld, node, BT_ERR_MODEL, "%s.inputs names %d files; at most %d", what, bt_ymap_len(node),
                           BT_DATA_MAX_INPUTS);
    for (int i = 0; i < bt_ymap_len(node); i++) {
        const bt_ynode *key = bt_ymap_key(node, i);
        const char *s;
        snprintf(sub, sizeof sub, "%s.inputs.%s", what, key->text);
        int known = 0;
        for (int k = 0; k < bt_graph_num_inputs(graph); k++) {
            bt_input_info in;
            if (bt_graph_input(graph, k, &in) == BT_OK && strcmp(in.name, key->text) == 0) known = 1;
        }
        if (!known)
            return bt_ld_error(ld, key, BT_ERR_MODEL, "%s.inputs: '%s' is not one of the model's inputs", what,
                               key->text);
        BT_TRY(bt_ld_string(ld, bt_ymap_val(node, i), sub, &s));
        src->input_names[i] = bt_strdup(key->text);
        src->input_files[i] = bt_strdup(s);
        src->n_inputs = i + 1;
        if (!src->input_names[i] || !src->input_files[i]) return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    for (int k = 0; k < bt_graph_num_inputs(graph); k++) {
        bt_input_info in;
        int given = 0;
        BT_TRY(bt_graph_input(graph, k, &in));
        for (int i = 0; i < src->n_inputs; i++) given |= strcmp(src->input_names[i], in.name) == 0;
        if (!given)
            return bt_ld_error(ld, node, BT_ERR_MODEL, "%s.inputs has no file for the model's input '%s'", what,
                               in.name);
    }
    return BT_OK;
}

static bt_status read_source(const bt_ld *ld, const bt_ynode *node, const char *what, source_role role,
                             const bt_graph *graph, bt_data_source *src)
{
    static const char *const types[] = {"synthetic", "idx", "npy", "text", "tokens", NULL};
    static const char *const file_keys[] = {"type", "images", "labels", "shuffle", NULL};
    static const char *const npy_keys[] = {"type", "images", "labels", "inputs", "shuffle", NULL};
    static const char *const synthetic_keys[] = {"type", "samples", "shuffle", NULL};
    const bt_ynode *map, *v;
    char sub[64];
    BT_TRY(bt_ld_map(ld, node, what, &map));
    if (!map) return bt_ld_error(ld, node, BT_ERR_MODEL, "%s must be a mapping with a type:", what);
    snprintf(sub, sizeof sub, "%s.type", what);
    BT_TRY(bt_ld_require(ld, map, "type", what, node, &v));
    int k;
    BT_TRY(bt_ld_enum(ld, v, sub, types, &k));
    src->kind = (bt_data_kind)(k + 1);
    if (src->kind == BT_DATA_TEXT || src->kind == BT_DATA_TOKENS) return read_text_source(ld, node, map, what, role, src);
    BT_TRY(bt_ld_keys(ld, map, what, src->kind == BT_DATA_SYNTHETIC ? synthetic_keys
                                     : src->kind == BT_DATA_NPY     ? npy_keys
                                                                    : file_keys));
    if (src->kind == BT_DATA_SYNTHETIC) {
        src->samples = 10000;
        snprintf(sub, sizeof sub, "%s.samples", what);
        if ((v = bt_ymap_get(map, "samples")))
            BT_TRY(bt_ld_int(ld, v, sub, 1, INT64_MAX, &src->samples));
    } else if (src->kind == BT_DATA_NPY && (v = bt_ymap_get(map, "inputs"))) {
        if (bt_ymap_get(map, "images") || bt_ymap_get(map, "labels"))
            return bt_ld_error(ld, v, BT_ERR_MODEL,
                               "%s: give either inputs: {name: file, ...} or images: and labels:, not both", what);
        BT_TRY(read_input_files(ld, v, what, graph, src));
    } else {
        const char *s;
        snprintf(sub, sizeof sub, "%s.images", what);
        BT_TRY(bt_ld_require(ld, map, "images", what, node, &v));
        BT_TRY(bt_ld_string(ld, v, sub, &s));
        if (!(src->images = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "out of memory");
        snprintf(sub, sizeof sub, "%s.labels", what);
        BT_TRY(bt_ld_require(ld, map, "labels", what, node, &v));
        BT_TRY(bt_ld_string(ld, v, sub, &s));
        if (!(src->labels = bt_strdup(s))) return bt_error(BT_ERR_NOMEM, "out of memory");
    }
    snprintf(sub, sizeof sub, "%s.shuffle", what);
    if ((v = bt_ymap_get(map, "shuffle"))) BT_TRY(bt_ld_bool(ld, v, sub, &src->shuffle));
    return BT_OK;
}

bt_status bt_ld_data(const bt_ld *ld, const bt_ynode *node, const bt_graph *graph, bt_data_config *cfg)
{
    static const char *const keys[] = {"train", "eval", NULL};
    const bt_ynode *map, *v;
    if (node && node->kind == BT_Y_SCALAR && !bt_ynode_is_null(node)) {
        /* data: synthetic, the short form of data: {train: {type: synthetic}} */
        if (strcmp(node->text, "synthetic") != 0)
            return bt_ld_error(ld, node, BT_ERR_MODEL,
                               "data must be a mapping (train:, eval:) or 'synthetic', not '%s'", node->text);
        cfg->train.kind = BT_DATA_SYNTHETIC;
        cfg->train.samples = 10000;
        return BT_OK;
    }
    BT_TRY(bt_ld_map(ld, node, "data", &map));
    BT_TRY(bt_ld_keys(ld, map, "data", keys));
    const source_role train_role = bt_ymap_get(map, "eval") ? ROLE_TRAIN : ROLE_TRAIN_SPLIT;
    if ((v = bt_ymap_get(map, "train"))) BT_TRY(read_source(ld, v, "data.train", train_role, graph, &cfg->train));
    if ((v = bt_ymap_get(map, "eval"))) BT_TRY(read_source(ld, v, "data.eval", ROLE_EVAL, graph, &cfg->eval));
    return BT_OK;
}
