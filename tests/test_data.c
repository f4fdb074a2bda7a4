/* tests/test_data.c: data for any input signature and forward-only serving. npy columns convert
 * exactly or are refused (naming file, sample, element), shapes are checked against the declared
 * input, integer inputs against their declared range; a regression model trains from float
 * targets and resumes bit for bit; a model without data: refuses to train instead of making data
 * up; bt_engine_forward on a training graph reports the loss a training step reports for the same
 * batch, and bt_engine_predict returns the chosen layer and per-sample losses; bt_predict_run on
 * a trained model reproduces the trainer's final eval loss exactly. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "baton.h"
#include "bt_test.h"
#include "io/columns.h"
#include "io/loader.h"
#include "io/npy.h"
#include "train/predict.h"
#include "train/trainer.h"

static char tmpdir[256];

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

static const char regression_yaml[] =
    "format: 1\n"
    "name: reg\n"
    "inputs:\n"
    "  x: {shape: [6]}\n"
    "  target: {shape: [2]}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 16}, act: tanh}\n"
    "  - {name: head, op: linear, args: {out: 2}}\n"
    "  - {name: loss, op: mse, from: [head, target]}\n"
    "train: {batch: 8, optimizer: {type: adamw, lr: 1.0e-2}}\n";

/* x uniform-ish in [-1, 1], target = a fixed linear map of x; n samples, written as f32 npy. */
static void write_regression_data(int n, const char *x_path, const char *y_path)
{
    float *x = malloc((size_t)n * 6 * sizeof *x), *y = malloc((size_t)n * 2 * sizeof *y);
    uint32_t s = 12345;
    for (int i = 0; i < n * 6; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)((s >> 8) & 0xffff) / 32768.0f - 1.0f; /* exact in f32 */
    }
    for (int i = 0; i < n; i++) {
        y[i * 2] = x[i * 6] - 0.5f * x[i * 6 + 3];
        y[i * 2 + 1] = x[i * 6 + 1] + x[i * 6 + 2];
    }
    int64_t dx[2] = {n, 6}, dy[2] = {n, 2};
    CU_ASSERT_FATAL(bt_npy_write(x_path, BT_F32, 2, dx, x) == BT_OK);
    CU_ASSERT_FATAL(bt_npy_write(y_path, BT_F32, 2, dy, y) == BT_OK);
    free(x);
    free(y);
}

