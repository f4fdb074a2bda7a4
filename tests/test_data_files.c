/* tests/test_data_files.c: IDX and .npy readers, the npy writer and the dataset pair loaders
 * (src/io/idx.h, src/io/npy.h). Fixtures are written at run time into a mkdtemp directory, byte by
 * byte (IDX headers big-endian, npy headers typed out), gzipped through zlib where the case needs
 * it. Two cases use files from outside: the Fashion-MNIST files under
 * /usr/share/datasets/fashion-mnist/ and numpy through /usr/bin/python3; each passes with a
 * printed note when its files or interpreter are absent. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#define BT_TEST_TMPDIR
#include "bt_test.h"
#include "core/error.h"
#include "io/idx.h"
#include "io/npy.h"

static void write_bytes(const char *path, const void *data, size_t n, int gzip)
{
    if (gzip) {
        gzFile gz = gzopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(gz);
        CU_ASSERT_EQUAL(gzwrite(gz, data, (unsigned)n), (int)n);
        gzclose(gz);
    } else {
        FILE *fp = fopen(path, "wb");
        CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
        CU_ASSERT_EQUAL(fwrite(data, 1, n, fp), n);
        fclose(fp);
    }
}

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* An IDX images file of n rows x cols images with pixel (i, r, c) = (i*31 + r*7 + c*3) % 256
 * into buf; returns its size. */
static size_t make_images(unsigned char *buf, uint32_t n, uint32_t rows, uint32_t cols)
{
    put_be32(buf, 0x00000803);
    put_be32(buf + 4, n);
    put_be32(buf + 8, rows);
    put_be32(buf + 12, cols);
    size_t k = 16;
    for (uint32_t i = 0; i < n; i++)
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t c = 0; c < cols; c++)
                buf[k++] = (unsigned char)((i * 31 + r * 7 + c * 3) % 256);
    return k;
}

static size_t make_labels(unsigned char *buf, uint32_t n, const unsigned char *labels)
{
    put_be32(buf, 0x00000801);
    put_be32(buf + 4, n);
    memcpy(buf + 8, labels, n);
    return 8 + n;
}

static void expect_idx_error(const char *path, bt_status want, const char *sub)
{
    bt_idx idx;
    bt_clear_error();
    CU_ASSERT_EQUAL(bt_idx_read(path, &idx), want);
    CU_ASSERT_PTR_NULL(idx.data);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), path));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), sub));
    if (!strstr(bt_last_error(), sub)) printf("\n    unexpected message: %s\n", bt_last_error());
}

/* ---- IDX ---- */

static void test_idx_read(void)
{
    unsigned char buf[4096];
    char plain[512], gz[512];
    make_tmpdir();
    size_t n = make_images(buf, 5, 3, 4);
    CU_ASSERT_EQUAL(n, 16 + 5 * 3 * 4);
    write_bytes(tmp_path("img.idx", plain, sizeof plain), buf, n, 0);
    write_bytes(tmp_path("img.idx.gz", gz, sizeof gz), buf, n, 1);
    const char *paths[2] = {plain, gz};
    for (int k = 0; k < 2; k++) {
        bt_idx idx;
        CU_ASSERT_EQUAL_FATAL(bt_idx_read(paths[k], &idx), BT_OK);
        CU_ASSERT_EQUAL(idx.ndim, 3);
        CU_ASSERT_EQUAL(idx.dim[0], 5);
        CU_ASSERT_EQUAL(idx.dim[1], 3);
        CU_ASSERT_EQUAL(idx.dim[2], 4);
        CU_ASSERT_EQUAL(idx.numel, 60);
        /* Pixel (i=4, r=2, c=3) is (124 + 14 + 9) % 256 = 147, at 4*12 + 2*4 + 3 = 59. */
        CU_ASSERT_EQUAL(idx.data[59], 147);
        CU_ASSERT_EQUAL(memcmp(idx.data, buf + 16, 60), 0);
        bt_idx_free(&idx);
        CU_ASSERT_PTR_NULL(idx.data);
    }
    bt_idx_free(NULL);

    unsigned char lab[3] = {9, 0, 4};
    n = make_labels(buf, 3, lab);
    write_bytes(tmp_path("lab.idx.gz", gz, sizeof gz), buf, n, 1);
    bt_idx idx;
    CU_ASSERT_EQUAL_FATAL(bt_idx_read(gz, &idx), BT_OK);
    CU_ASSERT_EQUAL(idx.ndim, 1);
    CU_ASSERT_EQUAL(idx.dim[0], 3);
    CU_ASSERT_EQUAL(idx.data[0], 9);
    CU_ASSERT_EQUAL(idx.data[2], 4);
    bt_idx_free(&idx);
    remove_tmpdir();
}

