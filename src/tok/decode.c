/* tok/decode.c: the decoders (tok_internal.h), each a decode_chain from token strings to strings
 * as tokenizers 0.19 defines it: ByteLevel (every character of the byte-level alphabet back to its
 * byte, a token with any other character as its own UTF-8; the bytes of all tokens joined, invalid
 * UTF-8 replaced as from_utf8_lossy does), Replace (a literal string), ByteFallback (runs of
 * <0xNN> tokens as their bytes; a run that is not UTF-8 gives one U+FFFD per byte), Fuse (one
 * string), Strip (up to `start` leading and `stop` trailing copies of a character) and Metaspace
 * (the replacement character back to a space, dropped from the first token unless the prepend
 * scheme is "never"); and transformers' clean-up of spaces before punctuation. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

bt_status tok_strs_add(tok_strs *l, const char *s, size_t n)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        char **p = realloc(l->s, cap * sizeof *p);
        if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu tokens)", cap);
        l->s = p;
        size_t *q = realloc(l->len, cap * sizeof *q);
        if (!q) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu tokens)", cap);
        l->len = q;
        l->cap = cap;
    }
    char *c = malloc(n + 1);
    if (!c) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    if (n) memcpy(c, s, n);
    c[n] = '\0';
    l->s[l->n] = c;
    l->len[l->n++] = n;
    return BT_OK;
}

void tok_strs_free(tok_strs *l)
{
    for (size_t i = 0; i < l->n; i++) free(l->s[i]);
    free(l->s);
    free(l->len);
    memset(l, 0, sizeof *l);
}

static bt_status byte_level(const tok_strs *in, tok_strs *out)
{
    tok_buf bytes = {0}, text = {0};
    bt_status st = BT_OK;
    for (size_t k = 0; k < in->n && st == BT_OK; k++) {
        const char *s = in->s[k];
        size_t n = in->len[k], mark = bytes.n;
        int all = 1;
        for (size_t i = 0; i < n && st == BT_OK;) {
            uint32_t cp;
            i += tok_utf8_decode(s + i, &cp);
            int b = tok_char_byte(cp);
            if (b < 0) {
                all = 0;
                break;
            }
            unsigned char c = (unsigned char)b;
            st = tok_buf_put(&bytes, &c, 1);
        }
        if (st == BT_OK && !all) {
            bytes.n = mark;
            st = tok_buf_put(&bytes, s, n);
        }
    }
    if (st == BT_OK) st = tok_buf_put_lossy(&text, (const unsigned char *)bytes.s, bytes.n);
    if (st == BT_OK) st = tok_strs_add(out, text.s ? text.s : "", text.n);
    free(bytes.s);
    free(text.s);
    return st;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* A <0xNN> token's byte (Rust's u8::from_str_radix of the two characters: a leading '+' is
 * allowed), or -1. */
static int fallback_byte(const char *s, size_t n)
{
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int hi = hexval(s[3]), lo = hexval(s[4]);
    if (s[3] == '+' && lo >= 0) return lo;
    return hi >= 0 && lo >= 0 ? hi * 16 + lo : -1;
}

static bt_status flush_bytes(tok_buf *run, tok_strs *out)
{
    if (run->n == 0) return BT_OK;
    bt_status st = BT_OK;
    if (tok_utf8_check(run->s, run->n) == run->n)
        st = tok_strs_add(out, run->s, run->n);
    else
        for (size_t i = 0; i < run->n && st == BT_OK; i++) st = tok_strs_add(out, "\xEF\xBF\xBD", 3);
    run->n = 0;
    return st;
}

static bt_status byte_fallback(const tok_strs *in, tok_strs *out)
{
    tok_buf run = {0};
    bt_status st = BT_OK;
    for (size_t k = 0; k < in->n && st == BT_OK; k++) {
        int b = fallback_byte(in->s[k], in->len[k]);
        if (b >= 0) {
            unsigned char c = (unsigned char)b;
            st = tok_buf_put(&run, &c, 1);
            continue;
        }
        st = flush_bytes(&run, out);
        if (st == BT_OK) st = tok_strs_add(out, in->s[k], in->len[k]);
    }
    if (st == BT_OK) st = flush_bytes(&run, out);
    free(run.s);
    return st;
}

static bt_status strip(const tok_dec *d, const char *s, size_t n, tok_strs *out)
{
    size_t b = 0, e = n, count = 0;
    uint32_t cp;
    while (count < d->start && b < n) {
        size_t k = tok_utf8_decode(s + b, &cp);
        if (cp != d->ch) break;
        b += k;
        count++;
    }
    count = 0;
    while (count < d->stop && e > 0) {
        size_t p = e - 1;
        while (p > 0 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
        tok_utf8_decode(s + p, &cp);
        if (cp != d->ch) break;
        e = p;
        count++;
    }
    return tok_strs_add(out, s + b, e > b ? e - b : 0);
}

static bt_status metaspace(const tok_dec *d, size_t index, const char *s, size_t n, tok_buf *tmp, tok_strs *out)
{
    tmp->n = 0;
    BT_TRY(tok_buf_put(tmp, "", 0));
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, &cp);
        if (cp == d->ch) {
            if (!(index == 0 && d->prepend != TOK_PREPEND_NEVER)) BT_TRY(tok_buf_put(tmp, " ", 1));
        } else
            BT_TRY(tok_buf_put(tmp, s + i, k));
        i += k;
    }
    return tok_strs_add(out, tmp->s, tmp->n);
}

bt_status tok_decode_step(const tok_dec *d, const tok_strs *in, tok_strs *out)
{
    tok_buf tmp = {0};
    bt_status st = BT_OK;
    switch (d->kind) {
    case TOK_DEC_BYTE_LEVEL: return byte_level(in, out);
    case TOK_DEC_BYTE_FALLBACK: return byte_fallback(in, out);
    case TOK_DEC_FUSE:
        for (size_t k = 0; k < in->n && st == BT_OK; k++) st = tok_buf_put(&tmp, in->s[k], in->len[k]);
        if (st == BT_OK) st = tok_strs_add(out, tmp.s ? tmp.s : "", tmp.n);
        break;
    case TOK_DEC_REPLACE:
        for (size_t k = 0; k < in->n && st == BT_OK; k++) {
            tmp.n = 0;
            st = tok_replace_all(in->s[k], in->len[k], d->a, d->an, d->b, d->bn, &tmp);
            if (st == BT_OK) st = tok_strs_add(out, tmp.s ? tmp.s : "", tmp.n);
        }
        break;
    case TOK_DEC_STRIP:
        for (size_t k = 0; k < in->n && st == BT_OK; k++) st = strip(d, in->s[k], in->len[k], out);
        break;
    case TOK_DEC_METASPACE:
        for (size_t k = 0; k < in->n && st == BT_OK; k++) st = metaspace(d, k, in->s[k], in->len[k], &tmp, out);
        break;
    }
    free(tmp.s);
    return st;
}

bt_status tok_clean_up_spaces(tok_buf *b)
{
    static const char *const from[] = {" .", " ?", " !", " ,", " ' ", " n't", " 'm", " 's", " 've", " 're"};
    static const char *const to[] = {".", "?", "!", ",", "'", "n't", "'m", "'s", "'ve", "'re"};
    for (size_t k = 0; k < sizeof from / sizeof from[0]; k++) {
        tok_buf t = {0};
        bt_status st = tok_replace_all(b->s ? b->s : "", b->n, from[k], strlen(from[k]), to[k], strlen(to[k]), &t);
        if (st != BT_OK) {
            free(t.s);
            return st;
        }
        free(b->s);
        *b = t;
    }
    return BT_OK;
}