static bt_model *load_regression(const char *x_path, const char *y_path)
{
    char text[2048], extra[600];
    snprintf(extra, sizeof extra, "data: {train: {type: npy, inputs: {x: '%s', target: '%s'}}}\n", x_path, y_path);
    snprintf(text, sizeof text, "%s%s", regression_yaml, extra);
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "reg.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

static bt_engine *make_engine(const bt_model *m, int stages, int training)
{
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.parallel.devices = stages == 2 ? "cpu:0,cpu:1" : "cpu:0";
    p.parallel.stages = stages;
    p.parallel.microbatches = 2;
    p.parallel.partition = BT_PARTITION_UNIFORM;
    p.parallel.schedule = training ? BT_SCHEDULE_1F1B : BT_SCHEDULE_STREAM;
    p.training = training;
    p.optimizer = m->train.optimizer;
    p.batch = m->train.batch;
    p.dtype = m->dtype;
    p.seed = 3;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

typedef struct last_eval {
    double loss;
    int on_train;
} last_eval;

static void on_event(const bt_train_event *ev, void *user)
{
    last_eval *le = user;
    if (ev->kind == BT_EV_EVAL) le->loss = ev->loss, le->on_train = ev->on_train;
}

static bt_status train(const bt_model *m, bt_engine *e, int64_t steps, const char *ckpt, const char *resume,
                       last_eval *le)
{
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = steps;
    o.checkpoint_dir = ckpt;
    o.resume = resume;
    o.seed = 3;
    bt_trainer *t = NULL;
    bt_status st = bt_trainer_create(m, e, &o, &t);
    if (st == BT_OK) st = bt_trainer_run(t, on_event, le);
    bt_trainer_destroy(t);
    return st;
}

static int same_params(const bt_model *m, const bt_engine *a, const bt_engine *b)
{
    int same = 1;
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * bt_dtype_size(bt_engine_dtype(a));
        void *x = malloc(bytes), *y = malloc(bytes);
        bt_engine_read_param(a, p.name, x, bytes);
        bt_engine_read_param(b, p.name, y, bytes);
        if (memcmp(x, y, bytes) != 0) same = 0;
        free(x);
        free(y);
    }
    return same;
}

/* Float targets train, resume bit for bit, the eval says it read the training set, and predict
 * on the trained weights reproduces the final eval loss exactly. */
static void test_regression_trains_resumes_and_predicts(void)
{
    char x[300], y[300], dir[300];
    write_regression_data(64, tmp_path("rx.npy", x, sizeof x), tmp_path("ry.npy", y, sizeof y));
    tmp_path("reg-ckpt", dir, sizeof dir);
    bt_model *m = load_regression(x, y);
    last_eval first_eval = {0}, straight_eval = {0}, resumed_eval = {0};
    bt_engine *straight = make_engine(m, 2, 1), *first = make_engine(m, 2, 1), *second = make_engine(m, 1, 1);
    CU_ASSERT(train(m, straight, 16, NULL, NULL, &straight_eval) == BT_OK);
    CU_ASSERT(train(m, first, 5, dir, NULL, &first_eval) == BT_OK);
    CU_ASSERT(first_eval.loss > straight_eval.loss); /* it learns: 16 steps beat 5 */
    CU_ASSERT(straight_eval.on_train);
    CU_ASSERT(train(m, second, 16, NULL, dir, &resumed_eval) == BT_OK);
    CU_ASSERT(same_params(m, straight, second));
    CU_ASSERT(resumed_eval.loss == straight_eval.loss);

    bt_engine *serve = make_engine(m, 2, 0);
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * 4;
        float *w = malloc(bytes);
        bt_engine_read_param(straight, p.name, w, bytes);
        CU_ASSERT(bt_engine_write_param(serve, p.name, w, bytes) == BT_OK);
        free(w);
    }
    bt_predict_opts po;
    bt_predict_report rep;
    memset(&po, 0, sizeof po);
    po.n_inputs = 1;
    po.input_files[0] = x; /* the one input besides the loss's target */
    po.labels = y;
    bt_status st = bt_predict_run(m, serve, &po, NULL, NULL, &rep);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT(rep.samples == 64 && rep.has_loss && isnan(rep.accuracy));
    CU_ASSERT_STRING_EQUAL(rep.output_layer, "head");
    CU_ASSERT(rep.loss == straight_eval.loss);
    CU_ASSERT(rep.p50_ms <= rep.p99_ms && rep.samples_per_s > 0);
    bt_engine_destroy(serve);
    bt_engine_destroy(straight);
    bt_engine_destroy(first);
    bt_engine_destroy(second);
    bt_model_destroy(m);
}

/* A model without data: is refused, never trained on made-up data. */
static void test_no_data_is_refused(void)
{
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(regression_yaml, strlen(regression_yaml), "reg.yaml", NULL, 0, &m) == BT_OK);
    bt_engine *e = make_engine(m, 1, 1);
    last_eval le = {0};
    CU_ASSERT(train(m, e, 2, NULL, NULL, &le) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "has no data.train") != NULL);
    CU_ASSERT(bt_engine_step(e) == 0);
    bt_engine_destroy(e);
    bt_model_destroy(m);
    /* data: synthetic asks for it: every signature gets columns shaped like its declaration */
    const char *const ov[] = {"data=synthetic"};
    CU_ASSERT_FATAL(bt_model_load_string(regression_yaml, strlen(regression_yaml), "reg.yaml", ov, 1, &m) == BT_OK);
    e = make_engine(m, 1, 1);
    CU_ASSERT(train(m, e, 3, NULL, NULL, &le) == BT_OK);
    CU_ASSERT(bt_engine_step(e) == 3);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static bt_status load_cols(const char *name, const char *path, bt_dtype dtype, int ndim, const int64_t *dims,
                           int64_t int_hi, bt_columns *out)
{
    bt_column spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.name, sizeof spec.name, "%s", name);
    spec.dtype = dtype;
    spec.shape.ndim = ndim;
    spec.numel = 1;
    for (int i = 0; i < ndim; i++) spec.shape.dim[i] = dims[i], spec.numel *= dims[i];
    spec.int_hi = int_hi;
    bt_data_source src;
    memset(&src, 0, sizeof src);
    src.kind = BT_DATA_NPY;
    src.n_inputs = 1;
    src.input_names[0] = name;
    src.input_files[0] = path;
    return bt_columns_load_npy(&src, &spec, 1, NULL, out);
}

