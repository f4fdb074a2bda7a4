/* tests/test_safetensors.c: the safetensors writer and reader (src/io/safetensors.h).
 * Fixtures are written at run time into a mkdtemp directory: files built byte by byte in the test
 * (header JSON typed out by hand, little-endian data spelled as bytes), corrupt variants of them,
 * and files from baton's own writer. The crash test forks a child that dies mid-write through the
 * crash hook (tests/bt_test.h) and checks the previous checkpoint survives. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define BT_TEST_ATOMIC_HOOKS
#define BT_TEST_TMPDIR
#include "bt_test.h"
#include "io/atomic_file.h"
#include "core/error.h"
#include "io/safetensors.h"

/* ---- fixtures ---- */

/* Number of entries in tmpdir whose name starts with prefix. */
static int count_prefix(const char *prefix)
{
    DIR *d = opendir(tmpdir);
    int n = 0;
    struct dirent *e;
    if (!d) return -1;
    while ((e = readdir(d)))
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

static long file_size(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 ? (long)sb.st_size : -1;
}

static unsigned char *slurp(const char *path, long *size)
{
    FILE *fp = fopen(path, "rb");
    if (!fp) return NULL;
    fseek(fp, 0, SEEK_END);
    *size = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    unsigned char *buf = malloc((size_t)*size + 1);
    if (buf && fread(buf, 1, (size_t)*size, fp) != (size_t)*size) {
        free(buf);
        buf = NULL;
    }
    fclose(fp);
    return buf;
}

/* Writes a safetensors-shaped file by hand: declared_len as the u64 LE length (or, if negative,
 * the padded length of header), header padded with spaces to a multiple of 8 when pad is set,
 * then data_len bytes of data. */
static void write_raw(const char *path, long long declared_len, const char *header, int pad,
                      const unsigned char *data, size_t data_len)
{
    size_t n = strlen(header);
    size_t padded = pad ? (n + 7) / 8 * 8 : n;
    unsigned long long len = declared_len < 0 ? (unsigned long long)padded
                                              : (unsigned long long)declared_len;
    unsigned char le[8];
    for (int i = 0; i < 8; i++) le[i] = (unsigned char)(len >> (8 * i));
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite(le, 1, 8, fp);
    fwrite(header, 1, n, fp);
    for (size_t i = n; i < padded; i++) fputc(' ', fp);
    if (data_len) fwrite(data, 1, data_len, fp);
    fclose(fp);
}

static bt_shape shape1(int64_t a)
{
    bt_shape s = {1, {a}};
    return s;
}

static bt_shape shape2(int64_t a, int64_t b)
{
    bt_shape s = {2, {a, b}};
    return s;
}

/* ---- round trip ---- */

static void test_round_trip(void)
{
    char path[512];
    make_tmpdir();
    tmp_path("model.safetensors", path, sizeof path);

    float w[2][3] = {{1.5f, -2.25f, 3.0f}, {0.0f, 1e-7f, -1e30f}};
    double b[4] = {0.1, -0.2, 1e300, -0.0};
    int32_t steps[1] = {123456789};
    int32_t counts[2][2][2] = {{{1, -2}, {3, -4}}, {{5, -6}, {7, 2147483647}}};
    float scalar = 42.0f;
    bt_shape s_w = shape2(2, 3), s_b = shape1(4), s_steps = shape1(1);
    bt_shape s_counts = {3, {2, 2, 2}}, s_scalar = {0, {0}}, s_empty = shape2(0, 5);

    bt_st_writer *wr = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_writer_create(&wr), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "fc1.weight", BT_F32, &s_w, w), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "fc1.bias", BT_F64, &s_b, b), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "step", BT_I32, &s_steps, steps), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "counts", BT_I32, &s_counts, counts), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "scale", BT_F32, &s_scalar, &scalar), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "empty", BT_F32, &s_empty, NULL), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add_metadata(wr, "format", "pt"), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add_metadata(wr, "baton.step", "17"), BT_OK);
    /* Misuse is refused with a message. */
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "step", BT_I32, &s_steps, steps), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "'step' added twice"));
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "__metadata__", BT_I32, &s_steps, steps),
                    BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_st_writer_add_metadata(wr, "format", "again"), BT_ERR_INVALID_ARG);
    bt_shape negative = shape1(-1);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "neg", BT_F32, &negative, w), BT_ERR_INVALID_ARG);
    CU_ASSERT_EQUAL(bt_st_writer_write(wr, path), BT_OK);
    bt_st_writer_destroy(wr);

    /* The file's framing, checked on the raw bytes. */
    long size = 0;
    unsigned char *raw = slurp(path, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    unsigned long long n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | raw[i];
    CU_ASSERT_EQUAL(n % 8, 0);
    CU_ASSERT_EQUAL(raw[8], '{');
    size_t data_bytes = sizeof w + sizeof b + sizeof steps + sizeof counts + sizeof scalar;
    CU_ASSERT_EQUAL((unsigned long long)size, 8 + n + data_bytes);
    /* Data laid out in the order added: fc1.weight first, right after the header. */
    CU_ASSERT_EQUAL(memcmp(raw + 8 + n, w, sizeof w), 0);
    CU_ASSERT_EQUAL(memcmp(raw + 8 + n + sizeof w, b, sizeof b), 0);
    free(raw);
    CU_ASSERT_EQUAL(count_prefix("model.safetensors.tmp"), 0);

    bt_st_file *f = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    CU_ASSERT_EQUAL(bt_st_count(f), 6);
    CU_ASSERT_STRING_EQUAL(bt_st_at(f, 0)->name, "fc1.weight");
    CU_ASSERT_STRING_EQUAL(bt_st_at(f, 1)->name, "fc1.bias");
    CU_ASSERT_STRING_EQUAL(bt_st_at(f, 4)->name, "scale");
    CU_ASSERT_PTR_NULL(bt_st_at(f, 6));

    const bt_st_tensor *t = bt_st_find(f, "counts");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->dtype, BT_I32);
    CU_ASSERT_STRING_EQUAL(t->st_dtype, "I32");
    CU_ASSERT_EQUAL(t->shape.ndim, 3);
    CU_ASSERT_EQUAL(t->numel, 8);
    CU_ASSERT_EQUAL(t->nbytes, sizeof counts);
    t = bt_st_find(f, "scale");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->shape.ndim, 0);
    CU_ASSERT_EQUAL(t->numel, 1);
    t = bt_st_find(f, "empty");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->numel, 0);
    CU_ASSERT_EQUAL(t->nbytes, 0);
    CU_ASSERT_PTR_NULL(bt_st_find(f, "nope"));

    float w2[2][3];
    double b2[4];
    int32_t counts2[2][2][2], steps2[1];
    float scalar2 = 0;
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F32, &s_w, w2, sizeof w2), BT_OK);
    CU_ASSERT_EQUAL(memcmp(w, w2, sizeof w), 0);
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.bias", BT_F64, &s_b, b2, sizeof b2), BT_OK);
    CU_ASSERT_EQUAL(memcmp(b, b2, sizeof b), 0);
    CU_ASSERT_EQUAL(bt_st_read(f, "step", BT_I32, NULL, steps2, sizeof steps2), BT_OK);
    CU_ASSERT_EQUAL(steps2[0], 123456789);
    CU_ASSERT_EQUAL(bt_st_read(f, "counts", BT_I32, &s_counts, counts2, sizeof counts2), BT_OK);
    CU_ASSERT_EQUAL(memcmp(counts, counts2, sizeof counts), 0);
    CU_ASSERT_EQUAL(bt_st_read(f, "scale", BT_F32, &s_scalar, &scalar2, sizeof scalar2), BT_OK);
    CU_ASSERT_EQUAL(scalar2, 42.0f);

    /* Typed reads check dtype, shape, size and existence, naming file and tensor. */
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F64, &s_w, w2, sizeof w2), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "tensor 'fc1.weight': dtype F32, expected F64"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), path));
    bt_shape wrong = shape2(3, 2);
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F32, &wrong, w2, sizeof w2), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "shape [2, 3], expected [3, 2]"));
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F32, NULL, w2, sizeof w2 - 4), BT_ERR_IO);
    CU_ASSERT_EQUAL(bt_st_read(f, "fc2.weight", BT_F32, NULL, w2, sizeof w2), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "no tensor 'fc2.weight'"));

    CU_ASSERT_EQUAL(bt_st_metadata_count(f), 2);
    CU_ASSERT_STRING_EQUAL(bt_st_metadata(f, "format"), "pt");
    CU_ASSERT_STRING_EQUAL(bt_st_metadata(f, "baton.step"), "17");
    CU_ASSERT_PTR_NULL(bt_st_metadata(f, "missing"));
    const char *k, *v;
    bt_st_metadata_at(f, 0, &k, &v);
    CU_ASSERT_STRING_EQUAL(k, "baton.step");
    bt_st_close(f);
    bt_st_close(NULL);
    remove_tmpdir();
}