static void test_idx_errors(void)
{
    unsigned char buf[4096];
    char path[512];
    make_tmpdir();
    tmp_path("bad.idx.gz", path, sizeof path);

    expect_idx_error(tmp_path("missing.idx.gz", path, sizeof path), BT_ERR_IO, "No such file");
    tmp_path("bad.idx.gz", path, sizeof path);

    size_t n = make_images(buf, 2, 2, 2);
    put_be32(buf, 0x12345678);
    write_bytes(path, buf, n, 1);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "bad magic 0x12345678");

    /* A float IDX file (type 0x0D) is an IDX file baton does not read. */
    make_images(buf, 2, 2, 2);
    put_be32(buf, 0x00000D03);
    write_bytes(path, buf, n, 1);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "element type 0x0d is not supported");

    put_be32(buf, 0x00000800);
    write_bytes(path, buf, n, 1);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "0 dims");

    /* Truncated data: 8 pixels promised, 5 present; and truncated inside the dims. */
    n = make_images(buf, 2, 2, 2);
    write_bytes(path, buf, n - 3, 1);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "truncated: the dims need 8 data bytes, the file has 5");
    write_bytes(path, buf, 10, 0);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "truncated in the dims");
    write_bytes(path, buf, 2, 0);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "truncated");

    /* Trailing bytes. */
    n = make_images(buf, 2, 2, 2);
    buf[n] = 0;
    write_bytes(path, buf, n + 1, 1);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "trailing bytes");

    /* Absurd dims: a zero row count, and 2^32-1 cubed elements (no allocation is attempted). */
    n = make_images(buf, 2, 2, 2);
    put_be32(buf + 8, 0);
    write_bytes(path, buf, n, 0);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "absurd dims");
    put_be32(buf + 4, 0xffffffffu);
    put_be32(buf + 8, 0xffffffffu);
    put_be32(buf + 12, 0xffffffffu);
    write_bytes(path, buf, n, 0);
    expect_idx_error(path, BT_ERR_INVALID_ARG, "absurd dims");

    /* A damaged gzip stream: flip bytes in the deflate data. */
    unsigned char big[16 + 64 * 64];
    n = make_images(big, 1, 64, 64);
    write_bytes(path, big, n, 1);
    FILE *fp = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fseek(fp, 0, SEEK_END);
    long gz_size = ftell(fp);
    fseek(fp, 12, SEEK_SET);
    for (long i = 12; i < gz_size - 8; i++) fputc(0xA5, fp);
    fclose(fp);
    bt_idx idx;
    CU_ASSERT_EQUAL(bt_idx_read(path, &idx), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), path));
    remove_tmpdir();
}

/* bt_idx_read in a child whose address space may grow by at most 128 MiB beyond what it holds:
 * a reader that believes a header's dims fails to allocate instead of failing on the data.
 * Returns the status; msg gets the message. */
static bt_status idx_read_limited(const char *path, char *msg, size_t size)
{
    int fds[2];
    CU_ASSERT_FATAL(pipe(fds) == 0);
    pid_t pid = fork();
    CU_ASSERT_FATAL(pid >= 0);
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(99);
        fclose(f);
        struct rlimit rl = {.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (128u << 20)};
        rl.rlim_max = rl.rlim_cur;
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(99);
        bt_idx idx;
        int st = (int)bt_idx_read(path, &idx);
        if (st == BT_OK) bt_idx_free(&idx);
        char out[1024];
        int n = snprintf(out, sizeof out, "%d %s", st, st == BT_OK ? "" : bt_last_error());
        if (write(fds[1], out, (size_t)n) != n) _exit(99);
        _exit(0);
    }
    close(fds[1]);
    char in[1024];
    ssize_t n = read(fds[0], in, sizeof in - 1);
    close(fds[0]);
    int wst;
    waitpid(pid, &wst, 0);
    CU_ASSERT_FATAL(WIFEXITED(wst) && WEXITSTATUS(wst) == 0 && n > 0);
    in[n > 0 ? n : 0] = '\0';
    int st = atoi(in);
    const char *sp = strchr(in, ' ');
    snprintf(msg, size, "%s", sp ? sp + 1 : "");
    return (bt_status)st;
}

