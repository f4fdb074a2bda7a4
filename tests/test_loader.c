/* tests/test_loader.c: the YAML model loader (src/model/). Every shipped model loads with the
 * layer count, shapes, parameter counts and configuration computed by hand below; every file in
 * models/invalid/ fails with BT_ERR_MODEL or BT_ERR_SHAPE and a message that starts with
 * "<path>:<line>:<col>: " (or "<path>: ") and contains the substring its first line announces
 * ("# expect: ..."); overrides, repeat: expansion, from: references, scalar typing, defaults and
 * the resource limits (alias bombs, deep nesting) behave as docs/model-format.md says. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "baton/model.h"
#include "bt_test.h"

/* ---- helpers ---------------------------------------------------------------------------------- */

static bt_model *load(const char *rel, const char *const *ov, int n_ov)
{
    char path[1024];
    bt_model *m = NULL;
    bt_status st = bt_model_load(bt_test_src(rel, path, sizeof path), ov, n_ov, &m);
    if (st != BT_OK) fprintf(stderr, "loading %s: %s\n", rel, bt_last_error());
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    return m;
}

static bt_model *load_text(const char *text, const char *const *ov, int n_ov)
{
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "inline.yaml", ov, n_ov, &m);
    if (st != BT_OK) fprintf(stderr, "loading inline model: %s\n", bt_last_error());
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    return m;
}

/* Loads text expecting failure with status; returns the message (thread buffer). */
static const char *fail_text(const char *text, const char *const *ov, int n_ov, bt_status status)
{
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "inline.yaml", ov, n_ov, &m);
    CU_ASSERT_EQUAL(st, status);
    CU_ASSERT_PTR_NULL(m);
    bt_model_destroy(m);
    return bt_last_error();
}

static int contains(const char *msg, const char *part)
{
    if (strstr(msg, part)) return 1;
    fprintf(stderr, "message \"%s\" lacks \"%s\"\n", msg, part);
    return 0;
}

/* Checks layer i: name, op, per-sample shape (ndim dims...), parameter elements. */
static void check_layer(const bt_model *m, int i, const char *name, const char *op,
                        int64_t n_params, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
    bt_layer_info li;
    CU_ASSERT_EQUAL_FATAL(bt_graph_layer(m->graph, i, &li), BT_OK);
    CU_ASSERT_STRING_EQUAL(li.name, name);
    CU_ASSERT_STRING_EQUAL(li.op, op);
    CU_ASSERT_EQUAL(li.n_params, n_params);
    CU_ASSERT_EQUAL(li.shape.ndim, ndim);
    int64_t d[3] = {d0, d1, d2};
    for (int k = 0; k < ndim && k < 3; k++) CU_ASSERT_EQUAL(li.shape.dim[k], d[k]);
}

static const char *layer_input(const bt_model *m, int i, int k)
{
    bt_layer_info li;
    if (bt_graph_layer(m->graph, i, &li) != BT_OK || k >= li.n_inputs) return "";
    return li.inputs[k];
}

static const char *const fashion_train_images =
    "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz";
static const char *const fashion_test_labels =
    "/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz";

/* ---- shipped models --------------------------------------------------------------------------- */

static void test_mlp(void)
{
    bt_model *m = load("models/mlp.yaml", NULL, 0);
    CU_ASSERT_STRING_EQUAL(m->name, "mlp");
    CU_ASSERT_EQUAL(bt_graph_num_inputs(m->graph), 2);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 4);
    check_layer(m, 0, "fc1", "linear", 16 * 32 + 32, 1, 32, 0, 0);
    check_layer(m, 1, "fc2", "linear", 32 * 32 + 32, 1, 32, 0, 0);
    check_layer(m, 2, "head", "linear", 32 * 4 + 4, 1, 4, 0, 0);
    check_layer(m, 3, "loss", "cross_entropy", 0, 0, 0, 0, 0);
    CU_ASSERT_EQUAL(bt_graph_total_params(m->graph), 544 + 1056 + 132);
    CU_ASSERT(bt_graph_is_trainable(m->graph));
    CU_ASSERT_STRING_EQUAL(m->parallel.devices, "cpu:0,cpu:1");
    CU_ASSERT_EQUAL(m->parallel.stages, 2);
    CU_ASSERT_EQUAL(m->parallel.microbatches, 4);
    CU_ASSERT_EQUAL(m->parallel.schedule, BT_SCHEDULE_GPIPE);
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_UNIFORM);
    CU_ASSERT(m->train.enabled);
    CU_ASSERT_EQUAL(m->train.batch, 64);
    CU_ASSERT_EQUAL(m->train.steps, 200);
    CU_ASSERT_EQUAL(m->train.optimizer.kind, BT_OPT_SGD);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.lr, 0.05, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.momentum, 0.9, 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.weight_decay, 0.0, 0);
    CU_ASSERT_EQUAL(m->data.train.kind, BT_DATA_SYNTHETIC);
    CU_ASSERT_EQUAL(m->data.train.samples, 4096);
    CU_ASSERT_EQUAL(m->data.eval.kind, BT_DATA_NONE);
    bt_model_destroy(m);
}

