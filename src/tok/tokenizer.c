/* tok/tokenizer.c: loading, encoding and decoding (tok/tok.h). Encoding runs tokenizers' steps on
 * pieces of the text: added tokens that are not normalized are matched in the original text; each
 * piece between them is normalized and searched for the normalized added tokens; the pre-tokenizers
 * split and transform what is still text; the BPE model gives each piece's ids (a word cache per
 * call: a word seen before costs one lookup); and the post-processor's templates wrap the result.
 * Decoding maps ids to token strings (added tokens first), leaves out special ones when asked,
 * runs the decoders (no decoder: the tokens joined by spaces) and transformers' clean-up of spaces
 * when tokenizer_config.json asks for it. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/error.h"
#include "tok/tok_internal.h"

int32_t tok_token_id(const bt_tokenizer *t, const char *s, size_t n)
{
    int64_t v;
    if (tok_map_get(&t->added_ids, s, n, &v)) return (int32_t)v;
    if (tok_map_get(&t->bpe.vocab, s, n, &v)) return (int32_t)v;
    return -1;
}

int32_t bt_tokenizer_token_id(const bt_tokenizer *t, const char *token) { return tok_token_id(t, token, strlen(token)); }

int64_t bt_tokenizer_vocab_size(const bt_tokenizer *t) { return t->n_ids; }

void bt_tokenizer_destroy(bt_tokenizer *t)
{
    if (!t) return;
    free(t->name);
    for (size_t i = 0; i < t->n_added; i++) {
        free(t->added[i].content);
        free(t->added[i].pattern);
    }
    free(t->added);
    tok_matcher_free(&t->match_raw);
    tok_matcher_free(&t->match_normalized);
    for (size_t i = 0; i < t->n_norm; i++) {
        free(t->norm[i].a);
        free(t->norm[i].b);
    }
    free(t->norm);
    for (size_t i = 0; i < t->n_pre; i++) {
        tok_regex_free(t->pre[i].re);
        free(t->pre[i].literal);
    }
    free(t->pre);
    tok_bpe_free(&t->bpe);
    for (size_t i = 0; i < t->n_post; i++) {
        free(t->post[i].prefix);
        free(t->post[i].suffix);
    }
    free(t->post);
    for (size_t i = 0; i < t->n_dec; i++) {
        free(t->dec[i].a);
        free(t->dec[i].b);
    }
    free(t->dec);
    tok_map_free(&t->special);
    tok_map_free(&t->added_ids);
    free(t->added_of);
    free(t);
}

static bt_status parse(const char *text, size_t len, const char *name, json_t **out)
{
    json_error_t err;
    *out = json_loadb(text, len, JSON_REJECT_DUPLICATES, &err);
    if (!*out) return bt_error(BT_ERR_MODEL, "%s:%d:%d: %s", name, err.line, err.column, err.text);
    return BT_OK;
}

static bt_status from_json(const char *json, size_t len, const char *config, size_t config_len, const char *name,
                           const char *config_name, bt_tokenizer **out)
{
    *out = NULL;
    json_t *root = NULL, *cfg = NULL;
    bt_tokenizer *t = calloc(1, sizeof *t);
    bt_status st = BT_OK;
    if (!t || !(t->name = strdup(name))) {
        st = bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    BT_TRY_GOTO(st, parse(json, len, name, &root), done);
    if (config) BT_TRY_GOTO(st, parse(config, config_len, config_name, &cfg), done);
    BT_TRY_GOTO(st, tok_load(t, root, cfg, name, config_name), done);
    *out = t;
    t = NULL;
done:
    json_decref(root);
    json_decref(cfg);
    bt_tokenizer_destroy(t);
    return st;
}

bt_status bt_tokenizer_from_json(const char *json, size_t len, const char *config, size_t config_len, const char *name,
                                 bt_tokenizer **out)
{
    char cname[512];
    snprintf(cname, sizeof cname, "%s (tokenizer_config.json)", name);
    return from_json(json, len, config, config_len, name, cname, out);
}

/* The whole file in *out (malloc'ed); *exists 0 when it is not there and missing_ok. */
static bt_status read_file(const char *path, int missing_ok, char **out, size_t *len, int *exists)
{
    *out = NULL;
    *len = 0;
    *exists = 1;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (missing_ok && errno == ENOENT) {
            *exists = 0;
            return BT_OK;
        }
        return bt_error(errno == ENOENT ? BT_ERR_INVALID_ARG : BT_ERR_IO, "%s: cannot read: %s", path, strerror(errno));
    }
    tok_buf b = {0};
    char chunk[65536];
    size_t k;
    bt_status st = BT_OK;
    while (st == BT_OK && (k = fread(chunk, 1, sizeof chunk, f)) > 0) st = tok_buf_put(&b, chunk, k);
    if (st == BT_OK && ferror(f)) st = bt_error(BT_ERR_IO, "%s: read error: %s", path, strerror(errno));
    fclose(f);
    if (st != BT_OK) {
        free(b.s);
        return st;
    }
    *out = b.s;
    *len = b.n;
    return BT_OK;
}

