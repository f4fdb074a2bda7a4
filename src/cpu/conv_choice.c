/* cpu/conv_choice.c: which path conv2d takes on the CPU (cpu/conv_onednn.h): BATON_CPU_CONV, and
 * under auto the per-shape choice, timed once at a shape's first call and kept for the process in
 * a table that `baton run` and `baton profile` list. Timing calls back into the op (ops/conv.c's
 * bt_conv_time_fn) for each path: one warm-up each (oneDNN builds its primitives then), then
 * TIMED_RUNS runs alternating between the paths, the fastest of each kept (on a shared machine the
 * fastest run is the one least disturbed). Measurements are serialised by one mutex, so two stage
 * workers meeting their first conv at once do not time each other's noise; the table has its own
 * lock and is only read on the fast path. A oneDNN failure while timing takes oneDNN out of that
 * shape's choice and says why in the listing; a forced path is recorded (as forced) for the
 * listings too.
 *
 * Choices recorded beside a checkpoint (cli/run_conv_record.c) are preloaded before the first step
 * of a resumed run (bt_conv_choices_preload): a shape found there is taken as recorded, never
 * timed, so the resumed run sums in the order the run that wrote the checkpoint did. For tests,
 * BATON_CPU_CONV_TEST_PICK=onednn|im2col replaces every timed choice by that path (both are still
 * timed and listed), so two processes can be made to choose differently on purpose. Thread-safe. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif
#include "core/error.h"
#include "cpu/conv_onednn.h"
/* ---- which path (BATON_CPU_CONV) --------------------------------------------------------------- */

static pthread_once_t mode_once = PTHREAD_ONCE_INIT;
static int env_path = -1; /* -1: auto */
static char mode_error[200];
static char mode_desc[200];
static atomic_int test_path = -2; /* -2: the environment's */
static int test_pick = -1;        /* BATON_CPU_CONV_TEST_PICK: -1 none */

static void mode_read(void)
{
    const char *pick = getenv("BATON_CPU_CONV_TEST_PICK");
    if (pick && *pick) {
        if (strcmp(pick, "onednn") == 0) test_pick = BT_CONV_ONEDNN;
        else if (strcmp(pick, "im2col") == 0) test_pick = BT_CONV_IM2COL;
        else {
            snprintf(mode_error, sizeof mode_error,
                     "BATON_CPU_CONV_TEST_PICK=%s: expected onednn or im2col (a test knob)", pick);
            return;
        }
    }
    const char *want = getenv("BATON_CPU_CONV");
    if (!want || !*want) want = "auto";
    if (strcmp(want, "auto") == 0) env_path = -1;
    else if (strcmp(want, "onednn") == 0) env_path = BT_CONV_ONEDNN;
    else if (strcmp(want, "im2col") == 0) env_path = BT_CONV_IM2COL;
    else {
        snprintf(mode_error, sizeof mode_error,
                 "BATON_CPU_CONV=%s: expected auto, onednn or im2col", want);
        return;
    }
#ifndef BATON_HAVE_DNNL
    if (test_pick == BT_CONV_ONEDNN) {
        snprintf(mode_error, sizeof mode_error,
                 "BATON_CPU_CONV_TEST_PICK=onednn: this baton was built without oneDNN (libdnnl-dev)");
        return;
    }
    if (env_path == BT_CONV_ONEDNN) {
        snprintf(mode_error, sizeof mode_error,
                 "BATON_CPU_CONV=onednn: this baton was built without oneDNN (libdnnl-dev)");
        return;
    }
    snprintf(mode_desc, sizeof mode_desc,
             "conv2d by im2col + GEMM (this baton was built without oneDNN)");
    return;
#endif
    if (env_path < 0)
        snprintf(mode_desc, sizeof mode_desc,
                 "conv2d by oneDNN or im2col + GEMM, the faster per layer (timed at its first call)");
    else
        snprintf(mode_desc, sizeof mode_desc, "conv2d by %s (forced by BATON_CPU_CONV=%s)",
                 env_path == BT_CONV_ONEDNN ? "oneDNN" : "im2col + GEMM", want);
}

bt_status bt_cpu_conv_init(void)
{
    pthread_once(&mode_once, mode_read);
    /* a setting that cannot be honoured is a usage error (the CLI's exit 2), like a bad flag */
    if (mode_error[0]) return bt_error(BT_ERR_INVALID_ARG, "%s", mode_error);
    return BT_OK;
}

const char *bt_cpu_conv_describe(void)
{
    pthread_once(&mode_once, mode_read);
    return mode_error[0] ? mode_error : mode_desc;
}