static void test_residual_mlp(void)
{
    bt_model *m = load("models/residual-mlp.yaml", NULL, 0);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 7);
    check_layer(m, 0, "fc_in", "linear", 32 * 64 + 64, 1, 64, 0, 0);
    check_layer(m, 1, "blocks.0", "linear", 64 * 64 + 64, 1, 64, 0, 0);
    check_layer(m, 2, "blocks.1", "linear", 64 * 64 + 64, 1, 64, 0, 0);
    check_layer(m, 3, "skip", "add", 0, 1, 64, 0, 0);
    check_layer(m, 4, "norm", "layernorm", 2 * 64, 1, 64, 0, 0);
    check_layer(m, 5, "head", "linear", 64 * 8 + 8, 1, 8, 0, 0);
    check_layer(m, 6, "loss", "cross_entropy", 0, 0, 0, 0, 0);
    CU_ASSERT_EQUAL(bt_graph_total_params(m->graph), 2112 + 2 * 4160 + 128 + 520);
    CU_ASSERT_STRING_EQUAL(layer_input(m, 1, 0), "fc_in");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 2, 0), "blocks.0");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 3, 0), "blocks.1");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 3, 1), "fc_in");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 6, 1), "y");
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_LAYOUT);
    CU_ASSERT_STRING_EQUAL(m->parallel.layout, "fc_in,blocks.0|blocks.1,skip,norm,head,loss");
    CU_ASSERT_EQUAL(m->parallel.stages, 2);
    CU_ASSERT_STRING_EQUAL(m->parallel.devices, "cpu:0,cpu:1");
    CU_ASSERT_EQUAL(m->train.lr_schedule.kind, BT_LR_COSINE);
    CU_ASSERT_EQUAL(m->train.lr_schedule.warmup_steps, 10);
    CU_ASSERT_DOUBLE_EQUAL(m->train.lr_schedule.min_lr, 1e-5, 1e-20);
    CU_ASSERT_DOUBLE_EQUAL(m->train.clip_norm, 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.beta2, 0.98, 1e-15);
    CU_ASSERT_EQUAL(m->train.epochs, 1);
    bt_model_destroy(m);
}

static void test_cnn(void)
{
    bt_model *m = load("models/cnn.yaml", NULL, 0);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 5);
    check_layer(m, 0, "conv1", "conv2d", 8 * 1 * 3 * 3 + 8, 3, 8, 10, 10);
    check_layer(m, 1, "pool1", "maxpool2d", 0, 3, 8, 5, 5);
    check_layer(m, 2, "flat", "flatten", 0, 1, 8 * 5 * 5, 0, 0);
    check_layer(m, 3, "head", "linear", 200 * 10 + 10, 1, 10, 0, 0);
    check_layer(m, 4, "loss", "cross_entropy", 0, 0, 0, 0, 0);
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_PINNED);
    CU_ASSERT_EQUAL(m->parallel.stages, 2);
    int stages[5] = {0, 0, 1, 1, 1};
    for (int i = 0; i < 5; i++) {
        bt_layer_info li;
        CU_ASSERT_EQUAL_FATAL(bt_graph_layer(m->graph, i, &li), BT_OK);
        CU_ASSERT_EQUAL(li.stage, stages[i]);
    }
    CU_ASSERT_EQUAL(m->train.optimizer.kind, BT_OPT_SGD);
    CU_ASSERT(m->train.optimizer.nesterov);
    CU_ASSERT_EQUAL(m->train.lr_schedule.kind, BT_LR_STEP);
    CU_ASSERT_EQUAL(m->train.lr_schedule.step_size, 20);
    CU_ASSERT_DOUBLE_EQUAL(m->train.lr_schedule.gamma, 0.5, 0);
    bt_model_destroy(m);
}

