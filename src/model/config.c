/* model/config.c: defaults of the run configuration structs (baton/config.h). The loader starts
 * from these before reading a file's parallel:, train: and data: sections; C callers start from
 * them too. The defaults here are the ones docs/model-format.md lists. */
#include <string.h>

#include "baton/config.h"

void bt_parallel_config_init(bt_parallel_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->devices = "auto";
    cfg->stages = 0;
    cfg->microbatches = 1;
    cfg->schedule = BT_SCHEDULE_1F1B;
    cfg->virtual_stages = 1;
    cfg->partition = BT_PARTITION_PARAMS;
    cfg->n_balance = 0;
    cfg->layout = NULL;
}

void bt_train_config_init(bt_train_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->enabled = 0;
    cfg->batch = 32;
    cfg->epochs = 1;
    cfg->steps = 0;
    cfg->optimizer.kind = BT_OPT_ADAMW;
    cfg->optimizer.lr = 1e-3;
    cfg->optimizer.weight_decay = 0.01;
    cfg->optimizer.momentum = 0.0;
    cfg->optimizer.nesterov = 0;
    cfg->optimizer.beta1 = 0.9;
    cfg->optimizer.beta2 = 0.999;
    cfg->optimizer.eps = 1e-8;
    cfg->lr_schedule.kind = BT_LR_CONSTANT;
    cfg->lr_schedule.warmup_steps = 0;
    cfg->lr_schedule.step_size = 0;
    cfg->lr_schedule.gamma = 0.1;
    cfg->lr_schedule.min_lr = 0.0;
    cfg->clip_norm = 0.0;
    cfg->precision = BT_F32;
    cfg->eval_every = 0;
    cfg->checkpoint_every = 0;
    cfg->checkpoint_dir = NULL;
    cfg->checkpoint_keep_last = 1;
    cfg->tensorboard = NULL;
}

void bt_data_config_init(bt_data_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->train.kind = BT_DATA_NONE;
    cfg->train.shuffle = 1;
    cfg->eval.kind = BT_DATA_NONE;
    cfg->eval.shuffle = 0;
}

const char *bt_schedule_name(bt_schedule_kind kind)
{
    switch (kind) {
    case BT_SCHEDULE_GPIPE: return "gpipe";
    case BT_SCHEDULE_1F1B: return "1f1b";
    case BT_SCHEDULE_STREAM: return "stream";
    case BT_SCHEDULE_INTERLEAVED_1F1B: return "interleaved-1f1b";
    case BT_SCHEDULE_ZB_H1: return "zb-h1";
    case BT_SCHEDULE_ZBV: return "zbv";
    }
    return "unknown";
}