/* A 22-byte file whose header claims 1000 x 2048 x 2048 (4 GB) is refused as truncated, plain or
 * gzipped, without the 4 GB allocation; a gzip file big enough to pass the expansion bound but
 * short of its dims is read into a buffer that grows with the data; a 3 MiB file (the buffer
 * grows past its first MiB) still reads exactly. */
static void test_idx_header_lies(void)
{
    unsigned char head[22] = {0};
    char path[512], msg[1024];
    make_tmpdir();
    put_be32(head, 0x00000803);
    put_be32(head + 4, 1000);
    put_be32(head + 8, 2048);
    put_be32(head + 12, 2048);
    for (int gzip = 0; gzip < 2; gzip++) {
        write_bytes(tmp_path(gzip ? "lie.idx.gz" : "lie.idx", path, sizeof path), head, sizeof head, gzip);
        CU_ASSERT_EQUAL(idx_read_limited(path, msg, sizeof msg), BT_ERR_INVALID_ARG);
        if (!strstr(msg, "truncated")) printf("\n    unexpected message: %s\n", msg);
        CU_ASSERT_PTR_NOT_NULL(strstr(msg, "truncated"));
    }

    /* 256 KiB of incompressible bytes claiming 200 MB: past the 1100:1 bound, short of the dims */
    size_t n = 16 + (256u << 10);
    unsigned char *buf = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    put_be32(buf, 0x00000803);
    put_be32(buf + 4, 200);
    put_be32(buf + 8, 1000);
    put_be32(buf + 12, 1000);
    uint64_t x = 88172645463325252ULL;
    for (size_t i = 16; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
    write_bytes(tmp_path("short.idx.gz", path, sizeof path), buf, n, 1);
    CU_ASSERT_EQUAL(idx_read_limited(path, msg, sizeof msg), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(msg, "truncated: the dims need 200000000 data bytes, the file has 262144"));
    if (!strstr(msg, "the file has 262144")) printf("\n    unexpected message: %s\n", msg);
    free(buf);

    n = 16 + (size_t)3 * 1024 * 1024;
    buf = malloc(n);
    CU_ASSERT_PTR_NOT_NULL_FATAL(buf);
    make_images(buf, 3, 1024, 1024);
    write_bytes(tmp_path("big.idx.gz", path, sizeof path), buf, n, 1);
    bt_idx idx;
    CU_ASSERT_EQUAL_FATAL(bt_idx_read(path, &idx), BT_OK);
    CU_ASSERT_EQUAL(idx.numel, 3 * 1024 * 1024);
    CU_ASSERT_EQUAL(memcmp(idx.data, buf + 16, (size_t)idx.numel), 0);
    bt_idx_free(&idx);
    free(buf);
    remove_tmpdir();
}

static void test_idx_pair(void)
{
    unsigned char buf[4096];
    char img[512], lab[512], lab_bad[512], lab_short[512];
    make_tmpdir();
    size_t n = make_images(buf, 4, 2, 3);
    write_bytes(tmp_path("img.gz", img, sizeof img), buf, n, 1);
    unsigned char labels[4] = {3, 0, 9, 1};
    n = make_labels(buf, 4, labels);
    write_bytes(tmp_path("lab.gz", lab, sizeof lab), buf, n, 1);
    unsigned char labels_bad[4] = {3, 0, 10, 1};
    n = make_labels(buf, 4, labels_bad);
    write_bytes(tmp_path("lab_bad.gz", lab_bad, sizeof lab_bad), buf, n, 0);
    n = make_labels(buf, 3, labels);
    write_bytes(tmp_path("lab_short.gz", lab_short, sizeof lab_short), buf, n, 1);

    bt_dataset ds;
    CU_ASSERT_EQUAL_FATAL(bt_idx_load_pair(img, lab, 10, &ds), BT_OK);
    CU_ASSERT_EQUAL(ds.n, 4);
    CU_ASSERT_EQUAL(ds.n_classes, 10);
    CU_ASSERT_EQUAL(ds.sample_shape.ndim, 2);
    CU_ASSERT_EQUAL(ds.sample_shape.dim[0], 2);
    CU_ASSERT_EQUAL(ds.sample_shape.dim[1], 3);
    CU_ASSERT_EQUAL(ds.sample_numel, 6);
    int exact = 1;
    for (int i = 0; i < 4; i++)
        for (int r = 0; r < 2; r++)
            for (int c = 0; c < 3; c++) {
                double px = (i * 31 + r * 7 + c * 3) % 256;
                exact &= ds.inputs[i * 6 + r * 3 + c] == (float)(px / 255.0);
            }
    CU_ASSERT(exact);
    CU_ASSERT_EQUAL(ds.labels[0], 3);
    CU_ASSERT_EQUAL(ds.labels[2], 9);
    bt_dataset_free(&ds);
    CU_ASSERT_PTR_NULL(ds.inputs);
    bt_dataset_free(NULL);

    CU_ASSERT_EQUAL(bt_idx_load_pair(img, lab_bad, 10, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), lab_bad));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "label 2 is 10, not below n_classes 10"));
    CU_ASSERT_PTR_NULL(ds.inputs);
    /* With 11 classes the same file is fine. */
    CU_ASSERT_EQUAL(bt_idx_load_pair(img, lab_bad, 11, &ds), BT_OK);
    bt_dataset_free(&ds);

    CU_ASSERT_EQUAL(bt_idx_load_pair(img, lab_short, 10, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "has 4 images but"));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "has 3 labels"));

    /* Swapped arguments: the labels file has 1 dim, not an image file. */
    CU_ASSERT_EQUAL(bt_idx_load_pair(lab, img, 10, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "images need at least 2 dims"));
    remove_tmpdir();
}

