/* cpu/bf16_params.c: bf16 conversion of GEMM operands, and the process-wide cache of the bf16
 * copies of parameters (see bf16_params.h). Under `precision: bf16` a layer's weight compute copy
 * changes only when the engine refreshes it after an update, so its bf16 copy is converted once
 * and kept until a backend write to that memory marks it out of date (round_to, copy, zero, the
 * optimizer: bt_gemm_bf16_forget), when the next GEMM converts it again into the same buffer, or
 * a free drops it (bt_gemm_bf16_release): with 8 micro-batches the weights would otherwise be
 * converted 16 times a step. The refresh itself (round_copy) converts each weight's block as it
 * writes it (bt_bf16_refresh_*), so after an update the GEMMs find their copies up to date and
 * no pass rereads the compute copies. Thread-safe: one lock over the table; an entry is converted
 * either under it (acquire) or while a refresh holds it, and one in use by a GEMM is never
 * rewritten. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "core/util.h"
#include "cpu/bf16_params.h"
#include "cpu/blas.h"

/* d[0..n) = s[0..n) in bf16, rounded to nearest even (NaN kept, made quiet) */
BT_VCLONES static void row_to_bf16(const uint32_t *restrict s, uint16_t *restrict d, size_t n)
{
    for (size_t c = 0; c < n; c++) {
        const uint32_t u = s[c];
        const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        const uint32_t nan = (u >> 16) | 0x40u;
        d[c] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }
}

void bt_bf16_convert(const float *src, int rows, int cols, int ld, uint16_t *dst, int threads)
{
    const int nt = (size_t)rows * (size_t)cols >= ((size_t)64 << 10) ? threads : 1;
    (void)nt;
    BT_PARALLEL_FOR(nt)
    for (int r = 0; r < rows; r++)
        row_to_bf16((const uint32_t *)(src + (size_t)r * ld), dst + (size_t)r * cols, (size_t)cols);
}

#define PARAM_CACHE 128
#define PARAM_CACHE_BYTES ((size_t)1 << 30)

struct bt_bf16_param {
    const float *src;   /* first element */
    const float *end;   /* one past the last element read */
    int rows, cols, ld; /* as stored */
    uint16_t *bf16;     /* (rows, cols) */
    size_t bytes;
    uint64_t used;
    int users; /* GEMMs reading bf16 now, or a refresh writing it */
    int stale; /* dropped while in use: the last user frees it */
    int valid; /* bf16 holds src's values (0: written since; the buffer is kept for the next) */
};

static pthread_mutex_t param_mu = PTHREAD_MUTEX_INITIALIZER;
static bt_bf16_param *param_cache[PARAM_CACHE];
static int param_n;
static size_t param_bytes;
static uint64_t param_clock;
static atomic_int param_live; /* valid entries, read without the lock to skip forget when none */
static atomic_int param_entries; /* entries, read without the lock to skip release when none */
static atomic_llong param_conversions, param_refreshes;
static atomic_int param_cache_off;

static void param_free(bt_bf16_param *e)
{
    free(e->bf16);
    free(e);
}

static void set_valid(bt_bf16_param *e, int valid)
{
    if (e->valid != valid) atomic_fetch_add(&param_live, valid ? 1 : -1);
    e->valid = valid;
}

/* Removes entry i (the lock held); frees it unless it is in use. */
static void param_drop(int i)
{
    bt_bf16_param *e = param_cache[i];
    set_valid(e, 0);
    param_bytes -= e->bytes;
    param_cache[i] = param_cache[--param_n];
    atomic_store(&param_entries, param_n);
    if (e->users) e->stale = 1;
    else param_free(e);
}

/* The entries overlapping [lo, hi) (the lock held): dropped when drop is set or the entry is in
 * use (written while a GEMM reads it would be a caller's bug: never a stale read), else marked out
 * of date. With r, entries wholly inside as contiguous rows are taken into r instead (held). */
static void overlapping(const char *lo, const char *hi, int drop, bt_bf16_refresh *r)
{
    for (int i = param_n - 1; i >= 0; i--) {
        bt_bf16_param *e = param_cache[i];
        if ((const char *)e->src >= hi || (const char *)e->end <= lo) continue;
        if (drop || e->users) {
            param_drop(i);
            continue;
        }
        set_valid(e, 0);
        if (r && r->n < BT_BF16_REFRESH && e->ld == e->cols && (const char *)e->src >= lo &&
            (const char *)e->end <= hi) {
            e->users++;
            r->p[r->n++] = e;
        }
    }
}