/* A file with no tensors and no metadata is "{}" padded to 8. */
static void test_empty_file(void)
{
    char path[512];
    make_tmpdir();
    tmp_path("empty.safetensors", path, sizeof path);
    bt_st_writer *wr = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_writer_create(&wr), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_write(wr, path), BT_OK);
    bt_st_writer_destroy(wr);
    bt_st_writer_destroy(NULL);
    long size = 0;
    unsigned char *raw = slurp(path, &size);
    CU_ASSERT_PTR_NOT_NULL_FATAL(raw);
    static const unsigned char expect[16] = {8, 0, 0, 0, 0, 0, 0, 0, '{', '}', ' ', ' ',
                                             ' ', ' ', ' ', ' '};
    CU_ASSERT_EQUAL(size, 16);
    CU_ASSERT_EQUAL(memcmp(raw, expect, 16), 0);
    free(raw);
    bt_st_file *f = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    CU_ASSERT_EQUAL(bt_st_count(f), 0);
    CU_ASSERT_EQUAL(bt_st_metadata_count(f), 0);
    CU_ASSERT_PTR_NULL(bt_st_metadata(f, "format"));
    bt_st_close(f);
    remove_tmpdir();
}

/* ---- a file laid out by the upstream rules, by hand ---- */

/* What safetensors.torch.save_file({"fc1.weight": [[1,2,3],[4,5,6]] f32, "fc1.bias": [0.5,-0.5]
 * f32, "step": [7] i32}, metadata={"format": "pt"}) writes: "__metadata__" first, tensors sorted
 * by dtype (F32 before I32) then name, keys dtype/shape/data_offsets, compact JSON, space padding
 * to a multiple of 8, u64 LE length, little-endian data. */