/* The real Fashion-MNIST files, when the dataset-fashion-mnist package is installed. */
#define FMNIST "/usr/share/datasets/fashion-mnist/"

static void check_fashion_split(const char *images, const char *labels, int64_t n)
{
    bt_dataset ds;
    CU_ASSERT_EQUAL_FATAL(bt_idx_load_pair(images, labels, 10, &ds), BT_OK);
    CU_ASSERT_EQUAL(ds.n, n);
    CU_ASSERT_EQUAL(ds.sample_shape.ndim, 2);
    CU_ASSERT_EQUAL(ds.sample_shape.dim[0], 28);
    CU_ASSERT_EQUAL(ds.sample_shape.dim[1], 28);
    /* Fashion-MNIST is balanced: n/10 of each class. */
    int64_t count[10] = {0};
    for (int64_t i = 0; i < ds.n; i++)
        if (ds.labels[i] >= 0 && ds.labels[i] < 10) count[ds.labels[i]]++;
    for (int c = 0; c < 10; c++) CU_ASSERT_EQUAL(count[c], n / 10);
    float lo = 1, hi = 0;
    double sum = 0;
    for (int64_t i = 0; i < ds.n * 784; i++) {
        if (ds.inputs[i] < lo) lo = ds.inputs[i];
        if (ds.inputs[i] > hi) hi = ds.inputs[i];
        sum += ds.inputs[i];
    }
    CU_ASSERT_EQUAL(lo, 0.0f);
    CU_ASSERT_EQUAL(hi, 1.0f);
    /* The mean pixel of Fashion-MNIST is about 0.286. */
    double mean = sum / (double)(ds.n * 784);
    CU_ASSERT(mean > 0.27 && mean < 0.30);
    bt_dataset_free(&ds);
}

static void test_fashion_mnist(void)
{
    if (access(FMNIST "train-images-idx3-ubyte.gz", R_OK) != 0) {
        printf("\n    note: " FMNIST " absent; Fashion-MNIST check not run ");
        return;
    }
    check_fashion_split(FMNIST "train-images-idx3-ubyte.gz", FMNIST "train-labels-idx1-ubyte.gz",
                        60000);
    check_fashion_split(FMNIST "t10k-images-idx3-ubyte.gz", FMNIST "t10k-labels-idx1-ubyte.gz",
                        10000);
}

/* ---- npy ---- */

/* Writes a .npy file by hand: version major.0, dict text padded with spaces and '\n' to pad
 * alignment, then data. */