void bt_gemm_bf16_forget(const void *ptr, size_t bytes)
{
    if (!ptr || atomic_load(&param_live) == 0) return;
    pthread_mutex_lock(&param_mu);
    overlapping(ptr, (const char *)ptr + bytes, 0, NULL);
    pthread_mutex_unlock(&param_mu);
}

void bt_gemm_bf16_release(const void *ptr, size_t bytes)
{
    if (!ptr || atomic_load(&param_entries) == 0) return;
    pthread_mutex_lock(&param_mu);
    overlapping(ptr, (const char *)ptr + bytes, 1, NULL);
    pthread_mutex_unlock(&param_mu);
}

long long bt_gemm_bf16_conversions(void) { return atomic_load(&param_conversions); }

long long bt_gemm_bf16_refreshes(void) { return atomic_load(&param_refreshes); }

void bt_gemm_bf16_param_cache(int enable) { atomic_store(&param_cache_off, !enable); }

bt_bf16_param *bt_bf16_param_acquire(const float *src, int rows, int cols, int ld, int threads)
{
    bt_bf16_param *e = NULL;
    if (atomic_load(&param_cache_off)) return NULL;
    pthread_mutex_lock(&param_mu);
    for (int i = 0; i < param_n && !e; i++) {
        bt_bf16_param *c = param_cache[i];
        if (c->src == src && c->rows == rows && c->cols == cols && c->ld == ld) e = c;
    }
    if (!e) {
        const size_t bytes = (size_t)rows * cols * sizeof(uint16_t);
        while (param_n > 0 && (param_n == PARAM_CACHE || param_bytes + bytes > PARAM_CACHE_BYTES)) {
            int lru = -1;
            for (int i = 0; i < param_n; i++)
                if (!param_cache[i]->users && (lru < 0 || param_cache[i]->used < param_cache[lru]->used))
                    lru = i;
            if (lru < 0) break;
            param_drop(lru);
        }
        if (param_n < PARAM_CACHE && param_bytes + bytes <= PARAM_CACHE_BYTES &&
            (e = calloc(1, sizeof *e)) && (e->bf16 = malloc(bytes))) {
            e->src = src;
            e->end = src + (size_t)(rows - 1) * ld + cols;
            e->rows = rows, e->cols = cols, e->ld = ld;
            e->bytes = bytes;
            param_cache[param_n++] = e;
            atomic_store(&param_entries, param_n);
            param_bytes += bytes;
        } else if (e) {
            free(e);
            e = NULL;
        }
    }
    if (e && !e->valid && e->users) { /* being refreshed by another thread: not ours to convert */
        e = NULL;
    } else if (e && !e->valid) { /* new, or written since: converted now, into its own buffer */
        bt_bf16_convert(src, rows, cols, ld, e->bf16, threads);
        atomic_fetch_add(&param_conversions, 1);
        set_valid(e, 1);
    }
    if (e) {
        e->users++;
        e->used = ++param_clock;
    }
    pthread_mutex_unlock(&param_mu);
    return e;
}

const uint16_t *bt_bf16_param_data(const bt_bf16_param *p) { return p->bf16; }

void bt_bf16_param_release(bt_bf16_param *e)
{
    if (!e) return;
    pthread_mutex_lock(&param_mu);
    if (--e->users == 0 && e->stale) param_free(e);
    pthread_mutex_unlock(&param_mu);
}

void bt_bf16_refresh_begin(bt_bf16_refresh *r, const float *dst, size_t n)
{
    r->n = 0;
    if (!dst || atomic_load(&param_entries) == 0) return;
    pthread_mutex_lock(&param_mu);
    overlapping((const char *)dst, (const char *)(dst + n), 0, r);
    pthread_mutex_unlock(&param_mu);
}

void bt_bf16_refresh_block(const bt_bf16_refresh *r, const float *at, size_t len)
{
    const float *hi = at + len;
    for (int i = 0; i < r->n; i++) {
        const bt_bf16_param *e = r->p[i];
        const float *a = at > e->src ? at : e->src, *b = hi < e->end ? hi : e->end;
        if (a < b)
            row_to_bf16((const uint32_t *)a, e->bf16 + (a - e->src), (size_t)(b - a));
    }
}

void bt_bf16_refresh_end(bt_bf16_refresh *r)
{
    if (!r->n) return;
    pthread_mutex_lock(&param_mu);
    for (int i = 0; i < r->n; i++) {
        bt_bf16_param *e = r->p[i];
        if (!e->stale) { /* else dropped meanwhile (a free): no longer in the table */
            set_valid(e, 1);
            atomic_fetch_add(&param_refreshes, 1);
        }
        if (--e->users == 0 && e->stale) param_free(e);
    }
    pthread_mutex_unlock(&param_mu);
    r->n = 0;
}
