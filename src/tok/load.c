/* tok/load.c: tokenizer.json and tokenizer_config.json into a bt_tokenizer (tok_internal.h). Every
 * key of tokenizer.json is read or refused: an unknown key, a type baton does not implement, or a
 * value it cannot honour is BT_ERR_MODEL naming the file and the JSON path (`model.dropout`,
 * `pre_tokenizer.pretokenizers[2].type`); docs/tokenizers.md lists what is accepted. Ids are checked
 * as tokenizers assigns them: each merge's tokens and their join must be in the vocabulary, and an
 * added token's id must be the one tokenizers would give it (its vocabulary id, else the next free
 * one). From tokenizer_config.json only what changes tokenization is read: add_bos_token and
 * add_eos_token (LlamaTokenizerFast rebuilds its template from them; for other classes they must
 * agree with the file's post-processor), bos_token, eos_token, tokenizer_class and
 * clean_up_tokenization_spaces. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "tok/tok_internal.h"

#define PATH_MAX_LEN 512
#define MAX_IDS (1 << 24) /* the largest real vocabularies hold about 2^18 */

typedef struct loader {
    bt_tokenizer *t;
    const char *name, *config_name;
    int have_prepend_or_replace; /* the normalizer shifts text (Metaspace's "first" cannot follow) */
    int pre_shifts;              /* a pre-tokenizer before this one prepends */
} loader;

