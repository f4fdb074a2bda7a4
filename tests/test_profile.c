/* tests/test_profile.c: profiles and placement. A measured profile survives a save/load round trip
 * bit for bit; corrupt files are rejected with a message naming the file and the field; the
 * profiler measures something real (a wide layer costs more than a tiny one); the planner cuts a
 * model with one heavy layer where it balances, never worse than the uniform split as priced by
 * bt_partition_evaluate; the predicted bubble for equal stage costs is (p-1)/(m+p-1); memory per
 * stage is static + in-flight x activations, and a capacity too small fails naming the device;
 * `partition: profile` in a plan uses the measured optimum of costs measured beforehand, and is an
 * error naming what is missing without them; given the model, the memory `baton plan` reports
 * for each stage is exactly what the engine allocates for it; and a profile measures at the
 * precision asked for as the worker runs it (a probe op records each call's precision and whether
 * what it read was rounded), records it in its file, and is refused for a model of another. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "baton.h"
#include "bt_test.h"
#include "plan/partition.h"
#include "plan/placement.h"
#include "plan/plan.h"
#include "profile/auto_layout.h"
#include "profile/measure.h"
#include "plan/profile.h"
#include "optim/optim.h"

/* x[1024] -> wide (linear 1024, relu) -> a (128) -> b (1024) -> c (128) -> head (4) -> loss.
 * wide holds 1M multiply-adds per sample, a, b and c 131k each: the best 2-stage cut puts wide
 * alone (adding a to stage 0 costs wide/8, far more than the 4 KiB per sample wide hands on). */
static bt_graph *lopsided_graph(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in_dims[] = {1024};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, in_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    const char *names[] = {"wide", "a", "b", "c", "head"};
    const int outs[] = {1024, 128, 1024, 128, 4};
    for (int i = 0; i < 5; i++) {
        bt_layer_desc d;
        bt_layer_desc_init(&d);
        bt_args_set_int(a, "out", outs[i]);
        d.name = names[i], d.op = "linear", d.args = a, d.act = i < 4 ? "relu" : NULL;
        CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    }
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    bt_layer_desc_init(&d);
    d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    return g;
}

static bt_profile *measure(const bt_graph *g, const char *devices, int repeats)
{
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = devices;
    pp.batch = 64;
    pp.microbatches = 4;
    pp.repeats = repeats;
    pp.warmup = 1;
    pp.transfer_bytes = 1 << 20;
    bt_profile *p = NULL;
    bt_status st = bt_profile_measure(g, "lopsided", &pp, &p);
    if (st != BT_OK) printf("\n  measure: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return p;
}

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    const char *dir = getenv("TMPDIR");
    snprintf(buf, size, "%s/baton-test-profile-%d-%s", dir ? dir : "/tmp", (int)getpid(), name);
    return buf;
}

/* ---- round trip and validation ---------------------------------------------------------------- */

