/* tok/normalize.c: the normalizers baton implements (tok_internal.h): Unicode NFC, NFD, NFKC and
 * NFKD through libunistring's u8_normalize (without libunistring in the build the file is refused
 * at load, load.c), Prepend (its prefix before a non-empty text) and Replace of a literal string.
 * Each runs on one piece of text, as tokenizers runs the normalizer on each piece between the
 * added tokens that are matched before normalizing. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/error.h"
#include "tok/tok_internal.h"

#ifdef BATON_HAVE_UNISTRING
#include <uninorm.h>
#endif

bt_status tok_replace_all(const char *s, size_t n, const char *pat, size_t pn, const char *with, size_t wn,
                          tok_buf *out)
{
    size_t i = 0;
    while (i < n) {
        const char *hit = pn <= n - i ? memmem(s + i, n - i, pat, pn) : NULL;
        if (!hit) break;
        size_t at = (size_t)(hit - s);
        BT_TRY(tok_buf_put(out, s + i, at - i));
        BT_TRY(tok_buf_put(out, with, wn));
        i = at + pn;
    }
    return tok_buf_put(out, s + i, n - i);
}

static bt_status unicode_form(tok_norm_kind kind, const char *s, size_t n, tok_buf *out)
{
#ifdef BATON_HAVE_UNISTRING
    uninorm_t form = kind == TOK_NORM_NFC ? UNINORM_NFC : kind == TOK_NORM_NFD ? UNINORM_NFD
                     : kind == TOK_NORM_NFKC ? UNINORM_NFKC : UNINORM_NFKD;
    size_t len = 0;
    if (n == 0) return tok_buf_put(out, "", 0);
    uint8_t *r = u8_normalize(form, (const uint8_t *)s, n, NULL, &len);
    if (!r) return bt_error(BT_ERR_NOMEM, "tokenizer: Unicode normalization failed: %s", strerror(errno));
    bt_status st = tok_buf_put(out, r, len);
    free(r);
    return st;
#else
    return bt_error(BT_ERR_INTERNAL, "tokenizer: no Unicode normalization in this build");
#endif
}

int bt_tokenizer_have_unicode_normalization(void)
{
#ifdef BATON_HAVE_UNISTRING
    return 1;
#else
    return 0;
#endif
}

static bt_status normalize_step(const tok_norm *st, const char *s, size_t n, tok_buf *out)
{
    switch (st->kind) {
    case TOK_NORM_PREPEND:
        if (n) BT_TRY(tok_buf_put(out, st->a, st->an));
        return tok_buf_put(out, s, n);
    case TOK_NORM_REPLACE: return tok_replace_all(s, n, st->a, st->an, st->b, st->bn, out);
    default: return unicode_form(st->kind, s, n, out);
    }
}

bt_status tok_normalize(const tok_norm *steps, size_t n_steps, const char *s, size_t n, tok_buf *out)
{
    tok_buf tmp = {0};
    bt_status st = BT_OK;
    out->n = 0;
    BT_TRY(tok_buf_put(out, s, n));
    for (size_t k = 0; k < n_steps; k++) {
        tmp.n = 0;
        BT_TRY_GOTO(st, tok_buf_put(&tmp, "", 0), done);
        BT_TRY_GOTO(st, normalize_step(&steps[k], out->s, out->n, &tmp), done);
        tok_buf t = *out;
        *out = tmp;
        tmp = t;
    }
done:
    free(tmp.s);
    return st;
}
