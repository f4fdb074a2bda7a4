/* tok/bpe.c: the BPE model's tokenize (tok_internal.h), as tokenizers' BPE does it. A piece's
 * characters become the vocabulary's symbols (a character missing from it: its bytes as <0xNN>
 * tokens with byte_fallback, else the unk token, consecutive ones fused when fuse_unk); then the
 * lowest-ranked merge of two neighbours is applied, again and again, ties to the leftmost: a
 * binary heap of candidate merges over a linked list of symbols, stale candidates skipped when
 * popped (Word::merge_all). With ignore_merges a piece that is itself in the vocabulary is that one
 * token. Where tokenizers would silently drop a character that has no token at all (no unk token,
 * no byte fallback), baton refuses the text naming the character. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

typedef struct sym {
    uint32_t c;
    int32_t prev, next;
    uint32_t len; /* bytes; 0: merged into its left neighbour */
} sym;
typedef struct word {
    sym *s;
    size_t n, cap;
} word;

typedef struct cand {
    uint32_t rank, new_id, pos;
} cand;
typedef struct heap {
    cand *c;
    size_t n, cap;
} heap;

static int before(const cand *a, const cand *b) /* a pops first */
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static bt_status heap_reserve(heap *h, size_t n)
{
    if (n <= h->cap) return BT_OK;
    size_t cap = h->cap ? h->cap : 64;
    while (cap < n) cap *= 2;
    cand *c = realloc(h->c, cap * sizeof *c);
    if (!c) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu merge candidates)", cap);
    h->c = c;
    h->cap = cap;
    return BT_OK;
}

static bt_status heap_push(heap *h, cand x)
{
    BT_TRY(heap_reserve(h, h->n + 1));
    size_t i = h->n++;
    while (i > 0 && before(&x, &h->c[(i - 1) / 2])) {
        h->c[i] = h->c[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->c[i] = x;
    return BT_OK;
}

/* Puts x at slot i and moves it down to where it belongs. */
static void sift_down(heap *h, size_t i, cand x)
{
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &x;
        if (l < h->n && before(&h->c[l], best)) m = l, best = &h->c[l];
        if (r < h->n && before(&h->c[r], best)) m = r;
        if (m == i) break;
        h->c[i] = h->c[m];
        i = m;
    }
    h->c[i] = x;
}

static cand heap_pop(heap *h)
{
    cand top = h->c[0], x = h->c[--h->n];
    if (h->n) sift_down(h, 0, x);
    return top;
}

/* Orders h->c[0..n) as a heap in O(n) (the same pops as n pushes: keys are compared the same way). */
static void heapify(heap *h)
{
    for (size_t i = h->n / 2; i-- > 0;) sift_down(h, i, h->c[i]);
}

static bt_status word_add(word *w, uint32_t c, size_t len)
{
    if (w->n >= INT32_MAX) return bt_error(BT_ERR_INVALID_ARG, "tokenizer: a piece of more than 2^31 characters");
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 64;
        sym *s = realloc(w->s, cap * sizeof *s);
        if (!s) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (a word of %zu symbols)", cap);
        w->s = s;
        w->cap = cap;
    }
    int32_t n = (int32_t)w->n;
    if (w->n) w->s[w->n - 1].next = n;
    w->s[w->n++] = (sym){.c = c, .prev = n - 1, .next = -1, .len = (uint32_t)len};
    return BT_OK;
}

