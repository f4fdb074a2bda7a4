/* tok/regex.c: the pre-tokenizers' regexes. tokenizers compiles them with Oniguruma (Ruby syntax);
 * baton with PCRE2 (UTF, Unicode properties, ^ and $ at line ends as in Ruby, LF newlines),
 * rewriting the escapes whose meaning differs: \s and \S are Unicode White_Space (PCRE2's \s also
 * takes U+180E), \w is letters, marks, numbers and connector punctuation (PCRE2's leaves out
 * marks), \h and \H are hex digits (PCRE2: horizontal space), \uHHHH is \x{HHHH}. What cannot be
 * given the same meaning is refused naming the JSON path: \b and \B (PCRE2's word boundary uses its
 * own \w), \W and \H inside a character class, nested classes and Oniguruma's && class
 * intersections. Matches come in the order of Rust's find_iter. Without PCRE2 in the build every
 * compile is refused, saying so. */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "core/error.h"
#include "tok/tok_internal.h"

#ifdef BATON_HAVE_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

struct tok_regex {
    pcre2_code *code;
    char *path;
};

static int hex4(const char *s)
{
    for (int k = 0; k < 4; k++)
        if (!((s[k] >= '0' && s[k] <= '9') || (s[k] >= 'a' && s[k] <= 'f') || (s[k] >= 'A' && s[k] <= 'F'))) return 0;
    return 1;
}

/* Oniguruma pattern -> PCRE2 pattern (see the opening comment). */
static bt_status translate(const char *p, size_t n, const char *path, tok_buf *out)
{
    int in_class = 0;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (c == '\\' && i + 1 < n) {
            char e = p[i + 1];
            const char *rep = NULL;
            switch (e) {
            case 's': rep = "\\p{White_Space}"; break;
            case 'S': rep = "\\P{White_Space}"; break;
            case 'w': rep = in_class ? "\\p{L}\\p{M}\\p{N}\\p{Pc}" : "[\\p{L}\\p{M}\\p{N}\\p{Pc}]"; break;
            case 'h': rep = in_class ? "0-9A-Fa-f" : "[0-9A-Fa-f]"; break;
            case 'W':
            case 'H':
                if (in_class)
                    return bt_error(BT_ERR_MODEL, "%s: \\%c inside a character class is not supported (offset %zu of the pattern)",
                                    path, e, i);
                rep = e == 'W' ? "[^\\p{L}\\p{M}\\p{N}\\p{Pc}]" : "[^0-9A-Fa-f]";
                break;
            case 'b':
            case 'B':
                if (!in_class)
                    return bt_error(BT_ERR_MODEL, "%s: the word boundary \\%c is not supported (offset %zu of the pattern)",
                                    path, e, i);
                break;
            case 'u':
                if (i + 6 <= n && hex4(p + i + 2)) {
                    BT_TRY(tok_buf_put(out, "\\x{", 3));
                    BT_TRY(tok_buf_put(out, p + i + 2, 4));
                    BT_TRY(tok_buf_put(out, "}", 1));
                    i += 6;
                    continue;
                }
                break;
            default: break;
            }
            if (rep) {
                BT_TRY(tok_buf_put(out, rep, strlen(rep)));
                i += 2;
            } else {
                size_t k = 1 + tok_utf8_len((unsigned char)e);
                BT_TRY(tok_buf_put(out, p + i, k));
                i += k;
            }
            continue;
        }
        if (!in_class && c == '[') {
            size_t j = i + 1;
            if (j < n && p[j] == '^') j++;
            if (j < n && p[j] == ']') j++; /* a ']' first in a class is itself */
            BT_TRY(tok_buf_put(out, p + i, j - i));
            in_class = 1;
            i = j;
            continue;
        }
        if (in_class && c == '[') {
            if (i + 1 < n && p[i + 1] == ':') {
                const char *end = NULL;
                for (size_t j = i + 2; j + 1 < n; j++)
                    if (p[j] == ':' && p[j + 1] == ']') {
                        end = p + j + 2;
                        break;
                    }
                if (end) {
                    BT_TRY(tok_buf_put(out, p + i, (size_t)(end - (p + i))));
                    i = (size_t)(end - p);
                    continue;
                }
            }
            return bt_error(BT_ERR_MODEL, "%s: a class inside a character class is not supported (offset %zu of the pattern)",
                            path, i);
        }
        if (in_class && c == '&' && i + 1 < n && p[i + 1] == '&')
            return bt_error(BT_ERR_MODEL, "%s: a class intersection (&&) is not supported (offset %zu of the pattern)", path, i);
        if (in_class && c == ']') in_class = 0;
        size_t k = tok_utf8_len((unsigned char)c);
        BT_TRY(tok_buf_put(out, p + i, k));
        i += k;
    }
    return BT_OK;
}