static const char hand_header[] =
    "{\"__metadata__\":{\"format\":\"pt\"},"
    "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
    "\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[8,32]},"
    "\"step\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[32,36]}}";
static const unsigned char hand_data[36] = {
    0x00, 0x00, 0x00, 0x3f, 0x00, 0x00, 0x00, 0xbf, /* 0.5, -0.5 */
    0x00, 0x00, 0x80, 0x3f, 0x00, 0x00, 0x00, 0x40, /* 1, 2 */
    0x00, 0x00, 0x40, 0x40, 0x00, 0x00, 0x80, 0x40, /* 3, 4 */
    0x00, 0x00, 0xa0, 0x40, 0x00, 0x00, 0xc0, 0x40, /* 5, 6 */
    0x07, 0x00, 0x00, 0x00,                         /* 7 */
};

static void test_hand_built_file(void)
{
    char path[512], path2[512];
    make_tmpdir();
    tmp_path("hand.safetensors", path, sizeof path);
    write_raw(path, -1, hand_header, 1, hand_data, sizeof hand_data);
    size_t padded = (strlen(hand_header) + 7) / 8 * 8;
    CU_ASSERT_EQUAL(file_size(path), (long)(8 + padded + sizeof hand_data));

    bt_st_file *f = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    CU_ASSERT_EQUAL(bt_st_count(f), 3);
    CU_ASSERT_STRING_EQUAL(bt_st_metadata(f, "format"), "pt");
    float w[6], bias[2];
    int32_t step[1];
    bt_shape sw = shape2(2, 3), sb = shape1(2), ss = shape1(1);
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F32, &sw, w, sizeof w), BT_OK);
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.bias", BT_F32, &sb, bias, sizeof bias), BT_OK);
    CU_ASSERT_EQUAL(bt_st_read(f, "step", BT_I32, &ss, step, sizeof step), BT_OK);
    for (int i = 0; i < 6; i++) CU_ASSERT_EQUAL(w[i], (float)(i + 1));
    CU_ASSERT_EQUAL(bias[0], 0.5f);
    CU_ASSERT_EQUAL(bias[1], -0.5f);
    CU_ASSERT_EQUAL(step[0], 7);
    const bt_st_tensor *t = bt_st_find(f, "fc1.weight");
    CU_ASSERT_EQUAL(t->offset, 8);
    CU_ASSERT_EQUAL(t->shape.dim[0], 2);
    CU_ASSERT_EQUAL(t->shape.dim[1], 3);
    bt_st_close(f);

    /* baton's writer, given the same tensors in the same order, writes the same bytes. */
    const float bias_v[2] = {0.5f, -0.5f};
    const float w_v[6] = {1, 2, 3, 4, 5, 6};
    const int32_t step_v[1] = {7};
    bt_st_writer *wr = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_writer_create(&wr), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "fc1.bias", BT_F32, &sb, bias_v), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "fc1.weight", BT_F32, &sw, w_v), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add(wr, "step", BT_I32, &ss, step_v), BT_OK);
    CU_ASSERT_EQUAL(bt_st_writer_add_metadata(wr, "format", "pt"), BT_OK);
    tmp_path("baton.safetensors", path2, sizeof path2);
    CU_ASSERT_EQUAL(bt_st_writer_write(wr, path2), BT_OK);
    bt_st_writer_destroy(wr);
    long s1 = 0, s2 = 0;
    unsigned char *a = slurp(path, &s1), *b = slurp(path2, &s2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(a);
    CU_ASSERT_PTR_NOT_NULL_FATAL(b);
    CU_ASSERT_EQUAL(s1, s2);
    CU_ASSERT(s1 == s2 && memcmp(a, b, (size_t)s1) == 0);
    free(a);
    free(b);
    remove_tmpdir();
}