static void test_npy_columns_convert_exactly(void)
{
    char p[300];
    bt_columns c;
    int64_t d23[2] = {2, 3}, three[1] = {3}, two[1] = {2};
    double exact[6] = {0.5, -2, 3.25, 1024, 0, 7};
    CU_ASSERT_FATAL(bt_npy_write(tmp_path("f8.npy", p, sizeof p), BT_F64, 2, d23, exact) == BT_OK);
    CU_ASSERT(load_cols("x", p, BT_F32, 1, three, 0, &c) == BT_OK);
    CU_ASSERT(c.n == 2 && ((float *)c.col[0].data)[2] == 3.25f);
    bt_columns_free(&c);
    /* an integer-valued float feeds an i32 input, within the declared range */
    CU_ASSERT(load_cols("tok", p, BT_I32, 1, three, 0, &c) == BT_ERR_INVALID_ARG); /* 0.5 */
    CU_ASSERT(strstr(bt_last_error(), "f8.npy: sample 0, element 0 is 0.5, which is not an integer") != NULL);
    /* 0.1 is no f32 */
    double inexact[6] = {0.5, 0.1, 1, 2, 3, 4};
    CU_ASSERT_FATAL(bt_npy_write(tmp_path("f8b.npy", p, sizeof p), BT_F64, 2, d23, inexact) == BT_OK);
    CU_ASSERT(load_cols("x", p, BT_F32, 1, three, 0, &c) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "sample 0, element 1 is 0.10000000000000001, which float32 cannot hold") != NULL);
    CU_ASSERT(load_cols("x", p, BT_F64, 1, three, 0, &c) == BT_OK);
    CU_ASSERT(((double *)c.col[0].data)[1] == 0.1);
    bt_columns_free(&c);
    /* shapes: (2, 3) is not (N, 2) */
    CU_ASSERT(load_cols("x", p, BT_F64, 1, two, 0, &c) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "f8b.npy: shape (2, 3) does not fit input 'x' (per sample [2]): expected (N, 2)") !=
              NULL);
    /* integer range: a vocabulary of 5 */
    int32_t ids[6] = {0, 4, 1, 2, 5, 3};
    CU_ASSERT_FATAL(bt_npy_write(tmp_path("i4.npy", p, sizeof p), BT_I32, 2, d23, ids) == BT_OK);
    CU_ASSERT(load_cols("tok", p, BT_I32, 1, three, 5, &c) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "i4.npy: sample 1, element 1 is 5: input 'tok' takes values in [0, 5)") != NULL);
    CU_ASSERT(load_cols("tok", p, BT_I32, 1, three, 6, &c) == BT_OK);
    CU_ASSERT(((int32_t *)c.col[0].data)[4] == 5);
    bt_columns_free(&c);
    /* small integers feed a float input exactly */
    CU_ASSERT(load_cols("x", p, BT_F32, 1, three, 0, &c) == BT_OK);
    CU_ASSERT(((float *)c.col[0].data)[4] == 5.0f);
    bt_columns_free(&c);
}

/* With use given, a file in the column's own type stays in the file (rows_in_file: checked through
 * a buffer, past its first 4 MiB part too; the loader reads rows from it, the same rows as from
 * memory); a column left out by use is not loaded, but its header is checked. */