static void test_fashion_mlp(void)
{
    /* the file says parallel: auto (chosen by measuring); the layout it said before, given as an
     * override, is checked below as before */
    bt_model *file = load("models/fashion-mlp.yaml", NULL, 0);
    CU_ASSERT_EQUAL(file->parallel.auto_layout, 1);
    CU_ASSERT_EQUAL(file->parallel.schedule, BT_SCHEDULE_1F1B);
    bt_model_destroy(file);
    const char *layout[] = {"parallel={devices: auto, pipeline: {stages: 2, microbatches: 8, schedule: 1f1b, partition: params}}"};
    bt_model *m = load("models/fashion-mlp.yaml", layout, 1);
    CU_ASSERT_EQUAL(m->parallel.auto_layout, 0);
    CU_ASSERT_STRING_EQUAL(m->name, "fashion-mlp");
    bt_input_info in;
    CU_ASSERT_EQUAL_FATAL(bt_graph_input(m->graph, 0, &in), BT_OK);
    CU_ASSERT_STRING_EQUAL(in.name, "image");
    CU_ASSERT_EQUAL(in.shape.ndim, 1);
    CU_ASSERT_EQUAL(in.shape.dim[0], 784);
    CU_ASSERT_EQUAL(in.dtype, BT_F32);
    CU_ASSERT_EQUAL_FATAL(bt_graph_input(m->graph, 1, &in), BT_OK);
    CU_ASSERT_EQUAL(in.shape.ndim, 0);
    CU_ASSERT_EQUAL(in.dtype, BT_I32);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 4);
    check_layer(m, 0, "fc1", "linear", 784 * 1024 + 1024, 1, 1024, 0, 0);
    check_layer(m, 1, "fc2", "linear", 1024 * 1024 + 1024, 1, 1024, 0, 0);
    check_layer(m, 2, "head", "linear", 1024 * 10 + 10, 1, 10, 0, 0);
    CU_ASSERT_EQUAL(bt_graph_total_params(m->graph), 803840 + 1049600 + 10250);
    CU_ASSERT_EQUAL(bt_graph_num_params(m->graph), 6);
    bt_param_info p;
    CU_ASSERT_EQUAL_FATAL(bt_graph_param(m->graph, 0, &p), BT_OK);
    CU_ASSERT_STRING_EQUAL(p.name, "fc1.weight");
    CU_ASSERT_EQUAL(p.shape.dim[0], 1024); /* PyTorch layout [out, in] */
    CU_ASSERT_EQUAL(p.shape.dim[1], 784);
    CU_ASSERT_STRING_EQUAL(m->parallel.devices, "auto");
    CU_ASSERT_EQUAL(m->parallel.stages, 2);
    CU_ASSERT_EQUAL(m->parallel.microbatches, 8);
    CU_ASSERT_EQUAL(m->parallel.schedule, BT_SCHEDULE_1F1B);
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_PARAMS);
    CU_ASSERT_EQUAL(m->train.batch, 256);
    CU_ASSERT_EQUAL(m->train.epochs, 5);
    CU_ASSERT_EQUAL(m->train.steps, 0);
    CU_ASSERT_EQUAL(m->train.optimizer.kind, BT_OPT_ADAMW);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.lr, 2e-3, 1e-18);
    CU_ASSERT_EQUAL(m->train.lr_schedule.kind, BT_LR_COSINE);
    CU_ASSERT_DOUBLE_EQUAL(m->train.lr_schedule.min_lr, 1e-4, 1e-18);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.beta1, 0.9, 0);
    CU_ASSERT_EQUAL(m->train.precision, BT_F32);
    CU_ASSERT_EQUAL(m->data.train.kind, BT_DATA_IDX);
    CU_ASSERT_STRING_EQUAL(m->data.train.images, fashion_train_images);
    CU_ASSERT(m->data.train.shuffle);
    CU_ASSERT_EQUAL(m->data.eval.kind, BT_DATA_IDX);
    CU_ASSERT_STRING_EQUAL(m->data.eval.labels, fashion_test_labels);
    CU_ASSERT(!m->data.eval.shuffle);
    bt_model_destroy(m);
}

static void test_fashion_cnn(void)
{
    bt_model *m = load("models/fashion-cnn.yaml", NULL, 0);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 8);
    check_layer(m, 0, "conv1", "conv2d", 32 * 1 * 9 + 32, 3, 32, 28, 28);
    check_layer(m, 1, "pool1", "maxpool2d", 0, 3, 32, 14, 14);
    check_layer(m, 2, "conv2", "conv2d", 64 * 32 * 9 + 64, 3, 64, 14, 14);
    check_layer(m, 3, "pool2", "maxpool2d", 0, 3, 64, 7, 7);
    check_layer(m, 4, "flat", "flatten", 0, 1, 64 * 7 * 7, 0, 0);
    check_layer(m, 5, "fc", "linear", 3136 * 128 + 128, 1, 128, 0, 0);
    check_layer(m, 6, "head", "linear", 128 * 10 + 10, 1, 10, 0, 0);
    CU_ASSERT_EQUAL(bt_graph_total_params(m->graph), 320 + 18496 + 401536 + 1290);
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_BALANCE);
    CU_ASSERT_EQUAL(m->parallel.n_balance, 2);
    CU_ASSERT_EQUAL(m->parallel.balance[0], 4);
    CU_ASSERT_EQUAL(m->parallel.balance[1], 4);
    CU_ASSERT_EQUAL(m->train.batch, 128);
    CU_ASSERT_EQUAL(m->train.eval_every, 468);
    bt_model_destroy(m);
}