/* Symbols of s[0..n) before merging (merge_word's loop). */
static bt_status initial_symbols(const tok_bpe *m, const char *s, size_t n, word *w)
{
    int64_t id;
    int have_unk = 0;
    size_t unk_len = 0;
    for (size_t i = 0; i < n;) {
        size_t k = tok_utf8_len((unsigned char)s[i]);
        if (tok_map_get(&m->vocab, s + i, k, &id)) {
            if (have_unk) BT_TRY(word_add(w, (uint32_t)m->unk, unk_len));
            have_unk = 0;
            BT_TRY(word_add(w, (uint32_t)id, k));
            i += k;
            continue;
        }
        if (m->byte_fallback) {
            int64_t ids[4];
            size_t found = 0;
            for (size_t b = 0; b < k; b++) {
                char code[8];
                snprintf(code, sizeof code, "<0x%02X>", (unsigned char)s[i + b]);
                if (tok_map_get(&m->vocab, code, 6, &ids[b])) found++;
            }
            if (found == k) {
                for (size_t b = 0; b < k; b++) BT_TRY(word_add(w, (uint32_t)ids[b], 1));
                i += k;
                continue;
            }
        }
        if (m->unk < 0) {
            uint32_t cp;
            tok_utf8_decode(s + i, &cp);
            return bt_error(BT_ERR_INVALID_ARG,
                            "tokenizer: the character U+%04X has no token (the model has no unk_token%s), where "
                            "tokenizers would drop it silently",
                            (unsigned)cp, m->byte_fallback ? " and no <0xNN> token for one of its bytes" : " and no byte_fallback");
        }
        if (have_unk && m->fuse_unk)
            unk_len += k;
        else {
            if (have_unk) BT_TRY(word_add(w, (uint32_t)m->unk, unk_len));
            have_unk = 1;
            unk_len = k;
        }
        i += k;
    }
    if (have_unk) BT_TRY(word_add(w, (uint32_t)m->unk, unk_len));
    return BT_OK;
}

