/* metrics/tb_writer_stub.c: the TensorBoard writer of a build without protobuf-c (configure did
 * not find libprotobuf-c-dev and protobuf-c-compiler): every entry point says so, nothing is
 * written. The CLI asks bt_tb_available() before a run starts and refuses --tensorboard. */
#include <stddef.h>

#include "core/error.h"
#include "metrics/tb_writer.h"

static const char reason[] = "this baton was built without protobuf-c, which TensorBoard event files need: "
                             "install libprotobuf-c-dev and protobuf-c-compiler (scripts/install-deps.sh) "
                             "and run configure again";

int bt_tb_available(void) { return 0; }

const char *bt_tb_unavailable_reason(void) { return reason; }

bt_status bt_tb_writer_open(const char *dir, bt_tb_writer **out)
{
    if (out) *out = NULL;
    return bt_error(BT_ERR_UNSUPPORTED, "%s", reason);
}

bt_status bt_tb_write_scalars(bt_tb_writer *w, int64_t step, const bt_tb_scalar *v, int n)
{
    return bt_error(BT_ERR_UNSUPPORTED, "%s", reason);
}

bt_status bt_tb_write_text(bt_tb_writer *w, int64_t step, const char *tag, const char *markdown)
{
    return bt_error(BT_ERR_UNSUPPORTED, "%s", reason);
}

bt_status bt_tb_flush(bt_tb_writer *w) { return bt_error(BT_ERR_UNSUPPORTED, "%s", reason); }

const char *bt_tb_writer_path(const bt_tb_writer *w) { return NULL; }

bt_status bt_tb_writer_close(bt_tb_writer *w) { return BT_OK; }
