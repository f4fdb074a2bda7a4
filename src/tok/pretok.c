/* tok/pretok.c: the pre-tokenizers (tok_internal.h). Split (a regex or a literal, the five
 * delimiter behaviours, invert), ByteLevel (a space before the text when add_prefix_space and it
 * does not start with one, GPT-2's regex when use_regex, then every byte as its character of the
 * byte-level alphabet) and Metaspace (spaces become the replacement character, which is prepended
 * always, to the first piece of the text only, or never, and split on, merged with what follows).
 * Each mirrors tokenizers' NormalizedString::split: the pattern's matches and the text between them
 * cover the piece, the behaviour folds them, and empty pieces are dropped. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

const char tok_gpt2_pattern[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

typedef struct span {
    size_t b, e;
    int match; /* after the fold: 1 means "remove" */
} span;
typedef struct spans {
    span *s;
    size_t n, cap;
} spans;

static bt_status spans_add(spans *l, size_t b, size_t e, int match)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        span *p = realloc(l->s, cap * sizeof *p);
        if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%zu splits)", cap);
        l->s = p;
        l->cap = cap;
    }
    l->s[l->n++] = (span){b, e, match};
    return BT_OK;
}

/* Pattern::find_matches: matches and the gaps between them, covering s[0..n). */
static bt_status find_matches(const tok_regex *re, tok_regex_scratch *scratch, const char *lit, size_t lit_n, const char *s,
                              size_t n, spans *out)
{
    out->n = 0;
    if (n == 0) return spans_add(out, 0, 0, 0);
    size_t prev = 0;
    if (re) {
        size_t *m = NULL, count = 0;
        BT_TRY(tok_regex_matches(re, scratch, s, n, &m, &count));
        bt_status st = BT_OK;
        for (size_t k = 0; k < count && st == BT_OK; k++) {
            if (prev != m[2 * k]) st = spans_add(out, prev, m[2 * k], 0);
            if (st == BT_OK) st = spans_add(out, m[2 * k], m[2 * k + 1], 1);
            prev = m[2 * k + 1];
        }
        free(m);
        BT_TRY(st);
    } else {
        size_t i = 0;
        while (i < n) {
            const char *hit = lit_n <= n - i ? memmem(s + i, n - i, lit, lit_n) : NULL;
            if (!hit) break;
            size_t at = (size_t)(hit - s);
            if (prev != at) BT_TRY(spans_add(out, prev, at, 0));
            BT_TRY(spans_add(out, at, at + lit_n, 1));
            prev = i = at + lit_n;
        }
    }
    if (prev != n) BT_TRY(spans_add(out, prev, n, 0));
    return BT_OK;
}

/* The delimiter behaviour over the matches, in place: afterwards match = 1 marks spans to remove. */
static void fold(spans *l, tok_split_behavior how, int invert)
{
    if (invert)
        for (size_t k = 0; k < l->n; k++) l->s[k].match = !l->s[k].match;
    size_t w = 0;
    int previous = 0;
    switch (how) {
    case TOK_SPLIT_REMOVED: return;
    case TOK_SPLIT_ISOLATED:
        for (size_t k = 0; k < l->n; k++) l->s[k].match = 0;
        return;
    case TOK_SPLIT_CONTIGUOUS:
    case TOK_SPLIT_MERGED_PREVIOUS:
        for (size_t k = 0; k < l->n; k++) {
            int m = l->s[k].match;
            int merge = how == TOK_SPLIT_CONTIGUOUS ? m == previous : (m && !previous);
            if (merge && w > 0)
                l->s[w - 1].e = l->s[k].e;
            else
                l->s[w++] = (span){l->s[k].b, l->s[k].e, 0};
            previous = m;
        }
        l->n = w;
        return;
    case TOK_SPLIT_MERGED_NEXT: {
        /* right to left: a match joins the span after it; w counts spans kept from the end */
        size_t n = l->n;
        for (size_t k = n; k-- > 0;) {
            int m = l->s[k].match;
            if (m && !previous && w > 0)
                l->s[n - w].b = l->s[k].b;
            else {
                w++;
                l->s[n - w] = (span){l->s[k].b, l->s[k].e, 0};
            }
            previous = m;
        }
        memmove(l->s, l->s + (n - w), w * sizeof *l->s);
        l->n = w;
        return;
    }
    }
}

