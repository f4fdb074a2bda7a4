/* tok/utf8.c: UTF-8 helpers, Unicode White_Space, GPT-2's byte-level alphabet, growing buffers and
 * id arrays, and piece lists (tok_internal.h). The alphabet maps the 188 printable bytes
 * ('!'..'~', 0xA1..0xAC, 0xAE..0xFF) to the characters of the same number and the other 68 bytes,
 * in byte order, to U+0100 onwards: tokenizers' bytes_char(), so that every byte is one printable
 * character of a vocabulary entry. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

size_t tok_utf8_len(unsigned char c)
{
    if (c < 0x80) return 1;
    if (c >= 0xF0) return 4;
    if (c >= 0xE0) return 3;
    return 2;
}

size_t tok_utf8_decode(const char *s, uint32_t *cp)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = tok_utf8_len(u[0]);
    uint32_t c = n == 1 ? u[0] : n == 2 ? (u[0] & 0x1Fu) : n == 3 ? (u[0] & 0x0Fu) : (u[0] & 0x07u);
    for (size_t i = 1; i < n; i++) c = (c << 6) | (u[i] & 0x3Fu);
    *cp = c;
    return n;
}

size_t tok_utf8_encode(uint32_t cp, char *out)
{
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Length of the valid UTF-8 sequence at u[0..n) (1..4), or 0 when it is not one; *maximal: how
 * many bytes form the longest prefix of a valid sequence (what one U+FFFD replaces). */
static size_t valid_seq(const unsigned char *u, size_t n, size_t *maximal)
{
    unsigned char c = u[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    *maximal = 1;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        need = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        need = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else
        return 0;
    for (size_t i = 1; i < need; i++) {
        if (i >= n) return 0;
        unsigned char b = u[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return 0;
        *maximal = i + 1;
    }
    return need;
}

size_t tok_utf8_check(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, maximal;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        size_t k = valid_seq(u + i, n - i, &maximal);
        if (k == 0) return i;
        i += k;
    }
    return n;
}

int tok_is_whitespace(uint32_t c)
{
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

static int printable_byte(unsigned b)
{
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The 68 other bytes, in order: 0x00..0x20 (33), 0x7F..0xA0 (34) and 0xAD, become U+0100 onwards. */
uint32_t tok_byte_char(unsigned char b)
{
    if (printable_byte(b)) return b;
    if (b <= 0x20) return 256u + b;
    if (b <= 0xA0) return 256u + 33u + (b - 0x7Fu);
    return 256u + 67u; /* 0xAD */
}

int tok_char_byte(uint32_t cp)
{
    if (cp < 256) return printable_byte(cp) ? (int)cp : -1;
    uint32_t n = cp - 256;
    if (n < 33) return (int)n;
    if (n < 67) return (int)(0x7F + n - 33);
    return n == 67 ? 0xAD : -1;
}

bt_status tok_buf_put(tok_buf *b, const void *data, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *s = realloc(b->s, cap);
        if (!s) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu bytes of text)", cap);
        b->s = s;
        b->cap = cap;
    }
    if (n) memcpy(b->s + b->n, data, n);
    b->n += n;
    b->s[b->n] = '\0';
    return BT_OK;
}

bt_status tok_buf_put_lossy(tok_buf *b, const unsigned char *u, size_t n)
{
    size_t i = 0, maximal;
    while (i < n) {
        size_t run = i;
        while (run < n) {
            size_t k = u[run] < 0x80 ? 1 : valid_seq(u + run, n - run, &maximal);
            if (k == 0) break;
            run += k;
        }
        BT_TRY(tok_buf_put(b, u + i, run - i));
        i = run;
        if (i < n) {
            valid_seq(u + i, n - i, &maximal);
            BT_TRY(tok_buf_put(b, "\xEF\xBF\xBD", 3));
            i += maximal;
        }
    }
    return BT_OK;
}

bt_status tok_ids_push(bt_tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? 2 * ids->cap : 256;
        int32_t *p = realloc(ids->ids, cap * sizeof *p);
        if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu token ids)", cap);
        ids->ids = p;
        ids->cap = cap;
    }
    ids->ids[ids->n++] = id;
    return BT_OK;
}

bt_status tok_pieces_add(tok_pieces *l, const char *s, size_t n, int32_t token, int at_start)
{
    if (n == 0 && token < 0) return BT_OK;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        tok_piece *p = realloc(l->p, cap * sizeof *p);
        if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu pieces)", cap);
        l->p = p;
        l->cap = cap;
    }
    size_t off = l->buf.n;
    BT_TRY(tok_buf_put(&l->buf, s, n));
    l->p[l->n++] = (tok_piece){.off = off, .len = n, .token = token, .at_start = at_start};
    return BT_OK;
}

void tok_pieces_free(tok_pieces *l)
{
    free(l->buf.s);
    free(l->p);
    memset(l, 0, sizeof *l);
}

void tok_pieces_swap(tok_pieces *a, tok_pieces *b)
{
    tok_pieces t = *a;
    *a = *b;
    *b = t;
}