static void test_mlp_infer(void)
{
    bt_model *m = load("models/mlp-infer.yaml", NULL, 0);
    CU_ASSERT(!m->train.enabled);
    CU_ASSERT(!bt_graph_is_trainable(m->graph));
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 4);
    check_layer(m, 0, "fc1", "linear", 64 * 128 + 128, 1, 128, 0, 0);
    check_layer(m, 1, "drop", "dropout", 0, 1, 128, 0, 0);
    check_layer(m, 2, "fc2", "linear", 128 * 10, 1, 10, 0, 0); /* bias: false */
    check_layer(m, 3, "probs", "softmax", 0, 1, 10, 0, 0);
    bt_layer_info li;
    CU_ASSERT_EQUAL_FATAL(bt_graph_layer(m->graph, 0, &li), BT_OK);
    CU_ASSERT_STRING_EQUAL(li.act, "gelu");
    CU_ASSERT_EQUAL(m->parallel.schedule, BT_SCHEDULE_STREAM); /* the default without train: */
    CU_ASSERT_EQUAL(m->parallel.stages, 2);
    CU_ASSERT_EQUAL(m->data.train.kind, BT_DATA_NONE);
    bt_model_destroy(m);
}

/* Layer positions point at the layer's mapping (1-based), in the file it came from. */
static void test_layer_positions(void)
{
    char path[1024];
    bt_model *m = load("models/fashion-mlp.yaml", NULL, 0);
    bt_test_src("models/fashion-mlp.yaml", path, sizeof path);
    bt_layer_info li;
    CU_ASSERT_EQUAL_FATAL(bt_graph_layer(m->graph, 0, &li), BT_OK);
    CU_ASSERT_STRING_EQUAL(li.loc.file, path);
    CU_ASSERT_EQUAL(li.loc.line, 11); /* "  - {name: fc1, ..." */
    CU_ASSERT_EQUAL(li.loc.col, 5);
    CU_ASSERT_STRING_EQUAL(m->path, path);
    bt_model_destroy(m);
}

/* ---- invalid models --------------------------------------------------------------------------- */

static int name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Checks "<path>:<line>:<col>: " (line within the file) or "<path>: " at the start of msg. */
static int has_prefix(const char *msg, const char *path, int n_lines)
{
    size_t n = strlen(path);
    if (strncmp(msg, path, n) != 0) return 0;
    const char *p = msg + n;
    if (p[0] == ':' && p[1] == ' ') return 1;
    int line = 0, col = 0, used = 0;
    if (sscanf(p, ":%d:%d: %n", &line, &col, &used) != 2 || used == 0) return 0;
    return line >= 1 && line <= n_lines && col >= 1;
}

static void test_invalid_models(void)
{
    char dir_path[1024];
    DIR *dir = opendir(bt_test_src("models/invalid", dir_path, sizeof dir_path));
    CU_ASSERT_PTR_NOT_NULL_FATAL(dir);
    char *names[512];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dir)) && n < 512) {
        size_t len = strlen(de->d_name);
        if (len > 5 && strcmp(de->d_name + len - 5, ".yaml") == 0) names[n++] = strdup(de->d_name);
    }
    closedir(dir);
    qsort(names, (size_t)n, sizeof *names, name_cmp);
    CU_ASSERT(n >= 30);
    int failures = 0;
    for (int i = 0; i < n; i++) {
        char path[1536], first[512] = "";
        snprintf(path, sizeof path, "%s/%s", dir_path, names[i]);
        FILE *f = fopen(path, "rb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        int n_lines = 0, c, last = '\n';
        if (!fgets(first, sizeof first, f)) first[0] = '\0';
        rewind(f);
        while ((c = fgetc(f)) != EOF) {
            if (c == '\n') n_lines++;
            last = c;
        }
        if (last != '\n') n_lines++;
        fclose(f);
        first[strcspn(first, "\r\n")] = '\0';
        const char *expect = strncmp(first, "# expect: ", 10) == 0 ? first + 10 : NULL;
        CU_ASSERT_PTR_NOT_NULL(expect);
        if (!expect) {
            fprintf(stderr, "%s: first line is not '# expect: ...'\n", names[i]);
            failures++;
            continue;
        }
        bt_model *m = NULL;
        bt_status st = bt_model_load(path, NULL, 0, &m);
        const char *msg = bt_last_error();
        int ok = (st == BT_ERR_MODEL || st == BT_ERR_SHAPE) && m == NULL &&
                 has_prefix(msg, path, n_lines) && strstr(msg, expect) != NULL;
        if (!ok) {
            fprintf(stderr, "%s: status %d, message \"%s\", expected \"%s\"\n", names[i], st, msg,
                    expect);
            failures++;
        }
        bt_model_destroy(m);
    }
    CU_ASSERT_EQUAL(failures, 0);
    for (int i = 0; i < n; i++) free(names[i]);
}

