/* tests/test_ckpt_shards.c: sharded checkpoints in one process (train/checkpoint_shards.c,
 * ckpt_index.c, ckpt_source.c; docs/checkpoints.md). The index reader and writer: a round trip,
 * and malformed indexes refused naming what is wrong. A sharded checkpoint of 3 stages holds
 * exactly the tensors (bit for bit) and training state of a single file and resumes bit for bit
 * on 1 and 2 stages; weights load from its directory and its index. Broken shards are refused
 * naming the tensor and the shard: missing, truncated, holding a tensor twice, left from another
 * checkpoint, of a wrong shape. A shard whose write fails (a full disk) leaves no index for its
 * step, and the directory's latest still resumes the previous checkpoint: the index is written
 * last. keep_last removes every file of an old sharded checkpoint, and a directory that changes
 * layout keeps one latest. The multi-process side is tests/dist_ckpt.sh. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "baton.h"
#define BT_TEST_ATOMIC_HOOKS
#include "bt_test.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "train/checkpoint.h"
#include "train/ckpt_index.h"
#include "train/ckpt_source.h"

/* wide enough that a stage's shard is far larger than the index (the failed-write test) */
static const char model_yaml[] =
    "format: 1\n"
    "name: wide\n"
    "inputs:\n"
    "  x: {shape: [64]}\n"
    "  label: {shape: [], dtype: i32}\n"
    "layers:\n"
    "  - {name: fc1, op: linear, args: {out: 128}, act: relu}\n"
    "  - {name: fc2, op: linear, args: {out: 64}, act: tanh}\n"
    "  - {name: head, op: linear, args: {out: 3}}\n"
    "  - {name: loss, op: cross_entropy, from: [head, label]}\n"
    "train:\n"
    "  batch: 16\n"
    "  optimizer: {type: adamw, lr: 3.0e-3}\n"
    "data:\n"
    "  train: {type: synthetic, samples: 160}\n";

static char tmpdir[256];

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}

static bt_model *load_model(const char *text)
{
    bt_model *m = NULL;
    bt_status st = bt_model_load_string(text, strlen(text), "wide.yaml", NULL, 0, &m);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return m;
}

static bt_engine *make_engine(const bt_model *m, int stages)
{
    static const char *const devices[] = {"cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2"};
    static const char *const layouts[] = {"fc1,fc2,head,loss", "fc1|fc2,head,loss", "fc1|fc2|head,loss"};
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.parallel.devices = devices[stages - 1];
    p.parallel.stages = stages;
    p.parallel.microbatches = 2;
    p.parallel.partition = BT_PARTITION_LAYOUT;
    p.parallel.layout = layouts[stages - 1];
    p.optimizer = m->train.optimizer;
    p.batch = m->train.batch;
    p.seed = 9;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return e;
}

/* Runs steps (resuming from resume, checkpointing into dir: sharded or not); returns the status. */
static bt_status train(const bt_model *m, bt_engine *e, int64_t steps, const char *dir, int sharded, int keep_last,
                       const char *resume)
{
    bt_trainer_opts o;
    bt_trainer_opts_init(&o);
    o.steps = steps;
    o.eval_every = -1;
    o.checkpoint_dir = dir;
    o.checkpoint_every = dir ? 4 : 0;
    o.keep_last = keep_last;
    o.checkpoint_shards = sharded;
    o.resume = resume;
    o.seed = 9;
    bt_trainer *t = NULL;
    bt_status st = bt_trainer_create(m, e, &o, &t);
    if (st == BT_OK) st = bt_trainer_run(t, NULL, NULL);
    bt_trainer_destroy(t);
    return st;
}

static void train_ok(const bt_model *m, bt_engine *e, int64_t steps, const char *dir, int sharded, const char *resume)
{
    bt_status st = train(m, e, steps, dir, sharded, -1, resume);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
}