static void write_npy_raw(const char *path, int major, const char *dict, const void *data,
                          size_t n)
{
    unsigned char pre[12] = {0x93, 'N', 'U', 'M', 'P', 'Y', (unsigned char)major, 0};
    size_t pre_len = major == 1 ? 10 : 12;
    size_t dict_len = strlen(dict);
    size_t total = (pre_len + dict_len + 1 + 15) / 16 * 16;
    size_t hlen = total - pre_len;
    for (size_t i = 0; i < pre_len - 8; i++) pre[8 + i] = (unsigned char)(hlen >> (8 * i));
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fwrite(pre, 1, pre_len, fp);
    fwrite(dict, 1, dict_len, fp);
    for (size_t i = dict_len; i < hlen - 1; i++) fputc(' ', fp);
    fputc('\n', fp);
    if (n) fwrite(data, 1, n, fp);
    fclose(fp);
}

static void expect_npy_error(const char *path, bt_status want, const char *sub)
{
    bt_npy a;
    bt_clear_error();
    CU_ASSERT_EQUAL(bt_npy_read(path, &a), want);
    CU_ASSERT_PTR_NULL(a.data);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), path));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), sub));
    if (!strstr(bt_last_error(), sub)) printf("\n    unexpected message: %s\n", bt_last_error());
}

static void test_npy_read_hand_built(void)
{
    char path[512];
    make_tmpdir();
    tmp_path("a.npy", path, sizeof path);

    /* v1.0, '<f8', (2, 3): 0.5, -1, 2, 4, 8, 1e300 as little-endian doubles. */
    double d[6] = {0.5, -1, 2, 4, 8, 1e300};
    unsigned char le[48];
    for (int i = 0; i < 6; i++) {
        uint64_t bits;
        memcpy(&bits, &d[i], 8);
        for (int b = 0; b < 8; b++) le[8 * i + b] = (unsigned char)(bits >> (8 * b));
    }
    write_npy_raw(path, 1, "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", le, 48);
    bt_npy a;
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_F8);
    CU_ASSERT_EQUAL(a.ndim, 2);
    CU_ASSERT_EQUAL(a.dim[0], 2);
    CU_ASSERT_EQUAL(a.dim[1], 3);
    CU_ASSERT_EQUAL(a.numel, 6);
    CU_ASSERT_EQUAL(a.nbytes, 48);
    CU_ASSERT_EQUAL(((double *)a.data)[1], -1.0);
    CU_ASSERT_EQUAL(((double *)a.data)[5], 1e300);
    bt_npy_free(&a);

    /* v2.0, keys in another order and double quotes, '<i8' 1-d. */
    int64_t q[3] = {-5, 0, 1LL << 40};
    write_npy_raw(path, 2, "{\"shape\": (3,), \"fortran_order\": False, \"descr\": \"<i8\"}", q,
                  sizeof q);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_I8);
    CU_ASSERT_EQUAL(a.ndim, 1);
    CU_ASSERT_EQUAL(((int64_t *)a.data)[2], 1LL << 40);
    bt_npy_free(&a);

    /* '|u1' scalar (shape ()), '<i4' with an empty dim, '<f4' with a Python 2 long. */
    unsigned char u = 200;
    write_npy_raw(path, 1, "{'descr': '|u1', 'fortran_order': False, 'shape': (), }", &u, 1);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.ndim, 0);
    CU_ASSERT_EQUAL(a.numel, 1);
    CU_ASSERT_EQUAL(((unsigned char *)a.data)[0], 200);
    bt_npy_free(&a);
    write_npy_raw(path, 1, "{'descr': '<i4', 'fortran_order': False, 'shape': (0, 7), }", NULL, 0);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.numel, 0);
    bt_npy_free(&a);
    float f2[2] = {1.25f, -3};
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2L,), }", f2, 8);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(((float *)a.data)[0], 1.25f);
    bt_npy_free(&a);
    remove_tmpdir();
}