int bt_cpu_conv_onednn_available(void)
{
#ifdef BATON_HAVE_DNNL
    return 1;
#else
    return 0;
#endif
}

void bt_cpu_conv_force(int path) { atomic_store(&test_path, path); }

int bt_cpu_conv_forced(void)
{
    const int t = atomic_load(&test_path);
    if (t >= -1) return t;
    pthread_once(&mode_once, mode_read);
    return mode_error[0] ? -1 : env_path;
}

/* ---- the choices, per shape, for the process -------------------------------------------------- */

#define CHOICE_MAX 256
#define TIMED_RUNS 5

static pthread_mutex_t choice_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t measure_mu = PTHREAD_MUTEX_INITIALIZER;
static bt_conv_choice choices[CHOICE_MAX];
static int n_choices;

static int same_shape(const bt_conv_choice *a, const bt_conv_choice *b)
{
    const bt_conv_config *x = &a->cfg, *y = &b->cfg;
    return x->c == y->c && x->h == y->h && x->w == y->w && x->out == y->out && x->ho == y->ho &&
           x->wo == y->wo && x->kh == y->kh && x->kw == y->kw && x->sh == y->sh &&
           x->sw == y->sw && x->ph == y->ph && x->pw == y->pw && x->bias == y->bias &&
           a->batch == b->batch && a->precision == b->precision && a->threads == b->threads &&
           a->pass == b->pass;
}

/* The choice for key's shape, copied into *out; 0 when there is none. A recorded choice found is
 * marked used (the listings show it from then on). */
static int choice_find(const bt_conv_choice *key, bt_conv_choice *out)
{
    int found = 0;
    pthread_mutex_lock(&choice_mu);
    for (int i = 0; i < n_choices && !found; i++)
        if (same_shape(&choices[i], key)) {
            if (choices[i].recorded && !choices[i].forced) choices[i].used = 1;
            *out = choices[i], found = 1;
        }
    pthread_mutex_unlock(&choice_mu);
    return found;
}

/* Records c, in place of an earlier choice for its shape (a forced one, then a timed one). */
static void choice_put(const bt_conv_choice *c)
{
    pthread_mutex_lock(&choice_mu);
    int i = 0;
    while (i < n_choices && !same_shape(&choices[i], c)) i++;
    if (i < n_choices) choices[i] = *c;
    else if (n_choices < CHOICE_MAX) choices[n_choices++] = *c;
    pthread_mutex_unlock(&choice_mu);
}

int bt_conv_choices(bt_conv_choice *out, int max)
{
    pthread_mutex_lock(&choice_mu);
    const int n = n_choices;
    for (int i = 0; i < n && i < max; i++) out[i] = choices[i];
    pthread_mutex_unlock(&choice_mu);
    return n;
}

int bt_conv_choices_preload(const bt_conv_choice *c, int n)
{
    int added = 0;
    pthread_mutex_lock(&choice_mu);
    for (int k = 0; k < n; k++) {
        int i = 0;
        while (i < n_choices && !same_shape(&choices[i], &c[k])) i++;
        if (i < n_choices || n_choices == CHOICE_MAX) continue; /* the first record of a shape wins */
        bt_conv_choice *d = &choices[n_choices++];
        *d = c[k];
        d->forced = 0, d->recorded = 1, d->used = 0, d->test_picked = 0;
        d->ms[0] = d->ms[1] = -1;
        d->note[0] = 0;
        added++;
    }
    pthread_mutex_unlock(&choice_mu);
    return added;
}

void bt_conv_choices_reset(void)
{
    pthread_mutex_lock(&choice_mu);
    n_choices = 0;
    pthread_mutex_unlock(&choice_mu);
}

static const char *path_name(int path) { return path == BT_CONV_ONEDNN ? "onednn" : "im2col"; }

static const char *pass_name(int pass)
{
    switch (pass) {
    case BT_CONV_FORWARD: return "forward";
    case BT_CONV_GRAD_INPUT: return "backward (input gradient)";
    case BT_CONV_GRAD_WEIGHTS: return "backward (weight gradients)";
    default: return "backward";
    }
}