bt_status tok_regex_compile(const char *pattern, size_t n, const char *path, tok_regex **out)
{
    *out = NULL;
    tok_buf pat = {0};
    bt_status st = translate(pattern, n, path, &pat);
    tok_regex *re = NULL;
    pcre2_compile_context *cc = NULL;
    if (st != BT_OK) goto done;
    if (!pat.s) BT_TRY_GOTO(st, tok_buf_put(&pat, "", 0), done);
    re = calloc(1, sizeof *re);
    cc = pcre2_compile_context_create(NULL);
    if (!re || !cc || !(re->path = strdup(path))) {
        st = bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
        goto done;
    }
    pcre2_set_newline(cc, PCRE2_NEWLINE_LF);
    int err = 0;
    PCRE2_SIZE at = 0;
    re->code = pcre2_compile((PCRE2_SPTR)pat.s, pat.n, PCRE2_UTF | PCRE2_UCP | PCRE2_MULTILINE, &err, &at, cc);
    if (!re->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        st = bt_error(BT_ERR_MODEL, "%s: the regex does not compile (PCRE2, offset %zu of \"%s\"): %s", path, (size_t)at,
                      pat.s, (const char *)msg);
        goto done;
    }
    pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE); /* without JIT (it may fail) it still matches */
    *out = re;
    re = NULL;
done:
    pcre2_compile_context_free(cc);
    tok_regex_free(re);
    free(pat.s);
    return st;
}

void tok_regex_free(tok_regex *re)
{
    if (!re) return;
    pcre2_code_free(re->code);
    free(re->path);
    free(re);
}

struct tok_regex_scratch {
    pcre2_match_data *md;
    pcre2_match_context *mc;
    pcre2_jit_stack *js;
};

void tok_regex_scratch_free(tok_regex_scratch *s)
{
    if (!s) return;
    pcre2_jit_stack_free(s->js);
    pcre2_match_context_free(s->mc);
    pcre2_match_data_free(s->md);
    free(s);
}

bt_status tok_regex_scratch_new(const tok_regex *re, tok_regex_scratch **out)
{
    tok_regex_scratch *s = calloc(1, sizeof *s);
    *out = NULL;
    if (!s || !(s->md = pcre2_match_data_create_from_pattern(re->code, NULL)) || !(s->mc = pcre2_match_context_create(NULL)) ||
        !(s->js = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, NULL))) {
        tok_regex_scratch_free(s);
        return bt_error(BT_ERR_NOMEM, "%s: out of memory for matching", re->path);
    }
    pcre2_jit_stack_assign(s->mc, NULL, s->js);
    *out = s;
    return BT_OK;
}

bt_status tok_regex_matches(const tok_regex *re, tok_regex_scratch *scratch, const char *s, size_t n, size_t **m,
                            size_t *count)
{
    *m = NULL;
    *count = 0;
    size_t cap = 0, last_end = 0, have_last = 0, last_match = 0;
    bt_status st = BT_OK;
    while (last_end <= n) {
        int rc = pcre2_match(re->code, (PCRE2_SPTR)s, n, last_end, PCRE2_NO_UTF_CHECK, scratch->md, scratch->mc);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(rc, msg, sizeof msg);
            st = bt_error(BT_ERR_INVALID_ARG, "%s: matching the regex failed at byte %zu of a piece of %zu bytes: %s",
                          re->path, last_end, n, (const char *)msg);
            goto done;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(scratch->md);
        size_t b = ov[0], e = ov[1];
        if (b == e) {
            last_end = e < n ? e + tok_utf8_len((unsigned char)s[e]) : e + 1;
            if (have_last && last_match == e) continue;
        } else
            last_end = e;
        have_last = 1;
        last_match = e;
        if (*count == cap) {
            cap = cap ? 2 * cap : 64;
            size_t *p = realloc(*m, 2 * cap * sizeof *p);
            if (!p) {
                st = bt_error(BT_ERR_NOMEM, "%s: out of memory for %zu matches", re->path, cap);
                goto done;
            }
            *m = p;
        }
        (*m)[2 * *count] = b;
        (*m)[2 * *count + 1] = e;
        (*count)++;
    }
done:
    if (st != BT_OK) {
        free(*m);
        *m = NULL;
        *count = 0;
    }
    return st;
}

int bt_tokenizer_have_regex(void) { return 1; }

#else

struct tok_regex {
    int unused;
};

bt_status tok_regex_compile(const char *pattern, size_t n, const char *path, tok_regex **out)
{
    *out = NULL;
    return bt_error(BT_ERR_MODEL,
                    "%s: this baton was built without PCRE2, which tokenizer regexes need (install libpcre2-dev, "
                    "scripts/install-deps.sh, and configure again)",
                    path);
}

void tok_regex_free(tok_regex *re) { free(re); }

struct tok_regex_scratch {
    int unused;
};

bt_status tok_regex_scratch_new(const tok_regex *re, tok_regex_scratch **out)
{
    *out = NULL;
    return bt_error(BT_ERR_INTERNAL, "tokenizer: no regex support in this build");
}

void tok_regex_scratch_free(tok_regex_scratch *s) { free(s); }

bt_status tok_regex_matches(const tok_regex *re, tok_regex_scratch *scratch, const char *s, size_t n, size_t **m,
                            size_t *count)
{
    *m = NULL;
    *count = 0;
    return bt_error(BT_ERR_INTERNAL, "tokenizer: no regex support in this build");
}

int bt_tokenizer_have_regex(void) { return 0; }

#endif