static void test_npy_errors(void)
{
    char path[512];
    float f[4] = {0};
    make_tmpdir();
    tmp_path("bad.npy", path, sizeof path);
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "fortran_order is True");
    write_npy_raw(path, 1, "{'descr': '>f4', 'fortran_order': False, 'shape': (2, 2), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "dtype '>f4' is not supported");
    write_npy_raw(path, 1, "{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "dtype '<c8' is not supported");
    write_npy_raw(path, 1, "{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (4,), }",
                  f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "structured");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), }", f, 12);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "truncated: shape needs 16 data bytes, the file has 12");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "size mismatch");
    write_npy_raw(path, 1, "{'descr': '<f4', 'shape': (4,), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "lacks 'fortran_order'");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (2 2), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "'shape' tuple is malformed");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (-4,), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "non-negative integers");
    write_npy_raw(path, 1, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", f,
                  16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "unexpected key 'x'");
    write_npy_raw(path, 4, "{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", f, 16);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "version 4.0 is not supported");
    FILE *fp = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    fputs("PK\x03\x04 this is a zip", fp);
    fclose(fp);
    expect_npy_error(path, BT_ERR_INVALID_ARG, "bad magic");
    expect_npy_error(tmp_path("absent.npy", path, sizeof path), BT_ERR_IO, "No such file");
    remove_tmpdir();
}

static void test_npy_write_round_trip(void)
{
    char path[512];
    make_tmpdir();
    tmp_path("w.npy", path, sizeof path);
    float f[2][3] = {{1, 2, 3}, {-4.5f, 1e-20f, 3e38f}};
    int64_t dims[2] = {2, 3};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(path, BT_F32, 2, dims, f), BT_OK);

    /* The header as numpy writes it: dict, spaces, '\n', data at a multiple of 64. */
    FILE *fp = fopen(path, "rb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(fp);
    unsigned char raw[256];
    size_t got = fread(raw, 1, sizeof raw, fp);
    fclose(fp);
    static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }";
    /* 10 + 59 dict chars + '\n' = 70, rounded up to 128: header length 118. */
    CU_ASSERT_EQUAL(strlen(dict), 59);
    CU_ASSERT_EQUAL(got, 128 + sizeof f);
    CU_ASSERT_EQUAL(memcmp(raw, "\x93NUMPY\x01\x00", 8), 0);
    CU_ASSERT_EQUAL(raw[8] | raw[9] << 8, 118);
    CU_ASSERT_EQUAL(memcmp(raw + 10, dict, strlen(dict)), 0);
    CU_ASSERT_EQUAL(raw[127], '\n');
    CU_ASSERT_EQUAL(raw[126], ' ');
    CU_ASSERT_EQUAL(raw[69], ' ');
    CU_ASSERT_EQUAL(memcmp(raw + 128, f, sizeof f), 0);

    bt_npy a;
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_F4);
    CU_ASSERT_EQUAL(a.ndim, 2);
    CU_ASSERT_EQUAL(memcmp(a.data, f, sizeof f), 0);
    bt_npy_free(&a);

    int32_t v[5] = {7, -1, 0, 2147483647, -2147483647 - 1};
    int64_t d1[1] = {5};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(path, BT_I32, 1, d1, v), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_I4);
    CU_ASSERT_EQUAL(a.dim[0], 5);
    CU_ASSERT_EQUAL(memcmp(a.data, v, sizeof v), 0);
    bt_npy_free(&a);

    double s = 2.5;
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(path, BT_F64, 0, NULL, &s), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(path, &a), BT_OK);
    CU_ASSERT_EQUAL(a.ndim, 0);
    CU_ASSERT_EQUAL(((double *)a.data)[0], 2.5);
    bt_npy_free(&a);
    bt_npy_free(NULL);

    CU_ASSERT_EQUAL(bt_npy_write(path, BT_BF16, 1, d1, v), BT_ERR_INVALID_ARG);
    int64_t neg[1] = {-1};
    CU_ASSERT_EQUAL(bt_npy_write(path, BT_F32, 1, neg, v), BT_ERR_INVALID_ARG);
    remove_tmpdir();
}

