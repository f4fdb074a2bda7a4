/* tok/tok_internal.h: what the files of src/tok share. A tokenizer is a pipeline of plain parts
 * read from tokenizer.json by load.c: added tokens (added.c), normalizers (normalize.c),
 * pre-tokenizers (pretok.c, regexes through regex.c), the BPE model (bpe.c), the post-processor's
 * templates and the decoders (decode.c); tokenizer.c drives them. Text moves between the steps as
 * pieces: byte ranges of one buffer, each either plain text or an already chosen token. All text is
 * valid UTF-8 (checked on entry), and every step keeps it so, as the Rust library's `str` does. */
#ifndef BT_TOK_INTERNAL_H
#define BT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"
#include "tok/tok.h"

/* ---- UTF-8 and the byte-level alphabet (utf8.c) ------------------------------------------ */

/* Length of the UTF-8 sequence starting at s[0] (1..4), for valid UTF-8. */
size_t tok_utf8_len(unsigned char c);
/* Decodes the character at s (valid UTF-8) into *cp; returns its length. */
size_t tok_utf8_decode(const char *s, uint32_t *cp);
/* Encodes cp into out (4 bytes of room); returns the length. */
size_t tok_utf8_encode(uint32_t cp, char *out);
/* Offset of the first byte of s[0..n) that is not valid UTF-8, or n when all of it is. */
size_t tok_utf8_check(const char *s, size_t n);
/* Unicode White_Space (Rust's char::is_whitespace). */
int tok_is_whitespace(uint32_t cp);
/* GPT-2's bytes_to_unicode: the character standing for byte b, and back (-1: not in the alphabet). */
uint32_t tok_byte_char(unsigned char b);
int tok_char_byte(uint32_t cp);

/* A growing byte buffer. */
typedef struct tok_buf {
    char *s;
    size_t n, cap;
} tok_buf;
bt_status tok_buf_put(tok_buf *b, const void *data, size_t n);
/* Appends bytes as Rust's String::from_utf8_lossy does: each maximal invalid subsequence becomes
 * U+FFFD. */
bt_status tok_buf_put_lossy(tok_buf *b, const unsigned char *data, size_t n);
bt_status tok_ids_push(bt_tok_ids *ids, int32_t id);

/* ---- hash maps (map.c) --------------------------------------------------------------------- */

/* Byte string -> int64. Keys are copied. */
typedef struct tok_map_entry {
    char *key;
    uint32_t len, hash;
    int64_t value;
} tok_map_entry;
typedef struct tok_map {
    tok_map_entry *slots; /* key NULL: empty */
    size_t cap, count;
} tok_map;
/* Sets key -> value (replacing). */
bt_status tok_map_set(tok_map *m, const char *key, size_t len, int64_t value);
/* 1 and *value when key is there, else 0. */
int tok_map_get(const tok_map *m, const char *key, size_t len, int64_t *value);
void tok_map_free(tok_map *m);

/* (left id, right id) -> (rank, merged id): BPE's merges. */
typedef struct tok_pair_map {
    uint64_t *keys; /* UINT64_MAX: empty */
    uint64_t *vals; /* rank << 32 | id */
    size_t cap, count;
} tok_pair_map;
bt_status tok_pair_set(tok_pair_map *m, uint32_t a, uint32_t b, uint32_t rank, uint32_t id);
int tok_pair_get(const tok_pair_map *m, uint32_t a, uint32_t b, uint32_t *rank, uint32_t *id);
void tok_pair_free(tok_pair_map *m);

/* ---- pieces -------------------------------------------------------------------------------- */

typedef struct tok_piece {
    size_t off, len; /* in the list's buffer */
    int32_t token;   /* an added token's id, or -1 for text still to tokenize */
    int at_start;    /* the piece begins at offset 0 of the original text (Metaspace's "first") */
} tok_piece;
typedef struct tok_pieces {
    tok_buf buf;
    tok_piece *p;
    size_t n, cap;
} tok_pieces;
/* Appends a piece holding a copy of s[0..n); empty text pieces are dropped, as tokenizers drops
 * empty splits. */
bt_status tok_pieces_add(tok_pieces *l, const char *s, size_t n, int32_t token, int at_start);
void tok_pieces_free(tok_pieces *l);
void tok_pieces_swap(tok_pieces *a, tok_pieces *b);

/* ---- regexes (regex.c: PCRE2 with Oniguruma's meaning of the pattern) ------------------------ */