/* 1 if every parameter and optimizer state of a and b is bit-identical. */
static int same_state(const bt_model *m, const bt_engine *a, const bt_engine *b)
{
    int same = 1;
    for (int i = 0; i < bt_graph_num_params(m->graph); i++) {
        bt_param_info p;
        bt_graph_param(m->graph, i, &p);
        size_t bytes = (size_t)bt_shape_numel(&p.shape) * 4;
        float *x = malloc(bytes), *y = malloc(bytes);
        for (int s = -1; s < bt_engine_optimizer_slots(a); s++) {
            if (s < 0) bt_engine_read_param(a, p.name, x, bytes), bt_engine_read_param(b, p.name, y, bytes);
            else bt_engine_read_state(a, p.name, s, x, bytes), bt_engine_read_state(b, p.name, s, y, bytes);
            if (memcmp(x, y, bytes) != 0) same = 0;
        }
        free(x);
        free(y);
    }
    return same;
}

static int exists(const char *dir, const char *name)
{
    char p[512];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

/* Files in dir whose name starts with prefix. */
static int count_files(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (!d) return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) n += strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return n;
}

static void copy_file(const char *from, const char *to)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

static void copy_dir(const char *from, const char *to)
{
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && cp -r '%s' '%s'", to, from, to);
    CU_ASSERT_FATAL(system(cmd) == 0);
}

/* ---- the index ---- */

static void test_index_round_trip(void)
{
    char path[300];
    tmp_path("round.index.json", path, sizeof path);
    const char *keys[] = {"format", "step"}, *values[] = {"baton-checkpoint-1", "12"};
    const char *tensors[] = {"fc2.weight", "fc1.weight", "optimizer.fc1.weight.exp_avg"};
    const char *files[] = {"b.safetensors", "a.safetensors", "a.safetensors"};
    CU_ASSERT_FATAL(bt_ckpt_index_write(path, 4096, 2, keys, values, 3, tensors, files) == BT_OK);
    bt_ckpt_index x;
    bt_status st = bt_ckpt_index_read(path, &x);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_EQUAL(x.total_size, 4096);
    CU_ASSERT_EQUAL(x.n, 3);
    CU_ASSERT_STRING_EQUAL(x.map[0].tensor, "fc1.weight"); /* sorted */
    CU_ASSERT_EQUAL(x.n_files, 2);
    CU_ASSERT_STRING_EQUAL(x.files[0], "a.safetensors");
    CU_ASSERT_STRING_EQUAL(bt_ckpt_index_file_of(&x, "fc2.weight"), "b.safetensors");
    CU_ASSERT_PTR_NULL(bt_ckpt_index_file_of(&x, "fc3.weight"));
    CU_ASSERT_STRING_EQUAL(bt_ckpt_index_meta(&x, "step"), "12");
    CU_ASSERT_PTR_NULL(bt_ckpt_index_meta(&x, "total_size")); /* an integer, kept apart */
    bt_ckpt_index_free(&x);
    /* Hugging Face's own form: metadata with total_size alone (and other non-string values) */
    static const char hf[] = "{\"metadata\": {\"total_size\": 8, \"note\": [1]}, \"weight_map\": "
                             "{\"w\": \"model-00001-of-00002.safetensors\", \"v\": \"model-00002-of-00002.safetensors\"}}";
    CU_ASSERT_FATAL(bt_ckpt_index_parse("hf.json", hf, strlen(hf), &x) == BT_OK);
    CU_ASSERT_EQUAL(x.n_meta, 0);
    CU_ASSERT_EQUAL(x.n_files, 2);
    bt_ckpt_index_free(&x);
    /* the writer refuses a shard that is not a plain file name, and a tensor twice */
    const char *bad_files[] = {"../a.safetensors"};
    CU_ASSERT_EQUAL(bt_ckpt_index_write(path, 0, 0, NULL, NULL, 1, tensors, bad_files), BT_ERR_INVALID_ARG);
    const char *twice[] = {"w", "w"}, *two_files[] = {"a.safetensors", "b.safetensors"};
    CU_ASSERT_EQUAL(bt_ckpt_index_write(path, 0, 0, NULL, NULL, 2, twice, two_files), BT_ERR_INVALID_ARG);
}