static void test_save_load_round_trip(void)
{
    bt_graph *g = lopsided_graph();
    bt_profile *p = measure(g, "cpu:0,cpu:1", 2), *q = NULL;
    char path[256];
    tmp_path("round.json", path, sizeof path);
    CU_ASSERT_FATAL(bt_profile_save(p, path) == BT_OK);
    bt_status st = bt_profile_load(path, &q);
    if (st != BT_OK) printf("\n  load: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_STRING_EQUAL(q->model, "lopsided");
    CU_ASSERT_EQUAL(q->n_devices, 2);
    CU_ASSERT_STRING_EQUAL(q->devices[1], "cpu:1");
    CU_ASSERT_EQUAL(q->n_kinds, 1);
    CU_ASSERT_STRING_EQUAL(q->kinds[0], "cpu");
    CU_ASSERT_STRING_EQUAL(q->measured_on[0], "cpu:0");
    CU_ASSERT_EQUAL(q->batch, 64);
    CU_ASSERT_EQUAL(q->microbatches, 4);
    CU_ASSERT_EQUAL(q->microbatch_size, 16);
    CU_ASSERT_EQUAL(q->training, 1);
    CU_ASSERT_STRING_EQUAL(q->optimizer, "adamw");
    CU_ASSERT_EQUAL_FATAL(q->n_layers, p->n_layers);
    for (int l = 0; l < p->n_layers; l++) {
        CU_ASSERT_STRING_EQUAL(q->layers[l].name, p->layers[l].name);
        CU_ASSERT_STRING_EQUAL(q->layers[l].op, p->layers[l].op);
        CU_ASSERT((q->layers[l].act == NULL) == (p->layers[l].act == NULL));
        CU_ASSERT_EQUAL(q->layers[l].params, p->layers[l].params);
        CU_ASSERT_EQUAL(q->layers[l].param_bytes, p->layers[l].param_bytes);
        CU_ASSERT_EQUAL(q->layers[l].optimizer_bytes, p->layers[l].optimizer_bytes);
        CU_ASSERT_EQUAL(q->layers[l].activation_bytes_per_sample, p->layers[l].activation_bytes_per_sample);
        CU_ASSERT_EQUAL(q->layers[l].cut_bytes_per_sample, p->layers[l].cut_bytes_per_sample);
        const bt_profile_time *a = bt_profile_time_at(p, l, 0), *b = bt_profile_time_at(q, l, 0);
        CU_ASSERT(a->fwd_ms == b->fwd_ms && a->bwd_ms == b->bwd_ms && a->step_ms == b->step_ms);
        CU_ASSERT(a->b_ms == b->b_ms && a->w_ms == b->w_ms);
    }
    CU_ASSERT_EQUAL_FATAL(q->n_transfers, 2);
    CU_ASSERT(q->transfers[0].gb_per_s == p->transfers[0].gb_per_s);
    CU_ASSERT(bt_profile_rate(q, "cpu:1", "cpu:0") == p->transfers[1].gb_per_s);
    /* a pair not measured falls back to the slowest pair of the same kinds */
    double slowest = fmin(p->transfers[0].gb_per_s, p->transfers[1].gb_per_s);
    CU_ASSERT(bt_profile_rate(q, "cpu:0", "cpu:5") == slowest);
    /* bytes by hand: wide = 1024*1024 + 1024 params; AdamW keeps two states */
    CU_ASSERT_EQUAL(q->layers[0].params, 1024 * 1024 + 1024);
    CU_ASSERT_EQUAL(q->layers[0].optimizer_bytes, 2 * q->layers[0].param_bytes);
    CU_ASSERT_EQUAL(q->layers[0].output_bytes_per_sample, 1024 * 4);
    CU_ASSERT_EQUAL(q->layers[0].cut_bytes_per_sample, 1024 * 4);
    CU_ASSERT_EQUAL(q->layers[0].activation_bytes_per_sample, 1024 * 4); /* linear out, the relu fused */
    CU_ASSERT(bt_profile_check_graph(q, g, path) == BT_OK);
    unlink(path);
    bt_profile_destroy(p);
    bt_profile_destroy(q);
    bt_graph_destroy(g);
}

/* x[8] -> fc1 (16) -> fc2 (16) -> ln -> skip = ln + fc1 -> head (4) -> loss: a cut after fc2 or ln
 * carries fc1 as well; after skip only skip. */
static void test_cut_bytes_count_skips(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in_dims[] = {8};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, in_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    const char *skip_in[] = {"ln", "fc1"}, *loss_in[] = {"head", "label"};
    bt_layer_desc d;
    bt_args_set_int(a, "out", 16);
    bt_layer_desc_init(&d), d.name = "fc1", d.op = "linear", d.args = a, d.act = "tanh";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "fc2", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "ln", d.op = "layernorm";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "skip", d.op = "add", d.inputs = skip_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", 4);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    bt_profile *p = measure(g, "cpu:0", 1);
    const uint64_t want[6] = {64, 128, 128, 64, 16, 0};
    for (int l = 0; l < 6; l++) CU_ASSERT_EQUAL(p->layers[l].cut_bytes_per_sample, want[l]);
    CU_ASSERT_EQUAL(p->layers[1].output_bytes_per_sample, 64);
    CU_ASSERT_EQUAL(p->layers[0].activation_bytes_per_sample, 2 * 64); /* linear + tanh outputs */
    CU_ASSERT_EQUAL(p->n_transfers, 0);                             /* one device, no pairs */
    bt_profile_destroy(p);
    bt_graph_destroy(g);
}

/* Loads the good file, applies edit, writes it to bad, and expects load to fail naming field. */
typedef void (*json_edit)(json_t *root);

static void expect_rejected(const char *good, json_edit edit, const char *field)
{
    char bad[256];
    tmp_path("bad.json", bad, sizeof bad);
    json_t *root = json_load_file(good, 0, NULL);
    CU_ASSERT_FATAL(root != NULL);
    edit(root);
    CU_ASSERT_FATAL(json_dump_file(root, bad, JSON_INDENT(1)) == 0);
    json_decref(root);
    bt_profile *p = NULL;
    bt_status st = bt_profile_load(bad, &p);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    CU_ASSERT(p == NULL);
    const char *msg = bt_last_error();
    int names_file = strstr(msg, bad) != NULL, names_field = strstr(msg, field) != NULL;
    if (!names_file || !names_field) printf("\n  expected '%s' in: %s\n", field, msg);
    CU_ASSERT(names_file && names_field);
    unlink(bad);
}

static json_t *layer1(json_t *root) { return json_array_get(json_object_get(root, "layers"), 1); }
static void drop_batch(json_t *r) { json_object_del(r, "batch"); }
static void negative_fwd(json_t *r)
{
    json_t *t = json_object_get(json_object_get(layer1(r), "times"), "cpu");
    json_object_set_new(t, "fwd_ms", json_real(-1.0));
}
static void string_repeats(json_t *r) { json_object_set_new(r, "repeats", json_string("ten")); }
static void unknown_key(json_t *r) { json_object_set_new(layer1(r), "colour", json_string("red")); }
static void bad_transfer(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "transfers"), 0), "to", json_string("cpu:9"));
}
static void zero_rate(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "transfers"), 1), "gb_per_s", json_real(0));
}
static void wrong_microbatch(json_t *r) { json_object_set_new(r, "microbatch_size", json_integer(3)); }
static void missing_kind(json_t *r) { json_object_del(json_object_get(layer1(r), "times"), "cpu"); }
static void bad_format(json_t *r) { json_object_set_new(r, "format", json_string("chrome-trace")); }
static void float_bytes(json_t *r) { json_object_set_new(layer1(r), "param_bytes", json_real(1.5)); }
/* finite but absurd: 1e308 ms made `baton plan` print "inf ms" */
static void huge_fwd(json_t *r)
{
    json_t *t = json_object_get(json_object_get(layer1(r), "times"), "cpu");
    json_object_set_new(t, "bwd_ms", json_real(1e308));
}
static void tiny_rate(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "transfers"), 0), "gb_per_s", json_real(1e-300));
}
static void huge_rate(json_t *r)
{
    json_object_set_new(json_array_get(json_object_get(r, "transfers"), 0), "gb_per_s", json_real(1e300));
}
static void huge_bytes(json_t *r)
{
    json_object_set_new(layer1(r), "activation_bytes_per_sample", json_integer(INT64_MAX));
}

static void test_corrupt_profiles_rejected(void)
{
    bt_graph *g = lopsided_graph();
    bt_profile *p = measure(g, "cpu:0,cpu:1", 1);
    char good[256], path[256];
    tmp_path("good.json", good, sizeof good);
    CU_ASSERT_FATAL(bt_profile_save(p, good) == BT_OK);
    expect_rejected(good, drop_batch, "'batch'");
    expect_rejected(good, negative_fwd, "layers[1].times.cpu.fwd_ms");
    expect_rejected(good, string_repeats, "'repeats'");
    expect_rejected(good, unknown_key, "layers[1].colour");
    expect_rejected(good, bad_transfer, "transfers[0].to");
    expect_rejected(good, zero_rate, "transfers[1].gb_per_s");
    expect_rejected(good, wrong_microbatch, "microbatch_size");
    expect_rejected(good, missing_kind, "layers[1].times.cpu");
    expect_rejected(good, bad_format, "'format'");
    expect_rejected(good, float_bytes, "layers[1].param_bytes");
    expect_rejected(good, huge_fwd, "layers[1].times.cpu.bwd_ms");
    expect_rejected(good, tiny_rate, "transfers[0].gb_per_s");
    expect_rejected(good, huge_rate, "transfers[0].gb_per_s");
    expect_rejected(good, huge_bytes, "layers[1].activation_bytes_per_sample");

    /* not JSON at all: file:line:col */
    tmp_path("syntax.json", path, sizeof path);
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs("{\"format\": \"baton-profile\",\n  \"version\": 1,,\n}\n", f);
    fclose(f);
    bt_profile *q = NULL;
    CU_ASSERT_EQUAL(bt_profile_load(path, &q), BT_ERR_IO);
    char want[300];
    snprintf(want, sizeof want, "%s:2:", path);
    CU_ASSERT(strstr(bt_last_error(), want) != NULL);
    unlink(path);
    CU_ASSERT_EQUAL(bt_profile_load(path, &q), BT_ERR_IO); /* missing file */
    CU_ASSERT(strstr(bt_last_error(), path) != NULL);

    /* a profile of another model */
    bt_graph *other = NULL;
    int64_t dims[] = {4};
    CU_ASSERT_FATAL(bt_graph_create(&other) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(other, "x", 1, dims, BT_F32) == BT_OK);
    CU_ASSERT_EQUAL(bt_profile_check_graph(p, other, good), BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), good) != NULL);
    bt_graph_destroy(other);
    unlink(good);
    bt_profile_destroy(p);
    bt_graph_destroy(g);
}

