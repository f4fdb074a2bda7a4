/* tests/test_train.c: training for real. Resuming from a checkpoint continues bit for bit (20
 * steps in one go equal 10, save, resume, 10), also on another placement (saved from 2 stages,
 * resumed on 3); a process killed while writing a checkpoint leaves the previous one loadable;
 * mismatched checkpoints are rejected naming the tensor, before the engine is touched; weights
 * load from a safetensors file by PyTorch name; the loader visits every sample once per epoch in
 * a seeded order and seeks exactly; and a model learns the synthetic task. A diverged update is
 * never checkpointed (the last good checkpoint survives and resumes) and a non-finite eval loss
 * fails the run. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "baton.h"
#define BT_TEST_ATOMIC_HOOKS
#include "bt_test.h"
#include "io/atomic_file.h"
#include "io/dataset.h"
#include "io/loader.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

static const char model_yaml[] =
    "format: 1\n"
    "name: small\n"
    "inputs:\n"
    "  x: {shape: [12]}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 24}, act: relu}\n"
    "  - {name: drop, op: dropout, args: {p: 0.2}}\n"
    "  - {name: fc2, op: linear, args: {out: 24}, act: tanh}\n"
    "  - {name: head, op: linear, args: {out: 3}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "train:\n"
    "  batch: 16\n"
    "  optimizer: {type: adamw, lr: 3.0e-3}\n"
    "data:\n"
    "  train: {type: synthetic, samples: 200}\n";

static bt_model *load_model(const char *extra)
{
    char text[4096];
    snprintf(text, sizeof text, "%s%s", model_yaml, extra ? extra : "");
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "small.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

static bt_engine *make_engine(const bt_model *m, int stages, int microbatches)
{
    static char devices[64];
    bt_engine_params p;
    bt_engine_params_init(&p);
    devices[0] = '\0';
    for (int s = 0; s < stages; s++) {
        char one[16];
        snprintf(one, sizeof one, "%scpu:%d", s ? "," : "", s);
        strcat(devices, one);
    }
    p.parallel = m->parallel;
    p.parallel.devices = devices;
    p.parallel.stages = stages;
    p.parallel.microbatches = microbatches;
    p.parallel.partition = BT_PARTITION_UNIFORM;
    p.optimizer = m->train.optimizer;
    p.batch = m->train.batch;
    p.seed = 9;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

static void train(const bt_model *m, bt_engine *e, int64_t steps, const char *ckpt_dir, const char *resume)
{
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = steps;
    o.eval_every = -1;
    o.checkpoint_dir = ckpt_dir;
    o.resume = resume;
    o.seed = 9;
    bt_trainer *t = NULL;
    bt_status st = bt_trainer_create(m, e, &o, &t);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    st = bt_trainer_run(t, NULL, NULL);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    bt_trainer_destroy(t);
}

/* 1 if every parameter of a and b is bit-identical. */
static int same_params(const bt_model *m, const bt_engine *a, const bt_engine *b)
{
    int same = 1;
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * 4;
        float *x = malloc(bytes), *y = malloc(bytes);
        bt_engine_read_param(a, p.name, x, bytes);
        bt_engine_read_param(b, p.name, y, bytes);
        if (memcmp(x, y, bytes) != 0) same = 0;
        free(x);
        free(y);
    }
    return same;
}

static char tmpdir[256];

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

static void test_resume_is_bit_identical(void)
{
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("resume", dir, sizeof dir);
    bt_engine *straight = make_engine(m, 2, 4);
    train(m, straight, 20, NULL, NULL);
    bt_engine *first = make_engine(m, 2, 4);
    train(m, first, 10, dir, NULL);
    CU_ASSERT(!same_params(m, straight, first)); /* 10 steps are not 20 */
    bt_engine *second = make_engine(m, 2, 4);
    train(m, second, 20, NULL, dir);
    CU_ASSERT(bt_engine_step(second) == 20);
    CU_ASSERT(same_params(m, straight, second));
    bt_engine_destroy(straight);
    bt_engine_destroy(first);
    bt_engine_destroy(second);
    bt_model_destroy(m);
}

static void test_resume_on_another_placement(void)
{
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("placement", dir, sizeof dir);
    bt_engine *straight = make_engine(m, 1, 1);
    train(m, straight, 16, NULL, NULL);
    bt_engine *two = make_engine(m, 2, 1);
    train(m, two, 8, dir, NULL);
    bt_engine *three = make_engine(m, 3, 1);
    train(m, three, 16, NULL, dir);
    CU_ASSERT(same_params(m, straight, three));
    bt_engine_destroy(straight);
    bt_engine_destroy(two);
    bt_engine_destroy(three);
    bt_model_destroy(m);
}