static void test_npy_columns_in_file_and_left_out(void)
{
    char p[300];
    bt_columns c, mem;
    const int64_t n = 3000, per = 512, dims[2] = {n, per};
    float *x = malloc((size_t)(n * per) * sizeof *x);
    CU_ASSERT_FATAL(x != NULL);
    for (int64_t i = 0; i < n * per; i++) x[i] = (float)(i % 1000) * 0.25f;
    CU_ASSERT_FATAL(bt_npy_write(tmp_path("f4big.npy", p, sizeof p), BT_F32, 2, dims, x) == BT_OK);
    bt_column spec;
    memset(&spec, 0, sizeof spec);
    snprintf(spec.name, sizeof spec.name, "x");
    spec.dtype = BT_F32;
    spec.shape.ndim = 1;
    spec.shape.dim[0] = per;
    spec.numel = per;
    bt_data_source src;
    memset(&src, 0, sizeof src);
    src.kind = BT_DATA_NPY;
    src.n_inputs = 1;
    src.input_names[0] = "x";
    src.input_files[0] = p;
    unsigned char one[1] = {1}, none[1] = {0};
    CU_ASSERT_FATAL(bt_columns_load_npy(&src, &spec, 1, one, &c) == BT_OK);
    CU_ASSERT(c.n == n && c.col[0].rows_in_file && c.col[0].data == NULL);
    CU_ASSERT_FATAL(bt_columns_load_npy(&src, &spec, 1, NULL, &mem) == BT_OK);
    CU_ASSERT(!mem.col[0].rows_in_file && mem.col[0].data != NULL);
    /* a shard loader over each: rows 2..5 of batches of 8, the same bytes */
    unsigned char use[1] = {1};
    bt_loader *lf = NULL, *lm = NULL;
    CU_ASSERT_FATAL(bt_loader_create_shard(&c, 8, 2, 4, use, 1, 1, 7, 2, NULL, &lf) == BT_OK);
    CU_ASSERT_FATAL(bt_loader_create_shard(&mem, 8, 2, 4, use, 1, 1, 7, 2, NULL, &lm) == BT_OK);
    for (int k = 0; k < 3; k++) {
        bt_batch bf, bm;
        CU_ASSERT_FATAL(bt_loader_next(lf, &bf) == BT_OK && bt_loader_next(lm, &bm) == BT_OK);
        CU_ASSERT(memcmp(bf.cols[0], bm.cols[0], 4 * (size_t)per * sizeof(float)) == 0);
        bt_loader_release(lf);
        bt_loader_release(lm);
    }
    bt_loader_destroy(lf);
    bt_loader_destroy(lm);
    bt_columns_free(&c);
    bt_columns_free(&mem);
    x[2500 * per + 7] = NAN; /* in the second 4 MiB part */
    CU_ASSERT_FATAL(bt_npy_write(p, BT_F32, 2, dims, x) == BT_OK);
    CU_ASSERT(bt_columns_load_npy(&src, &spec, 1, one, &c) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "f4big.npy: sample 2500, element 7 is NaN") != NULL);
    /* left out: the header is read (samples, shape), the data is not (the NaN passes unseen) */
    CU_ASSERT(bt_columns_load_npy(&src, &spec, 1, none, &c) == BT_OK);
    CU_ASSERT(c.n == n && c.col[0].data == NULL && !c.col[0].rows_in_file);
    bt_columns_free(&c);
    spec.shape.dim[0] = spec.numel = per + 1;
    CU_ASSERT(bt_columns_load_npy(&src, &spec, 1, none, &c) == BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "does not fit input 'x'") != NULL);
    free(x);
}

/* bt_engine_forward on a training graph reports the loss the training step reports for the same
 * batch (before its update), and bt_engine_predict returns each sample's loss and the layer. */
static void test_forward_reports_the_loss(void)
{
    char x[300], y[300];
    write_regression_data(8, tmp_path("fx.npy", x, sizeof x), tmp_path("fy.npy", y, sizeof y));
    bt_model *m = load_regression(x, y);
    bt_engine *e = make_engine(m, 2, 1);
    bt_npy xa, ya;
    CU_ASSERT_FATAL(bt_npy_read(x, &xa) == BT_OK && bt_npy_read(y, &ya) == BT_OK);
    bt_feed feeds[2] = {{"x", xa.data, BT_F32}, {"target", ya.data, BT_F32}};
    bt_step_result fwd, grads;
    float losses[8], head[16];
    CU_ASSERT(bt_engine_forward(e, feeds, 2, NULL, &fwd) == BT_OK);
    CU_ASSERT(bt_engine_predict(e, feeds, 2, "head", head, losses, NULL) == BT_OK);
    CU_ASSERT(bt_engine_compute_grads(e, feeds, 2, &grads) == BT_OK);
    CU_ASSERT(fwd.loss > 0 && fabs(fwd.loss - grads.loss) <= 1e-12 * fabs(grads.loss));
    double sum = 0, direct = 0;
    for (int i = 0; i < 8; i++) {
        sum += losses[i];
        double d0 = head[i * 2] - ((float *)ya.data)[i * 2], d1 = head[i * 2 + 1] - ((float *)ya.data)[i * 2 + 1];
        direct += (d0 * d0 + d1 * d1) / 2;
    }
    CU_ASSERT(sum / 8 == fwd.loss);
    CU_ASSERT(fabs(direct / 8 - fwd.loss) < 1e-5);
    bt_npy_free(&xa);
    bt_npy_free(&ya);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test_data_XXXXXX");
    if (!mkdtemp(tmpdir)) return 99;
    static const bt_test_case cases[] = {
        {"a regression model trains, resumes and predicts exactly", test_regression_trains_resumes_and_predicts},
        {"a model without data: is refused", test_no_data_is_refused},
        {"npy columns convert exactly", test_npy_columns_convert_exactly},
        {"npy columns: rows in the file, and left out", test_npy_columns_in_file_and_left_out},
        {"forward reports the loss of a training graph", test_forward_reports_the_loss},
        {NULL, NULL}};
    int rc = bt_test_main("data", cases);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
