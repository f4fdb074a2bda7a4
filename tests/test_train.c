/* tests/test_train.c: training for real. Resuming from a checkpoint continues bit for bit (20
 * steps in one go equal 10, save, resume, 10), also on another placement (saved from 2 stages,
 * resumed on 3); a process killed while writing a checkpoint leaves the previous one loadable,
 * and its temporary file is removed: at once on SIGINT/SIGTERM, by the next run otherwise; two
 * runs cannot share a checkpoint directory, and a killed run's lock blocks nobody; resuming with
 * fewer steps than the checkpoint holds leaves the file untouched; a flipped bit in a tensor or
 * the metadata, and inconsistent metadata, are refused; checkpoints without checksums still load;
 * mismatched checkpoints are rejected naming the tensor, before the engine is touched; weights
 * load from a safetensors file by PyTorch name; the loader visits every sample once per epoch in
 * a seeded order and seeks exactly; and a model learns the synthetic task. A diverged update is
 * never checkpointed (the last good checkpoint survives and resumes) and a non-finite eval loss
 * fails the run. */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
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
#include "core/crc32c.h"

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
    p.precision = m->train.precision;
    p.loss_scale = m->train.loss_scale;
    p.seed = 9;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

static bt_status create_trainer(const bt_model *m, bt_engine *e, int64_t steps, const char *ckpt_dir,
                                const char *resume, bt_trainer **t)
{
    bt_trainer_opts o;
    memset(&o, 0, sizeof o);
    o.steps = steps;
    o.eval_every = -1;
    o.checkpoint_dir = ckpt_dir;
    o.resume = resume;
    o.seed = 9;
    return bt_trainer_create(m, e, &o, t);
}

static void train(const bt_model *m, bt_engine *e, int64_t steps, const char *ckpt_dir, const char *resume)
{
    bt_trainer *t = NULL;
    bt_status st = create_trainer(m, e, steps, ckpt_dir, resume, &t);
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

/* Files in dir named like a temporary checkpoint file: checkpoint.safetensors.tmp.XXXXXX, or
 * checkpoint-<step>.safetensors.tmp.XXXXXX for the numbered files. */
static int count_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        const char *tmp = strstr(e->d_name, ".safetensors.tmp.");
        size_t digits = strspn(e->d_name + strlen("checkpoint-"), "0123456789");
        int numbered = strncmp(e->d_name, "checkpoint-", 11) == 0 && digits >= 8 &&
                       tmp == e->d_name + strlen("checkpoint-") + digits;
        n += (strncmp(e->d_name, BT_CHECKPOINT_FILE ".tmp.", sizeof BT_CHECKPOINT_FILE + 4) == 0 || numbered) &&
             tmp && strlen(tmp) == strlen(".safetensors.tmp.") + 6;
    }
    closedir(d);
    return n;
}

static void touch(const char *path)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fclose(f);
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
    CU_ASSERT_EQUAL(count_temporaries(dir), 1); /* the crash left its temporary file */
    /* the next run removes it, and only baton's own temporary names */
    char keep1[400], keep2[400];
    snprintf(keep1, sizeof keep1, "%s/%s.tmp.abc", dir, BT_CHECKPOINT_FILE);
    snprintf(keep2, sizeof keep2, "%s/notes.tmp.ABC123", dir);
    touch(keep1);
    touch(keep2);
    bt_dir_lock *lock = NULL;
    CU_ASSERT_FATAL(bt_checkpoint_dir_open(dir, &lock) == BT_OK);
    bt_dir_lock_release(lock);
    CU_ASSERT_EQUAL(count_temporaries(dir), 0);
    CU_ASSERT(access(keep1, F_OK) == 0 && access(keep2, F_OK) == 0);
    unlink(keep1);
    unlink(keep2);
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

/* A shard loader (one rank of a job across processes) gives exactly its rows of the whole
 * batches, and only the columns asked for. */