static bt_status merge_all(const tok_bpe *m, word *w, heap *h)
{
    uint32_t rank, id;
    h->n = 0;
    BT_TRY(heap_reserve(h, w->n));
    for (size_t i = 0; i + 1 < w->n; i++)
        if (tok_pair_get(&m->merges, w->s[i].c, w->s[i + 1].c, &rank, &id))
            h->c[h->n++] = (cand){.rank = rank, .new_id = id, .pos = (uint32_t)i};
    heapify(h);
    while (h->n) {
        cand top = heap_pop(h);
        sym *cur = &w->s[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        size_t next_pos = (size_t)cur->next;
        sym right = w->s[next_pos];
        if (!tok_pair_get(&m->merges, cur->c, right.c, &rank, &id) || id != top.new_id) continue;
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        w->s[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < w->n) w->s[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0) {
            const sym *prev = &w->s[cur->prev];
            if (tok_pair_get(&m->merges, prev->c, cur->c, &rank, &id))
                BT_TRY(heap_push(h, (cand){.rank = rank, .new_id = id, .pos = (uint32_t)cur->prev}));
        }
        if (cur->next >= 0 && (size_t)cur->next < w->n) {
            const sym *nx = &w->s[cur->next];
            if (tok_pair_get(&m->merges, cur->c, nx->c, &rank, &id))
                BT_TRY(heap_push(h, (cand){.rank = rank, .new_id = id, .pos = top.pos}));
        }
    }
    return BT_OK;
}

#define CACHE_MAX_WORD 256
#define CACHE_MAX_ENTRIES (1u << 20)
#define SEGMENT_MIN 64

/* Merges the symbols of w[b..e) alone (as a word of its own) and appends the ids to out. */
static bt_status merge_range(const tok_bpe *m, const word *w, size_t b, size_t e, word *tmp, heap *h, bt_tok_ids *out)
{
    tmp->n = 0;
    for (size_t i = b; i < e; i++) BT_TRY(word_add(tmp, w->s[i].c, w->s[i].len));
    BT_TRY(merge_all(m, tmp, h));
    for (size_t i = 0; i < tmp->n; i++)
        if (tmp->s[i].len) BT_TRY(tok_ids_push(out, (int32_t)tmp->s[i].c));
    return BT_OK;
}

/* A long word is merged in segments: between two symbols whose characters (the left one's last,
 * the right one's first) no merge joins, no merge can ever cross, so the parts merge alone, and
 * the same run of symbols merges the same way wherever it stands (cached by its symbols). This
 * is what keeps a text without a pre-tokenizer (Llama 2: the whole text one word) fast. */
static bt_status merge_segments(const tok_bpe *m, const word *w, tok_map *seg_cache, bt_tok_ids *seg_ids,
                                bt_tok_ids *out)
{
    word tmp = {0};
    heap h = {0};
    bt_status st = BT_OK;
    uint32_t rank, id;
    size_t b = 0;
    for (size_t i = 1; i <= w->n && st == BT_OK; i++) {
        if (i < w->n && tok_pair_get(&m->joins, m->last_cp[w->s[i - 1].c], m->first_cp[w->s[i].c], &rank, &id)) continue;
        size_t n = i - b;
        uint32_t key[64];
        int64_t v;
        if (n <= 64) {
            for (size_t k = 0; k < n; k++) key[k] = w->s[b + k].c;
            if (tok_map_get(seg_cache, (const char *)key, n * sizeof *key, &v)) {
                size_t start = (size_t)(v >> 16), count = (size_t)(v & 0xFFFF);
                for (size_t k = 0; k < count && st == BT_OK; k++) st = tok_ids_push(out, seg_ids->ids[start + k]);
                b = i;
                continue;
            }
        }
        size_t first = out->n;
        st = merge_range(m, w, b, i, &tmp, &h, out);
        if (st == BT_OK && n <= 64 && seg_cache->count < CACHE_MAX_ENTRIES) {
            size_t start = seg_ids->n, count = out->n - first;
            for (size_t k = 0; k < count && st == BT_OK; k++) st = tok_ids_push(seg_ids, out->ids[first + k]);
            if (st == BT_OK) st = tok_map_set(seg_cache, (const char *)key, n * sizeof *key, (int64_t)start << 16 | (int64_t)count);
        }
        b = i;
    }
    free(tmp.s);
    free(h.c);
    return st;
}

bt_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t n, tok_map *cache, bt_tok_ids *cache_ids,
                           bt_tok_ids *out)
{
    int64_t v;
    if (n == 0) return BT_OK;
    if (cache && tok_map_get(cache, s, n, &v)) {
        size_t start = (size_t)(v >> 16), count = (size_t)(v & 0xFFFF);
        for (size_t k = 0; k < count; k++) BT_TRY(tok_ids_push(out, cache_ids->ids[start + k]));
        return BT_OK;
    }
    if (m->ignore_merges && tok_map_get(&m->vocab, s, n, &v)) return tok_ids_push(out, (int32_t)v);
    word w = {0};
    heap h = {0};
    size_t first = out->n;
    bt_status st = initial_symbols(m, s, n, &w);
    if (st == BT_OK && w.n > SEGMENT_MIN && cache) {
        tok_map seg_cache = {0};
        bt_tok_ids seg_ids = {0};
        st = merge_segments(m, &w, &seg_cache, &seg_ids, out);
        tok_map_free(&seg_cache);
        free(seg_ids.ids);
    } else {
        if (st == BT_OK) st = merge_all(m, &w, &h);
        for (size_t i = 0; i < w.n && st == BT_OK; i++)
            if (w.s[i].len) st = tok_ids_push(out, (int32_t)w.s[i].c);
    }
    size_t count = out->n - first;
    if (st == BT_OK && cache && n <= CACHE_MAX_WORD && count < 0x10000 && cache->count < CACHE_MAX_ENTRIES) {
        size_t start = cache_ids->n;
        for (size_t k = 0; k < count && st == BT_OK; k++) st = tok_ids_push(cache_ids, out->ids[first + k]);
        if (st == BT_OK) st = tok_map_set(cache, s, n, (int64_t)start << 16 | (int64_t)count);
    }
    free(w.s);
    free(h.c);
    return st;
}

void tok_bpe_free(tok_bpe *m)
{
    tok_map_free(&m->vocab);
    if (m->token_of)
        for (int32_t i = 0; i < m->n_ids; i++) free(m->token_of[i]);
    free(m->token_of);
    free(m->token_len);
    free(m->first_cp);
    free(m->last_cp);
    tok_pair_free(&m->merges);
    tok_pair_free(&m->joins);
    memset(m, 0, sizeof *m);
}