typedef struct tok_regex tok_regex;
/* Compiles an Oniguruma (Ruby syntax) pattern as tokenizers' SysRegex does; a construct PCRE2
 * cannot give the same meaning is refused (BT_ERR_MODEL) naming path. Without PCRE2 in the
 * build: BT_ERR_MODEL saying so, naming path. */
bt_status tok_regex_compile(const char *pattern, size_t n, const char *path, tok_regex **out);
void tok_regex_free(tok_regex *re);
/* What matching needs besides the compiled pattern (match data, the JIT stack): one per thread
 * and regex, made once for all the pieces of a call. */
typedef struct tok_regex_scratch tok_regex_scratch;
bt_status tok_regex_scratch_new(const tok_regex *re, tok_regex_scratch **out);
void tok_regex_scratch_free(tok_regex_scratch *s);
/* Every match of re in s[0..n), Rust's find_iter order (an empty match right after a match is
 * skipped; after an empty match the search goes on one character later): pairs start, end in
 * *m (malloc'ed), *count pairs. */
bt_status tok_regex_matches(const tok_regex *re, tok_regex_scratch *scratch, const char *s, size_t n, size_t **m,
                            size_t *count);

/* ---- normalizers (normalize.c) ------------------------------------------------------------- */

typedef enum tok_norm_kind {
    TOK_NORM_NFC,
    TOK_NORM_NFD,
    TOK_NORM_NFKC,
    TOK_NORM_NFKD,
    TOK_NORM_PREPEND, /* a: the prefix */
    TOK_NORM_REPLACE  /* a -> b, literal */
} tok_norm_kind;
typedef struct tok_norm {
    tok_norm_kind kind;
    char *a, *b;
    size_t an, bn;
} tok_norm;
/* Runs the steps over s[0..n) into out (cleared first). */
bt_status tok_normalize(const tok_norm *steps, size_t n_steps, const char *s, size_t n, tok_buf *out);
/* Literal replace-all, left to right, non-overlapping (Rust's str::replace); pat non-empty. */
bt_status tok_replace_all(const char *s, size_t n, const char *pat, size_t pn, const char *with, size_t wn,
                          tok_buf *out);

/* ---- pre-tokenizers (pretok.c) ------------------------------------------------------------- */

typedef enum tok_split_behavior {
    TOK_SPLIT_REMOVED,
    TOK_SPLIT_ISOLATED,
    TOK_SPLIT_MERGED_PREVIOUS,
    TOK_SPLIT_MERGED_NEXT,
    TOK_SPLIT_CONTIGUOUS
} tok_split_behavior;
typedef enum tok_pre_kind { TOK_PRE_BYTE_LEVEL, TOK_PRE_SPLIT, TOK_PRE_METASPACE } tok_pre_kind;
typedef enum tok_prepend { TOK_PREPEND_NEVER, TOK_PREPEND_FIRST, TOK_PREPEND_ALWAYS } tok_prepend;
typedef struct tok_pre {
    tok_pre_kind kind;
    int add_prefix_space; /* ByteLevel */
    tok_regex *re;        /* ByteLevel with use_regex (GPT-2's), or Split's Regex pattern */
    char *literal;        /* Split's String pattern (when re is NULL) */
    size_t literal_n;
    tok_split_behavior behavior;
    int invert;
    char repl[4]; /* Metaspace's replacement character, UTF-8 */
    size_t repl_n;
    tok_prepend prepend;
    int split;
} tok_pre;
/* Runs one pre-tokenizer over every text piece of in, into out (token pieces pass through). */
bt_status tok_pre_tokenize(const tok_pre *p, const tok_pieces *in, tok_pieces *out);
/* The GPT-2 regex ByteLevel splits with when use_regex is true. */
extern const char tok_gpt2_pattern[];

/* ---- added tokens (added.c) ---------------------------------------------------------------- */

typedef struct tok_added {
    char *content;
    size_t n;
    int32_t id;
    int special, lstrip, rstrip, normalized;
    char *pattern; /* what is matched: the content, normalized by the normalizer when normalized */
    size_t pn;
} tok_added;
/* Leftmost-longest matching of a set of added tokens (aho-corasick's LeftmostLongest). */
typedef struct tok_matcher {
    const tok_added *tokens;
    size_t *order; /* indices into tokens, by first byte, longest pattern first */
    size_t n;
    size_t start[257];
} tok_matcher;
/* Builds the matcher of the tokens whose normalized flag equals `normalized`. */
bt_status tok_matcher_build(tok_matcher *m, const tok_added *tokens, size_t n, int normalized);
void tok_matcher_free(tok_matcher *m);
/* Splits piece text s[0..n) around the matched tokens (find_matches: lstrip and rstrip take the
 * whitespace beside a token into it) into out. */
