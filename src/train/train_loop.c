/* train/train_loop.c: the loop both training loops share (see train_loop.h): steps, the stop
 * agreement, evaluations and checkpoints. Moved out of trainer.c when the language-model loop
 * (lm.c) came to need the same checkpoints across processes (zero's gathered state, the finite
 * check every owner runs, the agreement) instead of its own simpler copy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "core/util.h"
#include "graph/graph_internal.h"
#include "train/checkpoint.h"
#include "train/train_loop.h"

bt_status bt_train_check_opts(const bt_trainer_opts *o)
{
    if (o->resume && o->init)
        return bt_error(BT_ERR_INVALID_ARG,
                        "resuming (%s) and initialising from weights (%s) at once: a resumed run takes its weights "
                        "from the checkpoint; give one of them", o->resume, o->init);
    if (o->init_partial && !o->init)
        return bt_error(BT_ERR_INVALID_ARG, "a partial weight load was asked for without weights to load");
    if (o->checkpoint_every > 0 && !o->checkpoint_dir)
        return bt_error(BT_ERR_INVALID_ARG,
                        "checkpoints every %lld steps were asked for, but no checkpoint directory was given "
                        "(--checkpoint-dir DIR or train.checkpoint_dir), so none would be written",
                        (long long)o->checkpoint_every);
    if (o->checkpoint_shards && !o->checkpoint_dir)
        return bt_error(BT_ERR_INVALID_ARG, "sharded checkpoints were asked for, but no checkpoint directory was given "
                        "(--checkpoint-dir DIR or train.checkpoint_dir), so none would be written");
    if (o->keep_last < -1)
        return bt_error(BT_ERR_INVALID_ARG, "keep_last is %d: at least 1, or -1 to keep every checkpoint", o->keep_last);
    return BT_OK;
}

/* 1 if every element of x (n of the engine's dtype) is finite. */
static int all_finite(const void *x, size_t n, bt_dtype dtype)
{
    for (size_t i = 0; i < n; i++)
        if (dtype == BT_F64 ? !isfinite(((const double *)x)[i]) : !isfinite(((const float *)x)[i])) return 0;
    return 1;
}

/* A checkpoint must never hold a diverged state: every weight and optimizer buffer must be finite.
 * The gradients were checked before the update (the engine stops on a non-finite norm), but an
 * update can still overflow (a learning rate far too large). Names the first tensor that is not. */
static bt_status check_state_finite(bt_train_loop *l, int64_t step)
{
    const bt_graph *g = l->model->graph;
    bt_dtype dtype = bt_engine_dtype(l->engine);
    int slots = bt_engine_optimizer_slots(l->engine);
    bt_status st = BT_OK;
    void *buf = NULL;
    for (int i = 0; i < bt_graph_num_params(g) && st == BT_OK; i++) {
        bt_param_info info;
        BT_TRY_GOTO(st, bt_graph_param(g, i, &info), done);
        size_t n = (size_t)bt_shape_numel(&info.shape), bytes = n * bt_dtype_size(dtype);
        void *grown = realloc(buf, bytes ? bytes : 1);
        if (!grown) {
            st = bt_error(BT_ERR_NOMEM, "trainer: out of memory");
            goto done;
        }
        buf = grown;
        int stage;
        BT_TRY_GOTO(st, bt_engine_param_stage(l->engine, info.name, &stage), done);
        if (!bt_engine_owns_stage(l->engine, stage)) continue; /* its owner checks it */
        for (int slot = -1; slot < slots; slot++) {
            if (slot < 0) BT_TRY_GOTO(st, bt_engine_read_param(l->engine, info.name, buf, bytes), done);
            else BT_TRY_GOTO(st, bt_engine_read_state(l->engine, info.name, slot, buf, bytes), done);
            if (all_finite(buf, n, dtype)) continue;
            char what[160];
            if (slot < 0) snprintf(what, sizeof what, "the weights of '%s'", info.name);
            else snprintf(what, sizeof what, "the optimizer's %s of '%s'",
                          bt_engine_optimizer_slot_name(l->engine, slot), info.name);
            char kept[96] = "";
            if (l->saved_step >= 0) snprintf(kept, sizeof kept, " (it keeps step %lld)", (long long)l->saved_step);
            st = bt_error(BT_ERR_NUMERIC,
                          "step %lld: %s are not finite after the update: the training diverged (lower the "
                          "learning rate); the checkpoint in %s was not written%s",
                          (long long)step, what, l->opts->checkpoint_dir, kept);
            goto done;
        }
    }
done:
    free(buf);
    return st;
}

/* A checkpoint save of step that failed (a full disk): the message says, with the cause, whether
 * the step's checkpoint was lost (its file is written atomically, so it exists only when whole)
 * and then which step the directory still holds, the last good one; or that it was written and
 * what failed after it (pointing checkpoint.safetensors at it, pruning). */
static bt_status lost_checkpoint(const bt_train_loop *l, bt_status st, int64_t step, int sharded)
{
    const char *dir = l->opts->checkpoint_dir;
    char *file = sharded ? bt_checkpoint_index_path(dir, step) : bt_checkpoint_numbered_path(dir, step);
    struct stat sb;
    int written = file && stat(file, &sb) == 0;
    free(file);
    if (written)
        return bt_error(st, "step %lld: the checkpoint of step %lld was written, but then: %s", (long long)step,
                        (long long)step, bt_last_error());
    if (l->saved_step >= 0)
        return bt_error(st, "step %lld: the checkpoint of step %lld was not written (%s); %s keeps step %lld, the last "
                        "good checkpoint", (long long)step, (long long)step, bt_last_error(), dir,
                        (long long)l->saved_step);
    return bt_error(st, "step %lld: the checkpoint of step %lld was not written (%s); this run wrote none before it, "
                    "so %s holds only what it held before the run", (long long)step, (long long)step, bt_last_error(),
                    dir);
}

