/* baton.h: the umbrella header of baton, a pipeline/model-parallel execution engine. Include this
 * and link with `pkg-config --cflags --libs baton`. Every call returns a bt_status (0 = ok) and
 * writes results through out-parameters; bt_last_error() gives the calling thread's message. */
#ifndef BATON_H
#define BATON_H

#include "baton/args.h"
#include "baton/config.h"
#include "baton/data.h"
#include "baton/engine.h"
#include "baton/generate.h"
#include "baton/graph.h"
#include "baton/model.h"
#include "baton/op.h"
#include "baton/profile.h"
#include "baton/status.h"
#include "baton/tensor.h"
#include "baton/train.h"

#define BATON_VERSION "0.1.0"

#endif
