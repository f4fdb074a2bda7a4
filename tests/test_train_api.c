/* tests/test_train_api.c: the public training API (baton/train.h, baton/data.h) as a C program
 * uses it, through <baton.h> alone: a trainer with a checkpoint directory (numbered files,
 * keep_last, checkpoint.safetensors the newest, the metadata), a stop flag set mid-run and an
 * exact resume from the checkpoint it wrote, save and resume on a bare engine, weights given as
 * F16 and BF16 (converted exactly), a partial load that lists what it skipped, refused option
 * combinations, and the array readers. */
#include <CUnit/Basic.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton.h"

static const char model_yaml[] =
    "format: 1\n"
    "name: api\n"
    "inputs:\n"
    "  x: {shape: [12]}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 24}, act: relu}\n"
    "  - {name: head, op: linear, args: {out: 3}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "parallel: {devices: [cpu:0, cpu:1], pipeline: {stages: 2, microbatches: 2, schedule: 1f1b}}\n"
    "train:\n"
    "  batch: 16\n"
    "  optimizer: {type: adamw, lr: 3.0e-3}\n"
    "data:\n"
    "  train: {type: synthetic, samples: 256}\n";

static char tmpdir[256];

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

static bt_model *load(void)
{
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(model_yaml, sizeof model_yaml - 1, "api.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

static bt_engine *engine(const bt_model *m)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.training = 1;
    p.optimizer = m->train.optimizer;
    p.batch = m->train.batch;
    p.seed = 5;
    p.threads = 1;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

static void opts_for(bt_trainer_opts *o, int64_t steps, const char *dir, const char *resume)
{
    bt_trainer_opts_init(o);
    o->steps = steps;
    o->eval_every = -1;
    o->checkpoint_dir = dir;
    o->resume = resume;
    o->seed = 5;
}

static void run(const bt_model *m, bt_engine *e, const bt_trainer_opts *o, bt_train_callback cb, void *user,
                bt_trainer **keep)
{
    bt_trainer *t = NULL;
    bt_status st = bt_trainer_create(m, e, o, &t);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    st = bt_trainer_run(t, cb, user);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT(st == BT_OK);
    if (keep) *keep = t;
    else bt_trainer_destroy(t);
}

/* 1 when every parameter of a and b is bit-identical. */
static int same_params(const bt_model *m, const bt_engine *a, const bt_engine *b)
{
    int same = 1;
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * sizeof(float);
        float *x = malloc(bytes), *y = malloc(bytes);
        CU_ASSERT_FATAL(x && y);
        CU_ASSERT(bt_engine_read_param(a, p.name, x, bytes) == BT_OK);
        CU_ASSERT(bt_engine_read_param(b, p.name, y, bytes) == BT_OK);
        same &= memcmp(x, y, bytes) == 0;
        free(x);
        free(y);
    }
    return same;
}

static int exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

static void test_checkpoint_directory(void)
{
    bt_model *m = load();
    bt_engine *e = engine(m);
    char dir[300], f[400], latest[400];
    bt_trainer_opts o;
    opts_for(&o, 6, tmp_path("runs/deep/dir", dir, sizeof dir), NULL);
    o.checkpoint_every = 2;
    o.keep_last = 2;
    run(m, e, &o, NULL, NULL, NULL);
    snprintf(f, sizeof f, "%s/checkpoint-00000002.safetensors", dir);
    CU_ASSERT(!exists(f)); /* pruned: keep_last 2 */
    snprintf(f, sizeof f, "%s/checkpoint-00000004.safetensors", dir);
    CU_ASSERT(exists(f));
    snprintf(f, sizeof f, "%s/checkpoint-00000006.safetensors", dir);
    snprintf(latest, sizeof latest, "%s/checkpoint.safetensors", dir);
    struct stat a, b;
    CU_ASSERT_FATAL(stat(f, &a) == 0 && stat(latest, &b) == 0);
    CU_ASSERT(a.st_ino == b.st_ino);
    bt_checkpoint_meta meta;
    CU_ASSERT_FATAL(bt_checkpoint_read_meta(dir, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 6);
    CU_ASSERT_EQUAL(meta.batch, 16);
    CU_ASSERT_EQUAL(meta.seed, 5);
    CU_ASSERT_STRING_EQUAL(meta.model, "api");
    /* save and resume on a bare engine */
    char other[300];
    tmp_path("bare", other, sizeof other);
    meta.step = 6;
    CU_ASSERT_FATAL(bt_checkpoint_save(e, m->graph, other, &meta) == BT_OK);
    bt_engine *back = engine(m);
    bt_checkpoint_meta got;
    CU_ASSERT_FATAL(bt_checkpoint_resume(back, m->graph, other, &got) == BT_OK);
    CU_ASSERT_EQUAL(got.step, 6);
    CU_ASSERT_EQUAL(bt_engine_step(back), 6);
    CU_ASSERT(same_params(m, e, back));
    bt_engine_destroy(back);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

typedef struct stopper {
    volatile sig_atomic_t flag;
    int64_t at;
} stopper;

static void stop_at(const bt_train_event *ev, void *user)
{
    stopper *s = user;
    if (ev->kind == BT_EV_STEP && ev->step == s->at) s->flag = 1;
}

static void test_stop_and_resume(void)
{
    bt_model *m = load();
    char dir[300], f[400];
    tmp_path("stopped", dir, sizeof dir);
    stopper s = {.flag = 0, .at = 3};
    bt_trainer_opts o;
    opts_for(&o, 9, dir, NULL);
    o.stop = &s.flag;
    bt_engine *e = engine(m);
    bt_trainer *t = NULL;
    run(m, e, &o, stop_at, &s, &t);
    CU_ASSERT_EQUAL(bt_trainer_stopped_at(t), 3);
    bt_trainer_destroy(t);
    snprintf(f, sizeof f, "%s/checkpoint-00000003.safetensors", dir);
    CU_ASSERT(exists(f));
    bt_engine *resumed = engine(m), *straight = engine(m);
    opts_for(&o, 9, dir, dir);
    run(m, resumed, &o, NULL, NULL, NULL);
    opts_for(&o, 9, NULL, NULL);
    run(m, straight, &o, NULL, NULL, NULL);
    CU_ASSERT(same_params(m, resumed, straight));
    /* what cannot be honoured together is refused */
    bt_trainer_opts bad;
    opts_for(&bad, 9, NULL, dir);
    bad.init = dir;
    CU_ASSERT_EQUAL(bt_trainer_create(m, straight, &bad, &t), BT_ERR_INVALID_ARG);
    opts_for(&bad, 9, NULL, NULL);
    bad.checkpoint_every = 2;
    CU_ASSERT_EQUAL(bt_trainer_create(m, straight, &bad, &t), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "no checkpoint directory"));
    bt_engine_destroy(e);
    bt_engine_destroy(resumed);
    bt_engine_destroy(straight);
    bt_model_destroy(m);
}

/* f16 bits of a float that f16 holds exactly (normal numbers and zero). */
static uint16_t f16_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    if ((u & 0x7fffffff) == 0) return (uint16_t)(u >> 16);
    int exp = (int)((u >> 23) & 0xff) - 127 + 15;
    return (uint16_t)((u >> 16 & 0x8000) | (uint32_t)exp << 10 | (u >> 13 & 0x3ff));
}

static uint16_t bf16_bits(float v)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    return (uint16_t)(u >> 16);
}