static void test_crash_while_writing_keeps_previous_checkpoint(void)
{
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("crash", dir, sizeof dir);
    bt_engine *e = make_engine(m, 2, 2);
    train(m, e, 5, dir, NULL);                  /* checkpoint at step 5 */
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        bt_test_write_limit = 2000;
        bt_atomic_file_set_test_hook(bt_test_crash_hook);
        bt_engine *c = make_engine(m, 2, 2);
        train(m, c, 7, dir, NULL);              /* dies while writing step 7's checkpoint */
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CU_ASSERT(WIFEXITED(status) && WEXITSTATUS(status) == 3);
    bt_engine *back = make_engine(m, 2, 2);
    bt_checkpoint_meta meta;
    bt_status st = bt_checkpoint_resume(back, m->graph, dir, &meta);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT(st == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 5);
    CU_ASSERT(same_params(m, e, back));
    bt_engine_destroy(e);
    bt_engine_destroy(back);
    bt_model_destroy(m);
}

static void test_mismatched_checkpoint_rejected(void)
{
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("mismatch", dir, sizeof dir);
    bt_engine *e = make_engine(m, 1, 1);
    train(m, e, 2, dir, NULL);
    /* a model whose fc2 is wider cannot take this checkpoint */
    const char *wider[] = {"layers.fc2.args.out=30"};
    bt_model *other = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", wider, 1, &other) == BT_OK);
    bt_engine *o = make_engine(other, 1, 1);
    float before[24 * 12], after[24 * 12];
    CU_ASSERT(bt_engine_read_param(o, "fc1.weight", before, sizeof before) == BT_OK);
    bt_checkpoint_meta meta;
    bt_status st = bt_checkpoint_resume(o, other->graph, dir, &meta);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "tensor 'fc2.weight' has shape [24, 24] but the model's is [30, 24]"));
    CU_ASSERT(bt_engine_read_param(o, "fc1.weight", after, sizeof after) == BT_OK);
    CU_ASSERT(memcmp(before, after, sizeof before) == 0); /* nothing was loaded */
    /* an SGD run cannot resume an AdamW checkpoint */
    bt_engine_destroy(o);
    bt_model_destroy(other);
    const char *sgd[] = {"train.optimizer={type: sgd, lr: 0.1, momentum: 0.9}"};
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", sgd, 1, &other) == BT_OK);
    o = make_engine(other, 1, 1);
    st = bt_checkpoint_resume(o, other->graph, dir, &meta);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "optimizer"));
    bt_engine_destroy(o);
    bt_model_destroy(other);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_init_from_weights_file(void)
{
    bt_model *m = load_model(NULL);
    bt_engine *e = make_engine(m, 2, 2);
    char path[300];
    tmp_path("weights.safetensors", path, sizeof path);
    /* weights as PyTorch would save them: f64 here, names and [out, in] shapes */
    bt_st_writer *w = NULL;
    CU_ASSERT_FATAL(bt_st_writer_create(&w) == BT_OK);
    double *bufs[16];
    int n = bt_graph_num_params(m->graph);
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        int64_t k = bt_shape_numel(&p.shape);
        bufs[i] = malloc((size_t)k * 8);
        for (int64_t j = 0; j < k; j++) bufs[i][j] = 0.001 * (double)(i + 1) * (double)(j % 7) - 0.002;
        CU_ASSERT(bt_st_writer_add(w, p.name, BT_F64, &p.shape, bufs[i]) == BT_OK);
    }
    CU_ASSERT_FATAL(bt_st_writer_write(w, path) == BT_OK);
    bt_st_writer_destroy(w);
    CU_ASSERT_FATAL(bt_checkpoint_load_weights(e, m->graph, path) == BT_OK);
    for (int i = 0; i < n; i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        int64_t k = bt_shape_numel(&p.shape);
        float *got = malloc((size_t)k * 4);
        bt_engine_read_param(e, p.name, got, (size_t)k * 4);
        int ok = 1;
        for (int64_t j = 0; j < k; j++) ok &= got[j] == (float)bufs[i][j];
        CU_ASSERT(ok);
        free(got);
        free(bufs[i]);
    }
    /* a file missing a tensor is refused by name */
    CU_ASSERT_FATAL(bt_st_writer_create(&w) == BT_OK);
    float one = 1;
    bt_shape scalar = {0};
    bt_st_writer_add(w, "fc1.bias", BT_F32, &scalar, &one);
    CU_ASSERT_FATAL(bt_st_writer_write(w, path) == BT_OK);
    bt_st_writer_destroy(w);
    CU_ASSERT_EQUAL(bt_checkpoint_load_weights(e, m->graph, path), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "'fc1.weight' is missing"));
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_loader_order_and_seek(void)
{
    bt_data_source src = {.kind = BT_DATA_SYNTHETIC, .samples = 103, .shuffle = 1};
    bt_dataset ds;
    CU_ASSERT_FATAL(bt_dataset_load(&src, 5, 4, 1, 0, &ds) == BT_OK);
    /* tag each sample by its index so batches can be traced back */
    for (int64_t i = 0; i < ds.n; i++) ds.inputs[i * 5] = (float)i;
    bt_loader *l = NULL;
    CU_ASSERT_FATAL(bt_loader_create(&ds, 10, 1, 1, 77, 3, NULL, &l) == BT_OK);
    CU_ASSERT_EQUAL(bt_loader_batches_per_epoch(l), 10);
    int seen[103] = {0};
    float first_of_epoch1[10], batch5_epoch1[10];
    for (int k = 0; k < 20; k++) {
        bt_batch b;
        CU_ASSERT_FATAL(bt_loader_next(l, &b) == BT_OK);
        CU_ASSERT_EQUAL(b.epoch, k / 10);
        CU_ASSERT_EQUAL(b.index, k % 10);
        CU_ASSERT_EQUAL(b.valid, 10);
        for (int r = 0; r < 10; r++) {
            if (k < 10) seen[(int)b.inputs[r * 5]]++;
            if (k == 10) first_of_epoch1[r] = b.inputs[r * 5];
            if (k == 15) batch5_epoch1[r] = b.inputs[r * 5];
        }
        bt_loader_release(l);
    }
    int once = 0, never = 0;
    for (int i = 0; i < 103; i++) once += seen[i] == 1, never += seen[i] == 0;
    CU_ASSERT_EQUAL(once, 100); /* 10 full batches; 3 samples dropped this epoch */
    CU_ASSERT_EQUAL(never, 3);
    CU_ASSERT(bt_loader_seek(l, 1, 5) == BT_OK);
    bt_batch b;
    CU_ASSERT_FATAL(bt_loader_next(l, &b) == BT_OK);
    int same = 1, differs_from_first = 0;
    for (int r = 0; r < 10; r++) same &= b.inputs[r * 5] == batch5_epoch1[r];
    for (int r = 0; r < 10; r++) differs_from_first |= first_of_epoch1[r] != b.inputs[r * 5];
    CU_ASSERT(same);
    CU_ASSERT(differs_from_first);
    bt_loader_release(l);
    bt_loader_destroy(l);
    /* evaluation: no shuffle, last batch padded with valid rows counted */
    CU_ASSERT_FATAL(bt_loader_create(&ds, 10, 0, 0, 0, 2, NULL, &l) == BT_OK);
    CU_ASSERT_EQUAL(bt_loader_batches_per_epoch(l), 11);
    for (int k = 0; k < 11; k++) {
        CU_ASSERT_FATAL(bt_loader_next(l, &b) == BT_OK);
        CU_ASSERT_EQUAL(b.valid, k < 10 ? 10 : 3);
        CU_ASSERT_EQUAL(b.inputs[0], (float)(k * 10));
        bt_loader_release(l);
    }
    bt_loader_destroy(l);
    bt_dataset_free(&ds);
}