static void test_loader_shard(void)
{
    bt_data_source src = {.kind = BT_DATA_SYNTHETIC, .samples = 103, .shuffle = 1};
    bt_dataset ds;
    CU_ASSERT_FATAL(bt_dataset_load(&src, 5, 4, 1, 0, &ds) == BT_OK);
    for (int64_t i = 0; i < ds.n; i++) ds.inputs[i * 5] = (float)i;
    bt_columns cols;
    memset(&cols, 0, sizeof cols);
    cols.n = ds.n;
    cols.n_cols = 2;
    cols.col[0] = (bt_column){.dtype = BT_F32, .numel = 5, .data = ds.inputs};
    cols.col[1] = (bt_column){.dtype = BT_I32, .numel = 1, .data = ds.labels};
    bt_loader *whole = NULL, *shard = NULL;
    const unsigned char use[2] = {1, 0};
    CU_ASSERT_FATAL(bt_loader_create_columns(&cols, 10, 1, 1, 77, 2, NULL, &whole) == BT_OK);
    CU_ASSERT_FATAL(bt_loader_create_shard(&cols, 10, 5, 5, use, 1, 1, 77, 2, NULL, &shard) == BT_OK);
    CU_ASSERT_EQUAL(bt_loader_batches_per_epoch(shard), 10);
    int same = 1;
    for (int k = 0; k < 13; k++) {
        bt_batch a, b;
        CU_ASSERT_FATAL(bt_loader_next(whole, &a) == BT_OK);
        CU_ASSERT_FATAL(bt_loader_next(shard, &b) == BT_OK);
        CU_ASSERT_EQUAL(b.valid, 5);
        CU_ASSERT_PTR_NULL(b.cols[1]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(b.cols[0]);
        same &= memcmp((const float *)a.cols[0] + 5 * 5, b.cols[0], 5 * 5 * sizeof(float)) == 0;
        bt_loader_release(whole);
        bt_loader_release(shard);
    }
    CU_ASSERT(same);
    bt_loader_destroy(whole);
    bt_loader_destroy(shard);
    CU_ASSERT(bt_loader_create_shard(&cols, 10, 6, 5, use, 1, 1, 77, 2, NULL, &shard) == BT_ERR_INVALID_ARG);
    bt_dataset_free(&ds);
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

static int signal_pipe[2];

/* Write hook of a child killed mid-write: past the limit, tell the parent and wait to be killed. */
static size_t stall_hook(uint64_t written, size_t want)
{
    if (written < bt_test_write_limit) return written + want > bt_test_write_limit ? (size_t)(bt_test_write_limit - written) : want;
    char c = 1;
    if (write(signal_pipe[1], &c, 1) != 1) _exit(4);
    for (;;) pause();
}

static void test_signal_while_writing_removes_the_temporary(void)
{
#ifdef __SANITIZE_THREAD__
    /* The child here starts worker threads after fork(), which ThreadSanitizer's runtime cannot
     * survive (it deadlocks); the normal and AddressSanitizer jobs run this case. */
    printf("(skipped under ThreadSanitizer: threads after fork) ");
    return;
#endif
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("signal", dir, sizeof dir);
    bt_engine *e = make_engine(m, 2, 2);
    train(m, e, 5, dir, NULL); /* checkpoint at step 5 */
    const int sigs[] = {SIGTERM, SIGINT};
    for (int k = 0; k < 2; k++) {
        CU_ASSERT_FATAL(pipe(signal_pipe) == 0);
        pid_t pid = fork();
        CU_ASSERT_FATAL(pid >= 0);
        if (pid == 0) {
            close(signal_pipe[0]);
            bt_atomic_file_remove_on_signals(); /* what the baton command's main does */
            bt_test_write_limit = 2000;
            bt_atomic_file_set_test_hook(stall_hook);
            bt_engine *c = make_engine(m, 2, 2);
            train(m, c, 7, dir, NULL); /* stalls while writing step 7's checkpoint */
            _exit(0);
        }
        close(signal_pipe[1]);
        char c = 0;
        ssize_t got;
        while ((got = read(signal_pipe[0], &c, 1)) < 0 && errno == EINTR) {}
        close(signal_pipe[0]);
        CU_ASSERT_EQUAL(got, 1);
        CU_ASSERT_EQUAL(count_temporaries(dir), 1); /* the child is writing */
        kill(pid, sigs[k]);
        int status = 0;
        waitpid(pid, &status, 0);
        CU_ASSERT(WIFSIGNALED(status) && WTERMSIG(status) == sigs[k]); /* still dies of the signal */
        CU_ASSERT_EQUAL(count_temporaries(dir), 0);                    /* but removed its temporary */
    }
    bt_engine *back = make_engine(m, 2, 2);
    bt_checkpoint_meta meta;
    CU_ASSERT(bt_checkpoint_resume(back, m->graph, dir, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 5);
    CU_ASSERT(same_params(m, e, back));
    bt_engine_destroy(e);
    bt_engine_destroy(back);
    bt_model_destroy(m);
}

static void test_two_runs_on_one_directory(void)
{
    bt_model *m = load_model(NULL);
    char dir[300], want[64];
    tmp_path("shared", dir, sizeof dir);
    bt_engine *a = make_engine(m, 1, 1), *b = make_engine(m, 1, 1);
    bt_trainer *first = NULL, *second = NULL;
    CU_ASSERT_FATAL(create_trainer(m, a, 3, dir, NULL, &first) == BT_OK);
    CU_ASSERT_EQUAL(create_trainer(m, b, 3, dir, NULL, &second), BT_ERR_INVALID_ARG);
    snprintf(want, sizeof want, "in use by another run (pid %lld on host ", (long long)getpid());
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
    if (!strstr(bt_last_error(), want)) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_PTR_NULL(second);
    bt_trainer_destroy(first); /* releases the directory */
    CU_ASSERT_FATAL(create_trainer(m, b, 3, dir, NULL, &second) == BT_OK);
    bt_trainer_destroy(second);
    /* a run killed outright (SIGKILL) leaves no lock behind */
    int ready[2];
    CU_ASSERT_FATAL(pipe(ready) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        bt_dir_lock *lock = NULL;
        char c = bt_checkpoint_dir_open(dir, &lock) == BT_OK;
        if (write(ready[1], &c, 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(ready[1]);
    char c = 0;
    CU_ASSERT(read(ready[0], &c, 1) == 1 && c == 1);
    close(ready[0]);
    snprintf(want, sizeof want, "(pid %lld on host ", (long long)pid);
    CU_ASSERT_EQUAL(create_trainer(m, b, 3, dir, NULL, &second), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    CU_ASSERT_FATAL(create_trainer(m, b, 3, dir, NULL, &second) == BT_OK);
    bt_trainer_destroy(second);
    bt_engine_destroy(a);
    bt_engine_destroy(b);
    bt_model_destroy(m);
}

static void test_resume_with_fewer_steps_leaves_the_checkpoint(void)
{
    bt_model *m = load_model(NULL);
    char dir[300], file[400];
    tmp_path("fewer", dir, sizeof dir);
    snprintf(file, sizeof file, "%s/%s", dir, BT_CHECKPOINT_FILE);
    bt_engine *e = make_engine(m, 2, 2);
    train(m, e, 10, dir, NULL);
    struct stat before, after;
    CU_ASSERT_FATAL(stat(file, &before) == 0);
    char *bytes = malloc((size_t)before.st_size), *again = malloc((size_t)before.st_size);
    FILE *f = fopen(file, "rb");
    CU_ASSERT_FATAL(f && fread(bytes, 1, (size_t)before.st_size, f) == (size_t)before.st_size);
    fclose(f);
    for (int64_t steps = 5; steps <= 10; steps += 5) { /* fewer, and exactly as many */
        bt_engine *r = make_engine(m, 2, 2);
        bt_trainer *t = NULL;
        CU_ASSERT_FATAL(create_trainer(m, r, steps, dir, dir, &t) == BT_OK);
        CU_ASSERT(bt_trainer_nothing_to_do(t));
        CU_ASSERT(bt_trainer_run(t, NULL, NULL) == BT_OK);
        bt_trainer_destroy(t);
        bt_engine_destroy(r);
    }
    CU_ASSERT_FATAL(stat(file, &after) == 0);
    CU_ASSERT_EQUAL(after.st_ino, before.st_ino);
    CU_ASSERT_EQUAL(after.st_size, before.st_size);
    CU_ASSERT(after.st_mtim.tv_sec == before.st_mtim.tv_sec && after.st_mtim.tv_nsec == before.st_mtim.tv_nsec);
    f = fopen(file, "rb");
    CU_ASSERT_FATAL(f && fread(again, 1, (size_t)after.st_size, f) == (size_t)after.st_size);
    fclose(f);
    CU_ASSERT(memcmp(bytes, again, (size_t)before.st_size) == 0);
    /* and the checkpoint still continues exactly */
    bt_engine *straight = make_engine(m, 2, 2), *resumed = make_engine(m, 2, 2);
    train(m, straight, 14, NULL, NULL);
    train(m, resumed, 14, NULL, dir);
    CU_ASSERT(same_params(m, straight, resumed));
    free(bytes);
    free(again);
    bt_engine_destroy(e);
    bt_engine_destroy(straight);
    bt_engine_destroy(resumed);
    bt_model_destroy(m);
}

/* Copies the checkpoint in src_dir to dst with metadata key set to value (NULL: removed) and,
 * when strip, every checksum removed (a checkpoint as written before checksums existed). */
static void rewrite_checkpoint(const char *src_dir, const char *dst, const char *key, const char *value, int strip)
{
    char src[400];
    snprintf(src, sizeof src, "%s/%s", src_dir, BT_CHECKPOINT_FILE);
    bt_st_file *f = NULL;
    bt_st_writer *w = NULL;
    CU_ASSERT_FATAL(bt_st_open(src, &f) == BT_OK);
    CU_ASSERT_FATAL(bt_st_writer_create(&w) == BT_OK);
    for (int i = 0; i < bt_st_count(f); i++) {
        const bt_st_tensor *t = bt_st_at(f, i);
        CU_ASSERT(bt_st_writer_add(w, t->name, t->dtype, &t->shape, t->data) == BT_OK);
    }
    for (int i = 0; i < bt_st_metadata_count(f); i++) {
        const char *k, *v;
        bt_st_metadata_at(f, i, &k, &v);
        if (strip && strncmp(k, "crc32c.", 7) == 0) continue;
        if (key && strcmp(k, key) == 0) continue;
        CU_ASSERT(bt_st_writer_add_metadata(w, k, v) == BT_OK);
    }
    if (key && value) CU_ASSERT(bt_st_writer_add_metadata(w, key, value) == BT_OK);
    CU_ASSERT_FATAL(bt_st_writer_write(w, dst) == BT_OK);
    bt_st_writer_destroy(w);
    bt_st_close(f);
}

/* Flips bit `bit` of byte `at` of path. */
static void flip_bit(const char *path, long at, int bit)
{
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_FATAL(f != NULL);
    fseek(f, at, SEEK_SET);
    int c = fgetc(f);
    fseek(f, at, SEEK_SET);
    fputc(c ^ (1 << bit), f);
    fclose(f);
}

/* Expects resume from path to fail with BT_ERR_IO and a message containing want, leaving e's
 * fc1.weight as it was. */
static void expect_refused(const bt_model *m, bt_engine *e, const char *path, const char *want)
{
    float before[24 * 12], after[24 * 12];
    bt_checkpoint_meta meta;
    CU_ASSERT(bt_engine_read_param(e, "fc1.weight", before, sizeof before) == BT_OK);
    CU_ASSERT_EQUAL(bt_checkpoint_resume(e, m->graph, path, &meta), BT_ERR_IO);
    if (!strstr(bt_last_error(), want)) printf("\n  expected '%s' in: %s\n", want, bt_last_error());
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
    CU_ASSERT(bt_engine_read_param(e, "fc1.weight", after, sizeof after) == BT_OK);
    CU_ASSERT(memcmp(before, after, sizeof before) == 0);
}

static void test_corrupt_checkpoints_refused(void)
{
    bt_model *m = load_model(NULL);
    char dir[300], file[400], copy[400];
    tmp_path("corrupt", dir, sizeof dir);
    snprintf(file, sizeof file, "%s/%s", dir, BT_CHECKPOINT_FILE);
    tmp_path("copy.safetensors", copy, sizeof copy);
    bt_engine *e = make_engine(m, 2, 2);
    train(m, e, 3, dir, NULL);
    bt_engine *o = make_engine(m, 1, 1);
    /* one flipped bit in the data of fc2.weight */
    rewrite_checkpoint(dir, copy, NULL, NULL, 0);
    bt_st_file *f = NULL;
    CU_ASSERT_FATAL(bt_st_open(copy, &f) == BT_OK);
    const bt_st_tensor *t = bt_st_find(f, "fc2.weight");
    long at = (long)((const char *)t->data - (const char *)bt_st_at(f, 0)->data) + (long)bt_st_at(f, 0)->offset;
    uint64_t header;
    FILE *raw = fopen(copy, "rb");
    CU_ASSERT_FATAL(raw && fread(&header, 8, 1, raw) == 1);
    fclose(raw);
    bt_st_close(f);
    flip_bit(copy, 8 + (long)header + at + 37, 3);
    expect_refused(m, o, copy, "tensor 'fc2.weight' is corrupt: its data has CRC-32C");
    CU_ASSERT_EQUAL(bt_checkpoint_load_weights(o, m->graph, copy), BT_ERR_IO);
    /* one flipped bit in the metadata: "step": "3" becomes "2" */
    rewrite_checkpoint(dir, copy, NULL, NULL, 0);
    raw = fopen(copy, "rb");
    char text[8192] = {0};
    CU_ASSERT_FATAL(raw && fread(text, 1, sizeof text - 1, raw) > 8);
    fclose(raw);
    char *step = strstr(text + 8, "\"step\":\"3\"");
    CU_ASSERT_PTR_NOT_NULL_FATAL(step);
    flip_bit(copy, (long)(step - text) + 8, 0);
    expect_refused(m, o, copy, "the metadata is corrupt");
    /* a checksum of a tensor that is not there, or a tensor without one */
    rewrite_checkpoint(dir, copy, "crc32c.fc2.weight", NULL, 0);
    expect_refused(m, o, copy, "the metadata is corrupt");
    /* inconsistent metadata (no checksums, as an old checkpoint): step past the data position */
    rewrite_checkpoint(dir, copy, "step", "4", 1);
    expect_refused(m, o, copy, "inconsistent metadata: step 4 is past its data position (epoch 0, batch 3 of 12)");
    rewrite_checkpoint(dir, copy, "batch_index", "12", 1);
    expect_refused(m, o, copy, "batch_index 12 is past an epoch of 12 batches");
    rewrite_checkpoint(dir, copy, "epoch", "99999999999999999999", 1);
    expect_refused(m, o, copy, "metadata 'epoch' = '99999999999999999999' is not a count");
    rewrite_checkpoint(dir, copy, "epoch", "-1", 1);
    expect_refused(m, o, copy, "metadata 'epoch' = '-1' is not a count");
    rewrite_checkpoint(dir, copy, "epoch", "768614336404564651", 1);
    expect_refused(m, o, copy, "is past any run");
    /* a checkpoint written before checksums (and batches_per_epoch) existed still loads */
    rewrite_checkpoint(dir, copy, "batches_per_epoch", NULL, 1);
    bt_checkpoint_meta meta;
    CU_ASSERT(bt_checkpoint_resume(o, m->graph, copy, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 3);
    CU_ASSERT_EQUAL(meta.batches_per_epoch, 0);
    CU_ASSERT(same_params(m, e, o));
    bt_engine_destroy(e);
    bt_engine_destroy(o);
    bt_model_destroy(m);
}

static void test_resume_checks_the_run(void)
{
    bt_model *m = load_model(NULL);
    char dir[300];
    tmp_path("mismatched-run", dir, sizeof dir);
    bt_engine *e = make_engine(m, 1, 1);
    train(m, e, 3, dir, NULL);
    bt_trainer *t = NULL;
    /* another model with the same parameters */
    const char *renamed[] = {"name=other"};
    bt_model *other = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", renamed, 1, &other) == BT_OK);
    bt_engine *o = make_engine(other, 1, 1);
    CU_ASSERT_EQUAL(create_trainer(other, o, 6, NULL, dir, &t), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "was saved by model 'small', but this model is 'other'"));
    bt_engine_destroy(o);
    bt_model_destroy(other);
    /* another batch size: the data position means something else */
    const char *batch[] = {"train.batch=8"};
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", batch, 1, &other) == BT_OK);
    o = make_engine(other, 1, 1);
    CU_ASSERT_EQUAL(create_trainer(other, o, 6, NULL, dir, &t), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "was saved by a run of batch 16, but this run has batch 8"));
    bt_engine_destroy(o);
    bt_model_destroy(other);
    /* the same parameter names and shapes, another computation: fc2's activation (a node of its
     * own), relu fused into fc1's linear removed, dropout's p: each refused naming the line */
    static const struct {
        const char *override, *theirs, *ours;
    } graphs[] = {
        {"layers.fc2.act=relu", "fc2: linear(drop){out=24} -> [24] f32; tanh(fc2:pre) -> [24] f32",
         "fc2: linear(drop){act=\"relu\", out=24} -> [24] f32"},
        {"layers.drop.args.p=0.5", "drop: dropout(fc1){p=0.2} -> [24] f32", "drop: dropout(fc1){p=0.5} -> [24] f32"},
    };
    for (size_t i = 0; i < sizeof graphs / sizeof *graphs; i++) {
        CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", &graphs[i].override, 1,
                                             &other) == BT_OK);
        o = make_engine(other, 1, 1);
        float before[24 * 12], after[24 * 12];
        CU_ASSERT(bt_engine_read_param(o, "fc1.weight", before, sizeof before) == BT_OK);
        CU_ASSERT_EQUAL(create_trainer(other, o, 6, NULL, dir, &t), BT_ERR_INVALID_ARG);
        const char *msg = bt_last_error();
        int named = strstr(msg, "was saved by another model graph (parameter names and shapes alone agree)") &&
                    strstr(msg, graphs[i].theirs) && strstr(msg, graphs[i].ours);
        if (!named) printf("\n  %s: %s\n", graphs[i].override, msg);
        CU_ASSERT(named);
        CU_ASSERT(bt_engine_read_param(o, "fc1.weight", after, sizeof after) == BT_OK);
        CU_ASSERT(memcmp(before, after, sizeof before) == 0); /* nothing was loaded */
        bt_engine_destroy(o);
        bt_model_destroy(other);
    }
    /* the same batch over other data: another epoch length */
    const char *data[] = {"data.train.samples=400"};
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", data, 1, &other) == BT_OK);
    o = make_engine(other, 1, 1);
    CU_ASSERT_EQUAL(create_trainer(other, o, 6, NULL, dir, &t), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "was saved by a run of 12 batches per epoch, but this run has 25"));
    bt_engine_destroy(o);
    bt_model_destroy(other);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* precision f16 resumes bit for bit: the loss scaler's scale and clean-step count are in the
 * checkpoint. The run starts at a scale of 2^22, which overflows f16's gradients: the first steps
 * (two) are skipped, halving it, and the later ones applied; a resume from step 10 must take up
 * that scale and count (from 2^22 again it would skip steps the straight run applied). */
static void test_f16_resume_is_bit_identical(void)
{
    const char *f16[] = {"train.precision=f16", "train.loss_scale=4194304"};
    bt_model *m = NULL;
    CU_ASSERT_FATAL(bt_model_load_string(model_yaml, sizeof model_yaml - 1, "small.yaml", f16, 2, &m) == BT_OK);
    char dir[300];
    tmp_path("f16-resume", dir, sizeof dir);
    bt_engine *straight = make_engine(m, 2, 2);
    train(m, straight, 20, NULL, NULL);
    bt_engine *first = make_engine(m, 2, 2);
    train(m, first, 10, dir, NULL);
    double scale10, scale20, scale;
    int64_t clean10, clean20, clean;
    CU_ASSERT(bt_engine_loss_scale(first, &scale10, &clean10) == 1);
    CU_ASSERT(scale10 < 4194304.0 && clean10 > 0); /* it skipped, then applied steps */
    bt_engine *second = make_engine(m, 2, 2);
    bt_trainer *t = NULL;
    CU_ASSERT_FATAL(create_trainer(m, second, 20, NULL, dir, &t) == BT_OK);
    CU_ASSERT(bt_engine_loss_scale(second, &scale, &clean) == 1);
    CU_ASSERT(scale == scale10 && clean == clean10);
    CU_ASSERT_FATAL(bt_trainer_run(t, NULL, NULL) == BT_OK);
    bt_trainer_destroy(t);
    CU_ASSERT(bt_engine_step(second) == bt_engine_step(straight));
    CU_ASSERT(same_params(m, straight, second));
    bt_engine_loss_scale(straight, &scale20, &clean20);
    bt_engine_loss_scale(second, &scale, &clean);
    CU_ASSERT(scale == scale20 && clean == clean20);
    /* the setter's range; f32 has no scale to set */
    CU_ASSERT(bt_engine_set_loss_scale(second, 0.5, 0) == BT_ERR_INVALID_ARG);
    CU_ASSERT(bt_engine_set_loss_scale(second, 1024, 2000) == BT_ERR_INVALID_ARG);
    bt_model *f32 = load_model(NULL);
    bt_engine *e32 = make_engine(f32, 1, 1);
    CU_ASSERT(bt_engine_loss_scale(e32, &scale, &clean) == 0 && scale == 1 && clean == 0);
    CU_ASSERT(bt_engine_set_loss_scale(e32, 1024, 0) == BT_ERR_INVALID_ARG);
    bt_engine_destroy(e32);
    bt_model_destroy(f32);
    bt_engine_destroy(straight);
    bt_engine_destroy(first);
    bt_engine_destroy(second);
    bt_model_destroy(m);
}

static void test_crc32c(void)
{
    CU_ASSERT_EQUAL(bt_crc32c(0, "123456789", 9), 0xE3069283u); /* the standard check value */
    CU_ASSERT_EQUAL(bt_crc32c(0, "", 0), 0u);
    unsigned char zeros[32] = {0};
    CU_ASSERT_EQUAL(bt_crc32c(0, zeros, 32), 0x8A9136AAu); /* RFC 3720 B.4 */
    unsigned char ones[32];
    memset(ones, 0xff, sizeof ones);
    CU_ASSERT_EQUAL(bt_crc32c(0, ones, 32), 0x62A8AB43u);
    CU_ASSERT_EQUAL(bt_crc32c(bt_crc32c(0, "12345", 5), "6789", 4), 0xE3069283u);
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
        {"a signal while writing removes the temporary", test_signal_while_writing_removes_the_temporary},
        {"two runs cannot share a checkpoint directory", test_two_runs_on_one_directory},
        {"resume with fewer steps leaves the checkpoint", test_resume_with_fewer_steps_leaves_the_checkpoint},
        {"corrupt checkpoints are refused", test_corrupt_checkpoints_refused},
        {"resume checks the run", test_resume_checks_the_run},
        {"f16 resume is bit-identical (the loss scaler's state)", test_f16_resume_is_bit_identical},
        {"crc32c", test_crc32c},
        {"mismatched checkpoints are rejected", test_mismatched_checkpoint_rejected},
        {"init from a weights file", test_init_from_weights_file},
        {"loader order and seek", test_loader_order_and_seek},
        {"shard loader: its rows and columns of the whole batches", test_loader_shard},
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