static void expect_parse_error(const char *json, const char *want)
{
    bt_ckpt_index x;
    bt_status st = bt_ckpt_index_parse("bad.index.json", json, strlen(json), &x);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    if (st != BT_ERR_IO || !strstr(bt_last_error(), want) || !strstr(bt_last_error(), "bad.index.json"))
        printf("\n  %s: %s (wanted '%s')\n", json, bt_last_error(), want);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), want));
    bt_ckpt_index_free(&x);
}

static void test_index_rejects_malformed(void)
{
    expect_parse_error("{\"metadata\": {}}", "no \"weight_map\"");
    expect_parse_error("[1, 2]", "not an object");
    expect_parse_error("{\"weight_map\": {\"w\": \"a\", \"w\": \"b\"}}", "duplicate");
    expect_parse_error("{\"weight_map\": {\"w\": 3}}", "'w' is not a file name");
    expect_parse_error("{\"weight_map\": {\"w\": \"../w.safetensors\"}}", "not a file name beside the index");
    expect_parse_error("{\"weight_map\": {\"w\": \"/etc/w.safetensors\"}}", "not a file name beside the index");
    expect_parse_error("{\"weight_map\": {\"w\": \"..\"}}", "not a file name beside the index");
    expect_parse_error("{\"weight_map\": {}, \"shards\": 2}", "unknown key \"shards\"");
    expect_parse_error("{\"metadata\": {\"total_size\": -4}, \"weight_map\": {}}", "total_size");
    expect_parse_error("{\"metadata\": 7, \"weight_map\": {}}", "\"metadata\" is not an object");
    expect_parse_error("{\"weight_map\": {\"w\": \"a\"", "not a checkpoint index");
}

/* ---- sharded checkpoints ---- */