static void test_model_learns_synthetic_task(void)
{
    bt_model *m = load_model(NULL);
    bt_engine *e = make_engine(m, 2, 2);
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 150;
    o.eval_every = -1;
    o.seed = 9;
    bt_trainer *t = NULL;
    CU_ASSERT_FATAL(bt_trainer_create(m, e, &o, &t) == BT_OK);
    double acc0, loss0, acc1, loss1;
    int64_t n;
    CU_ASSERT_FATAL(bt_trainer_evaluate(t, &acc0, &loss0, &n) == BT_OK);
    CU_ASSERT_EQUAL(n, 40); /* held-out synthetic samples: a fifth of 200 */
    CU_ASSERT_FATAL(bt_trainer_run(t, NULL, NULL) == BT_OK);
    CU_ASSERT_FATAL(bt_trainer_evaluate(t, &acc1, &loss1, &n) == BT_OK);
    CU_ASSERT(loss1 < loss0 * 0.8);
    CU_ASSERT(acc1 > acc0 && acc1 >= 0.6);
    if (!(acc1 >= 0.6)) printf("\n  accuracy %.3f -> %.3f, loss %.3f -> %.3f\n", acc0, acc1, loss0, loss1);
    bt_trainer_destroy(t);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* A model that diverges on its first update: the learning rate overflows f32. */
static bt_model *load_diverging_model(void)
{
    const char *huge[] = {"train.optimizer.lr=1e39"};
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", huge, 1, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

/* An update that makes the weights non-finite is never checkpointed: the run stops naming the
 * step and the tensor, the last good checkpoint (step 4) is left as it was, and a run resumed from
 * it equals a straight run. Before, step 5's NaN weights overwrote it and every resume failed. */
static void test_diverged_update_is_never_checkpointed(void)
{
    bt_model *m = load_model(NULL), *bad = load_diverging_model();
    char dir[300];
    tmp_path("diverged", dir, sizeof dir);
    bt_engine *good = make_engine(m, 2, 2);
    train(m, good, 4, dir, NULL);
    bt_engine *e = make_engine(bad, 2, 2);
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 8;
    o.eval_every = -1;
    o.checkpoint_dir = dir;
    o.checkpoint_every = 1;
    o.resume = dir;
    o.seed = 9;
    bt_trainer *t = NULL;
    CU_ASSERT_FATAL(bt_trainer_create(bad, e, &o, &t) == BT_OK);
    bt_status st = bt_trainer_run(t, NULL, NULL);
    CU_ASSERT_EQUAL(st, BT_ERR_NUMERIC);
    const char *msg = bt_last_error();
    if (!strstr(msg, "step 5: the weights of 'fc1.weight' are not finite")) printf("\n  %s\n", msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "step 5: the weights of 'fc1.weight' are not finite"));
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "was not written (it keeps step 4)"));
    bt_trainer_destroy(t);
    bt_engine *back = make_engine(m, 2, 2);
    bt_checkpoint_meta meta;
    st = bt_checkpoint_resume(back, m->graph, dir, &meta);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT(st == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 4);
    CU_ASSERT(same_params(m, good, back));
    bt_engine *straight = make_engine(m, 2, 2), *resumed = make_engine(m, 2, 2);
    train(m, straight, 8, NULL, NULL);
    train(m, resumed, 8, NULL, dir);
    CU_ASSERT(same_params(m, straight, resumed));
    bt_engine_destroy(good);
    bt_engine_destroy(e);
    bt_engine_destroy(back);
    bt_engine_destroy(straight);
    bt_engine_destroy(resumed);
    bt_model_destroy(bad);
    bt_model_destroy(m);
}

