/* train/lm.h: training a language model on text (data: type text or tokens). The model reads one
 * i32 input of token ids [T] and one i32 input of next-token labels [T] (the loss's second
 * input); each step draws `batch` windows of T + 1 tokens at random offsets of the training split
 * (seeded by the run's seed and the step, so a run is reproducible); evaluation is the mean loss
 * over fixed windows of the validation split (the file named by data.eval, or the last
 * val_fraction of the training file), through the forward-only schedule. Checkpoints go where the
 * trainer's do (every checkpoint_every steps and at the end, keep_last numbered files kept; the
 * directory prepared and locked before step 1), with the vocabulary beside them (vocab.txt, for
 * `baton generate`); opts->stop ends the run after the current step with a checkpoint. A step's
 * windows depend only on the seed and the step, so opts->resume continues exactly: the data
 * position is the step, the weights, optimizer state and step counter come from the checkpoint
 * (a different seed, batch or training split is refused, and so is a text whose vocabulary is not
 * the vocab.txt beside the checkpoint, naming the first entry that differs). The checkpoint
 * directory's vocab.txt is written before step 1 and never replaced by another vocabulary.
 * Reports through the trainer's callback (train/trainer.h) and never prints. */
#ifndef BT_TRAIN_LM_H
#define BT_TRAIN_LM_H

#include "io/columns.h"
#include "io/text.h"
#include "train/trainer.h"

typedef struct bt_lm bt_lm;

/* 1 when the model's data: section is a language-model source (text or tokens). */
int bt_lm_wanted(const bt_model *model);
/* Loads and splits the data, checks it against the model (inputs, vocabulary size); opts->init
 * loads weights (all, or what matches with opts->init_partial), opts->resume a checkpoint to
 * continue from (not both: BT_ERR_INVALID_ARG). */
bt_status bt_lm_create(const bt_model *model, bt_engine *engine, const bt_trainer_opts *opts,
                       bt_lm **out);
void bt_lm_destroy(bt_lm *t);
int64_t bt_lm_total_steps(const bt_lm *t);
/* The step after which opts->stop ended the last bt_lm_run (a checkpoint was written when a
 * directory was given; no evaluation); 0 when it ran to the end. */
int64_t bt_lm_stopped_at(const bt_lm *t);
/* Steps the resumed checkpoint had taken (0 without opts->resume); bt_lm_run takes the rest. */
int64_t bt_lm_first_step(const bt_lm *t);
/* What an opts->init_partial load loaded and skipped, or NULL. */
const bt_weights_report *bt_lm_init_report(const bt_lm *t);
/* vocab.txt for a checkpoint: inside a directory, beside a .safetensors file or an index
 * (malloc'ed; NULL: out of memory). */
char *bt_lm_vocab_path(const char *checkpoint);
/* A vocabulary read from path (vocab.txt) against the model: more entries than the token ids an
 * input of the model takes (embedding's num), or than its logits, is BT_ERR_INVALID_ARG naming
 * path:1 and both numbers. */
bt_status bt_lm_check_vocab_file(const bt_model *model, const bt_vocab *vocab, const char *path);
/* Tokens in the training and validation splits, and the vocabulary size. */
void bt_lm_sizes(const bt_lm *t, int64_t *train_tokens, int64_t *val_tokens, int *vocab);
/* Mean per-token loss over the evaluation windows and how many windows (of T tokens) it took. */
bt_status bt_lm_evaluate(bt_lm *t, double *loss, int64_t *tokens);
bt_status bt_lm_run(bt_lm *t, bt_train_callback cb, void *user);
/* The windows bt_lm_evaluate reads at this batch size, in its order, as columns for spec (the
 * model's two i32 inputs, tokens and labels, in the graph's order; each (count, T), owned):
 * `baton predict --data eval` on a text model reproduces the run's validation loss with them. The
 * vocabulary is rebuilt from data.train, as the run built it. */
bt_status bt_lm_eval_columns(const bt_model *model, int64_t batch, const bt_column *spec, int n_spec,
                             bt_columns *out);

#endif