static void test_missing_file(void)
{
    bt_model *m = NULL;
    CU_ASSERT_EQUAL(bt_model_load("/nonexistent/model.yaml", NULL, 0, &m), BT_ERR_IO);
    CU_ASSERT(contains(bt_last_error(), "/nonexistent/model.yaml: cannot open"));
    CU_ASSERT_PTR_NULL(m);
    CU_ASSERT_EQUAL(bt_model_load(NULL, NULL, 0, &m), BT_ERR_INVALID_ARG);
}

/* ---- overrides -------------------------------------------------------------------------------- */

static void test_overrides(void)
{
    const char *ov[] = {
        "train.optimizer.lr=3e-4",                /* replace a float */
        "parallel.pipeline.microbatches=8",       /* replace an int */
        "train.clip_grad_norm=0.5",               /* create a missing key */
        "train.lr_schedule.type=cosine",          /* create a missing mapping on the way */
        "layers.head.args.out=6",                 /* a layer item by name */
        "layers.0.act=gelu",                      /* a layer item by index */
        "parallel.devices=[cpu:0, cpu:0]",        /* a YAML flow value */
        "parallel.pipeline.partition={balance: [3, 1]}",
    };
    bt_model *m = load("models/mlp.yaml", ov, (int)(sizeof ov / sizeof ov[0]));
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.lr, 3e-4, 1e-18);
    CU_ASSERT_EQUAL(m->parallel.microbatches, 8);
    CU_ASSERT_DOUBLE_EQUAL(m->train.clip_norm, 0.5, 0);
    CU_ASSERT_EQUAL(m->train.lr_schedule.kind, BT_LR_COSINE);
    check_layer(m, 2, "head", "linear", 32 * 6 + 6, 1, 6, 0, 0);
    bt_layer_info li;
    CU_ASSERT_EQUAL_FATAL(bt_graph_layer(m->graph, 0, &li), BT_OK);
    CU_ASSERT_STRING_EQUAL(li.act, "gelu");
    CU_ASSERT_STRING_EQUAL(m->parallel.devices, "cpu:0,cpu:0");
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_BALANCE);
    CU_ASSERT_EQUAL(m->parallel.balance[0], 3);
    CU_ASSERT_EQUAL(m->train.batch, 64); /* untouched */
    bt_model_destroy(m);

    /* the same key twice: the later one wins */
    const char *twice[] = {"train.batch=32", "train.batch=128"};
    m = load("models/mlp.yaml", twice, 2);
    CU_ASSERT_EQUAL(m->train.batch, 128);
    bt_model_destroy(m);
}

/* Loads models/mlp.yaml with one override expecting failure; checks "<path>: " and parts. */
static void check_bad_override(const char *ov, const char *part)
{
    char path[1024], prefix[1100];
    bt_model *m = NULL;
    bt_test_src("models/mlp.yaml", path, sizeof path);
    CU_ASSERT_EQUAL(bt_model_load(path, &ov, 1, &m), BT_ERR_MODEL);
    CU_ASSERT_PTR_NULL(m);
    snprintf(prefix, sizeof prefix, "%s: override '%s': ", path, ov);
    const char *msg = bt_last_error();
    CU_ASSERT(contains(msg, prefix));
    CU_ASSERT(strncmp(msg, prefix, strlen(prefix)) == 0);
    CU_ASSERT(contains(msg, part));
    bt_model_destroy(m);
}

static void test_bad_overrides(void)
{
    check_bad_override("train.batch=abc", "expected an integer for train.batch, got 'abc'");
    check_bad_override("train.optimizer.lr=-1", "train.optimizer.lr must be >= 0");
    check_bad_override("train.foo=1", "unknown key 'foo' in train");
    check_bad_override("train.batch.size=1", "'train.batch' is a scalar, not a mapping");
    check_bad_override("layers.9.op=relu", "'layers' has no item '9'");
    check_bad_override("layers.nope.op=relu", "'layers' has no item 'nope'");
    check_bad_override("parallel.pipeline.schedule=zigzag", "must be gpipe, 1f1b, stream, interleaved-1f1b, zb-h1 or zbv");
    check_bad_override("parallel.pipeline.microbatches=3", "not divisible");
    check_bad_override("train.batch", "expected key=value");
    check_bad_override("=1", "expected key=value");
    check_bad_override("train..batch=1", "empty part in the key");
    check_bad_override("train.optimizer={type: sgd", "YAML syntax error");
    check_bad_override("layers.head.args.out=x", "linear argument 'out' must be an integer");

    /* an override that creates train: on an inference model is checked like the file */
    char path[1024];
    bt_model *m = NULL;
    const char *ov = "train.batch=8";
    bt_test_src("models/mlp-infer.yaml", path, sizeof path);
    CU_ASSERT_EQUAL(bt_model_load(path, &ov, 1, &m), BT_ERR_MODEL);
    CU_ASSERT(contains(bt_last_error(), "override 'train.batch=8': train: needs a loss"));
}