static bt_status save(bt_train_loop *l, int64_t step, bt_train_callback cb, void *user)
{
    /* across processes every rank takes part: each stage's owner checks and writes its own tensors
     * (train/checkpoint_shards.c); with parallel.zero the state is gathered first */
    const bt_trainer_opts *o = l->opts;
    bt_status st = bt_engine_gather_state(l->engine);
    if (st == BT_OK) st = check_state_finite(l, step);
    BT_TRY(bt_engine_agree(l->engine, st, 0));
    bt_checkpoint_meta meta;
    memset(&meta, 0, sizeof meta);
    meta.step = bt_engine_step(l->engine); /* optimizer steps: fewer where f16 skipped some */
    meta.epoch = step / l->per_epoch;
    meta.batch_index = step % l->per_epoch;
    meta.batches_per_epoch = l->per_epoch;
    meta.batch = bt_engine_batch(l->engine);
    meta.seed = o->seed;
    snprintf(meta.model, sizeof meta.model, "%s", l->model->name ? l->model->name : "");
    int keep = o->keep_last == 0 ? 1 : o->keep_last;
    int sharded = o->checkpoint_shards || bt_engine_ranks(l->engine) > 1;
    st = bt_checkpoint_save_kept(l->engine, l->model->graph, o->checkpoint_dir, &meta, keep, sharded);
    if (st != BT_OK) return lost_checkpoint(l, st, step, sharded);
    l->saved_step = step;
    if (l->saved) BT_TRY(l->saved(l->src, step));
    if (bt_engine_rank(l->engine) != 0) return BT_OK; /* rank 0 reports */
    char *file = sharded ? bt_checkpoint_index_path(o->checkpoint_dir, step)
                         : bt_checkpoint_numbered_path(o->checkpoint_dir, step);
    if (cb) {
        bt_train_event ev = {.kind = BT_EV_CHECKPOINT, .step = step, .total_steps = l->total_steps,
                             .path = file ? file : o->checkpoint_dir};
        cb(&ev, user);
    }
    free(file);
    return BT_OK;
}

static bt_status eval_event(bt_train_loop *l, int64_t step, bt_train_callback cb, void *user)
{
    bt_train_event ev = {.kind = BT_EV_EVAL, .step = step, .total_steps = l->total_steps, .on_train = l->on_train,
                         .accuracy = NAN};
    double t0 = bt_now_ms();
    BT_TRY(l->evaluate(l->src, &ev));
    ev.eval_ms = bt_now_ms() - t0;
    if (cb) cb(&ev, user);
    if (!isfinite(ev.loss))
        return bt_error(BT_ERR_NUMERIC, "step %lld: the eval loss is %s: the weights have diverged; stopping "
                        "without a checkpoint", (long long)step, isnan(ev.loss) ? "NaN" : "infinite");
    return BT_OK;
}

bt_status bt_train_loop_run(bt_train_loop *l, bt_train_callback cb, void *user)
{
    const bt_trainer_opts *o = l->opts;
    l->stopped_at = 0;
    if (l->first_step >= l->total_steps) return BT_OK; /* a resumed run already at its end */
    for (int64_t step = l->first_step; step < l->total_steps; step++) {
        bt_feed feeds[BT_DATA_MAX_INPUTS];
        int nf = 0, local = 0;
        bt_step_result r;
        BT_TRY(l->feeds(l->src, step, feeds, &nf, &local));
        /* every step says it: an evaluation may have changed it */
        bt_status st = bt_engine_set_local_feeds(l->engine, local);
        if (st == BT_OK) st = bt_engine_train_step(l->engine, feeds, nf, &r);
        if (l->release) l->release(l->src);
        if (st == BT_ERR_NUMERIC) return st; /* the engine's message names the step */
        if (st != BT_OK) return bt_error_context(st, "step %lld", (long long)step + 1);
        if (!isfinite(r.loss))
            return bt_error(BT_ERR_NUMERIC, "step %lld: the loss is %s; stopping (try a lower learning rate)",
                            (long long)step + 1, isnan(r.loss) ? "NaN" : "infinite");
        if (cb) {
            bt_train_event ev = {.kind = BT_EV_STEP, .step = step + 1, .total_steps = l->total_steps,
                                 .epoch = step / l->per_epoch, .result = &r};
            cb(&ev, user);
        }
        int stop = 0; /* across processes every rank stops after the same step */
        if (o->stop) BT_TRY(bt_engine_agree_stop(l->engine, *o->stop != 0, &stop));
        if (stop && step + 1 < l->total_steps) {
            /* stopped from outside (a signal): keep the step just done, skip the evaluation */
            l->stopped_at = step + 1;
            if (o->checkpoint_dir) BT_TRY(save(l, step + 1, cb, user));
            return BT_OK;
        }
        int last = step + 1 == l->total_steps;
        if (o->eval_every > 0 && (step + 1) % o->eval_every == 0 && !last) BT_TRY(eval_event(l, step + 1, cb, user));
        if (o->checkpoint_dir && o->checkpoint_every > 0 && (step + 1) % o->checkpoint_every == 0 && !last)
            BT_TRY(save(l, step + 1, cb, user));
    }
    if (o->eval_every >= 0) BT_TRY(eval_event(l, l->total_steps, cb, user));
    if (o->checkpoint_dir) BT_TRY(save(l, l->total_steps, cb, user));
    return BT_OK;
}
