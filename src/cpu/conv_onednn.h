/* cpu/conv_onednn.h: conv2d on the CPU through oneDNN's convolution primitives, and the choice,
 * per layer shape, between them and baton's own im2col + GEMM kernels (ops/conv_tmpl.h).
 *
 * The choice: BATON_CPU_CONV = auto (default) | onednn | im2col. Under auto the first conv2d call
 * of each shape and pass (config, micro-batch, precision, threads; the forward, or the backward
 * with the gradients it computes) times that pass on both paths with its real inputs and weights
 * (the caller's timing function, bt_conv_time_fn) and keeps the faster for the rest of the
 * process: a first layer, whose backward computes no input gradient, is timed without one. The
 * choices are
 * listed by bt_conv_choices (`baton run` and `baton profile` print them). Forced modes are
 * deterministic; auto's choice depends on timing, and the two paths sum in different orders, so
 * results then differ between processes by float rounding (force a path for bit-identical
 * reruns; `baton run --resume` preloads the choices the checkpoint's run made, written beside it
 * by cli/run_conv_record.c, through bt_conv_choices_preload). f64 always uses im2col.
 *
 * The oneDNN path (conv_onednn.c): NCHW f32 tensors as baton lays them out, copied to and from
 * the layouts oneDNN's primitives prefer (blocked nChw16c, by cpu/blocked16.c on AVX-512, and the
 * like, by oneDNN's reorders); under `precision: bf16`
 * with a native bf16 path (bt_cpu_bf16_native) the operands are bf16 (the f32 values mixed
 * precision already rounded, converted exactly) with f32 accumulation, f32 gradients and a bf16
 * forward output (see bt_conv_onednn_forward); otherwise the forward rounds its f32 output to the
 * precision (bf16 and f16) as it copies it out. Backward adds into the gradients. Primitives are cached per
 * thread by shape; every call runs on `threads` OpenMP threads of the calling thread. Data flow:
 * ops/conv.c -> here -> oneDNN. */
#ifndef BT_CPU_CONV_ONEDNN_H
#define BT_CPU_CONV_ONEDNN_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "baton/tensor.h"
#include "ops/op_configs.h"

enum { BT_CONV_IM2COL = 0, BT_CONV_ONEDNN = 1, BT_CONV_PATHS = 2 };
/* A pass: the forward, or a backward computing these gradients (or'ed). */
enum { BT_CONV_FORWARD = 0, BT_CONV_GRAD_INPUT = 1, BT_CONV_GRAD_WEIGHTS = 2 };

/* Reads BATON_CPU_CONV once per process: BT_ERR_INVALID_ARG for an unknown value or onednn in a
 * build without oneDNN. The CPU backend calls it when a device opens. */
bt_status bt_cpu_conv_init(void);
/* "conv2d: im2col or oneDNN, the faster per layer (measured at its first call)", or the forced
 * path, or the error. */
const char *bt_cpu_conv_describe(void);
/* 1 when this build has the oneDNN path. */
int bt_cpu_conv_onednn_available(void);
/* Tests: force a path for the process (BT_CONV_IM2COL, BT_CONV_ONEDNN; -1: auto), overriding
 * BATON_CPU_CONV; -2 goes back to the environment's choice. */
void bt_cpu_conv_force(int path);
/* The path every conv2d takes whatever the table says (BATON_CPU_CONV=onednn|im2col, or a test's
 * bt_cpu_conv_force), or -1 under auto (and when BATON_CPU_CONV is invalid: bt_cpu_conv_init says). */
int bt_cpu_conv_forced(void);

/* One run of a conv2d call of the shape being chosen for on `path`: *ms, its time in
 * milliseconds, or a status (the oneDNN path failing takes it out of the choice). */
typedef bt_status (*bt_conv_time_fn)(void *ctx, int path, double *ms);

typedef struct bt_conv_choice {
    bt_conv_config cfg;        /* act and pointwise as the first call had them (not compared) */
    int64_t batch;             /* samples per call (the micro-batch) */
    bt_dtype precision;        /* BT_F32 or BT_BF16 */
    int threads;
    int pass;                  /* BT_CONV_FORWARD, or the backward's BT_CONV_GRAD_* */
    int path;                  /* BT_CONV_IM2COL or BT_CONV_ONEDNN */
    int forced;                /* 1: BATON_CPU_CONV (or a test) chose, nothing was timed */
    int recorded;              /* 1: preloaded from a checkpoint's record, not timed */
    int used;                  /* recorded: 1 once a call of its shape has taken it */
    int test_picked;           /* 1: timed, then replaced by BATON_CPU_CONV_TEST_PICK */
    double ms[BT_CONV_PATHS];  /* fastest of the timed runs per path; < 0: not timed */
    char note[200];            /* why oneDNN was not timed, or "" */
} bt_conv_choice;

/* The path a conv2d call of pass `pass` takes: the forced one, else the one chosen for its shape
 * and pass, else chosen now by timing each path with time(ctx, path, ...) (one warm-up, then 5 runs alternating between
 * the paths, the fastest of each; measurements are serialised process-wide). Thread-safe. */
bt_status bt_conv_choose(const bt_conv_config *cf, int64_t batch, bt_dtype precision, int threads,
                         int pass, bt_conv_time_fn time, void *ctx, int *path);
/* Copies up to max choices made so far into out (oldest first); returns how many there are. */
int bt_conv_choices(bt_conv_choice *out, int max);
/* Puts n choices recorded by an earlier process (cfg's shape fields, batch, precision, threads,
 * pass, path; the rest is ignored) into the table as `recorded`, before any call: a call of such
 * a shape and pass takes the recorded path and times nothing. A shape already in the table keeps
 * its choice (the first record of a shape wins). The caller checks that each path can run here.
 * Returns how many were added. Thread-safe. */
int bt_conv_choices_preload(const bt_conv_choice *c, int n);
/* Forgets every choice (tests). */
void bt_conv_choices_reset(void);
/* "[1, 28, 28] -> [32, 28, 28] k3x3 s1x1 p1x1, 32 samples, f32, 1 thread, forward: onednn
 * (0.41 ms; im2col 0.80 ms)". */
void bt_conv_choice_format(const bt_conv_choice *c, char *buf, size_t size);

/* y (B, out, Ho, Wo) = conv(x (B, C, H, W), w (out, C, kh, kw)) + b (out; NULL: none), then relu
 * where cf->act says so. precision BT_BF16 with a native bf16 path: bf16 operands, and y is
 * written by the primitive as bf16 (rounded to nearest even from the f32 sums, subnormal results
 * flushed to zero, as oneDNN's bf16 kernels read subnormal operands as zero) then widened. Under
 * BT_BF16 (without it) and BT_F16 y is rounded to that precision (bt_round_array), as the
 * executor would: y holds values of the precision either way. */
bt_status bt_conv_onednn_forward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                 int threads, const float *x, const float *w, const float *b,
                                 float *y);
/* From dy (B, out, Ho, Wo) as given (a fused relu's mask already applied): dx += , dw +=, db +=
 * (each NULL: not wanted). */
bt_status bt_conv_onednn_backward(const bt_conv_config *cf, int64_t batch, bt_dtype precision,
                                  int threads, const float *x, const float *w, const float *dy,
                                  float *dx, float *dw, float *db);

/* The largest thread count a oneDNN convolution has run with since the last reset (tests);
 * reset: 1 clears. */
int bt_conv_onednn_threads_seen(int reset);

#endif