/* ---- layers: repeat, from, names -------------------------------------------------------------- */

static const char *const repeat_model =
    "format: 1\n"
    "inputs: {x: {shape: [4]}, y: {shape: [], dtype: i32}}\n"
    "layers:\n"
    "  - {name: fc, op: linear, args: {out: 8}}\n"
    "  - {name: blocks, repeat: 3, op: linear, args: {out: 8}, act: relu}\n"
    "  - {name: mix, op: add, from: [blocks, fc]}\n"
    "  - {name: back, op: add, from: [-1, -3]}\n"
    "  - {name: second, op: linear, args: {out: 8}, from: x}\n"
    "  - {name: head, op: linear, args: {out: 3}, from: -2}\n"
    "  - {name: loss, op: cross_entropy, from: [head, y]}\n";

static void test_repeat_and_from(void)
{
    bt_model *m = load_text(repeat_model, NULL, 0);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 9);
    check_layer(m, 1, "blocks.0", "linear", 8 * 8 + 8, 1, 8, 0, 0);
    check_layer(m, 2, "blocks.1", "linear", 8 * 8 + 8, 1, 8, 0, 0);
    check_layer(m, 3, "blocks.2", "linear", 8 * 8 + 8, 1, 8, 0, 0);
    CU_ASSERT_STRING_EQUAL(layer_input(m, 0, 0), "x");        /* first layer: first input */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 1, 0), "fc");       /* default: the previous layer */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 2, 0), "blocks.0"); /* copies are chained */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 3, 0), "blocks.1");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 4, 0), "blocks.2"); /* a group name: its last copy */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 4, 1), "fc");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 5, 0), "mix");      /* -1 */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 5, 1), "blocks.1"); /* -3 */
    CU_ASSERT_STRING_EQUAL(layer_input(m, 6, 0), "x");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 7, 0), "back");     /* -2 */
    bt_param_info p;
    CU_ASSERT_EQUAL_FATAL(bt_graph_param(m->graph, 4, &p), BT_OK);
    CU_ASSERT_STRING_EQUAL(p.name, "blocks.1.weight");
    CU_ASSERT_STRING_EQUAL(m->name, "inline");                /* default: the file name */
    CU_ASSERT_EQUAL(bt_graph_find_layer(m->graph, "blocks"), -1);
    bt_model_destroy(m);

    /* a later layer may name a copy directly, and a repeated layer's from applies per copy */
    m = load_text("format: 1\ninputs: {x: {shape: [4]}}\nlayers:\n"
                  "  - {name: r, repeat: 2, op: linear, args: {out: 4}}\n"
                  "  - {name: s, repeat: 2, op: add, from: [-1, x]}\n"
                  "  - {name: t, op: add, from: [r.0, s.1]}\n",
                  NULL, 0);
    CU_ASSERT_EQUAL(bt_graph_num_layers(m->graph), 5);
    CU_ASSERT_STRING_EQUAL(layer_input(m, 2, 0), "r.1");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 3, 0), "s.0");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 3, 1), "x");
    CU_ASSERT_STRING_EQUAL(layer_input(m, 4, 0), "r.0");
    bt_model_destroy(m);

    /* a repeat group cannot read itself; positions come from the inline name */
    const char *msg = fail_text("format: 1\ninputs: {x: {shape: [4]}}\nlayers:\n"
                                "  - {name: r, repeat: 2, op: add, from: [x, r]}\n",
                                NULL, 0, BT_ERR_MODEL);
    CU_ASSERT(contains(msg, "inline.yaml:4:45: layer 'r.0': from: 'r' is this layer itself"));
}

/* ---- typing, defaults, limits ----------------------------------------------------------------- */

static void test_scalar_typing(void)
{
    bt_model *m = load_text("format: 1\ninputs: {x: {shape: [0x10]}, y: {shape: [], dtype: i32}}\n"
                            "layers:\n"
                            "  - {name: a, op: linear, args: {out: 0o10, bias: false}}\n"
                            "  - {name: d, op: dropout, args: {p: .25}}\n"
                            "  - {name: n, op: layernorm, args: {eps: 1}}\n"
                            "  - {name: loss, op: cross_entropy, from: [n, y]}\n"
                            "train: {optimizer: {lr: 1, weight_decay: 0}, clip_grad_norm: 1e1}\n",
                            NULL, 0);
    check_layer(m, 0, "a", "linear", 16 * 8, 1, 8, 0, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.lr, 1.0, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.clip_norm, 10.0, 0);
    bt_model_destroy(m);
    /* a quoted number is a string */
    const char *msg = fail_text("format: \"1\"\n", NULL, 0, BT_ERR_MODEL);
    CU_ASSERT(contains(msg, "inline.yaml:1:9: expected an integer for format, got '1'"));
}