/* ---- corrupt files ---- */

/* Opens path expecting BT_ERR_IO with a message containing each of the substrings. */
static void expect_reject(const char *path, const char *sub1, const char *sub2)
{
    bt_st_file *f = NULL;
    bt_clear_error();
    bt_status st = bt_st_open(path, &f);
    CU_ASSERT_EQUAL(st, BT_ERR_IO);
    CU_ASSERT_PTR_NULL(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), path));
    if (sub1) CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), sub1));
    if (sub2) CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), sub2));
    if ((sub1 && !strstr(bt_last_error(), sub1)) || (sub2 && !strstr(bt_last_error(), sub2)))
        printf("\n    unexpected message: %s\n", bt_last_error());
    bt_st_close(f);
}

static void test_corrupt_files(void)
{
    char path[512];
    unsigned char zeros[64] = {0};
    make_tmpdir();
    tmp_path("bad.safetensors", path, sizeof path);

    /* Shorter than the length field. */
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite("\x10\x00\x00", 1, 3, fp);
    fclose(fp);
    expect_reject(path, "truncated", "less than the 8-byte header length");

    /* Header cut off: the length says more than the file holds. */
    write_raw(path, 4096, hand_header, 1, NULL, 0);
    expect_reject(path, "truncated", "header length 4096 runs past the end");

    /* Data cut off: the last tensor runs past the end. */
    write_raw(path, -1, hand_header, 1, hand_data, sizeof hand_data - 3);
    expect_reject(path, "tensor 'step'", "past the data area");

    /* Header length over the 100,000,000 limit (even before looking at the file size). */
    write_raw(path, 100000001LL, hand_header, 1, hand_data, sizeof hand_data);
    expect_reject(path, "header length 100000001 exceeds the limit", NULL);

    /* Not JSON. */
    write_raw(path, -1, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], ", 1, zeros, 4);
    expect_reject(path, "header JSON", NULL);
    write_raw(path, -1, "[1, 2, 3]", 1, NULL, 0);
    expect_reject(path, "not a JSON object", NULL);

    /* Duplicate key. */
    write_raw(path, -1,
              "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
              "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
              1, zeros, 8);
    expect_reject(path, "header JSON", "duplicate");

    /* Overlap: fc1.bias starts inside fc1.weight. */
    write_raw(path, -1,
              "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
              1, zeros, 12);
    expect_reject(path, "tensor 'fc1.bias'", "overlap tensor 'fc1.weight'");

    /* Hole: 4 bytes nobody owns between the tensors. */
    write_raw(path, -1,
              "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
              "\"fc1.bias\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}",
              1, zeros, 20);
    expect_reject(path, "tensor 'fc1.bias'", "hole");
    /* A hole at the start. */
    write_raw(path, -1, "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 1,
              zeros, 8);
    expect_reject(path, "tensor 'x'", "hole");

    /* Size mismatch: extra bytes after the last tensor. */
    write_raw(path, -1, hand_header, 1, zeros, sizeof hand_data + 4);
    expect_reject(path, "size mismatch", NULL);

    /* Unknown dtype. */
    write_raw(path, -1, "{\"fc1.weight\":{\"dtype\":\"Q7\",\"shape\":[1],\"data_offsets\":[0,4]}}",
              1, zeros, 4);
    expect_reject(path, "tensor 'fc1.weight'", "unknown dtype 'Q7'");

    /* Shape disagrees with the offsets: [3] F32 needs 12 bytes, the offsets span 8. */
    write_raw(path, -1,
              "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 1, zeros,
              8);
    expect_reject(path, "tensor 'fc1.weight'", "span 8 bytes but shape [3] of F32 needs 12");

    /* Negative and non-integer dims, malformed offsets, missing fields. */
    write_raw(path, -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[-1],\"data_offsets\":[0,4]}}", 1,
              zeros, 4);
    expect_reject(path, "tensor 'w'", "shape[0] is not a non-negative integer");
    write_raw(path, -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1.5],\"data_offsets\":[0,4]}}", 1,
              zeros, 4);
    expect_reject(path, "tensor 'w'", "shape[0]");
    write_raw(path, -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,0]}}", 1,
              zeros, 4);
    expect_reject(path, "tensor 'w'", "end before begin");
    write_raw(path, -1, "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0]}}", 1, zeros,
              4);
    expect_reject(path, "tensor 'w'", "data_offsets");
    write_raw(path, -1, "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 1, zeros, 4);
    expect_reject(path, "tensor 'w'", "dtype");
    write_raw(path, -1, "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 1, zeros, 4);
    expect_reject(path, "tensor 'w'", "shape");
    write_raw(path, -1,
              "{\"w\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}", 1,
              zeros, 4);
    expect_reject(path, "tensor 'w'", "7 dims");
    /* Overflowing shape. */
    write_raw(path, -1,
              "{\"w\":{\"dtype\":\"F64\",\"shape\":[4294967296,4294967296],"
              "\"data_offsets\":[0,8]}}",
              1, zeros, 8);
    expect_reject(path, "tensor 'w'", "overflows");

    /* Metadata values must be strings. */
    write_raw(path, -1, "{\"__metadata__\":{\"epoch\":3}}", 1, NULL, 0);
    expect_reject(path, "__metadata__ 'epoch'", "not a string");

    /* Missing file. */
    tmp_path("absent.safetensors", path, sizeof path);
    expect_reject(path, "No such file", NULL);
    remove_tmpdir();
}

/* Dtypes baton cannot compute with are listed (known == 0), not fatal; reading them is. */
static void test_foreign_dtype(void)
{
    char path[512];
    unsigned char data[12] = {1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0x3f};
    make_tmpdir();
    tmp_path("foreign.safetensors", path, sizeof path);
    write_raw(path, -1,
              "{\"bn.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[0,8]},"
              "\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}",
              1, data, sizeof data);
    bt_st_file *f = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    const bt_st_tensor *t = bt_st_find(f, "bn.num_batches_tracked");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL(t->known, 0);
    CU_ASSERT_STRING_EQUAL(t->st_dtype, "I64");
    CU_ASSERT_EQUAL(t->nbytes, 8);
    float one = 0;
    CU_ASSERT_EQUAL(bt_st_read(f, "w", BT_F32, NULL, &one, sizeof one), BT_OK);
    CU_ASSERT_EQUAL(one, 1.0f);
    int32_t x[2];
    CU_ASSERT_EQUAL(bt_st_read(f, "bn.num_batches_tracked", BT_I32, NULL, x, 8), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "dtype I64"));
    bt_st_close(f);
    remove_tmpdir();
}

