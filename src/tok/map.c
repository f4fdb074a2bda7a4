/* tok/map.c: the two hash maps the tokenizer needs (tok_internal.h): byte strings to int64 (the
 * vocabulary, added tokens, the per-call word cache) and id pairs to (rank, id) (BPE merges). Open
 * addressing with linear probing, kept at most half full; FNV-1a for strings, a 64-bit mixer for
 * pairs. Entries are never removed. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

static uint32_t hash_bytes(const char *s, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

static size_t find_slot(const tok_map_entry *slots, size_t cap, const char *key, size_t len, uint32_t h)
{
    size_t i = h & (cap - 1);
    while (slots[i].key && !(slots[i].hash == h && slots[i].len == len && memcmp(slots[i].key, key, len) == 0))
        i = (i + 1) & (cap - 1);
    return i;
}

static bt_status map_grow(tok_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 64;
    tok_map_entry *slots = calloc(cap, sizeof *slots);
    if (!slots) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (a map of %zu entries)", cap);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->slots[i].key) continue;
        size_t j = m->slots[i].hash & (cap - 1);
        while (slots[j].key) j = (j + 1) & (cap - 1);
        slots[j] = m->slots[i];
    }
    free(m->slots);
    m->slots = slots;
    m->cap = cap;
    return BT_OK;
}

bt_status tok_map_set(tok_map *m, const char *key, size_t len, int64_t value)
{
    if (len > UINT32_MAX) return bt_error(BT_ERR_INVALID_ARG, "tokenizer: a token of %zu bytes is too long", len);
    if (2 * (m->count + 1) > m->cap) BT_TRY(map_grow(m));
    uint32_t h = hash_bytes(key, len);
    size_t i = find_slot(m->slots, m->cap, key, len, h);
    if (m->slots[i].key) {
        m->slots[i].value = value;
        return BT_OK;
    }
    char *k = malloc(len + 1);
    if (!k) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(k, key, len);
    k[len] = '\0';
    m->slots[i] = (tok_map_entry){.key = k, .len = (uint32_t)len, .hash = h, .value = value};
    m->count++;
    return BT_OK;
}

int tok_map_get(const tok_map *m, const char *key, size_t len, int64_t *value)
{
    if (!m->cap) return 0;
    size_t i = find_slot(m->slots, m->cap, key, len, hash_bytes(key, len));
    if (!m->slots[i].key) return 0;
    *value = m->slots[i].value;
    return 1;
}

void tok_map_free(tok_map *m)
{
    for (size_t i = 0; i < m->cap; i++) free(m->slots[i].key);
    free(m->slots);
    memset(m, 0, sizeof *m);
}

static size_t hash_pair(uint64_t k, size_t cap)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    k *= 0xc4ceb9fe1a85ec53ULL;
    k ^= k >> 33;
    return (size_t)k & (cap - 1);
}

static bt_status pair_grow(tok_pair_map *m)
{
    size_t cap = m->cap ? 2 * m->cap : 1024;
    uint64_t *keys = malloc(cap * sizeof *keys), *vals = malloc(cap * sizeof *vals);
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu merges)", cap);
    }
    memset(keys, 0xFF, cap * sizeof *keys);
    for (size_t i = 0; i < m->cap; i++) {
        if (m->keys[i] == UINT64_MAX) continue;
        size_t j = hash_pair(m->keys[i], cap);
        while (keys[j] != UINT64_MAX) j = (j + 1) & (cap - 1);
        keys[j] = m->keys[i];
        vals[j] = m->vals[i];
    }
    free(m->keys);
    free(m->vals);
    m->keys = keys;
    m->vals = vals;
    m->cap = cap;
    return BT_OK;
}

bt_status tok_pair_set(tok_pair_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id)
{
    if (2 * (m->count + 1) > m->cap) BT_TRY(pair_grow(m));
    uint64_t k = (uint64_t)a << 32 | b;
    size_t i = hash_pair(k, m->cap);
    while (m->keys[i] != UINT64_MAX && m->keys[i] != k) i = (i + 1) & (m->cap - 1);
    if (m->keys[i] == UINT64_MAX) m->count++;
    m->keys[i] = k;
    m->vals[i] = (uint64_t)rank << 32 | id;
    return BT_OK;
}

int tok_pair_get(const tok_pair_map *m, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *id)
{
    if (!m->cap) return 0;
    uint64_t k = (uint64_t)a << 32 | b;
    size_t i = hash_pair(k, m->cap);
    while (m->keys[i] != UINT64_MAX) {
        if (m->keys[i] == k) {
            *rank = (uint32_t)(m->vals[i] >> 32);
            *id = (uint32_t)m->vals[i];
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

void tok_pair_free(tok_pair_map *m)
{
    free(m->keys);
    free(m->vals);
    memset(m, 0, sizeof *m);
}