bt_status tok_matcher_split(const tok_matcher *m, const char *s, size_t n, int at_start, tok_pieces *out);

/* ---- the BPE model (bpe.c) ----------------------------------------------------------------- */

typedef struct tok_bpe {
    tok_map vocab;        /* token (as the file writes it) -> id */
    char **token_of;      /* id -> token, NULL where no token has the id */
    uint32_t *token_len;
    int32_t n_ids;        /* largest id + 1 */
    size_t vocab_count;   /* entries (tokenizers' get_vocab_size) */
    tok_pair_map merges;
    uint32_t *first_cp, *last_cp; /* id -> the first and last character of its token */
    tok_pair_map joins;   /* (last character of a merge's left token, first of its right one) */
    int32_t unk;          /* -1: none */
    int byte_fallback, fuse_unk, ignore_merges;
} tok_bpe;
/* Ids of the text piece s[0..n) appended to out; cache (may be NULL) remembers words already
 * seen, cache_ids their ids. */
bt_status tok_bpe_tokenize(const tok_bpe *m, const char *s, size_t n, tok_map *cache, bt_tok_ids *cache_ids,
                           bt_tok_ids *out);
void tok_bpe_free(tok_bpe *m);

/* ---- post-processor and decoders (decode.c) ------------------------------------------------ */

/* One TemplateProcessing's single-sequence template: prefix ids, $A, suffix ids. */
typedef struct tok_template {
    int32_t *prefix, *suffix;
    size_t n_prefix, n_suffix;
} tok_template;

typedef enum tok_dec_kind {
    TOK_DEC_BYTE_LEVEL,
    TOK_DEC_REPLACE,       /* a -> b, literal */
    TOK_DEC_BYTE_FALLBACK,
    TOK_DEC_FUSE,
    TOK_DEC_STRIP,         /* ch: content, start, stop */
    TOK_DEC_METASPACE      /* ch: replacement, prepend */
} tok_dec_kind;
typedef struct tok_dec {
    tok_dec_kind kind;
    char *a, *b;
    size_t an, bn;
    uint32_t ch;
    size_t start, stop;
    tok_prepend prepend;
} tok_dec;

/* A list of token strings, each malloc'ed. */
typedef struct tok_strs {
    char **s;
    size_t *len;
    size_t n, cap;
} tok_strs;
bt_status tok_strs_add(tok_strs *l, const char *s, size_t n);
void tok_strs_free(tok_strs *l);
/* Runs one decoder's decode_chain over in into out. */
bt_status tok_decode_step(const tok_dec *d, const tok_strs *in, tok_strs *out);
/* transformers' clean_up_tokenization (" ." -> "." and the rest), in place on b. */
bt_status tok_clean_up_spaces(tok_buf *b);

/* ---- the tokenizer ------------------------------------------------------------------------- */

struct bt_tokenizer {
    char *name;
    tok_added *added;
    size_t n_added;
    tok_matcher match_raw, match_normalized;
    tok_norm *norm;
    size_t n_norm;
    int has_normalizer;
    tok_pre *pre;
    size_t n_pre;
    tok_bpe bpe;
    tok_template *post;
    size_t n_post;
    tok_dec *dec;
    size_t n_dec;
    int has_decoder;
    int clean_up_spaces;
    tok_map special;     /* contents of special added tokens (decode's skip) */
    tok_map added_ids;   /* added token content -> id */
    int32_t *added_of;   /* id -> index into added, -1 (n_ids entries) */
    int32_t n_ids;       /* largest id of the model or an added token, + 1 */
};

/* load.c builds t from the two documents; tokenizer.c owns the rest. */
struct json_t;
bt_status tok_load(bt_tokenizer *t, struct json_t *root, struct json_t *config, const char *name,
                   const char *config_name);
/* The id of token text s[0..n): added tokens first, then the model vocabulary; -1 if none. */
int32_t tok_token_id(const bt_tokenizer *t, const char *s, size_t n);

#endif