static float value_at(int param, int64_t j) { return (float)((j + param) % 7 - 3) / 8.0f; }

/* Writes a safetensors file by hand: every parameter of m named in `only` (NULL: all) as dtype
 * ("F16" or "BF16") holding value_at, plus a tensor "extra" when asked. */
static void write_half_file(const bt_model *m, const char *path, const char *dtype, const char *only, int extra)
{
    char header[4096] = "{";
    unsigned char *data = NULL;
    size_t off = 0;
    for (int i = 0; i < bt_graph_num_params(m->graph) + extra; i++) {
        bt_param_info p;
        if (i < bt_graph_num_params(m->graph)) {
            bt_graph_param(m->graph, i, &p);
            if (only && strcmp(only, p.name) != 0) continue;
        } else {
            memset(&p, 0, sizeof p);
            p.name = "extra";
            p.shape.ndim = 1;
            p.shape.dim[0] = 4;
        }
        int64_t n = bt_shape_numel(&p.shape);
        data = realloc(data, off + (size_t)n * 2);
        CU_ASSERT_FATAL(data != NULL);
        for (int64_t j = 0; j < n; j++) {
            uint16_t bits = strcmp(dtype, "F16") == 0 ? f16_bits(value_at(i, j)) : bf16_bits(value_at(i, j));
            memcpy(data + off + (size_t)j * 2, &bits, 2);
        }
        char shape[64] = "";
        for (int d = 0; d < p.shape.ndim; d++)
            snprintf(shape + strlen(shape), sizeof shape - strlen(shape), "%s%lld", d ? "," : "", (long long)p.shape.dim[d]);
        snprintf(header + strlen(header), sizeof header - strlen(header),
                 "%s\"%s\":{\"dtype\":\"%s\",\"shape\":[%s],\"data_offsets\":[%zu,%zu]}", off ? "," : "", p.name, dtype,
                 shape, off, off + (size_t)n * 2);
        off += (size_t)n * 2;
    }
    strcat(header, "}");
    while (strlen(header) % 8) strcat(header, " ");
    FILE *f = fopen(path, "wb");
    CU_ASSERT_FATAL(f != NULL);
    uint64_t len = strlen(header);
    fwrite(&len, 8, 1, f);
    fwrite(header, 1, len, f);
    fwrite(data, 1, off, f);
    fclose(f);
    free(data);
}