static bt_status bad(const loader *ld, const char *path, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static bt_status bad(const loader *ld, const char *path, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return bt_error(BT_ERR_MODEL, "%s: %s: %s", ld->name, path, msg);
}

/* JSON paths: path.key, path[i], path."key" (cut at PATH_MAX_LEN, which no real file reaches). */
static void sub(char *out, const char *path, const char *key)
{
    if (snprintf(out, PATH_MAX_LEN, "%s%s%s", path, *path ? "." : "", key) >= PATH_MAX_LEN) out[PATH_MAX_LEN - 1] = '\0';
}

static void idx(char *out, const char *path, size_t i)
{
    if (snprintf(out, PATH_MAX_LEN, "%s[%zu]", path, i) >= PATH_MAX_LEN) out[PATH_MAX_LEN - 1] = '\0';
}

static void quoted(char *out, const char *path, const char *key)
{
    if (snprintf(out, PATH_MAX_LEN, "%s.\"%s\"", path, key) >= PATH_MAX_LEN) out[PATH_MAX_LEN - 1] = '\0';
}

/* Every key of obj must be one of keys (NULL-terminated). */
static bt_status only_keys(const loader *ld, json_t *obj, const char *path, const char *const *keys)
{
    const char *k;
    json_t *v;
    json_object_foreach(obj, k, v)
    {
        int known = 0;
        for (const char *const *p = keys; *p && !known; p++) known = strcmp(*p, k) == 0;
        if (!known) {
            char p2[PATH_MAX_LEN];
            sub(p2, path, k);
            return bad(ld, p2, "this key is not supported");
        }
    }
    return BT_OK;
}

static bt_status need_object(const loader *ld, json_t *v, const char *path)
{
    return json_is_object(v) ? BT_OK : bad(ld, path, "must be an object");
}

/* A boolean (missing or null: dflt). */
static bt_status get_bool(const loader *ld, json_t *obj, const char *key, const char *path, int dflt, int *out)
{
    json_t *v = json_object_get(obj, key);
    *out = dflt;
    if (!v || json_is_null(v)) return BT_OK;
    char p2[PATH_MAX_LEN];
    sub(p2, path, key);
    if (!json_is_boolean(v)) return bad(ld, p2, "must be true or false");
    *out = json_is_true(v);
    return BT_OK;
}

/* A string (required unless optional; missing or null then gives NULL). */
static bt_status get_string(const loader *ld, json_t *obj, const char *key, const char *path, int optional,
                            const char **out, size_t *len)
{
    json_t *v = json_object_get(obj, key);
    char p2[PATH_MAX_LEN];
    sub(p2, path, key);
    *out = NULL;
    if (len) *len = 0;
    if (!v || json_is_null(v)) return optional ? BT_OK : bad(ld, p2, "missing (a string is needed)");
    if (!json_is_string(v)) return bad(ld, p2, "must be a string");
    *out = json_string_value(v);
    if (len) *len = json_string_length(v);
    return BT_OK;
}

static bt_status get_type(const loader *ld, json_t *obj, const char *path, const char **type)
{
    BT_TRY(need_object(ld, obj, path));
    return get_string(ld, obj, "type", path, 0, type, NULL);
}

/* One character (a JSON string of exactly one), as UTF-8 into out (4 bytes) and as a code point. */
static bt_status get_char(const loader *ld, json_t *obj, const char *key, const char *path, char *out, size_t *n,
                          uint32_t *cp)
{
    const char *s;
    size_t len;
    BT_TRY(get_string(ld, obj, key, path, 0, &s, &len));
    char p2[PATH_MAX_LEN];
    sub(p2, path, key);
    if (len == 0 || tok_utf8_len((unsigned char)s[0]) != len) return bad(ld, p2, "must be one character");
    memcpy(out, s, len);
    *n = len;
    tok_utf8_decode(s, cp);
    return BT_OK;
}

static bt_status dup(const char *s, size_t n, char **out)
{
    *out = malloc(n + 1);
    if (!*out) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    if (n) memcpy(*out, s, n);
    (*out)[n] = '\0';
    return BT_OK;
}

/* A {"String": s} pattern (a {"Regex": r} one only when regex is non-NULL). */
static bt_status get_pattern(const loader *ld, json_t *obj, const char *path, const char **lit, size_t *lit_n,
                             const char **regex, size_t *regex_n)
{
    char p2[PATH_MAX_LEN];
    sub(p2, path, "pattern");
    json_t *p = json_object_get(obj, "pattern");
    if (!p) return bad(ld, p2, "missing");
    if (!json_is_object(p) || json_object_size(p) != 1) return bad(ld, p2, "must be {\"String\": ...} or {\"Regex\": ...}");
    *lit = NULL;
    if (regex) *regex = NULL;
    json_t *v = json_object_get(p, "String");
    if (v) {
        char p3[PATH_MAX_LEN];
        sub(p3, p2, "String");
        if (!json_is_string(v)) return bad(ld, p3, "must be a string");
        if (json_string_length(v) == 0) return bad(ld, p3, "an empty pattern is not supported");
        *lit = json_string_value(v);
        *lit_n = json_string_length(v);
        return BT_OK;
    }
    v = json_object_get(p, "Regex");
    char p3[PATH_MAX_LEN];
    sub(p3, p2, "Regex");
    if (!v) return bad(ld, p2, "must be {\"String\": ...} or {\"Regex\": ...}");
    if (!regex) return bad(ld, p3, "a regex pattern is not supported here (only {\"String\": ...})");
    if (!json_is_string(v)) return bad(ld, p3, "must be a string");
    *regex = json_string_value(v);
    *regex_n = json_string_length(v);
    return BT_OK;
}

/* ---- normalizer -------------------------------------------------------------------------------- */

static bt_status add_norm(bt_tokenizer *t, tok_norm n)
{
    tok_norm *p = realloc(t->norm, (t->n_norm + 1) * sizeof *p);
    if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    t->norm = p;
    t->norm[t->n_norm++] = n;
    return BT_OK;
}

/* A {"type": "Sequence", KEY: [...]} component: each element loaded by load, in order. */
typedef bt_status (*component_loader)(loader *ld, json_t *v, const char *path);
static bt_status load_sequence(loader *ld, json_t *v, const char *path, const char *key, component_loader load)
{
    const char *const keys[] = {"type", key, NULL};
    char p2[PATH_MAX_LEN];
    BT_TRY(only_keys(ld, v, path, keys));
    json_t *list = json_object_get(v, key);
    sub(p2, path, key);
    if (!json_is_array(list)) return bad(ld, p2, "must be an array");
    for (size_t i = 0; i < json_array_size(list); i++) {
        char p3[PATH_MAX_LEN];
        idx(p3, p2, i);
        BT_TRY(load(ld, json_array_get(list, i), p3));
    }
    return BT_OK;
}

static bt_status load_normalizer(loader *ld, json_t *v, const char *path)
{
    const char *type;
    BT_TRY(get_type(ld, v, path, &type));
    char p2[PATH_MAX_LEN];
    if (strcmp(type, "Sequence") == 0) return load_sequence(ld, v, path, "normalizers", load_normalizer);
    tok_norm n = {0};
    if (strcmp(type, "NFC") == 0 || strcmp(type, "NFD") == 0 || strcmp(type, "NFKC") == 0 || strcmp(type, "NFKD") == 0) {
        static const char *const keys[] = {"type", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        if (!bt_tokenizer_have_unicode_normalization()) {
            sub(p2, path, "type");
            return bad(ld, p2, "\"%s\" needs libunistring, which this baton was built without (install libunistring-dev, "
                               "scripts/install-deps.sh, and configure again)", type);
        }
        n.kind = type[2] == 'C' ? TOK_NORM_NFC : type[2] == 'D' ? TOK_NORM_NFD : type[3] == 'C' ? TOK_NORM_NFKC : TOK_NORM_NFKD;
        return add_norm(ld->t, n);
    }
    if (strcmp(type, "Prepend") == 0) {
        static const char *const keys[] = {"type", "prepend", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        const char *s;
        size_t len;
        BT_TRY(get_string(ld, v, "prepend", path, 0, &s, &len));
        n.kind = TOK_NORM_PREPEND;
        BT_TRY(dup(s, len, &n.a));
        n.an = len;
        ld->have_prepend_or_replace = 1;
        bt_status st = add_norm(ld->t, n);
        if (st != BT_OK) free(n.a);
        return st;
    }
    if (strcmp(type, "Replace") == 0) {
        static const char *const keys[] = {"type", "pattern", "content", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        const char *lit, *content;
        size_t lit_n, content_n;
        BT_TRY(get_pattern(ld, v, path, &lit, &lit_n, NULL, NULL));
        BT_TRY(get_string(ld, v, "content", path, 0, &content, &content_n));
        n.kind = TOK_NORM_REPLACE;
        if (dup(lit, lit_n, &n.a) != BT_OK || dup(content, content_n, &n.b) != BT_OK) {
            free(n.a);
            return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        }
        n.an = lit_n;
        n.bn = content_n;
        ld->have_prepend_or_replace = 1;
        bt_status st = add_norm(ld->t, n);
        if (st != BT_OK) {
            free(n.a);
            free(n.b);
        }
        return st;
    }
    sub(p2, path, "type");
    return bad(ld, p2, "the normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD, Prepend, Replace and Sequence are)", type);
}

/* ---- pre-tokenizer ------------------------------------------------------------------------------ */

static bt_status add_pre(bt_tokenizer *t, tok_pre p)
{
    tok_pre *q = realloc(t->pre, (t->n_pre + 1) * sizeof *q);
    if (!q) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    t->pre = q;
    t->pre[t->n_pre++] = p;
    return BT_OK;
}

/* Metaspace's fields (pre-tokenizer and decoder): replacement, prepend_scheme, split, and the
 * older add_prefix_space / str_rep, read as tokenizers 0.19 reads them. */
static bt_status metaspace_fields(const loader *ld, json_t *v, const char *path, char *repl, size_t *repl_n,
                                  uint32_t *cp, tok_prepend *prepend, int *split)
{
    static const char *const keys[] = {"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep", NULL};
    BT_TRY(only_keys(ld, v, path, keys));
    BT_TRY(get_char(ld, v, "replacement", path, repl, repl_n, cp));
    const char *scheme;
    BT_TRY(get_string(ld, v, "prepend_scheme", path, 1, &scheme, NULL));
    char p2[PATH_MAX_LEN];
    sub(p2, path, "prepend_scheme");
    *prepend = TOK_PREPEND_ALWAYS;
    if (scheme) {
        if (strcmp(scheme, "first") == 0) *prepend = TOK_PREPEND_FIRST;
        else if (strcmp(scheme, "never") == 0) *prepend = TOK_PREPEND_NEVER;
        else if (strcmp(scheme, "always") != 0) return bad(ld, p2, "must be \"first\", \"never\" or \"always\"");
    }
    int add_prefix_space;
    json_t *aps = json_object_get(v, "add_prefix_space");
    BT_TRY(get_bool(ld, v, "add_prefix_space", path, 1, &add_prefix_space));
    if (aps && !json_is_null(aps) && !add_prefix_space) {
        if (scheme && *prepend != TOK_PREPEND_NEVER)
            return bad(ld, p2, "add_prefix_space false does not match this prepend_scheme (tokenizers refuses it too)");
        *prepend = TOK_PREPEND_NEVER;
    }
    const char *str_rep;
    BT_TRY(get_string(ld, v, "str_rep", path, 1, &str_rep, NULL));
    return get_bool(ld, v, "split", path, 1, split);
}

static bt_status load_pre_tokenizer(loader *ld, json_t *v, const char *path)
{
    const char *type;
    BT_TRY(get_type(ld, v, path, &type));
    char p2[PATH_MAX_LEN];
    tok_pre p = {0};
    bt_status st = BT_OK;
    if (strcmp(type, "Sequence") == 0) return load_sequence(ld, v, path, "pretokenizers", load_pre_tokenizer);
    if (strcmp(type, "ByteLevel") == 0) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        int use_regex, trim;
        p.kind = TOK_PRE_BYTE_LEVEL;
        BT_TRY(get_bool(ld, v, "add_prefix_space", path, 1, &p.add_prefix_space));
        BT_TRY(get_bool(ld, v, "trim_offsets", path, 1, &trim)); /* offsets only: ids do not depend on it */
        BT_TRY(get_bool(ld, v, "use_regex", path, 1, &use_regex));
        if (use_regex) {
            sub(p2, path, "use_regex");
            BT_TRY(tok_regex_compile(tok_gpt2_pattern, strlen(tok_gpt2_pattern), p2, &p.re));
        }
        ld->pre_shifts = 1;
    } else if (strcmp(type, "Split") == 0) {
        static const char *const keys[] = {"type", "pattern", "behavior", "invert", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        const char *lit, *regex, *behavior;
        size_t lit_n = 0, regex_n = 0;
        p.kind = TOK_PRE_SPLIT;
        BT_TRY(get_pattern(ld, v, path, &lit, &lit_n, &regex, &regex_n));
        BT_TRY(get_string(ld, v, "behavior", path, 0, &behavior, NULL));
        BT_TRY(get_bool(ld, v, "invert", path, 0, &p.invert));
        sub(p2, path, "behavior");
        static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
        int found = -1;
        for (int k = 0; k < 5; k++)
            if (strcmp(behavior, names[k]) == 0) found = k;
        if (found < 0)
            return bad(ld, p2, "\"%s\" is not a split behavior (Removed, Isolated, MergedWithPrevious, MergedWithNext, "
                               "Contiguous)", behavior);
        p.behavior = (tok_split_behavior)found;
        if (regex) {
            char p3[PATH_MAX_LEN];
            sub(p3, path, "pattern.Regex");
            BT_TRY(tok_regex_compile(regex, regex_n, p3, &p.re));
        } else {
            BT_TRY(dup(lit, lit_n, &p.literal));
            p.literal_n = lit_n;
        }
    } else if (strcmp(type, "Metaspace") == 0) {
        uint32_t cp;
        p.kind = TOK_PRE_METASPACE;
        BT_TRY(metaspace_fields(ld, v, path, p.repl, &p.repl_n, &cp, &p.prepend, &p.split));
        if (p.prepend == TOK_PREPEND_FIRST && (ld->have_prepend_or_replace || ld->pre_shifts)) {
            sub(p2, path, "prepend_scheme");
            return bad(ld, p2, "\"first\" after a %s is not supported (where the text starts is then not tracked)",
                       ld->have_prepend_or_replace ? "Prepend or Replace normalizer" : "ByteLevel or Metaspace pre-tokenizer");
        }
        ld->pre_shifts = 1;
    } else {
        sub(p2, path, "type");
        return bad(ld, p2, "the pre-tokenizer \"%s\" is not supported (ByteLevel, Split, Metaspace and Sequence are)", type);
    }
    st = add_pre(ld->t, p);
    if (st != BT_OK) {
        tok_regex_free(p.re);
        free(p.literal);
    }
    return st;
}

/* ---- model ------------------------------------------------------------------------------------- */

static bt_status vocab_id(const loader *ld, const char *path, const char *s, size_t n, uint32_t *id)
{
    int64_t v;
    if (!tok_map_get(&ld->t->bpe.vocab, s, n, &v)) return bad(ld, path, "\"%s\" is not in model.vocab", s);
    *id = (uint32_t)v;
    return BT_OK;
}

static bt_status load_merge(loader *ld, const char *a, size_t an, const char *b, size_t bn, uint32_t rank, const char *path)
{
    uint32_t ia = 0, ib = 0, ij = 0;
    BT_TRY(vocab_id(ld, path, a, an, &ia));
    BT_TRY(vocab_id(ld, path, b, bn, &ib));
    char *joined = malloc(an + bn + 1);
    if (!joined) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    memcpy(joined, a, an);
    memcpy(joined + an, b, bn);
    joined[an + bn] = '\0';
    bt_status st = vocab_id(ld, path, joined, an + bn, &ij);
    free(joined);
    BT_TRY(st);
    tok_bpe *m = &ld->t->bpe;
    BT_TRY(tok_pair_set(&m->joins, m->last_cp[ia], m->first_cp[ib], 0, 0));
    return tok_pair_set(&m->merges, ia, ib, rank, ij);
}

static bt_status load_merges(loader *ld, json_t *list, const char *path)
{
    if (!json_is_array(list)) return bad(ld, path, "must be an array");
    uint32_t rank = 0;
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *m = json_array_get(list, i);
        char p2[PATH_MAX_LEN];
        idx(p2, path, i);
        if (json_is_string(m)) {
            const char *s = json_string_value(m);
            size_t n = json_string_length(m);
            if (n >= 8 && strncmp(s, "#version", 8) == 0) continue;
            const char *space = memchr(s, ' ', n);
            if (!space || memchr(space + 1, ' ', n - (size_t)(space + 1 - s)))
                return bad(ld, p2, "a merge must be two tokens separated by one space");
            BT_TRY(load_merge(ld, s, (size_t)(space - s), space + 1, n - (size_t)(space + 1 - s), rank, p2));
        } else if (json_is_array(m) && json_array_size(m) == 2 && json_is_string(json_array_get(m, 0)) &&
                   json_is_string(json_array_get(m, 1))) {
            json_t *a = json_array_get(m, 0), *b = json_array_get(m, 1);
            BT_TRY(load_merge(ld, json_string_value(a), json_string_length(a), json_string_value(b), json_string_length(b),
                              rank, p2));
        } else
            return bad(ld, p2, "a merge must be \"a b\" or [\"a\", \"b\"]");
        rank++;
    }
    return BT_OK;
}

static bt_status load_vocab(loader *ld, json_t *vocab, const char *path)
{
    tok_bpe *m = &ld->t->bpe;
    if (!json_is_object(vocab)) return bad(ld, path, "must be an object of token: id");
    const char *k;
    json_t *v;
    json_int_t max = -1;
    json_object_foreach(vocab, k, v)
    {
        char p2[PATH_MAX_LEN];
        quoted(p2, path, k);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_IDS)
            return bad(ld, p2, "an id must be an integer from 0 to %d", MAX_IDS - 1);
        if (json_integer_value(v) > max) max = json_integer_value(v);
    }
    m->n_ids = (int32_t)(max + 1);
    m->token_of = calloc((size_t)(max + 1 > 0 ? max + 1 : 1), sizeof *m->token_of);
    m->token_len = calloc((size_t)(max + 1 > 0 ? max + 1 : 1), sizeof *m->token_len);
    m->first_cp = calloc((size_t)(max + 1 > 0 ? max + 1 : 1), sizeof *m->first_cp);
    m->last_cp = calloc((size_t)(max + 1 > 0 ? max + 1 : 1), sizeof *m->last_cp);
    if (!m->token_of || !m->token_len || !m->first_cp || !m->last_cp) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory (%lld ids)", (long long)max + 1);
    json_object_foreach(vocab, k, v)
    {
        json_int_t id = json_integer_value(v);
        size_t len = strlen(k); /* jansson keys hold no NUL: a "\u0000" key is refused below */
        char p2[PATH_MAX_LEN];
        quoted(p2, path, k);
        if (m->token_of[id])
            return bad(ld, p2, "the id %lld is also the id of \"%s\"", (long long)id, m->token_of[id]);
        BT_TRY(dup(k, len, &m->token_of[id]));
        m->token_len[id] = (uint32_t)len;
        if (len) {
            size_t last = len - 1;
            while (last > 0 && ((unsigned char)k[last] & 0xC0) == 0x80) last--;
            tok_utf8_decode(k, &m->first_cp[id]);
            tok_utf8_decode(k + last, &m->last_cp[id]);
        }
        BT_TRY(tok_map_set(&m->vocab, k, len, id));
        m->vocab_count++;
    }
    return BT_OK;
}

static bt_status load_model(loader *ld, json_t *v, const char *path)
{
    const char *type;
    char p2[PATH_MAX_LEN];
    BT_TRY(get_type(ld, v, path, &type));
    sub(p2, path, "type");
    if (strcmp(type, "BPE") != 0) return bad(ld, p2, "the model \"%s\" is not supported (BPE is)", type);
    static const char *const keys[] = {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
                                       "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges", NULL};
    BT_TRY(only_keys(ld, v, path, keys));
    /* GPT-2's and Qwen2's files write "" for the prefix and suffix: no prefix, no suffix */
    static const char *const must_be_null[] = {"dropout", "continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 3; k++) {
        json_t *x = json_object_get(v, must_be_null[k]);
        sub(p2, path, must_be_null[k]);
        if (x && !json_is_null(x) && !(k > 0 && json_is_string(x) && json_string_length(x) == 0))
            return bad(ld, p2, "is not supported (only null%s)%s", k ? " or \"\"" : "",
                       k == 0 ? ": dropout makes tokenization random" : "");
    }
    tok_bpe *m = &ld->t->bpe;
    BT_TRY(get_bool(ld, v, "fuse_unk", path, 0, &m->fuse_unk));
    BT_TRY(get_bool(ld, v, "byte_fallback", path, 0, &m->byte_fallback));
    BT_TRY(get_bool(ld, v, "ignore_merges", path, 0, &m->ignore_merges));
    sub(p2, path, "vocab");
    json_t *vocab = json_object_get(v, "vocab");
    if (!vocab) return bad(ld, p2, "missing");
    BT_TRY(load_vocab(ld, vocab, p2));
    sub(p2, path, "merges");
    json_t *merges = json_object_get(v, "merges");
    if (!merges) return bad(ld, p2, "missing");
    BT_TRY(load_merges(ld, merges, p2));
    const char *unk;
    size_t unk_n;
    m->unk = -1;
    BT_TRY(get_string(ld, v, "unk_token", path, 1, &unk, &unk_n));
    if (unk) {
        uint32_t id = 0;
        sub(p2, path, "unk_token");
        BT_TRY(vocab_id(ld, p2, unk, unk_n, &id));
        m->unk = (int32_t)id;
    }
    return BT_OK;
}

/* ---- added tokens ------------------------------------------------------------------------------- */

static bt_status load_added(loader *ld, json_t *list, const char *path)
{
    bt_tokenizer *t = ld->t;
    if (!json_is_array(list)) return bad(ld, path, "must be an array");
    size_t n = json_array_size(list);
    t->added = calloc(n ? n : 1, sizeof *t->added);
    if (!t->added) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    int64_t max_added = -1;
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(list, i);
        char p2[PATH_MAX_LEN], p3[PATH_MAX_LEN];
        idx(p2, path, i);
        BT_TRY(need_object(ld, v, p2));
        static const char *const keys[] = {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special", NULL};
        BT_TRY(only_keys(ld, v, p2, keys));
        tok_added *a = &t->added[i];
        const char *content;
        size_t cn;
        int single_word;
        BT_TRY(get_string(ld, v, "content", p2, 0, &content, &cn));
        BT_TRY(get_bool(ld, v, "special", p2, 0, &a->special));
        BT_TRY(get_bool(ld, v, "single_word", p2, 0, &single_word));
        BT_TRY(get_bool(ld, v, "lstrip", p2, 0, &a->lstrip));
        BT_TRY(get_bool(ld, v, "rstrip", p2, 0, &a->rstrip));
        BT_TRY(get_bool(ld, v, "normalized", p2, !a->special, &a->normalized));
        sub(p3, p2, "content");
        if (cn == 0) return bad(ld, p3, "an empty added token is not supported (tokenizers skips it)");
        sub(p3, p2, "single_word");
        if (single_word) return bad(ld, p3, "single_word tokens are not supported");
        int64_t x;
        sub(p3, p2, "content");
        if (tok_map_get(&t->added_ids, content, cn, &x)) return bad(ld, p3, "\"%s\" is added twice", content);
        BT_TRY(dup(content, cn, &a->content));
        a->n = cn;
        t->n_added = i + 1;
        /* the id tokenizers gives it (AddedVocabulary::add_tokens) */
        int64_t want;
        if (!tok_map_get(&t->bpe.vocab, content, cn, &want)) {
            int64_t size = (int64_t)t->bpe.vocab_count;
            want = max_added < 0 ? size : (max_added >= size || size == 0) ? max_added + 1 : size;
        }
        json_t *id = json_object_get(v, "id");
        sub(p3, p2, "id");
        if (!json_is_integer(id)) return bad(ld, p3, "must be an integer");
        if (json_integer_value(id) != want)
            return bad(ld, p3, "the file says %lld, but tokenizers gives this token the id %lld (%s)",
                       (long long)json_integer_value(id), (long long)want,
                       want < (int64_t)t->bpe.vocab_count ? "its id in model.vocab" : "the next id after the vocabulary");
        if (want >= MAX_IDS) return bad(ld, p3, "ids must be below %d", MAX_IDS);
        a->id = (int32_t)want;
        if (want > max_added) max_added = want;
        BT_TRY(tok_map_set(&t->added_ids, content, cn, want));
        if (a->special) BT_TRY(tok_map_set(&t->special, content, cn, 1));
    }
    return BT_OK;
}

/* Each normalized added token is matched by its content normalized (refresh_added_tokens). */
static bt_status added_patterns(bt_tokenizer *t)
{
    tok_buf b = {0};
    bt_status st = BT_OK;
    for (size_t i = 0; i < t->n_added && st == BT_OK; i++) {
        tok_added *a = &t->added[i];
        if (a->normalized && t->n_norm) {
            st = tok_normalize(t->norm, t->n_norm, a->content, a->n, &b);
            if (st == BT_OK) st = dup(b.s, b.n, &a->pattern);
            a->pn = b.n;
        } else {
            st = dup(a->content, a->n, &a->pattern);
            a->pn = a->n;
        }
    }
    free(b.s);
    if (st == BT_OK) st = tok_matcher_build(&t->match_raw, t->added, t->n_added, 0);
    if (st == BT_OK) st = tok_matcher_build(&t->match_normalized, t->added, t->n_added, 1);
    return st;
}

/* ---- post-processor ------------------------------------------------------------------------------ */

static bt_status add_ids(int32_t **ids, size_t *n, json_t *list, const loader *ld, const char *path)
{
    if (!json_is_array(list)) return bad(ld, path, "must be an array of ids");
    for (size_t i = 0; i < json_array_size(list); i++) {
        json_t *v = json_array_get(list, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= MAX_IDS) {
            char p2[PATH_MAX_LEN];
            idx(p2, path, i);
            return bad(ld, p2, "must be an id from 0 to %d", MAX_IDS - 1);
        }
        int32_t *p = realloc(*ids, (*n + 1) * sizeof *p);
        if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        *ids = p;
        (*ids)[(*n)++] = (int32_t)json_integer_value(v);
    }
    return BT_OK;
}

static bt_status add_template(bt_tokenizer *t, tok_template tp)
{
    tok_template *p = realloc(t->post, (t->n_post + 1) * sizeof *p);
    if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    t->post = p;
    t->post[t->n_post++] = tp;
    return BT_OK;
}

static bt_status load_template(loader *ld, json_t *v, const char *path)
{
    static const char *const keys[] = {"type", "single", "pair", "special_tokens", NULL};
    BT_TRY(only_keys(ld, v, path, keys));
    char p2[PATH_MAX_LEN], p3[PATH_MAX_LEN], p4[PATH_MAX_LEN];
    json_t *specials = json_object_get(v, "special_tokens"), *single = json_object_get(v, "single");
    json_t *pair = json_object_get(v, "pair");
    sub(p2, path, "special_tokens");
    if (!json_is_object(specials)) return bad(ld, p2, "must be an object");
    sub(p2, path, "pair");
    if (pair && !json_is_array(pair)) return bad(ld, p2, "must be an array"); /* pairs are never encoded */
    sub(p2, path, "single");
    if (!json_is_array(single)) return bad(ld, p2, "must be an array");
    tok_template tp = {0};
    int seen_a = 0;
    bt_status st = BT_OK;
    for (size_t i = 0; i < json_array_size(single) && st == BT_OK; i++) {
        json_t *item = json_array_get(single, i), *x;
        idx(p3, p2, i);
        if (!json_is_object(item) || json_object_size(item) != 1) {
            st = bad(ld, p3, "must be {\"SpecialToken\": ...} or {\"Sequence\": ...}");
            break;
        }
        if ((x = json_object_get(item, "Sequence"))) {
            sub(p4, p3, "Sequence.id");
            json_t *id = json_is_object(x) ? json_object_get(x, "id") : NULL;
            if (!json_is_string(id) || strcmp(json_string_value(id), "A") != 0)
                st = bad(ld, p4, "a single-sequence template can only hold the sequence \"A\"");
            else if (seen_a++)
                st = bad(ld, p4, "the sequence \"A\" appears twice");
            continue;
        }
        x = json_object_get(item, "SpecialToken");
        sub(p4, p3, "SpecialToken.id");
        json_t *id = json_is_object(x) ? json_object_get(x, "id") : NULL;
        if (!json_is_string(id)) {
            st = bad(ld, p3, "must be {\"SpecialToken\": {\"id\": ...}} or {\"Sequence\": ...}");
            break;
        }
        json_t *spec = json_object_get(specials, json_string_value(id));
        if (!json_is_object(spec)) {
            st = bad(ld, p4, "\"%s\" is not in %s.special_tokens", json_string_value(id), path);
            break;
        }
        sub(p3, path, "special_tokens");
        quoted(p4, p3, json_string_value(id));
        sub(p3, p4, "ids");
        memcpy(p4, p3, PATH_MAX_LEN);
        st = seen_a ? add_ids(&tp.suffix, &tp.n_suffix, json_object_get(spec, "ids"), ld, p4)
                    : add_ids(&tp.prefix, &tp.n_prefix, json_object_get(spec, "ids"), ld, p4);
    }
    if (st == BT_OK && !seen_a) st = bad(ld, p2, "the template has no sequence \"A\"");
    if (st == BT_OK) st = add_template(ld->t, tp);
    if (st != BT_OK) {
        free(tp.prefix);
        free(tp.suffix);
    }
    return st;
}

static bt_status load_post(loader *ld, json_t *v, const char *path)
{
    const char *type;
    char p2[PATH_MAX_LEN];
    BT_TRY(get_type(ld, v, path, &type));
    if (strcmp(type, "Sequence") == 0) return load_sequence(ld, v, path, "processors", load_post);
    if (strcmp(type, "ByteLevel") == 0) { /* trims offsets only: the ids stay */
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        int x;
        BT_TRY(get_bool(ld, v, "add_prefix_space", path, 1, &x));
        BT_TRY(get_bool(ld, v, "trim_offsets", path, 1, &x));
        return get_bool(ld, v, "use_regex", path, 1, &x);
    }
    if (strcmp(type, "TemplateProcessing") == 0) return load_template(ld, v, path);
    sub(p2, path, "type");
    return bad(ld, p2, "the post-processor \"%s\" is not supported (TemplateProcessing, ByteLevel and Sequence are)", type);
}

/* ---- decoder ------------------------------------------------------------------------------------ */

static bt_status add_dec(bt_tokenizer *t, tok_dec d)
{
    tok_dec *p = realloc(t->dec, (t->n_dec + 1) * sizeof *p);
    if (!p) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    t->dec = p;
    t->dec[t->n_dec++] = d;
    return BT_OK;
}

static bt_status get_count(const loader *ld, json_t *v, const char *key, const char *path, size_t *out)
{
    json_t *x = json_object_get(v, key);
    char p2[PATH_MAX_LEN];
    sub(p2, path, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return bad(ld, p2, "must be a count (an integer >= 0)");
    *out = (size_t)json_integer_value(x);
    return BT_OK;
}

static bt_status load_decoder(loader *ld, json_t *v, const char *path)
{
    const char *type;
    char p2[PATH_MAX_LEN];
    BT_TRY(get_type(ld, v, path, &type));
    tok_dec d = {0};
    if (strcmp(type, "Sequence") == 0) return load_sequence(ld, v, path, "decoders", load_decoder);
    if (strcmp(type, "ByteLevel") == 0) {
        static const char *const keys[] = {"type", "add_prefix_space", "trim_offsets", "use_regex", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        int x;
        BT_TRY(get_bool(ld, v, "add_prefix_space", path, 1, &x)); /* none of the three changes decoding */
        BT_TRY(get_bool(ld, v, "trim_offsets", path, 1, &x));
        BT_TRY(get_bool(ld, v, "use_regex", path, 1, &x));
        d.kind = TOK_DEC_BYTE_LEVEL;
    } else if (strcmp(type, "ByteFallback") == 0 || strcmp(type, "Fuse") == 0) {
        static const char *const keys[] = {"type", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        d.kind = type[0] == 'B' ? TOK_DEC_BYTE_FALLBACK : TOK_DEC_FUSE;
    } else if (strcmp(type, "Replace") == 0) {
        static const char *const keys[] = {"type", "pattern", "content", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        const char *lit, *content;
        size_t lit_n, content_n;
        BT_TRY(get_pattern(ld, v, path, &lit, &lit_n, NULL, NULL));
        BT_TRY(get_string(ld, v, "content", path, 0, &content, &content_n));
        d.kind = TOK_DEC_REPLACE;
        if (dup(lit, lit_n, &d.a) != BT_OK || dup(content, content_n, &d.b) != BT_OK) {
            free(d.a);
            return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        }
        d.an = lit_n;
        d.bn = content_n;
    } else if (strcmp(type, "Strip") == 0) {
        static const char *const keys[] = {"type", "content", "start", "stop", NULL};
        BT_TRY(only_keys(ld, v, path, keys));
        char c[4];
        size_t cn;
        d.kind = TOK_DEC_STRIP;
        BT_TRY(get_char(ld, v, "content", path, c, &cn, &d.ch));
        BT_TRY(get_count(ld, v, "start", path, &d.start));
        BT_TRY(get_count(ld, v, "stop", path, &d.stop));
    } else if (strcmp(type, "Metaspace") == 0) {
        char c[4];
        size_t cn;
        int split;
        d.kind = TOK_DEC_METASPACE;
        BT_TRY(metaspace_fields(ld, v, path, c, &cn, &d.ch, &d.prepend, &split));
    } else {
        sub(p2, path, "type");
        return bad(ld, p2, "the decoder \"%s\" is not supported (ByteLevel, Replace, ByteFallback, Fuse, Strip, Metaspace "
                           "and Sequence are)", type);
    }
    bt_status st = add_dec(ld->t, d);
    if (st != BT_OK) {
        free(d.a);
        free(d.b);
    }
    return st;
}

/* ---- tokenizer_config.json -------------------------------------------------------------------- */

/* bos_token / eos_token: a string, {"content": ...} (an AddedToken), or null. */
static bt_status config_token(const loader *ld, json_t *config, const char *key, const char *dflt, const char **out)
{
    json_t *v = json_object_get(config, key);
    *out = dflt;
    if (!v) return BT_OK;
    if (json_is_null(v)) {
        *out = NULL;
        return BT_OK;
    }
    if (json_is_object(v)) v = json_object_get(v, "content");
    if (!json_is_string(v))
        return bt_error(BT_ERR_MODEL, "%s: %s: must be a token (a string or {\"content\": ...}) or null", ld->config_name, key);
    *out = json_string_value(v);
    return BT_OK;
}

static bt_status config_bool(const loader *ld, json_t *config, const char *key, int *present, int *out)
{
    json_t *v = json_object_get(config, key);
    *present = v && !json_is_null(v);
    if (!*present) return BT_OK;
    if (!json_is_boolean(v)) return bt_error(BT_ERR_MODEL, "%s: %s: must be true or false", ld->config_name, key);
    *out = json_is_true(v);
    return BT_OK;
}

static int is_llama_class(const char *cls)
{
    return cls && (strcmp(cls, "LlamaTokenizer") == 0 || strcmp(cls, "LlamaTokenizerFast") == 0);
}

/* LlamaTokenizerFast.update_post_processor: [bos if add_bos_token] $A [eos if add_eos_token]. */
static bt_status llama_template(const loader *ld, int add_bos, int add_eos, const char *bos, const char *eos)
{
    bt_tokenizer *t = ld->t;
    tok_template tp = {0};
    const char *which[2] = {bos, eos};
    int want[2] = {add_bos, add_eos};
    bt_status st = BT_OK;
    for (int k = 0; k < 2 && st == BT_OK; k++) {
        if (!want[k]) continue;
        const char *key = k ? "eos_token" : "bos_token";
        if (!which[k]) {
            st = bt_error(BT_ERR_MODEL, "%s: add_%s is true but %s is null", ld->config_name, key, key);
            break;
        }
        int32_t id = tok_token_id(t, which[k], strlen(which[k]));
        if (id < 0) {
            st = bt_error(BT_ERR_MODEL, "%s: %s \"%s\" is not a token of %s", ld->config_name, key, which[k], ld->name);
            break;
        }
        int32_t **ids = k ? &tp.suffix : &tp.prefix;
        size_t *n = k ? &tp.n_suffix : &tp.n_prefix;
        if (!(*ids = malloc(sizeof **ids))) st = bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        else {
            (*ids)[0] = id;
            *n = 1;
        }
    }
    for (size_t i = 0; i < t->n_post && st == BT_OK; i++) {
        free(t->post[i].prefix);
        free(t->post[i].suffix);
    }
    if (st == BT_OK) {
        t->n_post = 0;
        st = add_template(t, tp);
    }
    if (st != BT_OK) {
        free(tp.prefix);
        free(tp.suffix);
    }
    return st;
}

/* What the post-processor puts before ($A) or after it, all templates together. */
static size_t template_count(const bt_tokenizer *t, int after, int32_t *first)
{
    size_t n = 0;
    for (size_t i = 0; i < t->n_post; i++) {
        size_t k = after ? t->post[i].n_suffix : t->post[i].n_prefix;
        if (k && first) *first = after ? t->post[i].suffix[k - 1] : t->post[i].prefix[0];
        n += k;
    }
    return n;
}

static bt_status load_config(loader *ld, json_t *config)
{
    if (!json_is_object(config)) return bt_error(BT_ERR_MODEL, "%s: must be a JSON object", ld->config_name);
    int present, clean = 0, add_bos = 1, add_eos = 0, has_bos, has_eos;
    BT_TRY(config_bool(ld, config, "clean_up_tokenization_spaces", &present, &clean));
    ld->t->clean_up_spaces = present && clean;
    BT_TRY(config_bool(ld, config, "add_bos_token", &has_bos, &add_bos));
    BT_TRY(config_bool(ld, config, "add_eos_token", &has_eos, &add_eos));
    json_t *cls = json_object_get(config, "tokenizer_class");
    const char *cls_name = json_is_string(cls) ? json_string_value(cls) : NULL;
    const char *bos, *eos;
    if (is_llama_class(cls_name)) {
        json_t *aps = json_object_get(config, "add_prefix_space");
        if (aps && !json_is_null(aps))
            return bt_error(BT_ERR_MODEL, "%s: add_prefix_space: transformers then rebuilds the tokenizer from the "
                                          "SentencePiece model, which baton does not read", ld->config_name);
        BT_TRY(config_token(ld, config, "bos_token", "<s>", &bos));
        BT_TRY(config_token(ld, config, "eos_token", "</s>", &eos));
        return llama_template(ld, has_bos ? add_bos : 1, has_eos ? add_eos : 0, bos, eos);
    }
    /* other classes: transformers 4.40 leaves the file's post-processor alone; the keys must agree */
    const char *keys[2] = {"add_bos_token", "add_eos_token"};
    int has[2] = {has_bos, has_eos}, value[2] = {add_bos, add_eos};
    for (int k = 0; k < 2; k++) {
        if (!has[k]) continue;
        int32_t got = -1, id = -1;
        const char *tok;
        BT_TRY(config_token(ld, config, k ? "eos_token" : "bos_token", NULL, &tok));
        if (tok) id = tok_token_id(ld->t, tok, strlen(tok));
        int adds = template_count(ld->t, k, &got) > 0 && (id < 0 || got == id);
        if (adds != value[k])
            return bt_error(BT_ERR_MODEL, "%s: %s is %s, but %s's post_processor %s (and tokenizer_class %s%s%s does not "
                                          "rebuild it)", ld->config_name, keys[k], value[k] ? "true" : "false", ld->name,
                            adds ? "adds it" : "does not add it", cls_name ? "\"" : "", cls_name ? cls_name : "(none)",
                            cls_name ? "\"" : "");
    }
    return BT_OK;
}

/* ---- the whole file ------------------------------------------------------------------------------ */

bt_status tok_load(bt_tokenizer *t, json_t *root, json_t *config, const char *name, const char *config_name)
{
    loader ld = {.t = t, .name = name, .config_name = config_name};
    if (!json_is_object(root)) return bt_error(BT_ERR_MODEL, "%s: must be a JSON object", name);
    static const char *const keys[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                       "pre_tokenizer", "post_processor", "decoder", "model", NULL};
    BT_TRY(only_keys(&ld, root, "", keys));
    const char *version;
    BT_TRY(get_string(&ld, root, "version", "", 1, &version, NULL));
    if (version && strcmp(version, "1.0") != 0) return bad(&ld, "version", "\"%s\" is not supported (1.0 is)", version);
    static const char *const unused[] = {"truncation", "padding"};
    for (int k = 0; k < 2; k++) {
        json_t *x = json_object_get(root, unused[k]);
        if (x && !json_is_null(x)) return bad(&ld, unused[k], "is not supported (only null: baton encodes whole texts)");
    }
    json_t *v = json_object_get(root, "model");
    if (!v) return bad(&ld, "model", "missing");
    BT_TRY(load_model(&ld, v, "model"));
    if ((v = json_object_get(root, "normalizer")) && !json_is_null(v)) {
        BT_TRY(load_normalizer(&ld, v, "normalizer"));
        t->has_normalizer = 1;
    }
    if ((v = json_object_get(root, "pre_tokenizer")) && !json_is_null(v)) BT_TRY(load_pre_tokenizer(&ld, v, "pre_tokenizer"));
    if ((v = json_object_get(root, "added_tokens"))) BT_TRY(load_added(&ld, v, "added_tokens"));
    BT_TRY(added_patterns(t));
    t->n_ids = t->bpe.n_ids;
    for (size_t i = 0; i < t->n_added; i++)
        if (t->added[i].id >= t->n_ids) t->n_ids = t->added[i].id + 1;
    t->added_of = malloc((size_t)(t->n_ids ? t->n_ids : 1) * sizeof *t->added_of);
    if (!t->added_of) return bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < t->n_ids; i++) t->added_of[i] = -1;
    for (size_t i = 0; i < t->n_added; i++) t->added_of[t->added[i].id] = (int32_t)i;
    if ((v = json_object_get(root, "post_processor")) && !json_is_null(v)) BT_TRY(load_post(&ld, v, "post_processor"));
    if ((v = json_object_get(root, "decoder")) && !json_is_null(v)) {
        BT_TRY(load_decoder(&ld, v, "decoder"));
        t->has_decoder = 1;
    }
    if (config) BT_TRY(load_config(&ld, config));
    return BT_OK;
}