void bt_conv_choice_format(const bt_conv_choice *c, char *buf, size_t size)
{
    const bt_conv_config *f = &c->cfg;
    int n = snprintf(buf, size,
                     "[%lld, %lld, %lld] -> [%lld, %lld, %lld] k%lldx%lld s%lldx%lld p%lldx%lld, "
                     "%lld samples, %s, %d thread%s, %s: %s",
                     (long long)f->c, (long long)f->h, (long long)f->w, (long long)f->out,
                     (long long)f->ho, (long long)f->wo, (long long)f->kh, (long long)f->kw,
                     (long long)f->sh, (long long)f->sw, (long long)f->ph, (long long)f->pw,
                     (long long)c->batch, c->precision == BT_BF16 ? "bf16" : "f32", c->threads,
                     c->threads == 1 ? "" : "s", pass_name(c->pass), path_name(c->path));
    if (n < 0 || (size_t)n >= size) return;
    if (c->forced) {
        snprintf(buf + n, size - (size_t)n, " (forced)");
        return;
    }
    if (c->recorded) {
        snprintf(buf + n, size - (size_t)n, " (from the checkpoint's record, not timed)");
        return;
    }
    const int other = !c->path;
    if (c->ms[other] >= 0)
        snprintf(buf + n, size - (size_t)n, " (%.3f ms; %s %.3f ms%s)", c->ms[c->path],
                 path_name(other), c->ms[other],
                 c->test_picked ? "; picked by BATON_CPU_CONV_TEST_PICK" : "");
    else
        snprintf(buf + n, size - (size_t)n, " (%s)", c->note[0] ? c->note : "the only path");
}

static int forced_path(void)
{
    const int t = atomic_load(&test_path);
    if (t >= -1) return t;
    pthread_once(&mode_once, mode_read);
    return env_path;
}

/* Times both paths for key (measure_mu held) and fills in its choice. */
static bt_status measure(bt_conv_choice *key, bt_conv_time_fn time, void *ctx)
{
    double ms;
    pthread_once(&mode_once, mode_read); /* test_pick (a test's bt_cpu_conv_force skips it) */
    key->ms[BT_CONV_IM2COL] = key->ms[BT_CONV_ONEDNN] = -1;
    bt_status st = time(ctx, BT_CONV_IM2COL, &ms); /* warm-up */
    if (st != BT_OK) return st;
    int onednn = bt_cpu_conv_onednn_available();
    if (!onednn) snprintf(key->note, sizeof key->note, "built without oneDNN");
    if (onednn && time(ctx, BT_CONV_ONEDNN, &ms) != BT_OK) { /* warm-up: builds the primitives */
        snprintf(key->note, sizeof key->note, "oneDNN failed: %s", bt_last_error());
        onednn = 0;
    }
    for (int r = 0; r < TIMED_RUNS; r++)
        for (int i = 0; i < 2; i++) {
            const int path = (r + i) % 2 ? BT_CONV_ONEDNN : BT_CONV_IM2COL; /* alternating */
            if (path == BT_CONV_ONEDNN && !onednn) continue;
            if ((st = time(ctx, path, &ms)) != BT_OK) return st;
            if (key->ms[path] < 0 || ms < key->ms[path]) key->ms[path] = ms;
        }
    key->path = onednn && key->ms[BT_CONV_ONEDNN] < key->ms[BT_CONV_IM2COL] ? BT_CONV_ONEDNN
                                                                          : BT_CONV_IM2COL;
    if (test_pick >= 0 && (test_pick == BT_CONV_IM2COL || onednn)) /* tests: a choice set on purpose */
        key->path = test_pick, key->test_picked = 1;
    return BT_OK;
}

bt_status bt_conv_choose(const bt_conv_config *cf, int64_t batch, bt_dtype precision, int threads,
                         int pass, bt_conv_time_fn time, void *ctx, int *path)
{
    bt_conv_choice key, found;
    memset(&key, 0, sizeof key);
    key.cfg = *cf, key.batch = batch, key.precision = precision, key.threads = threads;
    key.pass = pass;
    const int forced = forced_path();
    if (forced == BT_CONV_ONEDNN && !bt_cpu_conv_onednn_available())
        return bt_error(BT_ERR_UNSUPPORTED,
                        "conv2d on oneDNN: this baton was built without oneDNN (libdnnl-dev)");
    if (forced >= 0) {
        *path = forced;
        if (!choice_find(&key, &found) || !found.forced || found.path != forced) {
            key.path = forced, key.forced = 1; /* recorded once, for the listings */
            key.ms[0] = key.ms[1] = -1;
            choice_put(&key);
        }
        return BT_OK;
    }
    if (choice_find(&key, &found) && !found.forced) {
        *path = found.path;
        return BT_OK;
    }
    pthread_mutex_lock(&measure_mu);
    bt_status st = BT_OK;
    if (choice_find(&key, &found) && !found.forced) {
        *path = found.path;
    } else if ((st = measure(&key, time, ctx)) == BT_OK) {
        *path = key.path;
        choice_put(&key);
    }
    pthread_mutex_unlock(&measure_mu);
    return st;
}