/* ---- precision -------------------------------------------------------------------------------- */

/* test.precprobe: y = w * x * 1.0001 (per feature; the factor keeps y off bf16's grid, so only the
 * profiler's rounding can put it there), recording what each call saw: its precision, and whether
 * the values it read were bf16 values (the input, the weights it was given, and in the backward
 * its own output and output gradient, which the worker rounds). */
static struct {
    int calls_fwd, calls_bwd;
    bt_dtype fwd_precision, bwd_precision;
    int in_exact, w_exact, out_exact, dy_exact;
} probe;

static int bf16_exact(const bt_tensor *t)
{
    const float *x = t->data;
    for (int64_t i = 0, n = bt_tensor_numel(t); i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof u);
        if (u & 0xffffu) return 0;
    }
    return 1;
}

static bt_status probe_infer(bt_infer_ctx *ctx)
{
    const bt_shape *s = bt_infer_input_shape(ctx, 0);
    bt_status st = bt_infer_add_param(ctx, "weight", s, BT_INIT_ONES, 1, 0);
    if (st != BT_OK) return st;
    return bt_infer_set_output(ctx, s, bt_infer_input_dtype(ctx, 0));
}

static bt_status probe_forward(const bt_op_call *c)
{
    probe.calls_fwd++;
    probe.fwd_precision = c->precision;
    probe.in_exact = bf16_exact(&c->in[0]);
    probe.w_exact = bf16_exact(&c->param[0]);
    const float *x = c->in[0].data, *w = c->param[0].data;
    float *y = c->out->data;
    int64_t per = bt_tensor_numel(&c->param[0]);
    for (int64_t i = 0, n = bt_tensor_numel(c->out); i < n; i++) y[i] = w[i % per] * x[i] * 1.0001f;
    return BT_OK;
}

static bt_status probe_backward(const bt_op_call *c)
{
    probe.calls_bwd++;
    probe.bwd_precision = c->precision;
    probe.out_exact = bf16_exact(c->out);
    probe.dy_exact = bf16_exact(c->out_grad);
    const float *dy = c->out_grad->data, *x = c->in[0].data, *w = c->param[0].data;
    int64_t per = bt_tensor_numel(&c->param[0]);
    for (int64_t i = 0, n = bt_tensor_numel(c->out_grad); i < n; i++) {
        if (c->in_grad[0].data) ((float *)c->in_grad[0].data)[i] += dy[i] * w[i % per] * 1.0001f;
        if (c->param_grad[0].data) ((float *)c->param_grad[0].data)[i % per] += dy[i] * x[i] * 1.0001f;
    }
    return BT_OK;
}

/* x[16] -> probe -> head (linear 4) -> loss */
static bt_graph *probe_graph(void)
{
    static int registered;
    if (!registered) {
        bt_op_def def = {.name = "test.precprobe", .min_inputs = 1, .max_inputs = 1, .infer = probe_infer,
                         .cpu_forward = probe_forward, .cpu_backward = probe_backward};
        CU_ASSERT_FATAL(bt_op_register(&def) == BT_OK);
        registered = 1;
    }
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in_dims[] = {16};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 1, in_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_layer_desc d;
    bt_layer_desc_init(&d);
    d.name = "probe", d.op = "test.precprobe";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", 4);
    bt_layer_desc_init(&d);
    d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc_init(&d);
    d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    return g;
}

static bt_profile *measure_probe(const bt_graph *g, bt_dtype precision)
{
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.batch = 8;
    pp.repeats = 1;
    pp.warmup = 0;
    pp.transfer_bytes = 1 << 16;
    pp.handoff_repeats = 0;
    pp.precision = precision;
    memset(&probe, 0, sizeof probe);
    bt_profile *p = NULL;
    bt_status st = bt_profile_measure(g, "probe", &pp, &p);
    if (st != BT_OK) printf("\n  measure: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    return p;
}

/* A profile measures at the precision asked for, as the engine's worker runs it: every call gets
 * it, inputs, weights (the rounded compute copy), activations and complete gradients are bf16
 * values under bf16 and f32's random values under f32; the profile and its file record it, a file
 * without the key reads as f32, an unknown value names the field, a precision other than f32, bf16
 * or f16 is refused, and a profile checked against another precision names both. */
static void test_profile_precision(void)
{
    bt_graph *g = probe_graph();
    bt_profile *f = measure_probe(g, BT_F32);
    CU_ASSERT(probe.calls_fwd > 0 && probe.calls_bwd > 0);
    CU_ASSERT_EQUAL(probe.fwd_precision, BT_F32);
    CU_ASSERT_EQUAL(probe.bwd_precision, BT_F32);
    CU_ASSERT(!probe.in_exact && !probe.w_exact && !probe.out_exact && !probe.dy_exact); /* nothing rounds */
    CU_ASSERT_EQUAL(bt_profile_precision(f), BT_F32);

    bt_profile *b = measure_probe(g, BT_BF16);
    CU_ASSERT(probe.calls_fwd > 0 && probe.calls_bwd > 0);
    CU_ASSERT_EQUAL(probe.fwd_precision, BT_BF16);
    CU_ASSERT_EQUAL(probe.bwd_precision, BT_BF16);
    CU_ASSERT(probe.in_exact);  /* the fed input, rounded as the worker feeds it */
    CU_ASSERT(probe.w_exact);   /* the weights' compute copy */
    CU_ASSERT(probe.out_exact); /* the activation the forward wrote, rounded */
    CU_ASSERT(probe.dy_exact);  /* the output gradient, rounded before the backward read it */
    CU_ASSERT_EQUAL(bt_profile_precision(b), BT_BF16);
    /* the weights' compute copy counts as weights, as the engine allocates it */
    CU_ASSERT_EQUAL(b->layers[0].param_bytes, 2 * f->layers[0].param_bytes);

    /* the file: written, read back; older files (no key) are f32; unknown values are refused */
    char path[256], old[256];
    tmp_path("bf16.json", path, sizeof path);
    tmp_path("old.json", old, sizeof old);
    CU_ASSERT_FATAL(bt_profile_save(b, path) == BT_OK);
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    CU_ASSERT_FATAL(root != NULL);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(root, "precision")), "bf16");
    bt_profile *q = NULL;
    CU_ASSERT_FATAL(bt_profile_load(path, &q) == BT_OK);
    CU_ASSERT_EQUAL(bt_profile_precision(q), BT_BF16);
    bt_profile_destroy(q);
    q = NULL;
    json_object_del(root, "precision");
    CU_ASSERT_FATAL(json_dump_file(root, old, 0) == 0);
    CU_ASSERT_FATAL(bt_profile_load(old, &q) == BT_OK);
    CU_ASSERT_EQUAL(bt_profile_precision(q), BT_F32);
    bt_profile_destroy(q);
    q = NULL;
    json_object_set_new(root, "precision", json_string("f8"));
    CU_ASSERT_FATAL(json_dump_file(root, old, 0) == 0);
    CU_ASSERT_EQUAL(bt_profile_load(old, &q), BT_ERR_IO);
    CU_ASSERT(strstr(bt_last_error(), "'precision'") != NULL);
    json_decref(root);
    unlink(old);

    /* a bf16 profile does not price an f32 model, nor the reverse */
    CU_ASSERT_EQUAL(bt_profile_check_precision(b, BT_BF16, path), BT_OK);
    CU_ASSERT_EQUAL(bt_profile_check_precision(b, BT_F32, path), BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), path) != NULL);
    CU_ASSERT(strstr(bt_last_error(), "precision bf16 but the model computes at f32") != NULL);
    CU_ASSERT_EQUAL(bt_profile_check_precision(f, BT_BF16, NULL), BT_ERR_MODEL);
    unlink(path);
    /* nor through the C API: an engine cut by partition: profile refuses another precision's costs */
    bt_engine_params ep;
    bt_engine_params_init(&ep);
    ep.parallel.devices = "cpu:0,cpu:1";
    ep.parallel.microbatches = 2;
    ep.parallel.partition = BT_PARTITION_PROFILE;
    ep.parallel.profile = b;
    ep.batch = 4;
    ep.threads = 1;
    ep.precision = BT_F32;
    bt_engine *eng = NULL;
    CU_ASSERT_EQUAL(bt_engine_create(g, &ep, &eng), BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "precision bf16 but the model computes at f32") != NULL);
    CU_ASSERT(eng == NULL);
    ep.precision = BT_BF16;
    bt_status est = bt_engine_create(g, &ep, &eng);
    if (est != BT_OK) printf("\n  engine at bf16: %s\n", bt_last_error());
    CU_ASSERT_EQUAL(est, BT_OK);
    bt_engine_destroy(eng);

    /* only f32, bf16 and f16 */
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    CU_ASSERT_EQUAL(pp.precision, BT_F32);
    pp.precision = BT_I32;
    bt_profile *bad = NULL;
    CU_ASSERT_EQUAL(bt_profile_measure(g, "probe", &pp, &bad), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "precision") != NULL && strstr(bt_last_error(), "i32") != NULL);
    CU_ASSERT(bad == NULL);

    bt_profile_destroy(f);
    bt_profile_destroy(b);
    bt_graph_destroy(g);
}