static void test_npy_pair(void)
{
    char x[512], y[512], y8[512], ybad[512];
    make_tmpdir();
    unsigned char px[3][2] = {{0, 255}, {51, 102}, {1, 2}};
    write_npy_raw(tmp_path("x.npy", x, sizeof x), 1,
                  "{'descr': '|u1', 'fortran_order': False, 'shape': (3, 2), }", px, sizeof px);
    int32_t lab[3] = {2, 0, 1};
    int64_t d[1] = {3};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(tmp_path("y.npy", y, sizeof y), BT_I32, 1, d, lab), BT_OK);
    int64_t lab8[3] = {1, 1, 4};
    write_npy_raw(tmp_path("y8.npy", y8, sizeof y8), 1,
                  "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", lab8, sizeof lab8);
    int64_t labbad[3] = {1, -1, 0};
    write_npy_raw(tmp_path("ybad.npy", ybad, sizeof ybad), 1,
                  "{'descr': '<i8', 'fortran_order': False, 'shape': (3,), }", labbad,
                  sizeof labbad);

    bt_dataset ds;
    CU_ASSERT_EQUAL_FATAL(bt_npy_load_pair(x, y, 3, &ds), BT_OK);
    CU_ASSERT_EQUAL(ds.n, 3);
    CU_ASSERT_EQUAL(ds.sample_numel, 2);
    CU_ASSERT_EQUAL(ds.inputs[1], 1.0f);
    CU_ASSERT_EQUAL(ds.inputs[2], (float)(51.0 / 255.0));
    CU_ASSERT_EQUAL(ds.labels[0], 2);
    bt_dataset_free(&ds);

    CU_ASSERT_EQUAL_FATAL(bt_npy_load_pair(x, y8, 5, &ds), BT_OK);
    CU_ASSERT_EQUAL(ds.labels[2], 4);
    bt_dataset_free(&ds);
    CU_ASSERT_EQUAL(bt_npy_load_pair(x, y8, 4, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), y8));
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "label 2 is 4, not in [0, 4)"));
    CU_ASSERT_EQUAL(bt_npy_load_pair(x, ybad, 4, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "label 1 is -1"));

    /* Float inputs are taken as they are. */
    float fx[3][2] = {{-1, 2}, {0.25f, 7}, {3, 4}};
    int64_t fd[2] = {3, 2};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(x, BT_F32, 2, fd, fx), BT_OK);
    CU_ASSERT_EQUAL_FATAL(bt_npy_load_pair(x, y, 3, &ds), BT_OK);
    CU_ASSERT_EQUAL(ds.inputs[0], -1.0f);
    CU_ASSERT_EQUAL(ds.inputs[3], 7.0f);
    bt_dataset_free(&ds);
    /* Non-finite inputs are refused at load, naming the file, the sample and the element
     * (before, a NaN trained silently: ReLU hid it from the loss while it poisoned the weights). */
    const struct {
        float v;
        const char *what;
    } nonfinite[] = {{NAN, "sample 2, element 1 is NaN"}, {INFINITY, "sample 2, element 1 is +infinity"},
                     {-INFINITY, "sample 2, element 1 is -infinity"}};
    for (int k = 0; k < 3; k++) {
        float bad[3][2] = {{-1, 2}, {0.25f, 7}, {3, 4}};
        bad[2][1] = nonfinite[k].v;
        CU_ASSERT_EQUAL_FATAL(bt_npy_write(x, BT_F32, 2, fd, bad), BT_OK);
        CU_ASSERT_EQUAL(bt_npy_load_pair(x, y, 3, &ds), BT_ERR_INVALID_ARG);
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), x));
        CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), nonfinite[k].what));
        CU_ASSERT_PTR_NULL(ds.inputs);
    }
    double big[3][2] = {{-1, 2}, {1e300, 7}, {3, 4}}; /* finite in f8, not in f4 */
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(x, BT_F64, 2, fd, big), BT_OK);
    CU_ASSERT_EQUAL(bt_npy_load_pair(x, y, 3, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "sample 1, element 0 is 1e+300, outside float32's range"));
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(x, BT_F32, 2, fd, fx), BT_OK);
    /* Count mismatch. */
    int64_t d2[1] = {2};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(y, BT_I32, 1, d2, lab), BT_OK);
    CU_ASSERT_EQUAL(bt_npy_load_pair(x, y, 3, &ds), BT_ERR_INVALID_ARG);
    CU_ASSERT_PTR_NOT_NULL(strstr(bt_last_error(), "has 3 samples but"));
    remove_tmpdir();
}

/* numpy as an independent peer: files numpy saves are read here, files written here load in
 * numpy with the same values. Needs Debian's /usr/bin/python3 with numpy; passes with a note
 * otherwise. */
