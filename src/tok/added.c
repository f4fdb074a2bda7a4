/* tok/added.c: matching added tokens in text (tok_internal.h), as tokenizers' AddedVocabulary does:
 * a leftmost-longest search over the patterns (aho-corasick's LeftmostLongest: the earliest start,
 * there the longest pattern; the next search starts where the match ended), each match widened by
 * lstrip over the whitespace before it (never into the previous match) and by rstrip over the
 * whitespace after it, and the text between matches kept as pieces. The patterns are bucketed by
 * their first byte, longest first, so a position costs one lookup when no pattern starts there. */
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

static int by_first_byte_longest(const void *a, const void *b, void *arg)
{
    const tok_added *tokens = arg;
    const tok_added *x = &tokens[*(const size_t *)a], *y = &tokens[*(const size_t *)b];
    unsigned char fx = (unsigned char)x->pattern[0], fy = (unsigned char)y->pattern[0];
    if (fx != fy) return fx < fy ? -1 : 1;
    if (x->pn != y->pn) return x->pn > y->pn ? -1 : 1;
    size_t ix = *(const size_t *)a, iy = *(const size_t *)b; /* equal patterns: the first added wins */
    return ix < iy ? -1 : ix > iy;
}

bt_status tok_matcher_build(tok_matcher *m, const tok_added *tokens, size_t n, int normalized)
{
    memset(m, 0, sizeof *m);
    m->tokens = tokens;
    m->order = malloc((n ? n : 1) * sizeof *m->order);
    if (!m->order) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    for (size_t i = 0; i < n; i++)
        if (!tokens[i].normalized == !normalized && tokens[i].pn > 0) m->order[m->n++] = i;
    qsort_r(m->order, m->n, sizeof *m->order, by_first_byte_longest, (void *)tokens);
    size_t k = 0;
    for (int b = 0; b < 256; b++) {
        m->start[b] = k;
        while (k < m->n && (unsigned char)tokens[m->order[k]].pattern[0] == b) k++;
    }
    m->start[256] = k;
    return BT_OK;
}

void tok_matcher_free(tok_matcher *m)
{
    free(m->order);
    memset(m, 0, sizeof *m);
}

/* The leftmost-longest match at or after from: 1 with *at and the token's index. */
static int next_match(const tok_matcher *m, const char *s, size_t n, size_t from, size_t *at, size_t *tok)
{
    for (size_t i = from; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        for (size_t k = m->start[c]; k < m->start[c + 1]; k++) {
            const tok_added *t = &m->tokens[m->order[k]];
            if (t->pn <= n - i && memcmp(s + i, t->pattern, t->pn) == 0) {
                *at = i;
                *tok = m->order[k];
                return 1;
            }
        }
    }
    return 0;
}

/* Where the whitespace run that ends s[0..n) begins. */
static size_t trailing_space_start(const char *s, size_t n)
{
    size_t i = n;
    while (i > 0) {
        size_t b = i - 1;
        while (b > 0 && ((unsigned char)s[b] & 0xC0) == 0x80) b--;
        uint32_t cp;
        tok_utf8_decode(s + b, &cp);
        if (!tok_is_whitespace(cp)) break;
        i = b;
    }
    return i;
}

/* Length of the whitespace run that starts s[0..n). */
static size_t leading_space_len(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        size_t k = tok_utf8_decode(s + i, &cp);
        if (!tok_is_whitespace(cp)) break;
        i += k;
    }
    return i;
}

bt_status tok_matcher_split(const tok_matcher *m, const char *s, size_t n, int at_start, tok_pieces *out)
{
    size_t from = 0, start_offset = 0, at, tok;
    if (m->n == 0) return tok_pieces_add(out, s, n, -1, at_start);
    while (from < n && next_match(m, s, n, from, &at, &tok)) {
        const tok_added *t = &m->tokens[tok];
        size_t start = at, stop = at + t->pn;
        from = stop;
        if (t->lstrip) {
            size_t ns = trailing_space_start(s, start);
            start = ns > start_offset ? ns : start_offset;
        }
        if (t->rstrip) stop += leading_space_len(s + stop, n - stop);
        if (start_offset < start) BT_TRY(tok_pieces_add(out, s + start_offset, start - start_offset, -1, at_start && start_offset == 0));
        BT_TRY(tok_pieces_add(out, s + start, stop - start, t->id, at_start && start == 0));
        start_offset = stop;
    }
    if (start_offset != n) BT_TRY(tok_pieces_add(out, s + start_offset, n - start_offset, -1, at_start && start_offset == 0));
    return BT_OK;
}