bt_status bt_tokenizer_load(const char *path, bt_tokenizer **out)
{
    *out = NULL;
    struct stat sb;
    if (stat(path, &sb) != 0)
        return bt_error(errno == ENOENT ? BT_ERR_INVALID_ARG : BT_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = strlen(path);
    char *dir = malloc(n + 32), *file = malloc(n + 32), *cfg = malloc(n + 48);
    char *json = NULL, *config = NULL;
    size_t json_n = 0, config_n = 0;
    int exists;
    bt_status st = BT_OK;
    if (!dir || !file || !cfg) {
        st = bt_error(BT_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    if (S_ISDIR(sb.st_mode)) {
        strcpy(dir, path);
        snprintf(file, n + 32, "%s/tokenizer.json", path);
    } else {
        strcpy(file, path);
        strcpy(dir, path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else strcpy(dir, ".");
    }
    snprintf(cfg, n + 48, "%s/tokenizer_config.json", dir);
    BT_TRY_GOTO(st, read_file(file, 0, &json, &json_n, &exists), done);
    BT_TRY_GOTO(st, read_file(cfg, 1, &config, &config_n, &exists), done);
    st = from_json(json, json_n, exists ? config : NULL, config_n, file, cfg, out);
done:
    free(dir);
    free(file);
    free(cfg);
    free(json);
    free(config);
    return st;
}

/* Added tokens matched in the original text, then each text piece normalized and searched for the
 * normalized ones (AddedVocabulary::extract_and_normalize). */
static bt_status extract_and_normalize(const bt_tokenizer *t, const char *text, size_t len, tok_pieces *out)
{
    tok_pieces raw = {0};
    tok_buf norm = {0};
    bt_status st = tok_matcher_split(&t->match_raw, text, len, 1, &raw);
    for (size_t k = 0; k < raw.n && st == BT_OK; k++) {
        const tok_piece *p = &raw.p[k];
        const char *s = raw.buf.s + p->off;
        if (p->token >= 0) {
            st = tok_pieces_add(out, s, p->len, p->token, p->at_start);
            continue;
        }
        if (t->has_normalizer) {
            st = tok_normalize(t->norm, t->n_norm, s, p->len, &norm);
            if (st == BT_OK) st = tok_matcher_split(&t->match_normalized, norm.s, norm.n, p->at_start, out);
        } else
            st = tok_matcher_split(&t->match_normalized, s, p->len, p->at_start, out);
    }
    tok_pieces_free(&raw);
    free(norm.s);
    return st;
}

bt_status bt_tokenizer_encode(const bt_tokenizer *t, const char *text, size_t len, int add_special, bt_tok_ids *out)
{
    size_t bad = tok_utf8_check(text, len);
    if (bad < len) return bt_error(BT_ERR_INVALID_ARG, "the text is not valid UTF-8 (at byte %zu)", bad);
    tok_pieces a = {0}, b = {0};
    tok_map cache = {0};
    bt_tok_ids cache_ids = {0}, body = {0};
    bt_status st = extract_and_normalize(t, text, len, &a);
    for (size_t k = 0; k < t->n_pre && st == BT_OK; k++) {
        b.n = 0;
        b.buf.n = 0;
        st = tok_pre_tokenize(&t->pre[k], &a, &b);
        tok_pieces_swap(&a, &b);
    }
    for (size_t k = 0; k < a.n && st == BT_OK; k++) {
        const tok_piece *p = &a.p[k];
        if (p->token >= 0)
            st = tok_ids_push(&body, p->token);
        else
            st = tok_bpe_tokenize(&t->bpe, a.buf.s + p->off, p->len, &cache, &cache_ids, &body);
    }
    /* the templates in order, each around what the ones before made */
    for (size_t k = t->n_post; add_special && k-- > 0 && st == BT_OK;)
        for (size_t i = 0; i < t->post[k].n_prefix && st == BT_OK; i++) st = tok_ids_push(out, t->post[k].prefix[i]);
    for (size_t i = 0; i < body.n && st == BT_OK; i++) st = tok_ids_push(out, body.ids[i]);
    for (size_t k = 0; add_special && k < t->n_post && st == BT_OK; k++)
        for (size_t i = 0; i < t->post[k].n_suffix && st == BT_OK; i++) st = tok_ids_push(out, t->post[k].suffix[i]);
    tok_pieces_free(&a);
    tok_pieces_free(&b);
    tok_map_free(&cache);
    free(cache_ids.ids);
    free(body.ids);
    return st;
}

bt_status bt_tokenizer_decode(const bt_tokenizer *t, const int32_t *ids, size_t n, int skip_special, char **text,
                              size_t *len)
{
    *text = NULL;
    *len = 0;
    tok_strs a = {0}, b = {0};
    tok_buf out = {0};
    bt_status st = BT_OK;
    for (size_t i = 0; i < n && st == BT_OK; i++) {
        int32_t id = ids[i];
        const char *s = NULL;
        size_t sn = 0;
        if (id >= 0 && id < t->n_ids && t->added_of[id] >= 0) {
            s = t->added[t->added_of[id]].content;
            sn = t->added[t->added_of[id]].n;
        } else if (id >= 0 && id < t->bpe.n_ids && t->bpe.token_of[id]) {
            s = t->bpe.token_of[id];
            sn = t->bpe.token_len[id];
        }
        if (!s) {
            st = bt_error(BT_ERR_INVALID_ARG, "id %ld (the %zu%s of the ids) is not a token of %s (ids run from 0 to %ld)",
                          (long)id, i + 1, i == 0 ? "st" : i == 1 ? "nd" : i == 2 ? "rd" : "th", t->name, (long)t->n_ids - 1);
            break;
        }
        int64_t x;
        if (skip_special && tok_map_get(&t->special, s, sn, &x)) continue;
        st = tok_strs_add(&a, s, sn);
    }
    for (size_t k = 0; k < t->n_dec && st == BT_OK; k++) {
        tok_strs_free(&b);
        st = tok_decode_step(&t->dec[k], &a, &b);
        tok_strs tmp = a;
        a = b;
        b = tmp;
    }
    for (size_t i = 0; i < a.n && st == BT_OK; i++) {
        if (!t->has_decoder && i > 0) st = tok_buf_put(&out, " ", 1);
        if (st == BT_OK) st = tok_buf_put(&out, a.s[i], a.len[i]);
    }
    if (st == BT_OK && !out.s) st = tok_buf_put(&out, "", 0);
    if (st == BT_OK && t->clean_up_spaces) st = tok_clean_up_spaces(&out);
    tok_strs_free(&a);
    tok_strs_free(&b);
    if (st != BT_OK) {
        free(out.s);
        return st;
    }
    *text = out.s;
    *len = out.n;
    return BT_OK;
}