/* The measurements made for a plan take the model's precision: `partition: profile`
 * (bt_profile_measure_for_plan) and `parallel: auto` (bt_auto_search, from bt_search_params). */
static void test_plan_measurements_take_precision(void)
{
    bt_graph *g = probe_graph();
    bt_parallel_config cfg;
    bt_parallel_config_init(&cfg);
    cfg.devices = "cpu:0,cpu:1";
    cfg.microbatches = 2;
    cfg.partition = BT_PARTITION_PROFILE;
    bt_profile *costs = NULL;
    memset(&probe, 0, sizeof probe);
    bt_status st = bt_profile_measure_for_plan(g, &cfg, BT_BF16, &costs);
    if (st != BT_OK) printf("\n  measure: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK && costs != NULL);
    CU_ASSERT_EQUAL(bt_profile_precision(costs), BT_BF16);
    CU_ASSERT_EQUAL(probe.fwd_precision, BT_BF16);
    CU_ASSERT_EQUAL(probe.bwd_precision, BT_BF16);
    bt_profile_destroy(costs);
    costs = NULL;
    CU_ASSERT_EQUAL(bt_profile_measure_for_plan(g, &cfg, BT_F64, &costs), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "f64") != NULL);

    bt_search_params sp;
    bt_search_params_init(&sp);
    sp.graph = g;
    sp.batch = 8;
    sp.precision = BT_BF16;
    sp.optimizer_slots = 2;
    sp.max_stages = 1;
    sp.threads = 1;
    sp.n_microbatches = 1;
    sp.microbatches[0] = 1;
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.repeats = 1;
    pp.warmup = 0;
    pp.handoff_repeats = 0;
    pp.transfer_bytes = 1 << 16;
    bt_search_result r;
    int measured = 0;
    memset(&probe, 0, sizeof probe);
    st = bt_auto_search(g, "probe", &sp, &pp, &r, &measured);
    if (st != BT_OK) printf("\n  search: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT(measured >= 1);
    CU_ASSERT_EQUAL(probe.fwd_precision, BT_BF16);
    CU_ASSERT_EQUAL(probe.bwd_precision, BT_BF16);
    bt_search_result_clear(&r);
    bt_graph_destroy(g);
}

/* ---- placement -------------------------------------------------------------------------------- */

/* Links between ranks (`baton profile` under mpirun): they survive a round trip, the fit gives the
 * latency of the smallest message and the slope to the largest (the slowest pair's of each), a
 * link from a rank to itself is refused, and a plan with every stage on its own rank pays the link
 * per message on top of the same-process transfer: latency + cut bytes / bandwidth, by hand. */
static void test_links_between_ranks(void)
{
    bt_graph *g = lopsided_graph();
    bt_profile *p = measure(g, "cpu:0", 1), *q = NULL;
    double lat = -1, bw = -1;
    CU_ASSERT_EQUAL(bt_profile_link_model(p, &lat, &bw), 0); /* one process: none */
    p->links = calloc(4, sizeof *p->links);
    CU_ASSERT_FATAL(p->links != NULL);
    /* rank 0 -> 1: 0.5 ms + bytes / 2 GB/s; rank 0 -> 2: 0.2 ms + bytes / 4 GB/s */
    p->links[0] = (bt_profile_link){0, 1, 8, 0.5 + 8 / 2e6};
    p->links[1] = (bt_profile_link){0, 1, 1 << 20, 0.5 + (1 << 20) / 2e6};
    p->links[2] = (bt_profile_link){0, 2, 8, 0.2 + 8 / 4e6};
    p->links[3] = (bt_profile_link){0, 2, 1 << 20, 0.2 + (1 << 20) / 4e6};
    p->n_links = 4;
    CU_ASSERT_EQUAL(bt_profile_link_model(p, &lat, &bw), 1);
    CU_ASSERT(fabs(lat - (0.5 + 8 / 2e6)) < 1e-12);
    CU_ASSERT(fabs(bw - 2.0) < 1e-9);
    CU_ASSERT(fabs(bt_profile_link_ms(lat, bw, 2e6) - (lat + 1.0)) < 1e-12);
    char path[256];
    tmp_path("links.json", path, sizeof path);
    CU_ASSERT_FATAL(bt_profile_save(p, path) == BT_OK);
    CU_ASSERT_FATAL(bt_profile_load(path, &q) == BT_OK);
    CU_ASSERT_EQUAL_FATAL(q->n_links, 4);
    for (int i = 0; i < 4; i++) {
        CU_ASSERT_EQUAL(q->links[i].from_rank, p->links[i].from_rank);
        CU_ASSERT_EQUAL(q->links[i].to_rank, p->links[i].to_rank);
        CU_ASSERT_EQUAL(q->links[i].bytes, p->links[i].bytes);
        CU_ASSERT(q->links[i].oneway_ms == p->links[i].oneway_ms);
    }
    bt_profile_destroy(q);
    q = NULL;
    p->links[3].to_rank = 0; /* a link from rank 0 to itself */
    CU_ASSERT_FATAL(bt_profile_save(p, path) == BT_OK);
    CU_ASSERT_EQUAL(bt_profile_load(path, &q), BT_ERR_IO);
    CU_ASSERT(strstr(bt_last_error(), "links[3].to_rank") != NULL);
    p->links[3].to_rank = 2;
    unlink(path);

    for (int l = 0; l < p->n_layers * p->n_kinds; l++) /* fixed costs: the same cut both ways, no noise */
        p->times[l] = (bt_profile_time){0.01, 0.02, 0.0, 0.01, 0.01};
    bt_placement_params pp;
    bt_placement_params_init(&pp);
    pp.devices = "cpu:0,cpu:1";
    bt_placement local, across;
    CU_ASSERT_FATAL(bt_placement_plan(p, &pp, &local) == BT_OK);
    pp.cross_rank = 1;
    CU_ASSERT_FATAL(bt_placement_plan(p, &pp, &across) == BT_OK);
    const bt_placement_stage *s0 = &across.stage[0], *s1 = &across.stage[1];
    int last = s0->first_layer + s0->n_layers - 1;
    double cut = (double)p->layers[last].cut_bytes_per_sample * (double)across.microbatch_size;
    CU_ASSERT(fabs(s0->link_act_ms - (lat + cut / 2e6)) < 1e-9);
    CU_ASSERT(fabs(s1->link_grad_ms - (lat + cut / 2e6)) < 1e-9);
    CU_ASSERT(s0->send_act_ms >= s0->link_act_ms);
    /* with the link the cut moves to where no more bytes cross than without it */
    int lc = local.stage[1].first_layer - 1, ac = across.stage[1].first_layer - 1;
    CU_ASSERT(p->layers[ac].cut_bytes_per_sample <= p->layers[lc].cut_bytes_per_sample);
    /* on the same cut, the link adds at least a forward and a backward crossing to the step */
    int first[3] = {0, across.stage[1].first_layer, p->n_layers};
    bt_placement same;
    pp.cross_rank = 0;
    CU_ASSERT_FATAL(bt_placement_evaluate(p, &pp, first, &same) == BT_OK);
    pp.cross_rank = 1;
    CU_ASSERT(across.step_ms > same.step_ms + 2 * lat - 1e-9);
    bt_placement_clear(&same);
    bt_placement_clear(&local);
    bt_placement_clear(&across);
    /* no links: planning across ranks says how to measure them */
    free(p->links);
    p->links = NULL;
    p->n_links = 0;
    CU_ASSERT_EQUAL(bt_placement_plan(p, &pp, &across), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "mpirun -np 2 baton profile") != NULL);
    bt_profile_destroy(p);
    bt_graph_destroy(g);
}

