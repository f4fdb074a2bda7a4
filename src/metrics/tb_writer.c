/* metrics/tb_writer.c: TensorBoard event files through protobuf-c (see tb_writer.h). Each call
 * builds its Event on the stack, packs it into a buffer the writer keeps (grown as needed) and
 * frames it as a TFRecord. Summary values carry SummaryMetadata naming their plugin ("scalars" is
 * implied by simple_value; text names "text"), as TensorBoard's own writers do.
 *
 * Data flow: CLI (run records) -> bt_tb_write_* -> Event -> protobuf-c -> TFRecord -> file. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include "core/error.h"
#include "core/strutil.h"
#include "metrics/tb_event.pb-c.h"
#include "metrics/tb_writer.h"
#include "metrics/tfrecord.h"

struct bt_tb_writer {
    FILE *f;
    char *path;
    uint8_t *buf;     /* packed message */
    size_t cap;
    bt_status failed; /* the first write error, reported again by close */
};

int bt_tb_available(void) { return 1; }

const char *bt_tb_unavailable_reason(void) { return NULL; }

static double wall_time(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

/* mkdir -p: every missing directory along path. */
static bt_status make_dirs(const char *dir)
{
    char *p = bt_strdup(dir);
    if (!p) return bt_error(BT_ERR_NOMEM, "out of memory");
    bt_status st = BT_OK;
    for (char *c = p + 1;; c++) {
        if (*c != '/' && *c != '\0') continue;
        char keep = *c;
        *c = '\0';
        struct stat sb;
        if (mkdir(p, 0777) != 0 && errno != EEXIST) {
            st = bt_error(BT_ERR_IO, "tensorboard: cannot create directory %s: %s", p, strerror(errno));
            break;
        }
        if (stat(p, &sb) != 0 || !S_ISDIR(sb.st_mode)) {
            st = bt_error(BT_ERR_IO, "tensorboard: %s is not a directory", p);
            break;
        }
        *c = keep;
        if (!keep) break;
    }
    free(p);
    return st;
}

/* Packs e and writes it as one record. */
static bt_status write_event(bt_tb_writer *w, const Tensorflow__Event *e)
{
    if (w->failed) return w->failed;
    size_t n = tensorflow__event__get_packed_size(e);
    if (n > w->cap) {
        uint8_t *b = realloc(w->buf, n);
        if (!b) return bt_error(BT_ERR_NOMEM, "tensorboard: out of memory for an event of %zu bytes", n);
        w->buf = b;
        w->cap = n;
    }
    tensorflow__event__pack(e, w->buf);
    bt_status st = bt_tfrecord_write(w->f, w->path, w->buf, n);
    if (st != BT_OK) w->failed = st;
    return st;
}

bt_status bt_tb_writer_open(const char *dir, bt_tb_writer **out)
{
    if (!dir || !*dir || !out) return bt_error(BT_ERR_INVALID_ARG, "bt_tb_writer_open: no directory");
    *out = NULL;
    bt_tb_writer *w = calloc(1, sizeof *w);
    if (!w) return bt_error(BT_ERR_NOMEM, "out of memory");
    bt_status st = make_dirs(dir);
    if (st != BT_OK) goto fail;
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) strcpy(host, "localhost");
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    size_t len = strlen(dir) + strlen(host) + 96;
    if (!(w->path = malloc(len))) {
        st = bt_error(BT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* O_EXCL: a new file, never one another run (or this one, within the same second) writes */
    int fd = -1;
    for (int n = 0; n < 1000 && fd < 0; n++) {
        snprintf(w->path, len, "%s/events.out.tfevents.%010lld.%s.%d.%d", dir, (long long)wall_time(), host,
                 (int)getpid(), n);
        fd = open(w->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd < 0 && errno != EEXIST) break;
    }
    if (fd < 0 || !(w->f = fdopen(fd, "wb"))) {
        st = bt_error(BT_ERR_IO, "tensorboard: cannot create %s: %s", w->path, strerror(errno));
        if (fd >= 0) close(fd);
        goto fail;
    }
    Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
    e.wall_time = wall_time();
    e.what_case = TENSORFLOW__EVENT__WHAT_FILE_VERSION;
    e.file_version = "brain.Event:2";
    if ((st = write_event(w, &e)) != BT_OK || (st = bt_tb_flush(w)) != BT_OK) goto fail;
    *out = w;
    return BT_OK;
fail:
    bt_tb_writer_close(w);
    return st;
}

bt_status bt_tb_write_scalars(bt_tb_writer *w, int64_t step, const bt_tb_scalar *v, int n)
{
    if (!w || (n > 0 && !v) || n < 0) return bt_error(BT_ERR_INVALID_ARG, "bt_tb_write_scalars: bad arguments");
    Tensorflow__Summary__Value *vals = calloc((size_t)(n ? n : 1), sizeof *vals);
    Tensorflow__Summary__Value **ptrs = calloc((size_t)(n ? n : 1), sizeof *ptrs);
    bt_status st = BT_OK;
    if (!vals || !ptrs) {
        st = bt_error(BT_ERR_NOMEM, "out of memory");
        goto done;
    }
    for (int i = 0; i < n; i++) {
        tensorflow__summary__value__init(&vals[i]);
        vals[i].tag = (char *)v[i].tag;
        vals[i].value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_SIMPLE_VALUE;
        vals[i].simple_value = (float)v[i].value;
        ptrs[i] = &vals[i];
    }
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = (size_t)n;
    sum.value = ptrs;
    Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
    e.wall_time = wall_time();
    e.step = step;
    e.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    e.summary = &sum;
    st = write_event(w, &e);
done:
    free(vals);
    free(ptrs);
    return st;
}

bt_status bt_tb_write_text(bt_tb_writer *w, int64_t step, const char *tag, const char *markdown)
{
    if (!w || !tag || !markdown) return bt_error(BT_ERR_INVALID_ARG, "bt_tb_write_text: NULL argument");
    /* a scalar string tensor (shape []), dtype DT_STRING = 7, for the text plugin */
    ProtobufCBinaryData text = {strlen(markdown), (uint8_t *)markdown};
    Tensorflow__TensorShapeProto shape = TENSORFLOW__TENSOR_SHAPE_PROTO__INIT;
    Tensorflow__TensorProto tensor = TENSORFLOW__TENSOR_PROTO__INIT;
    tensor.dtype = 7;
    tensor.tensor_shape = &shape;
    tensor.n_string_val = 1;
    tensor.string_val = &text;
    Tensorflow__SummaryMetadata__PluginData plugin = TENSORFLOW__SUMMARY_METADATA__PLUGIN_DATA__INIT;
    plugin.plugin_name = "text";
    Tensorflow__SummaryMetadata meta = TENSORFLOW__SUMMARY_METADATA__INIT;
    meta.plugin_data = &plugin;
    meta.data_class = 2; /* DATA_CLASS_TENSOR */
    Tensorflow__Summary__Value val = TENSORFLOW__SUMMARY__VALUE__INIT;
    val.tag = (char *)tag;
    val.metadata = &meta;
    val.value_case = TENSORFLOW__SUMMARY__VALUE__VALUE_TENSOR;
    val.tensor = &tensor;
    Tensorflow__Summary__Value *ptr = &val;
    Tensorflow__Summary sum = TENSORFLOW__SUMMARY__INIT;
    sum.n_value = 1;
    sum.value = &ptr;
    Tensorflow__Event e = TENSORFLOW__EVENT__INIT;
    e.wall_time = wall_time();
    e.step = step;
    e.what_case = TENSORFLOW__EVENT__WHAT_SUMMARY;
    e.summary = &sum;
    return write_event(w, &e);
}

bt_status bt_tb_flush(bt_tb_writer *w)
{
    if (!w) return bt_error(BT_ERR_INVALID_ARG, "bt_tb_flush: NULL writer");
    if (w->failed) return w->failed;
    if (fflush(w->f) != 0) {
        w->failed = bt_error(BT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
        return w->failed;
    }
    return BT_OK;
}

const char *bt_tb_writer_path(const bt_tb_writer *w) { return w ? w->path : NULL; }

bt_status bt_tb_writer_close(bt_tb_writer *w)
{
    if (!w) return BT_OK;
    bt_status st = w->failed;
    if (w->f) {
        if (fflush(w->f) != 0 && st == BT_OK) st = bt_error(BT_ERR_IO, "%s: cannot write: %s", w->path, strerror(errno));
        if (fclose(w->f) != 0 && st == BT_OK) st = bt_error(BT_ERR_IO, "%s: cannot close: %s", w->path, strerror(errno));
    }
    free(w->path);
    free(w->buf);
    free(w);
    return st;
}
