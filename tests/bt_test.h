/* tests/bt_test.h: the harness every CUnit test program shares. A program lists its cases in a
 * bt_test_case array ending with {NULL, NULL} and returns bt_test_main(...) from main: it runs them
 * verbosely and exits non-zero when any assertion failed (CUnit's own runner does not), or 77 (the
 * automake "skipped" code) when the program calls bt_test_skip_all first. */
#ifndef BT_TEST_H
#define BT_TEST_H

#include <CUnit/Basic.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct bt_test_case {
    const char *name;
    void (*fn)(void);
} bt_test_case;

#define BT_TEST_SKIP 77

static inline int bt_test_main(const char *suite_name, const bt_test_case *cases)
{
    if (CU_initialize_registry() != CUE_SUCCESS) return 99;
    CU_pSuite suite = CU_add_suite(suite_name, NULL, NULL);
    if (!suite) return 99;
    for (const bt_test_case *c = cases; c->name; c++)
        if (!CU_add_test(suite, c->name, c->fn)) return 99;
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failures = CU_get_number_of_failures();
    unsigned run = CU_get_number_of_tests_run();
    unsigned failed_tests = CU_get_number_of_tests_failed();
    printf("%s: %u tests, %u failed, %u assertion failures\n", suite_name, run, failed_tests,
           failures);
    CU_cleanup_registry();
    return failures != 0 ? 1 : 0;
}

/* Write hooks for io/atomic_file.h (tests that include it define BT_TEST_ATOMIC_HOOKS): the
 * limit is the number of bytes a temporary file may receive. Past it, the crash hook ends the
 * process with status 3 as a crash mid-write would; the fail hook makes the write fail (EIO). */
#ifdef BT_TEST_ATOMIC_HOOKS
static uint64_t bt_test_write_limit;

static size_t bt_test_crash_hook(uint64_t written, size_t want)
{
    if (written >= bt_test_write_limit) _exit(3);
    uint64_t room = bt_test_write_limit - written;
    return room < want ? (size_t)room : want;
}

static size_t bt_test_fail_hook(uint64_t written, size_t want)
{
    uint64_t room = written < bt_test_write_limit ? bt_test_write_limit - written : 0;
    return room < want ? (size_t)room : want;
}
#endif

/* A scratch directory for a test program (tests that use it define BT_TEST_TMPDIR):
 * make_tmpdir() creates /tmp/bt_test.XXXXXX, tmp_path() names a file in it, remove_tmpdir()
 * deletes its files and the directory. */
#ifdef BT_TEST_TMPDIR
#include <dirent.h>
#include <string.h>

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/bt_test.XXXXXX");
    CU_ASSERT_PTR_NOT_NULL_FATAL(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    DIR *d = opendir(tmpdir);
    if (!d) return;
    struct dirent *e;
    char p[512];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tmpdir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tmpdir);
}

static const char *tmp_path(const char *name, char *buf, size_t size)
{
    snprintf(buf, size, "%s/%s", tmpdir, name);
    return buf;
}
#endif

/* Path of a file in the source tree (models/, tests/data/), from BT_SRCDIR. */
static inline const char *bt_test_src(const char *rel, char *buf, size_t size)
{
    const char *root = getenv("BT_SRCDIR");
#ifdef BT_SRCDIR
    if (!root) root = BT_SRCDIR;
#endif
    if (!root) root = ".";
    snprintf(buf, size, "%s/%s", root, rel);
    return buf;
}

#endif