static void test_planner_balances_measured_costs(void)
{
    bt_graph *g = lopsided_graph();
    bt_profile *p = measure(g, "cpu:0,cpu:1", 5);
    const bt_profile_time *wide = bt_profile_time_at(p, 0, 0);
    for (int l = 1; l < 5; l++) { /* the profiler measures real work: 1024x1024 vs 1024x128 */
        const bt_profile_time *t = bt_profile_time_at(p, l, 0);
        CU_ASSERT(wide->fwd_ms > t->fwd_ms);
        CU_ASSERT(wide->bwd_ms > t->bwd_ms);
        CU_ASSERT(wide->w_ms > t->w_ms); /* W measured on its own: the weight GEMM */
    }
    /* the first layer's input is the graph's: its B computes nothing but its W the whole weight
     * gradient, so W is a real measurement and B is not the fused backward */
    CU_ASSERT(wide->w_ms > 0 && wide->b_ms < wide->w_ms);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = "cpu:0,cpu:1";
    bt_placement pl;
    bt_status st = bt_placement_plan(p, &lp, &pl);
    if (st != BT_OK) printf("\n  plan: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_EQUAL(pl.stages, 2);
    CU_ASSERT_EQUAL(pl.stage[0].n_layers, 1); /* the wide layer alone */
    CU_ASSERT_STRING_EQUAL(pl.layout, "wide|a,b,c,head,loss");
    CU_ASSERT(strstr(pl.yaml, "partition: {layout: \"wide|a,b,c,head,loss\"}") != NULL);
    CU_ASSERT(strstr(pl.yaml, "devices: [cpu:0, cpu:1]") != NULL);

    /* never worse than the uniform split, both priced by bt_partition_evaluate */
    bt_placement_problem pb;
    CU_ASSERT_FATAL(bt_placement_problem_build(p, &lp, &pb) == BT_OK);
    bt_partition_plan uni, opt;
    memset(&uni, 0, sizeof uni);
    uni.stages = 2;
    CU_ASSERT_FATAL(bt_partition_uniform(p->n_layers, 2, uni.first_layer) == BT_OK);
    uni.device[0] = 0, uni.device[1] = 1;
    CU_ASSERT_FATAL(bt_partition_evaluate(&pb.pr, &uni) == BT_OK);
    memset(&opt, 0, sizeof opt);
    opt.stages = 2;
    opt.first_layer[0] = 0, opt.first_layer[1] = pl.stage[1].first_layer, opt.first_layer[2] = p->n_layers;
    opt.device[0] = 0, opt.device[1] = 1;
    CU_ASSERT_FATAL(bt_partition_evaluate(&pb.pr, &opt) == BT_OK);
    CU_ASSERT(opt.bottleneck <= uni.bottleneck);
    CU_ASSERT(fabs(opt.bottleneck - pl.bottleneck_ms) <= 1e-12 * fmax(1, opt.bottleneck));
    CU_ASSERT(opt.bottleneck < uni.bottleneck); /* uniform is wide, a, b | c, head, loss */
    /* and the simulated step agrees */
    bt_placement up;
    CU_ASSERT_FATAL(bt_placement_evaluate(p, &lp, uni.first_layer, &up) == BT_OK);
    CU_ASSERT(pl.step_ms <= up.step_ms);
    CU_ASSERT(fabs(up.bottleneck_ms - uni.bottleneck) <= 1e-12 * fmax(1, uni.bottleneck));
    bt_placement_clear(&up);
    bt_placement_problem_free(&pb);
    bt_placement_clear(&pl);
    bt_profile_destroy(p);
    bt_graph_destroy(g);
}

/* A profile made by hand: layers with given fwd/bwd ms, act bytes, params, no transfer bytes. */
static bt_profile *synthetic_profile(int n, const double *fwd, const double *bwd, int64_t batch, int m)
{
    bt_profile *p = calloc(1, sizeof *p);
    p->model = strdup("synthetic");
    p->n_devices = 4;
    for (int d = 0; d < 4; d++) snprintf(p->devices[d], sizeof p->devices[d], "cpu:%d", d);
    p->n_kinds = 1;
    strcpy(p->kinds[0], "cpu");
    strcpy(p->measured_on[0], "cpu:0");
    p->batch = batch;
    p->microbatches = m;
    p->microbatch_size = batch / m;
    p->training = 1;
    strcpy(p->optimizer, "sgd-momentum");
    p->threads = p->repeats = 1;
    p->n_layers = n;
    p->layers = calloc((size_t)n, sizeof *p->layers);
    p->times = calloc((size_t)n, sizeof *p->times);
    for (int l = 0; l < n; l++) {
        char name[16];
        snprintf(name, sizeof name, "l%d", l);
        p->layers[l].name = strdup(name);
        p->layers[l].op = strdup("linear");
        p->layers[l].params = 1000;
        p->layers[l].param_bytes = p->layers[l].grad_bytes = p->layers[l].optimizer_bytes = 4000;
        p->layers[l].activation_bytes_per_sample = 100;
        p->times[l].fwd_ms = fwd[l];
        p->times[l].bwd_ms = bwd[l];
    }
    return p;
}

static void test_bubble_for_equal_costs(void)
{
    const double fwd[8] = {1, 1, 1, 1, 1, 1, 1, 1}, bwd[8] = {2, 2, 2, 2, 2, 2, 2, 2};
    const struct { int p, m; bt_schedule_kind kind; } cases[] = {
        {2, 4, BT_SCHEDULE_1F1B}, {4, 8, BT_SCHEDULE_1F1B}, {4, 8, BT_SCHEDULE_GPIPE}, {2, 1, BT_SCHEDULE_1F1B}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int p = cases[c].p, m = cases[c].m;
        bt_profile *prof = synthetic_profile(8, fwd, bwd, 8 * m, m);
        char devices[64] = "";
        for (int d = 0; d < p; d++) snprintf(devices + strlen(devices), 16, "%scpu:%d", d ? "," : "", d);
        bt_placement_params lp;
        bt_placement_params_init(&lp);
        lp.devices = devices;
        lp.schedule = cases[c].kind;
        bt_placement pl;
        CU_ASSERT_FATAL(bt_placement_plan(prof, &lp, &pl) == BT_OK);
        double want = (double)(p - 1) / (double)(m + p - 1);
        if (fabs(pl.bubble - want) > 1e-9) printf("\n  p=%d m=%d: bubble %.6f, want %.6f\n", p, m, pl.bubble, want);
        CU_ASSERT(fabs(pl.bubble - want) <= 1e-9);
        /* equal stages of 8/p layers, each (fwd + bwd) = 3 ms per layer */
        for (int k = 0; k < p; k++) CU_ASSERT_EQUAL(pl.stage[k].n_layers, 8 / p);
        CU_ASSERT(fabs(pl.bottleneck_ms - 3.0 * 8 / p) <= 1e-9);
        CU_ASSERT(fabs(pl.step_ms - (m + p - 1) * 3.0 * 8 / p) <= 1e-9);
        bt_placement_clear(&pl);
        bt_profile_destroy(prof);
    }
}

static void test_memory_and_scaling(void)
{
    const double fwd[4] = {4, 1, 1, 1}, bwd[4] = {8, 2, 2, 2};
    bt_profile *prof = synthetic_profile(4, fwd, bwd, 32, 4); /* micro-batches of 8 */
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = "cpu:0,cpu:1";
    bt_placement pl;
    CU_ASSERT_FATAL(bt_placement_plan(prof, &lp, &pl) == BT_OK);
    CU_ASSERT_EQUAL(pl.stage[0].n_layers, 1);
    /* 1F1B, p=2, m=4: stage 0 holds 2 micro-batches, stage 1 one; static = 3 x 4000 per layer */
    CU_ASSERT_EQUAL(pl.stage[0].inflight, 2);
    CU_ASSERT_EQUAL(pl.stage[0].peak_bytes, 12000 + 2 * 100 * 8);
    CU_ASSERT_EQUAL(pl.stage[1].peak_bytes, 3 * 12000 + 1 * 3 * 100 * 8);
    CU_ASSERT(fabs(pl.stage[0].fwd_ms - 4) < 1e-12 && fabs(pl.stage[1].bwd_ms - 6) < 1e-12);
    bt_placement_clear(&pl);

    /* two micro-batches of 16: every time doubles, activations per micro-batch too */
    lp.microbatches = 2;
    CU_ASSERT_FATAL(bt_placement_plan(prof, &lp, &pl) == BT_OK);
    CU_ASSERT_EQUAL(pl.microbatch_size, 16);
    CU_ASSERT(fabs(pl.stage[0].fwd_ms - 8) < 1e-12 && fabs(pl.stage[1].bwd_ms - 12) < 1e-12);
    CU_ASSERT_EQUAL(pl.stage[1].peak_bytes, 3 * 12000 + 3 * 100 * 16);
    bt_placement_clear(&pl);
    lp.microbatches = 3; /* 32 samples do not split in 3 */
    CU_ASSERT_EQUAL(bt_placement_plan(prof, &lp, &pl), BT_ERR_INVALID_ARG);
    lp.microbatches = 0;

    /* 28,000 bytes per device: stage 1 cannot hold layers 1..3 (38,400 bytes), so the cut moves
     * one layer on (27,200 and 25,600 bytes); 14,000 bytes fits no cut and the message names a
     * device */
    lp.memory = 28000;
    bt_status st = bt_placement_plan(prof, &lp, &pl);
    if (st != BT_OK) printf("\n  memory plan: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_EQUAL(pl.stage[0].n_layers, 2);
    CU_ASSERT_EQUAL(pl.stage[0].peak_bytes, 27200);
    CU_ASSERT_EQUAL(pl.stage[1].peak_bytes, 25600);
    bt_placement_clear(&pl);
    lp.memory = 14000;
    CU_ASSERT_EQUAL(bt_placement_plan(prof, &lp, &pl), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "device") != NULL);

    /* a device kind the profile did not measure */
    lp.memory = 0;
    lp.devices = "cpu:0,cuda:0";
    CU_ASSERT_EQUAL(bt_placement_plan(prof, &lp, &pl), BT_ERR_INVALID_ARG);
    CU_ASSERT(strstr(bt_last_error(), "cuda:0") != NULL);
    bt_profile_destroy(prof);
}

/* x[16, 32, 32] -> conv1, conv2 (3x3, 16 channels, relu) -> flat -> fc (linear 16) -> head -> loss.
 * By parameters the convolutions are light (2,320 each) and fc heavy (262,160): balancing
 * parameters cuts after flat. By time conv1 alone (2.4M multiply-adds per sample forward, as much
 * again for the weight gradient) outweighs fc (0.26M forward, two such backward), so the measured
 * optimum puts conv1 alone on stage 0 and everything else on stage 1. */
static bt_graph *conv_graph(void)
{
    bt_graph *g = NULL;
    bt_args *a = NULL;
    int64_t in_dims[] = {16, 32, 32};
    CU_ASSERT_FATAL(bt_graph_create(&g) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "x", 3, in_dims, BT_F32) == BT_OK);
    CU_ASSERT_FATAL(bt_graph_add_input(g, "label", 0, NULL, BT_I32) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_int(a, "out", 16);
    int64_t k = 3, pad = 1;
    bt_args_set_ints(a, "kernel", 1, &k);
    bt_args_set_ints(a, "padding", 1, &pad);
    bt_layer_desc d;
    bt_layer_desc_init(&d), d.name = "conv1", d.op = "conv2d", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_layer_desc_init(&d), d.name = "conv2", d.op = "conv2d", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    bt_layer_desc_init(&d), d.name = "flat", d.op = "flatten";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    CU_ASSERT_FATAL(bt_args_create(&a) == BT_OK);
    bt_args_set_int(a, "out", 16);
    bt_layer_desc_init(&d), d.name = "fc", d.op = "linear", d.args = a, d.act = "relu";
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_set_int(a, "out", 4);
    bt_layer_desc_init(&d), d.name = "head", d.op = "linear", d.args = a;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    bt_args_destroy(a);
    const char *loss_in[] = {"head", "label"};
    bt_layer_desc_init(&d), d.name = "loss", d.op = "cross_entropy", d.inputs = loss_in, d.n_inputs = 2;
    CU_ASSERT_FATAL(bt_graph_add_layer(g, &d) == BT_OK);
    return g;
}

static void test_plan_partition_profile(void)
{
    bt_graph *g = conv_graph();
    bt_parallel_config cfg;
    bt_parallel_config_init(&cfg);
    cfg.devices = "cpu:0,cpu:1";
    cfg.microbatches = 2;
    cfg.partition = BT_PARTITION_PARAMS;
    bt_plan *plan = NULL;
    CU_ASSERT_FATAL(bt_plan_build(g, &cfg, &plan) == BT_OK);
    CU_ASSERT_EQUAL(plan->n_stage_layers[0], 3); /* by parameters: conv1, conv2, flat | fc, ... */
    bt_plan_destroy(plan);
    cfg.partition = BT_PARTITION_PROFILE;
    bt_profile *costs = NULL; /* measuring is the caller's step, before the plan */
    bt_status st = bt_profile_measure_for_plan(g, &cfg, BT_F32, &costs);
    if (st != BT_OK) printf("\n  measure: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK && costs != NULL);
    cfg.profile = costs;
    st = bt_plan_build(g, &cfg, &plan);
    if (st != BT_OK) printf("\n  plan: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    CU_ASSERT_EQUAL(plan->stages, 2);
    if (plan->n_stage_layers[0] != 1) printf("\n  profile cut: %d layers on stage 0\n", plan->n_stage_layers[0]);
    CU_ASSERT_EQUAL(plan->n_stage_layers[0], 1); /* by time: conv1 | conv2, flat, fc, head, loss */
    bt_plan_destroy(plan);
    bt_profile_destroy(costs);
    bt_graph_destroy(g);
}

/* Planning never measures: `partition: profile` without costs is an error that names what is
 * missing, never a silent fallback to another partition; costs of another graph are refused;
 * one stage, or another partition, needs no costs (and bt_profile_measure_for_plan measures
 * nothing then). */
static void test_plan_profile_needs_costs(void)
{
    bt_graph *g = conv_graph(), *other = lopsided_graph();
    bt_parallel_config cfg;
    bt_parallel_config_init(&cfg);
    cfg.devices = "cpu:0,cpu:1";
    cfg.microbatches = 2;
    cfg.partition = BT_PARTITION_PROFILE;
    bt_plan *plan = NULL;
    CU_ASSERT_EQUAL(bt_plan_build(g, &cfg, &plan), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NULL(plan);
    CU_ASSERT(strstr(bt_last_error(), "partition: profile") != NULL);
    CU_ASSERT(strstr(bt_last_error(), "bt_parallel_config.profile is NULL") != NULL);
    CU_ASSERT(bt_plan_needs_profile(g, &cfg));

    bt_profile *foreign = measure(other, "cpu:0,cpu:1", 1);
    cfg.profile = foreign;
    CU_ASSERT_EQUAL(bt_plan_build(g, &cfg, &plan), BT_ERR_MODEL);
    CU_ASSERT(strstr(bt_last_error(), "profile this model again") != NULL);
    bt_profile_destroy(foreign);
    cfg.profile = NULL;

    bt_profile *costs = (bt_profile *)1;
    cfg.devices = "cpu:0";
    CU_ASSERT_FALSE(bt_plan_needs_profile(g, &cfg));
    CU_ASSERT_EQUAL(bt_profile_measure_for_plan(g, &cfg, BT_F32, &costs), BT_OK);
    CU_ASSERT_PTR_NULL(costs);
    CU_ASSERT_FATAL(bt_plan_build(g, &cfg, &plan) == BT_OK);
    CU_ASSERT_EQUAL(plan->stages, 1);
    bt_plan_destroy(plan);
    cfg.devices = "cpu:0,cpu:1";
    cfg.partition = BT_PARTITION_PARAMS;
    CU_ASSERT_FALSE(bt_plan_needs_profile(g, &cfg));
    bt_graph_destroy(other);
    bt_graph_destroy(g);
}

/* `baton plan` and `baton run` must agree on a stage's memory: plan prices the engine's own cuts
 * with the model and the engine allocates (once asserted equal to the same model). Before the one
 * memory model, plan said 16.4 MiB for fashion-mlp's stage 1 and the engine allocated 17.8 MiB
 * (value gradients, workspace, channel buffers and slot alignment were missing). */
static void check_plan_matches_engine(const char *model, const char *schedule)
{
    char path[1024], over[256];
    snprintf(path, sizeof path, "%s/models/%s", BT_SRCDIR, model);
    bt_model *m = NULL;
    /* fashion-mlp says parallel: auto: its former layout, as this check always priced it */
    const char *layout[] = {"parallel={devices: auto, pipeline: {stages: 2, microbatches: 8, schedule: 1f1b, partition: params}}"};
    int fashion = strcmp(model, "fashion-mlp.yaml") == 0;
    if (schedule) { /* the model's own layout under another schedule */
        snprintf(over, sizeof over, "parallel.pipeline.schedule=%s", schedule);
        layout[0] = over;
    }
    CU_ASSERT_FATAL(bt_model_load(path, fashion || schedule ? layout : NULL, fashion || schedule, &m) == BT_OK);
    int training = m->train.enabled && bt_graph_is_trainable(m->graph);
    bt_engine_params ep;
    bt_engine_params_init(&ep);
    ep.parallel = m->parallel;
    ep.training = training;
    if (!training) ep.parallel.schedule = BT_SCHEDULE_STREAM;
    ep.optimizer = m->train.optimizer;
    ep.batch = m->train.batch;
    ep.threads = 1;
    if (training) ep.precision = m->train.precision;
    bt_engine *e = NULL;
    bt_status st = bt_engine_create(m->graph, &ep, &e);
    if (st != BT_OK) printf("\n  %s: %s\n", model, bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);

    int p = bt_engine_num_stages(e), first[BT_MAX_STAGES + 1];
    char devices[BT_MAX_STAGES * 33] = "";
    for (int k = 0; k < p; k++) {
        bt_stage_info si;
        CU_ASSERT_FATAL(bt_engine_stage(e, k, &si) == BT_OK);
        first[k] = si.first_layer;
        strcat(devices, k ? "," : "");
        strcat(devices, si.device);
    }
    first[p] = bt_graph_num_layers(m->graph);
    bt_profile_params pp;
    bt_profile_params_init(&pp);
    pp.devices = devices;
    pp.batch = ep.batch;
    pp.microbatches = ep.parallel.microbatches;
    pp.training = training;
    pp.optimizer = m->train.optimizer;
    pp.repeats = 1;
    pp.warmup = 0;
    pp.transfer_bytes = 4096;
    bt_profile *prof = NULL;
    CU_ASSERT_FATAL(bt_profile_measure(m->graph, m->name, &pp, &prof) == BT_OK);
    bt_placement_params lp;
    bt_placement_params_init(&lp);
    lp.devices = devices;
    lp.schedule = ep.parallel.schedule;
    lp.graph = m->graph;
    lp.precision = ep.precision;
    lp.optimizer_slots = training ? bt_optim_state_count(&m->train.optimizer) : 0;
    bt_placement pl;
    st = bt_placement_evaluate(prof, &lp, first, &pl);
    if (st != BT_OK) printf("\n  %s: %s\n", model, bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    for (int k = 0; k < p; k++) {
        bt_memory_stats mem;
        CU_ASSERT_FATAL(bt_engine_memory(e, k, &mem) == BT_OK);
        if (pl.stage[k].peak_bytes != mem.current)
            printf("\n  %s stage %d: plan %llu bytes, engine %zu\n", model, k,
                   (unsigned long long)pl.stage[k].peak_bytes, mem.current);
        CU_ASSERT_EQUAL(pl.stage[k].peak_bytes, mem.current);
        CU_ASSERT_EQUAL(pl.stage[k].static_bytes, mem.weights + mem.gradients + mem.optimizer);
    }
    bt_placement_clear(&pl);
    bt_profile_destroy(prof);
    bt_engine_destroy(e);
    bt_model_destroy(m);
}

static void test_plan_memory_is_engine_memory(void)
{
    check_plan_matches_engine("fashion-mlp.yaml", NULL);  /* 1F1B, AdamW */
    check_plan_matches_engine("residual-mlp.yaml", NULL); /* skip connections across the cut */
    check_plan_matches_engine("cnn.yaml", NULL);          /* convolutions: saved state, workspace */
    check_plan_matches_engine("mlp-infer.yaml", NULL);    /* forward only, one slot */
    /* zero bubble: the slots keep the W stashes (plan priced them without, before) */
    check_plan_matches_engine("residual-mlp.yaml", "zb-h1");
    check_plan_matches_engine("cnn.yaml", "zb-h1");
}

/* A measurement that is not finite is written as JSON null, never bare NaN (and loading such a
 * file is refused naming the field). Before, jansson refused the NaN and the save failed as "out
 * of memory". */
static void test_nonfinite_measurement_saved_as_null(void)
{
    bt_graph *g = lopsided_graph();
    bt_profile *p = measure(g, "cpu:0", 1);
    char path[256];
    tmp_path("nan.json", path, sizeof path);
    ((bt_profile_time *)bt_profile_time_at(p, 0, 0))->fwd_ms = NAN;
    bt_status st = bt_profile_save(p, path);
    if (st != BT_OK) printf("\n  save: %s\n", bt_last_error());
    CU_ASSERT_FATAL(st == BT_OK);
    char text[1 << 16];
    FILE *f = fopen(path, "r");
    CU_ASSERT_FATAL(f != NULL);
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "\"fwd_ms\": null"));
    CU_ASSERT_PTR_NULL(strstr(text, "nan"));
    CU_ASSERT_PTR_NULL(strstr(text, "NaN"));
    bt_profile *q = NULL;
    CU_ASSERT_NOT_EQUAL(bt_profile_load(path, &q), BT_OK);
    bt_profile_destroy(q);
    remove(path);
    bt_profile_destroy(p);
    bt_graph_destroy(g);
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"profile save/load round trip", test_save_load_round_trip},
        {"links between ranks: file, fit, priced per message", test_links_between_ranks},
        {"corrupt profiles rejected naming the field", test_corrupt_profiles_rejected},
        {"a profile measures at its precision", test_profile_precision},
        {"measurements for a plan take the model's precision", test_plan_measurements_take_precision},
        {"a non-finite measurement is saved as null", test_nonfinite_measurement_saved_as_null},
        {"cut bytes count skip connections", test_cut_bytes_count_skips},
        {"planner balances measured costs", test_planner_balances_measured_costs},
        {"bubble for equal costs is (p-1)/(m+p-1)", test_bubble_for_equal_costs},
        {"memory model, capacity and micro-batch scaling", test_memory_and_scaling},
        {"partition: profile in a plan", test_plan_partition_profile},
        {"partition: profile without costs is an error", test_plan_profile_needs_costs},
        {"plan's stage memory is what the engine allocates", test_plan_memory_is_engine_memory},
        {NULL, NULL}};
    return bt_test_main("profile", cases);
}