/* A final evaluation whose loss is not finite fails the run (and writes no checkpoint). Before,
 * the run succeeded and reported the NaN. */
static void test_nonfinite_eval_loss_fails_the_run(void)
{
    bt_model *bad = load_diverging_model();
    char dir[300];
    tmp_path("nan-eval", dir, sizeof dir);
    bt_engine *e = make_engine(bad, 1, 1);
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = 1;
    o.eval_every = 0;
    o.checkpoint_dir = dir;
    o.seed = 9;
    bt_trainer *t = NULL;
    CU_ASSERT_FATAL(bt_trainer_create(bad, e, &o, &t) == BT_OK);
    CU_ASSERT_EQUAL(bt_trainer_run(t, NULL, NULL), BT_ERR_NUMERIC);
    if (!strstr(bt_last_error(), "step 1: the eval loss is")) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "step 1: the eval loss is"));
    struct stat sb;
    char file[400];
    snprintf(file, sizeof file, "%s/checkpoint.safetensors", dir);
    CU_ASSERT(stat(file, &sb) != 0);
    bt_trainer_destroy(t);
    bt_engine_destroy(e);
    bt_model_destroy(bad);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test_train_XXXXXX");
    if (!mkdtemp(tmpdir)) return 99;
    static const bt_test_case cases[] = {
        {"resume is bit-identical", test_resume_is_bit_identical},
        {"resume on another placement", test_resume_on_another_placement},
        {"a crash while writing keeps the previous checkpoint", test_crash_while_writing_keeps_previous_checkpoint},
        {"mismatched checkpoints are rejected", test_mismatched_checkpoint_rejected},
        {"init from a weights file", test_init_from_weights_file},
        {"loader order and seek", test_loader_order_and_seek},
        {"a model learns the synthetic task", test_model_learns_synthetic_task},
        {"a diverged update is never checkpointed", test_diverged_update_is_never_checkpointed},
        {"a non-finite eval loss fails the run", test_nonfinite_eval_loss_fails_the_run},
        {NULL, NULL}};
    int rc = bt_test_main("train", cases);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