static void test_defaults(void)
{
    bt_model *m = load_text("format: 1\ninputs: {x: {shape: [3]}}\n"
                            "layers: [{name: a, op: linear, args: {out: 2}}]\n",
                            NULL, 0);
    CU_ASSERT_STRING_EQUAL(m->parallel.devices, "auto");
    CU_ASSERT_EQUAL(m->parallel.stages, 0);
    CU_ASSERT_EQUAL(m->parallel.microbatches, 1);
    CU_ASSERT_EQUAL(m->parallel.schedule, BT_SCHEDULE_STREAM);
    CU_ASSERT_EQUAL(m->parallel.partition, BT_PARTITION_PARAMS);
    CU_ASSERT_PTR_NULL(m->parallel.layout);
    CU_ASSERT(!m->train.enabled);
    CU_ASSERT_EQUAL(m->data.train.kind, BT_DATA_NONE);
    bt_model_destroy(m);

    m = load_text("format: 1\nname: tiny\ninputs: {x: {shape: [3]}}\n"
                  "layers: [{name: a, op: linear, args: {out: 2}}, {name: l, op: mse, from: [a, a]}]\n"
                  "train:\n"
                  "data: {train: {type: synthetic}, eval: {type: npy, images: a.npy, labels: "
                  "b.npy}}\n",
                  NULL, 0);
    CU_ASSERT_STRING_EQUAL(m->name, "tiny");
    CU_ASSERT(m->train.enabled);
    CU_ASSERT_EQUAL(m->parallel.schedule, BT_SCHEDULE_1F1B);
    CU_ASSERT_EQUAL(m->train.batch, 32);
    CU_ASSERT_EQUAL(m->train.epochs, 1);
    CU_ASSERT_EQUAL(m->train.optimizer.kind, BT_OPT_ADAMW);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.lr, 1e-3, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.weight_decay, 0.01, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.beta2, 0.999, 0);
    CU_ASSERT_DOUBLE_EQUAL(m->train.optimizer.eps, 1e-8, 0);
    CU_ASSERT_EQUAL(m->train.lr_schedule.kind, BT_LR_CONSTANT);
    CU_ASSERT_DOUBLE_EQUAL(m->train.clip_norm, 0, 0);
    CU_ASSERT_EQUAL(m->train.precision, BT_F32);
    CU_ASSERT_PTR_NULL(m->train.checkpoint_dir);
    CU_ASSERT_EQUAL(m->data.train.kind, BT_DATA_SYNTHETIC);
    CU_ASSERT_EQUAL(m->data.train.samples, 10000);
    CU_ASSERT(m->data.train.shuffle);
    CU_ASSERT_EQUAL(m->data.eval.kind, BT_DATA_NPY);
    CU_ASSERT_STRING_EQUAL(m->data.eval.images, "a.npy"); /* relative paths stay as written */
    CU_ASSERT(!m->data.eval.shuffle);
    bt_model_destroy(m);
}