static void test_sharded_resumes_bit_for_bit(void)
{
    bt_model *m = load_model(model_yaml);
    char dir[300];
    tmp_path("sharded", dir, sizeof dir);
    bt_engine *straight = make_engine(m, 1);
    train_ok(m, straight, 10, NULL, 0, NULL);
    bt_engine *three = make_engine(m, 3);
    train_ok(m, three, 6, dir, 1, NULL); /* checkpoints at 4 and 6 */
    CU_ASSERT(exists(dir, "checkpoint.safetensors.index.json"));
    CU_ASSERT(exists(dir, "checkpoint-00000006.safetensors.index.json"));
    CU_ASSERT(exists(dir, "checkpoint-00000006-00001-of-00003.safetensors"));
    CU_ASSERT(exists(dir, "checkpoint-00000006-00003-of-00003.safetensors"));
    CU_ASSERT(!exists(dir, "checkpoint.safetensors"));
    CU_ASSERT(!exists(dir, "checkpoint-00000006.safetensors"));
    for (int stages = 1; stages <= 2; stages++) {
        bt_engine *back = make_engine(m, stages);
        train_ok(m, back, 10, NULL, 0, dir);
        CU_ASSERT(bt_engine_step(back) == 10);
        CU_ASSERT(same_state(m, straight, back));
        bt_engine_destroy(back);
    }
    /* weights alone, from the directory and from an index by its own name */
    char index[400];
    snprintf(index, sizeof index, "%s/checkpoint-00000006.safetensors.index.json", dir);
    bt_engine *w1 = make_engine(m, 1), *w2 = make_engine(m, 2);
    CU_ASSERT(bt_checkpoint_load_weights(w1, m->graph, dir) == BT_OK);
    CU_ASSERT(bt_checkpoint_load_weights(w2, m->graph, index) == BT_OK);
    bt_checkpoint_meta meta;
    CU_ASSERT(bt_checkpoint_read_meta(dir, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 6);
    bt_engine_destroy(w1);
    bt_engine_destroy(w2);
    bt_engine_destroy(straight);
    bt_engine_destroy(three);
    bt_model_destroy(m);
}

static void test_sharded_holds_the_single_files_tensors(void)
{
    bt_model *m = load_model(model_yaml);
    char single[300], sharded[300];
    tmp_path("same-single", single, sizeof single);
    tmp_path("same-sharded", sharded, sizeof sharded);
    bt_engine *e = make_engine(m, 3);
    train_ok(m, e, 3, NULL, 0, NULL);
    bt_checkpoint_meta meta = {.step = 3, .epoch = 0, .batch_index = 3, .batches_per_epoch = 10, .batch = 16, .seed = 9};
    snprintf(meta.model, sizeof meta.model, "wide");
    CU_ASSERT_FATAL(bt_checkpoint_save(e, m->graph, single, &meta) == BT_OK);
    CU_ASSERT_FATAL(bt_checkpoint_save_sharded(e, m->graph, sharded, &meta) == BT_OK);
    bt_ckpt_source *a = NULL, *b = NULL;
    CU_ASSERT_FATAL(bt_ckpt_source_open(single, &a) == BT_OK);
    CU_ASSERT_FATAL(bt_ckpt_source_open(sharded, &b) == BT_OK);
    CU_ASSERT_PTR_NOT_NULL(a->single);
    CU_ASSERT_PTR_NULL(b->single);
    CU_ASSERT_EQUAL(b->index.n_files, 3);
    CU_ASSERT_EQUAL(bt_ckpt_source_count(a), bt_ckpt_source_count(b));
    int64_t total = 0;
    for (int i = 0; i < bt_ckpt_source_count(a); i++) {
        const bt_st_tensor *t = bt_ckpt_source_at(a, i, NULL), *u = bt_ckpt_source_find(b, t->name, NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(u);
        CU_ASSERT(t->nbytes == u->nbytes && memcmp(t->data, u->data, t->nbytes) == 0);
        total += (int64_t)t->nbytes;
    }
    CU_ASSERT_EQUAL(b->index.total_size, total);
    static const char *const keys[] = {"format", "model", "step", "epoch", "batch_index", "batches_per_epoch",
                                       "batch", "seed", "optimizer_slots"};
    for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
        CU_ASSERT_STRING_EQUAL(bt_ckpt_source_meta(a, keys[k]), bt_ckpt_source_meta(b, keys[k]));
    bt_checkpoint_meta ma, mb;
    CU_ASSERT(bt_checkpoint_verify_source(a, &ma) == BT_OK);
    CU_ASSERT(bt_checkpoint_verify_source(b, &mb) == BT_OK);
    bt_ckpt_source_close(a);
    bt_ckpt_source_close(b);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

/* The resume from path fails with BT_ERR_IO, its message naming every want. */
static void expect_refused(const bt_model *m, const char *path, const char *want1, const char *want2)
{
    bt_engine *e = make_engine(m, 2);
    bt_checkpoint_meta meta;
    bt_status st = bt_checkpoint_resume(e, m->graph, path, &meta);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    int ok = strstr(bt_last_error(), want1) && (!want2 || strstr(bt_last_error(), want2));
    if (!ok) printf("\n  %s (wanted '%s' and '%s')\n", bt_last_error(), want1, want2 ? want2 : "");
    CU_ASSERT(ok);
    bt_engine_destroy(e);
}

static void test_broken_shards_refused(void)
{
    bt_model *m = load_model(model_yaml);
    char dir[300], copy[300], a[500], b[500];
    tmp_path("broken", dir, sizeof dir);
    tmp_path("broken-copy", copy, sizeof copy);
    bt_engine *e = make_engine(m, 3);
    train_ok(m, e, 8, dir, 1, NULL); /* checkpoints at 4 and 8 */
    const char *s1 = "checkpoint-00000008-00001-of-00003.safetensors", *s2 = "checkpoint-00000008-00002-of-00003.safetensors";
    /* a missing shard */
    copy_dir(dir, copy);
    snprintf(a, sizeof a, "%s/%s", copy, s2);
    unlink(a);
    expect_refused(m, copy, "names shard checkpoint-00000008-00002-of-00003.safetensors", NULL);
    /* a truncated shard */
    copy_dir(dir, copy);
    CU_ASSERT_FATAL(truncate(a, 600) == 0);
    expect_refused(m, copy, s2, NULL);
    /* a shard that also holds a tensor the index maps to another: shard 2 plus fc1.bias */
    copy_dir(dir, copy);
    snprintf(b, sizeof b, "%s/%s", copy, s1);
    {
        bt_st_file *f1 = NULL, *f2 = NULL;
        bt_st_writer *wr = NULL;
        CU_ASSERT_FATAL(bt_st_open(b, &f1) == BT_OK && bt_st_open(a, &f2) == BT_OK);
        CU_ASSERT_FATAL(bt_st_writer_create(&wr) == BT_OK);
        for (int i = 0; i < bt_st_count(f2); i++) {
            const bt_st_tensor *t = bt_st_at(f2, i);
            CU_ASSERT(bt_st_writer_add(wr, t->name, t->dtype, &t->shape, t->data) == BT_OK);
        }
        const bt_st_tensor *extra = bt_st_find(f1, "fc1.bias");
        CU_ASSERT_FATAL(extra != NULL);
        CU_ASSERT(bt_st_writer_add(wr, extra->name, extra->dtype, &extra->shape, extra->data) == BT_OK);
        char out[520];
        snprintf(out, sizeof out, "%s.new", a);
        CU_ASSERT_FATAL(bt_st_writer_write(wr, out) == BT_OK);
        CU_ASSERT_FATAL(rename(out, a) == 0);
        bt_st_writer_destroy(wr);
        bt_st_close(f1);
        bt_st_close(f2);
    }
    expect_refused(m, copy, "tensor 'fc1.bias' is duplicated", s2);
    /* a shard left from another checkpoint (step 4's shard 2 under step 8's name) */
    copy_dir(dir, copy);
    snprintf(b, sizeof b, "%s/checkpoint-00000004-00002-of-00003.safetensors", copy);
    copy_file(b, a);
    expect_refused(m, copy, "belongs to another checkpoint", s2);
    /* a corrupt tensor in a shard */
    copy_dir(dir, copy);
    {
        FILE *f = fopen(a, "r+b");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        fseek(f, -5, SEEK_END);
        int c = fgetc(f);
        fseek(f, -5, SEEK_END);
        fputc(c ^ 0x10, f);
        fclose(f);
    }
    expect_refused(m, copy, "is corrupt", s2);
    /* a model of another shape: names the tensor and its shard */
    char other_yaml[sizeof model_yaml + 8];
    snprintf(other_yaml, sizeof other_yaml, "%s", model_yaml);
    char *w = strstr(other_yaml, "out: 64");
    CU_ASSERT_PTR_NOT_NULL_FATAL(w);
    memcpy(w, "out: 32", 7);
    bt_model *other = load_model(other_yaml);
    expect_refused(other, dir, "tensor 'fc2.weight' has shape", s2);
    bt_model_destroy(other);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_failed_shard_leaves_no_index(void)
{
    bt_model *m = load_model(model_yaml);
    char dir[300];
    tmp_path("failed", dir, sizeof dir);
    bt_engine *e = make_engine(m, 3);
    train_ok(m, e, 4, dir, 1, NULL);
    /* every file may take 16 KiB: the index (about 1.5 KiB) passes, fc1's and fc2's shards fail */
    bt_test_write_limit = 16384;
    bt_atomic_file_set_test_hook(bt_test_fail_hook);
    bt_engine *c = make_engine(m, 3);
    bt_status st = train(m, c, 8, dir, 1, -1, dir);
    bt_atomic_file_set_test_hook(NULL);
    CU_ASSERT_NOT_EQUAL(st, BT_OK);
    CU_ASSERT(!exists(dir, "checkpoint-00000008.safetensors.index.json"));
    bt_checkpoint_meta meta;
    bt_engine *back = make_engine(m, 1);
    st = bt_checkpoint_resume(back, m->graph, dir, &meta);
    if (st != BT_OK) printf("\n  %s\n", bt_last_error());
    CU_ASSERT(st == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 4);
    bt_engine_destroy(back);
    /* the next complete save removes what the failed one left */
    bt_engine *d = make_engine(m, 3);
    train_ok(m, d, 8, dir, 1, dir);
    CU_ASSERT(exists(dir, "checkpoint-00000008.safetensors.index.json"));
    bt_engine_destroy(d);
    bt_engine_destroy(c);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_keep_last_and_layout_changes(void)
{
    bt_model *m = load_model(model_yaml);
    char dir[300];
    tmp_path("keep", dir, sizeof dir);
    bt_engine *e = make_engine(m, 3);
    CU_ASSERT_FATAL(train(m, e, 12, dir, 1, 1, NULL) == BT_OK); /* 4, 8, 12: only 12 kept */
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000004"), 0);
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000008"), 0);
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000012"), 4); /* index and 3 shards */
    /* shards no index names (a failed save of step 14) are no checkpoint: keep_last 2 keeps 12 and
     * 16 below, not the stray shard */
    char shard12[400], stray[400];
    snprintf(shard12, sizeof shard12, "%s/checkpoint-00000012-00001-of-00003.safetensors", dir);
    snprintf(stray, sizeof stray, "%s/checkpoint-00000014-00001-of-00003.safetensors", dir);
    copy_file(shard12, stray);
    /* the same directory continued in one file: one latest, the old layout pruned when
     * keep_last says so, and the stray shard always */
    bt_engine *one = make_engine(m, 1);
    CU_ASSERT_FATAL(train(m, one, 16, dir, 0, 2, dir) == BT_OK);
    CU_ASSERT(exists(dir, "checkpoint.safetensors"));
    CU_ASSERT(!exists(dir, "checkpoint.safetensors.index.json"));
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000014"), 0);
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000012"), 4);
    CU_ASSERT_EQUAL(count_files(dir, "checkpoint-00000016"), 1);
    /* and back to shards, resuming from the single file */
    bt_engine *two = make_engine(m, 2);
    CU_ASSERT_FATAL(train(m, two, 20, dir, 1, 2, dir) == BT_OK);
    CU_ASSERT(!exists(dir, "checkpoint.safetensors"));
    CU_ASSERT(exists(dir, "checkpoint-00000016.safetensors")); /* kept: keep_last 2 */
    bt_checkpoint_meta meta;
    CU_ASSERT(bt_checkpoint_read_meta(dir, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 20);
    /* after a crash between the two pointers both exist: the later position wins */
    char from[400], to[400];
    snprintf(from, sizeof from, "%s/checkpoint-00000016.safetensors", dir);
    snprintf(to, sizeof to, "%s/checkpoint.safetensors", dir);
    CU_ASSERT_FATAL(link(from, to) == 0);
    CU_ASSERT(bt_checkpoint_read_meta(dir, &meta) == BT_OK);
    CU_ASSERT_EQUAL(meta.step, 20);
    bt_engine_destroy(e);
    bt_engine_destroy(one);
    bt_engine_destroy(two);
    bt_model_destroy(m);
}

int main(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test_shards_XXXXXX");
    if (!mkdtemp(tmpdir)) return 99;
    (void)bt_test_crash_hook; /* the fail hook is the one used here */
    static const bt_test_case cases[] = {
        {"the index: a round trip", test_index_round_trip},
        {"the index: malformed ones are refused", test_index_rejects_malformed},
        {"a sharded checkpoint resumes bit for bit on other placements", test_sharded_resumes_bit_for_bit},
        {"shards hold the single file's tensors", test_sharded_holds_the_single_files_tensors},
        {"broken shards are refused naming tensor and shard", test_broken_shards_refused},
        {"a failed shard write leaves no index (written last)", test_failed_shard_leaves_no_index},
        {"keep_last and a directory changing layout", test_keep_last_and_layout_changes},
        {NULL, NULL}};
    int rc = bt_test_main("ckpt_shards", cases);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmpdir);
    return rc;
}
