/* metrics/tb_writer.h: TensorBoard event files. A writer owns one file,
 * DIR/events.out.tfevents.<unix time>.<host>.<pid>.<n>, created new (never appended to): a run
 * resumed into the same DIR gets a second file beside the first, which TensorBoard reads as one
 * run, its steps continuing. Every record is an Event (tb_event.proto) framed as a TFRecord
 * (tfrecord.h); the first says "brain.Event:2". Scalars are Summary values with simple_value (a
 * float32), text is a string tensor for TensorBoard's text plugin (markdown).
 *
 * Writes go through stdio; bt_tb_flush hands them to the kernel (the CLI flushes after every step),
 * so a TensorBoard watching DIR shows the curves as the run goes. Built with protobuf-c
 * (tb_writer.c); without it (tb_writer_stub.c) bt_tb_available() is 0 and opening fails with
 * BT_ERR_UNSUPPORTED naming the missing packages. Only one writer per run: see the CLI. */
#ifndef BT_METRICS_TB_WRITER_H
#define BT_METRICS_TB_WRITER_H

#include <stdint.h>

#include "baton/status.h"

typedef struct bt_tb_writer bt_tb_writer;

typedef struct bt_tb_scalar {
    const char *tag;   /* "train/loss", "stage0/busy" */
    double value;      /* stored as float32, as TensorBoard keeps scalars */
} bt_tb_scalar;

/* 1 when this build writes event files (configure found protobuf-c), else 0. */
int bt_tb_available(void);
/* The reason bt_tb_available() is 0 (names the packages), or NULL when it is 1. */
const char *bt_tb_unavailable_reason(void);

/* Creates dir (and its parents) if needed and a new event file in it; *out owns it. */
bt_status bt_tb_writer_open(const char *dir, bt_tb_writer **out);
/* One event at step holding n scalars. */
bt_status bt_tb_write_scalars(bt_tb_writer *w, int64_t step, const bt_tb_scalar *v, int n);
/* One text summary (markdown) under tag at step. */
bt_status bt_tb_write_text(bt_tb_writer *w, int64_t step, const char *tag, const char *markdown);
/* Hands everything written so far to the kernel. */
bt_status bt_tb_flush(bt_tb_writer *w);
/* The event file's path. */
const char *bt_tb_writer_path(const bt_tb_writer *w);
/* Flushes and closes; accepts NULL. Returns the first write error not yet reported. */
bt_status bt_tb_writer_close(bt_tb_writer *w);

#endif