/* Splits s[0..n) by pattern and behaviour into out (pieces of s; the first keeps at_start). */
static bt_status split_into(const tok_regex *re, tok_regex_scratch *scratch, const char *lit, size_t lit_n,
                            tok_split_behavior how, int invert, const char *s, size_t n, int at_start, spans *work,
                            tok_pieces *out)
{
    BT_TRY(find_matches(re, scratch, lit, lit_n, s, n, work));
    fold(work, how, invert);
    for (size_t k = 0; k < work->n; k++) {
        if (work->s[k].match) continue;
        BT_TRY(tok_pieces_add(out, s + work->s[k].b, work->s[k].e - work->s[k].b, -1, at_start && work->s[k].b == 0));
    }
    return BT_OK;
}

static bt_status byte_level(const tok_pre *p, tok_regex_scratch *scratch, const char *s, size_t n, int at_start,
                            spans *work, tok_buf *tmp, tok_pieces *split, tok_pieces *out)
{
    tmp->n = 0;
    if (p->add_prefix_space && !(n > 0 && s[0] == ' ')) BT_TRY(tok_buf_put(tmp, " ", 1));
    BT_TRY(tok_buf_put(tmp, s, n));
    split->n = 0;
    split->buf.n = 0;
    if (p->re)
        BT_TRY(split_into(p->re, scratch, NULL, 0, TOK_SPLIT_ISOLATED, 0, tmp->s, tmp->n, at_start, work, split));
    else
        BT_TRY(tok_pieces_add(split, tmp->s, tmp->n, -1, at_start));
    for (size_t k = 0; k < split->n; k++) {
        const unsigned char *u = (const unsigned char *)split->buf.s + split->p[k].off;
        tmp->n = 0;
        for (size_t i = 0; i < split->p[k].len; i++) {
            char enc[4];
            BT_TRY(tok_buf_put(tmp, enc, tok_utf8_encode(tok_byte_char(u[i]), enc)));
        }
        BT_TRY(tok_pieces_add(out, tmp->s, tmp->n, -1, split->p[k].at_start));
    }
    return BT_OK;
}

static bt_status metaspace(const tok_pre *p, const char *s, size_t n, int at_start, spans *work, tok_buf *tmp,
                           tok_pieces *out)
{
    tmp->n = 0;
    tok_buf replaced = {0};
    bt_status st = tok_replace_all(s, n, " ", 1, p->repl, p->repl_n, &replaced);
    if (st != BT_OK) goto done;
    int starts = replaced.n >= p->repl_n && memcmp(replaced.s, p->repl, p->repl_n) == 0;
    if ((p->prepend == TOK_PREPEND_ALWAYS && !starts) || (p->prepend == TOK_PREPEND_FIRST && !starts && at_start))
        BT_TRY_GOTO(st, tok_buf_put(tmp, p->repl, p->repl_n), done);
    BT_TRY_GOTO(st, tok_buf_put(tmp, replaced.s, replaced.n), done);
    if (p->split)
        st = split_into(NULL, NULL, p->repl, p->repl_n, TOK_SPLIT_MERGED_NEXT, 0, tmp->s, tmp->n, at_start, work, out);
    else
        st = tok_pieces_add(out, tmp->s, tmp->n, -1, at_start);
done:
    free(replaced.s);
    return st;
}

bt_status tok_pre_tokenize(const tok_pre *p, const tok_pieces *in, tok_pieces *out)
{
    spans work = {0};
    tok_buf tmp = {0};
    tok_pieces split = {0};
    tok_regex_scratch *scratch = NULL;
    bt_status st = p->re ? tok_regex_scratch_new(p->re, &scratch) : BT_OK;
    for (size_t k = 0; k < in->n && st == BT_OK; k++) {
        const tok_piece *pc = &in->p[k];
        const char *s = in->buf.s + pc->off;
        if (pc->token >= 0) {
            st = tok_pieces_add(out, s, pc->len, pc->token, pc->at_start);
            continue;
        }
        switch (p->kind) {
        case TOK_PRE_SPLIT:
            st = split_into(p->re, scratch, p->literal, p->literal_n, p->behavior, p->invert, s, pc->len, pc->at_start, &work,
                            out);
            break;
        case TOK_PRE_BYTE_LEVEL: st = byte_level(p, scratch, s, pc->len, pc->at_start, &work, &tmp, &split, out); break;
        case TOK_PRE_METASPACE: st = metaspace(p, s, pc->len, pc->at_start, &work, &tmp, out); break;
        }
    }
    free(work.s);
    free(tmp.s);
    tok_pieces_free(&split);
    tok_regex_scratch_free(scratch);
    return st;
}