/* 1 when parameter i of e holds value_at(i, .) exactly. */
static int holds_values(const bt_model *m, const bt_engine *e, int i)
{
    bt_param_info p;
    bt_graph_param(m->graph, i, &p);
    int64_t n = bt_shape_numel(&p.shape);
    float *x = malloc((size_t)n * sizeof *x);
    CU_ASSERT_FATAL(x != NULL);
    CU_ASSERT(bt_engine_read_param(e, p.name, x, (size_t)n * sizeof *x) == BT_OK);
    int ok = 1;
    for (int64_t j = 0; j < n; j++) ok &= x[j] == value_at(i, j);
    free(x);
    return ok;
}

static void test_half_weights(void)
{
    bt_model *m = load();
    const char *dtypes[] = {"F16", "BF16"};
    for (int k = 0; k < 2; k++) {
        char path[300];
        tmp_path(k ? "w-bf16.safetensors" : "w-f16.safetensors", path, sizeof path);
        write_half_file(m, path, dtypes[k], NULL, 0);
        bt_engine *e = engine(m);
        bt_status st = bt_checkpoint_load_weights(e, m->graph, path);
        if (st != BT_OK) printf("\n  %s\n", bt_last_error());
        CU_ASSERT(st == BT_OK);
        for (int i = 0; i < bt_graph_num_params(m->graph); i++) CU_ASSERT(holds_values(m, e, i));
        bt_engine_destroy(e);
    }
    /* a file with one parameter and an extra tensor: refused whole, loaded in part */
    char path[300];
    tmp_path("w-part.safetensors", path, sizeof path);
    write_half_file(m, path, "F16", "fc1.weight", 1);
    bt_engine *e = engine(m);
    CU_ASSERT(bt_checkpoint_load_weights(e, m->graph, path) != BT_OK);
    bt_weights_report r;
    CU_ASSERT_FATAL(bt_checkpoint_load_weights_partial(e, m->graph, path, &r) == BT_OK);
    CU_ASSERT_EQUAL(r.loaded, 1);
    CU_ASSERT_EQUAL(r.n_skipped, 1);
    CU_ASSERT(r.n_skipped == 1 && strstr(r.skipped[0], "extra: no parameter") != NULL);
    CU_ASSERT_EQUAL(r.n_missing, bt_graph_num_params(m->graph) - 1);
    CU_ASSERT(holds_values(m, e, 0));
    bt_weights_report_free(&r);
    CU_ASSERT_EQUAL(r.n_missing, 0);
    char missing[300];
    CU_ASSERT_EQUAL(bt_checkpoint_load_weights(e, m->graph, tmp_path("nope.safetensors", missing, sizeof missing)),
                    BT_ERR_INVALID_ARG);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_arrays(void)
{
    char path[300], ipath[300];
    float xs[6] = {0.5f, -1.25f, 3.0f, 0.0f, 1e-3f, 7.0f};
    bt_array a = {.dtype = BT_F32, .ndim = 2, .dim = {3, 2}, .numel = 6, .data = xs};
    CU_ASSERT_FATAL(bt_array_write_npy(tmp_path("x.npy", path, sizeof path), &a) == BT_OK);
    bt_array b;
    CU_ASSERT_FATAL(bt_array_read(path, BT_F64, &b) == BT_OK);
    CU_ASSERT(b.ndim == 2 && b.dim[0] == 3 && b.dim[1] == 2 && b.numel == 6);
    for (int i = 0; i < 6; i++) CU_ASSERT(((double *)b.data)[i] == (double)xs[i]);
    bt_array_free(&b);
    CU_ASSERT_EQUAL(bt_array_read(path, BT_I32, &b), BT_ERR_INVALID_ARG); /* floats never become labels */
    CU_ASSERT_PTR_NULL(b.data);
    int32_t ys[3] = {2, 0, 16777217};
    bt_array c = {.dtype = BT_I32, .ndim = 1, .dim = {3}, .numel = 3, .data = ys};
    CU_ASSERT_FATAL(bt_array_write_npy(tmp_path("y.npy", ipath, sizeof ipath), &c) == BT_OK);
    CU_ASSERT_FATAL(bt_array_read(ipath, BT_F64, &b) == BT_OK);
    CU_ASSERT(((double *)b.data)[2] == 16777217.0);
    bt_array_free(&b);
    CU_ASSERT_EQUAL(bt_array_read(ipath, BT_F32, &b), BT_ERR_INVALID_ARG); /* 2^24 + 1 is not a float */
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "element 2"));
    CU_ASSERT_EQUAL(bt_array_read(tmp_path("none.npy", path, sizeof path), BT_F32, &b), BT_ERR_INVALID_ARG);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_train_api_XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    if (CU_initialize_registry() != CUE_SUCCESS) return 1;
    CU_pSuite s = CU_add_suite("train_api", NULL, NULL);
    CU_add_test(s, "checkpoint directory, save and resume", test_checkpoint_directory);
    CU_add_test(s, "stop flag and exact resume", test_stop_and_resume);
    CU_add_test(s, "F16/BF16 and partial weights", test_half_weights);
    CU_add_test(s, "array readers", test_arrays);
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failures = CU_get_number_of_failures();
    printf("train_api: %u tests, %u failed\n", CU_get_number_of_tests_run(), CU_get_number_of_tests_failed());
    CU_cleanup_registry();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) return 1;
    return failures != 0;
}
