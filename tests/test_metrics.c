/* tests/test_metrics.c: the TFRecord framing of TensorBoard event files (src/metrics/tfrecord.c)
 * against independent references: CRC-32C check values from RFC 3720 (iSCSI) and the well-known
 * "123456789" vector, and a framed record whose sums TensorBoard's own Python reader computed
 * (tensorboard.compat.tensorflow_stub.pywrap_tensorflow.masked_crc32c). Then the writer: the file
 * it makes is a chain of whole records, each sum right, ending exactly at the end of the file; or,
 * in a build without protobuf-c, every call refuses naming the packages. tests/tensorboard.sh reads
 * real runs' files with TensorBoard itself. */
#include <dirent.h>
#include <string.h>

#define BT_TEST_TMPDIR
#include "bt_test.h"
#include "baton/status.h"
#include "metrics/tb_writer.h"
#include "core/crc32c.h"
#include "metrics/tfrecord.h"

static void test_crc32c_vectors(void)
{
    unsigned char buf[32];
    CU_ASSERT_EQUAL(bt_crc32c(0, "123456789", 9), 0xe3069283u);
    CU_ASSERT_EQUAL(bt_crc32c(0, "", 0), 0u);
    memset(buf, 0, sizeof buf);
    CU_ASSERT_EQUAL(bt_crc32c(0, buf, 32), 0x8a9136aau);
    memset(buf, 0xff, sizeof buf);
    CU_ASSERT_EQUAL(bt_crc32c(0, buf, 32), 0x62a8ab43u);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)i;
    CU_ASSERT_EQUAL(bt_crc32c(0, buf, 32), 0x46dd794eu);
    for (int i = 0; i < 32; i++) buf[i] = (unsigned char)(31 - i);
    CU_ASSERT_EQUAL(bt_crc32c(0, buf, 32), 0x113fdb5cu);
    /* continuing from a partial sum is the same as one pass */
    CU_ASSERT_EQUAL(bt_crc32c(bt_crc32c(0, "1234", 4), "56789", 5), 0xe3069283u);
}

static void test_mask(void)
{
    CU_ASSERT_EQUAL(bt_crc32c_mask(0), 0xa282ead8u);
    /* rotate right 15: the low 15 bits move to the top */
    CU_ASSERT_EQUAL(bt_crc32c_mask(1u << 15), 1u + 0xa282ead8u);
    CU_ASSERT_EQUAL(bt_crc32c_mask(1u), (1u << 17) + 0xa282ead8u);
}

static uint32_t le32(const unsigned char *p) { return p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24; }

static void test_frame(void)
{
    unsigned char header[12], footer[4];
    bt_tfrecord_frame("hello", 5, header, footer);
    static const unsigned char len5[8] = {5, 0, 0, 0, 0, 0, 0, 0};
    CU_ASSERT_EQUAL(memcmp(header, len5, 8), 0);
    CU_ASSERT_EQUAL(le32(header + 8), 0x3e04b2eau); /* TensorBoard's masked_crc32c(length) */
    CU_ASSERT_EQUAL(le32(footer), 0x191c1fbbu);     /* TensorBoard's masked_crc32c(b"hello") */
}

/* The one event file in dir, read whole; its path in path. */
static unsigned char *read_event_file(const char *dir, char *path, size_t size, long *len)
{
    DIR *d = opendir(dir);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, "events.out.tfevents.", 20) == 0) {
            snprintf(path, size, "%s/%s", dir, e->d_name);
            found++;
        }
    closedir(d);
    CU_ASSERT_EQUAL_FATAL(found, 1);
    FILE *f = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fseek(f, 0, SEEK_END);
    *len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)*len + 1);
    CU_ASSERT_EQUAL(fread(b, 1, (size_t)*len, f), (size_t)*len);
    fclose(f);
    return b;
}

static void test_writer(void)
{
    make_tmpdir();
    char dir[300];
    snprintf(dir, sizeof dir, "%s/runs/a", tmpdir); /* parents are created */
    bt_tb_writer *w = NULL;
    bt_status st = bt_tb_writer_open(dir, &w);
    if (!bt_tb_available()) {
        CU_ASSERT_EQUAL(st, BT_ERR_UNSUPPORTED);
        CU_ASSERT_PTR_NULL(w);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "protobuf-c"));
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_tb_unavailable_reason(), "libprotobuf-c-dev"));
        remove_tmpdir();
        return;
    }
    CU_ASSERT_EQUAL_FATAL(st, BT_OK);
    bt_tb_scalar v[2] = {{"train/loss", 2.5}, {"train/lr", 1e-3}};
    CU_ASSERT_EQUAL(bt_tb_write_scalars(w, 1, v, 2), BT_OK);
    CU_ASSERT_EQUAL(bt_tb_write_text(w, 1, "config", "| key | value |\n|---|---|\n| model | mlp |"), BT_OK);
    CU_ASSERT_EQUAL(bt_tb_flush(w), BT_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_tb_writer_path(w), "/runs/a/events.out.tfevents."));
    CU_ASSERT_EQUAL(bt_tb_writer_close(w), BT_OK);

    char path[600];
    long len = 0;
    unsigned char *b = read_event_file(dir, path, sizeof path, &len);
    long pos = 0;
    int records = 0;
    while (pos + 12 <= len) {
        uint64_t n = 0;
        for (int i = 7; i >= 0; i--) n = n << 8 | b[pos + i];
        CU_ASSERT_EQUAL(le32(b + pos + 8), bt_crc32c_mask(bt_crc32c(0, b + pos, 8)));
        CU_ASSERT_FATAL(pos + 12 + (long)n + 4 <= len);
        CU_ASSERT_EQUAL(le32(b + pos + 12 + n), bt_crc32c_mask(bt_crc32c(0, b + pos + 12, n)));
        if (records == 0) /* the first says which format follows */
            CU_ASSERT_PTR_NOT_NULL(memmem(b + pos + 12, n, "brain.Event:2", 13));
        pos += 12 + (long)n + 4;
        records++;
    }
    CU_ASSERT_EQUAL(pos, len);
    CU_ASSERT_EQUAL(records, 3); /* version, scalars, text */
    CU_ASSERT_PTR_NOT_NULL(memmem(b, (size_t)len, "train/loss", 10));
    free(b);
    unlink(path);
    rmdir(dir);
    snprintf(path, sizeof path, "%s/runs", tmpdir);
    rmdir(path);
    remove_tmpdir();
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"crc32c check values", test_crc32c_vectors},
        {"crc32c mask", test_mask},
        {"record frame = TensorBoard's sums", test_frame},
        {"event file: whole records, sums right", test_writer},
        {NULL, NULL},
    };
    return bt_test_main("metrics", cases);
}