static void test_config_init(void)
{
    bt_parallel_config p;
    bt_train_config t;
    bt_data_config d;
    bt_parallel_config_init(&p);
    bt_train_config_init(&t);
    bt_data_config_init(&d);
    CU_ASSERT_STRING_EQUAL(p.devices, "auto");
    CU_ASSERT_EQUAL(p.stages, 0);
    CU_ASSERT_EQUAL(p.microbatches, 1);
    CU_ASSERT_EQUAL(p.schedule, BT_SCHEDULE_1F1B);
    CU_ASSERT_EQUAL(p.partition, BT_PARTITION_PARAMS);
    CU_ASSERT(!t.enabled);
    CU_ASSERT_EQUAL(t.batch, 32);
    CU_ASSERT_EQUAL(t.optimizer.kind, BT_OPT_ADAMW);
    CU_ASSERT_DOUBLE_EQUAL(t.optimizer.beta1, 0.9, 0);
    CU_ASSERT_EQUAL(d.train.kind, BT_DATA_NONE);
    CU_ASSERT_STRING_EQUAL(bt_schedule_name(BT_SCHEDULE_GPIPE), "gpipe");
    CU_ASSERT_STRING_EQUAL(bt_schedule_name(BT_SCHEDULE_1F1B), "1f1b");
    CU_ASSERT_STRING_EQUAL(bt_schedule_name(BT_SCHEDULE_STREAM), "stream");
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Hostile inputs fail fast with a clean message, never by exhausting memory, stack or time. */
static void test_limits(void)
{
    size_t depth = 1000000;
    char *deep = malloc(depth + 8);
    CU_ASSERT_PTR_NOT_NULL_FATAL(deep);
    memcpy(deep, "x: ", 3);
    memset(deep + 3, '[', depth);
    deep[depth + 3] = '\0';
    double t0 = now_s();
    /* the root mapping is a level too: the 64th '[' (column 3 + 64) is one too many */
    CU_ASSERT(contains(fail_text(deep, NULL, 0, BT_ERR_MODEL),
                       "inline.yaml:1:67: nesting is deeper than 64 levels"));
    free(deep);

    /* 9^9 expanded strings if aliases were followed */
    char bomb[2048] = "a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
    for (char c = 'b'; c <= 'i'; c++) {
        char line[128];
        snprintf(line, sizeof line, "%c: [*%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c, *%c]\n", c,
                 c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1, c - 1);
        strcat(bomb, line);
    }
    CU_ASSERT(contains(fail_text(bomb, NULL, 0, BT_ERR_MODEL), "anchor '&a' is not supported"));
    CU_ASSERT(now_s() - t0 < 5.0);

    /* an override value is parsed with the same limits */
    const char *ov = "train.optimizer=[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["
                     "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[";
    CU_ASSERT(contains(fail_text("format: 1\n", &ov, 1, BT_ERR_MODEL),
                       "nesting is deeper than 64 levels"));
    CU_ASSERT(contains(fail_text("", NULL, 0, BT_ERR_MODEL), "inline.yaml: the file is empty"));
}

/* ---- determinism ------------------------------------------------------------------------------ */

static void test_load_twice_identical(void)
{
    const char *models[] = {"models/residual-mlp.yaml", "models/fashion-cnn.yaml",
                            "models/cnn.yaml"};
    for (size_t k = 0; k < sizeof models / sizeof models[0]; k++) {
        bt_model *a = load(models[k], NULL, 0), *b = load(models[k], NULL, 0);
        CU_ASSERT_EQUAL(bt_graph_num_layers(a->graph), bt_graph_num_layers(b->graph));
        CU_ASSERT_EQUAL(bt_graph_num_params(a->graph), bt_graph_num_params(b->graph));
        for (int i = 0; i < bt_graph_num_layers(a->graph); i++) {
            bt_layer_info x, y;
            CU_ASSERT_EQUAL_FATAL(bt_graph_layer(a->graph, i, &x), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_graph_layer(b->graph, i, &y), BT_OK);
            CU_ASSERT_STRING_EQUAL(x.name, y.name);
            CU_ASSERT_STRING_EQUAL(x.op, y.op);
            CU_ASSERT(memcmp(&x.shape, &y.shape, sizeof x.shape) == 0);
            CU_ASSERT_EQUAL(x.n_params, y.n_params);
            CU_ASSERT_EQUAL(x.stage, y.stage);
            CU_ASSERT_EQUAL(x.n_inputs, y.n_inputs);
            for (int j = 0; j < x.n_inputs; j++) CU_ASSERT_STRING_EQUAL(x.inputs[j], y.inputs[j]);
            CU_ASSERT_EQUAL(x.loc.line, y.loc.line);
        }
        for (int i = 0; i < bt_graph_num_params(a->graph); i++) {
            bt_param_info x, y;
            CU_ASSERT_EQUAL_FATAL(bt_graph_param(a->graph, i, &x), BT_OK);
            CU_ASSERT_EQUAL_FATAL(bt_graph_param(b->graph, i, &y), BT_OK);
            CU_ASSERT_STRING_EQUAL(x.name, y.name);
            CU_ASSERT(memcmp(&x.shape, &y.shape, sizeof x.shape) == 0);
        }
        CU_ASSERT(memcmp(&a->train.optimizer, &b->train.optimizer, sizeof a->train.optimizer) == 0);
        CU_ASSERT_EQUAL(a->parallel.partition, b->parallel.partition);
        CU_ASSERT(memcmp(a->parallel.balance, b->parallel.balance, sizeof a->parallel.balance) == 0);
        bt_model_destroy(a);
        bt_model_destroy(b);
    }
    bt_model_destroy(NULL);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"mlp", test_mlp},
        {"residual-mlp", test_residual_mlp},
        {"cnn", test_cnn},
        {"fashion-mlp", test_fashion_mlp},
        {"fashion-cnn", test_fashion_cnn},
        {"mlp-infer", test_mlp_infer},
        {"layer positions", test_layer_positions},
        {"invalid models", test_invalid_models},
        {"missing file", test_missing_file},
        {"overrides", test_overrides},
        {"bad overrides", test_bad_overrides},
        {"repeat and from", test_repeat_and_from},
        {"scalar typing", test_scalar_typing},
        {"defaults", test_defaults},
        {"config init", test_config_init},
        {"limits", test_limits},
        {"load twice", test_load_twice_identical},
        {NULL, NULL},
    };
    return bt_test_main("loader", cases);
}