static void test_npy_numpy_peer(void)
{
    char cmd[4096], np_f4[512], np_i8[512], np_u1[512], np_f8t[512], ours[512];
    if (system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") != 0) {
        printf("\n    note: /usr/bin/python3 with numpy absent; numpy cross-check not run ");
        return;
    }
    make_tmpdir();
    tmp_path("np_f4.npy", np_f4, sizeof np_f4);
    tmp_path("np_i8.npy", np_i8, sizeof np_i8);
    tmp_path("np_u1.npy", np_u1, sizeof np_u1);
    tmp_path("np_f8t.npy", np_f8t, sizeof np_f8t);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np; "
             "np.save('%s', (np.arange(24, dtype=np.float32).reshape(2, 3, 4) - 5) / 4); "
             "np.save('%s', np.array([3, -2, 1 << 40], dtype=np.int64)); "
             "np.save('%s', np.arange(256, dtype=np.uint8).reshape(16, 16)); "
             "np.save('%s', np.asfortranarray(np.ones((3, 2))))\"",
             np_f4, np_i8, np_u1, np_f8t);
    CU_ASSERT_EQUAL_FATAL(system(cmd), 0);
    bt_npy a;
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(np_f4, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_F4);
    CU_ASSERT_EQUAL(a.ndim, 3);
    CU_ASSERT_EQUAL(a.dim[2], 4);
    int ok = 1;
    for (int i = 0; i < 24; i++) ok &= ((float *)a.data)[i] == (float)(i - 5) / 4.0f;
    CU_ASSERT(ok);
    bt_npy_free(&a);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(np_i8, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_I8);
    CU_ASSERT_EQUAL(((int64_t *)a.data)[1], -2);
    CU_ASSERT_EQUAL(((int64_t *)a.data)[2], 1LL << 40);
    bt_npy_free(&a);
    CU_ASSERT_EQUAL_FATAL(bt_npy_read(np_u1, &a), BT_OK);
    CU_ASSERT_EQUAL(a.type, BT_NPY_U1);
    CU_ASSERT_EQUAL(((unsigned char *)a.data)[255], 255);
    bt_npy_free(&a);
    expect_npy_error(np_f8t, BT_ERR_INVALID_ARG, "fortran_order is True");

    float w[2][3] = {{0.5f, -1.5f, 3}, {1e-3f, 0, -7}};
    int64_t dims[2] = {2, 3};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(tmp_path("ours.npy", ours, sizeof ours), BT_F32, 2, dims, w),
                          BT_OK);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np, sys; a = np.load('%s'); "
             "e = np.array([[0.5, -1.5, 3], [1e-3, 0, -7]], dtype=np.float32); "
             "sys.exit(0 if a.dtype == np.float32 and a.shape == (2, 3) and "
             "a.flags['C_CONTIGUOUS'] and (a == e).all() else 1)\"",
             ours);
    CU_ASSERT_EQUAL(system(cmd), 0);
    /* Byte for byte what np.save writes for the same array. */
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np, sys; "
             "e = np.array([[0.5, -1.5, 3], [1e-3, 0, -7]], dtype=np.float32); "
             "np.save('%s', e); "
             "sys.exit(0 if open('%s', 'rb').read() == open('%s', 'rb').read() else 1)\"",
             np_f4, np_f4, ours);
    CU_ASSERT_EQUAL(system(cmd), 0);
    int32_t v[4] = {1, -2, 3, 2147483647};
    int64_t d1[1] = {4};
    CU_ASSERT_EQUAL_FATAL(bt_npy_write(ours, BT_I32, 1, d1, v), BT_OK);
    snprintf(cmd, sizeof cmd,
             "/usr/bin/python3 -c \"import numpy as np, sys; a = np.load('%s'); "
             "sys.exit(0 if a.dtype == np.int32 and a.tolist() == [1, -2, 3, 2147483647] "
             "else 1)\"",
             ours);
    CU_ASSERT_EQUAL(system(cmd), 0);
    remove_tmpdir();
}

int main(void)
{
    static const bt_test_case cases[] = {
        {"idx read plain and gzipped", test_idx_read},
        {"idx errors", test_idx_errors},
        {"idx header lies", test_idx_header_lies},
        {"idx images+labels pair", test_idx_pair},
        {"fashion-mnist files (when installed)", test_fashion_mnist},
        {"npy read hand-built v1/v2", test_npy_read_hand_built},
        {"npy errors", test_npy_errors},
        {"npy write round trip", test_npy_write_round_trip},
        {"npy pair", test_npy_pair},
        {"npy against numpy (when installed)", test_npy_numpy_peer},
        {NULL, NULL},
    };
    return bt_test_main("data_files", cases);
}