/* ---- crashes and failures during a write ---- */

static bt_status write_checkpoint(const char *path, const float *w, int64_t n, const char *tag)
{
    bt_st_writer *wr = NULL;
    bt_shape s = shape1(n);
    bt_status st = bt_st_writer_create(&wr);
    if (st == BT_OK) st = bt_st_writer_add(wr, "fc1.weight", BT_F32, &s, w);
    if (st == BT_OK) st = bt_st_writer_add_metadata(wr, "tag", tag);
    if (st == BT_OK) st = bt_st_writer_write(wr, path);
    bt_st_writer_destroy(wr);
    return st;
}

/* The file at path is the v1 checkpoint: tag "v1" and 256 weights equal to their index. */
static void check_v1(const char *path)
{
    bt_st_file *f = NULL;
    float got[256];
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    CU_ASSERT_STRING_EQUAL(bt_st_metadata(f, "tag"), "v1");
    CU_ASSERT_EQUAL(bt_st_read(f, "fc1.weight", BT_F32, NULL, got, sizeof got), BT_OK);
    int same = 1;
    for (int i = 0; i < 256; i++) same &= got[i] == (float)i;
    CU_ASSERT(same);
    bt_st_close(f);
}

static void test_crash_during_write(void)
{
    char path[512];
    float v1[256], v2[4096];
    for (int i = 0; i < 256; i++) v1[i] = (float)i;
    for (int i = 0; i < 4096; i++) v2[i] = -1.0f;
    make_tmpdir();
    tmp_path("ckpt.safetensors", path, sizeof path);
    CU_ASSERT_EQUAL_FATAL(write_checkpoint(path, v1, 256, "v1"), BT_OK);
    check_v1(path);

    /* A child crashes 5000 bytes into writing v2 (header plus part of the data). */
    fflush(NULL);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        bt_test_write_limit = 5000;
        bt_atomic_file_set_test_hook(bt_test_crash_hook);
        write_checkpoint(path, v2, 4096, "v2");
        _exit(0); /* the hook did not fire */
    }
    int status = 0;
    CU_ASSERT_EQUAL(waitpid(pid, &status, 0), pid);
    CU_ASSERT(WIFEXITED(status));
    CU_ASSERT_EQUAL(WEXITSTATUS(status), 3);
    /* The crash left a 5000-byte temporary file beside the checkpoint, which is still v1. */
    CU_ASSERT_EQUAL(count_prefix("ckpt.safetensors.tmp."), 1);
    DIR *d = opendir(tmpdir);
    struct dirent *e;
    char tmp[512];
    while (d && (e = readdir(d)))
        if (strncmp(e->d_name, "ckpt.safetensors.tmp.", 21) == 0) {
            tmp_path(e->d_name, tmp, sizeof tmp);
            CU_ASSERT_EQUAL(file_size(tmp), 5000);
            bt_st_file *partial = NULL;
            CU_ASSERT_EQUAL(bt_st_open(tmp, &partial), BT_ERR_IO);
            unlink(tmp);
        }
    if (d) closedir(d);
    check_v1(path);

    /* A write that fails in-process (a full disk) reports it, removes its temporary file and
     * leaves v1 in place. */
    bt_test_write_limit = 3000;
    bt_atomic_file_set_test_hook(bt_test_fail_hook);
    CU_ASSERT_EQUAL(write_checkpoint(path, v2, 4096, "v2"), BT_ERR_IO);
    bt_atomic_file_set_test_hook(NULL);
    /* the message names the file, not the temporary it removed */
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "ckpt.safetensors: write: "));
    CU_ASSERT_PTR_NULL(strstr(bt_last_error(), ".tmp."));
    CU_ASSERT_EQUAL(count_prefix("ckpt.safetensors.tmp."), 0);
    check_v1(path);

    /* Without the hooks the new checkpoint replaces the old one. */
    CU_ASSERT_EQUAL(write_checkpoint(path, v2, 4096, "v2"), BT_OK);
    bt_st_file *f = NULL;
    CU_ASSERT_EQUAL_FATAL(bt_st_open(path, &f), BT_OK);
    CU_ASSERT_STRING_EQUAL(bt_st_metadata(f, "tag"), "v2");
    CU_ASSERT_EQUAL(bt_st_find(f, "fc1.weight")->numel, 4096);
    bt_st_close(f);
    CU_ASSERT_EQUAL(count_prefix("ckpt.safetensors.tmp."), 0);

    /* A directory that does not exist: an error naming the path, nothing created. */
    char bad[600];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", tmpdir);
    CU_ASSERT_EQUAL(write_checkpoint(bad, v1, 256, "v1"), BT_ERR_IO);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), bad));
    remove_tmpdir();
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"round trip f32/f64/i32 with metadata", test_round_trip},
        {"empty file", test_empty_file},
        {"hand-built file, byte-identical writer", test_hand_built_file},
        {"corrupt files rejected", test_corrupt_files},
        {"foreign dtypes listed, not readable", test_foreign_dtype},
        {"crash during write keeps old file", test_crash_during_write},
        {NULL, NULL},
    };
    return bt_test_main("safetensors", cases);
}
