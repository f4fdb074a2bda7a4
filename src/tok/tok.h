/* tok/tok.h: Hugging Face tokenizers in C. Loads a `tokenizer.json` as the `tokenizers` library
 * (0.19) defines it, for the two kinds Llama-family models use: byte-level BPE (GPT-2, Llama 3,
 * Qwen2: the file's split regex through PCRE2, the byte-level alphabet and decoder) and
 * SentencePiece-style BPE (Llama 2, Mistral: byte fallback, the metaspace normalizer or
 * pre-tokenizer); added and special tokens; the post-processor's BOS/EOS; and, from
 * tokenizer_config.json beside it, `add_bos_token` / `add_eos_token` and
 * `clean_up_tokenization_spaces`. Anything in the file it does not implement is refused at load
 * (BT_ERR_MODEL) with a message naming its JSON path (`pre_tokenizer.pretokenizers[1].type`).
 * docs/tokenizers.md lists what is supported. Encoding gives the ids `tokenizers` gives; decoding
 * gives its text. A loaded tokenizer is read-only: encode and decode may run on several threads.
 * Plain data: it sees neither the graph nor the engine. */
#ifndef BT_TOK_TOK_H
#define BT_TOK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"

typedef struct bt_tokenizer bt_tokenizer;

/* path: a directory holding tokenizer.json, or the tokenizer.json file itself; in both cases the
 * tokenizer_config.json of that directory is read too when it exists. *out is the caller's
 * (bt_tokenizer_destroy). Errors name the file, and within it the JSON path. */
bt_status bt_tokenizer_load(const char *path, bt_tokenizer **out);
/* The same from texts in memory: json (len bytes) is the tokenizer.json, config (config_len bytes,
 * or NULL) the tokenizer_config.json; name labels the messages. */
bt_status bt_tokenizer_from_json(const char *json, size_t len, const char *config, size_t config_len,
                                 const char *name, bt_tokenizer **out);
void bt_tokenizer_destroy(bt_tokenizer *t);

/* A growing array of token ids; free ids with free(). */
typedef struct bt_tok_ids {
    int32_t *ids;
    size_t n, cap;
} bt_tok_ids;

/* Appends the ids of text[0..len) (UTF-8, else BT_ERR_INVALID_ARG naming the byte offset) to
 * out; with add_special, the post-processor's tokens (BOS, EOS) too. */
bt_status bt_tokenizer_encode(const bt_tokenizer *t, const char *text, size_t len, int add_special,
                              bt_tok_ids *out);
/* The text of ids[0..n) in *text (malloc'ed, NUL-terminated, *len bytes without the NUL): the
 * file's decoder, then tokenizer_config.json's clean-up of spaces when it asks for it. With
 * skip_special, special added tokens are left out. An id without a token is BT_ERR_INVALID_ARG
 * naming it and its position. */
bt_status bt_tokenizer_decode(const bt_tokenizer *t, const int32_t *ids, size_t n, int skip_special,
                              char **text, size_t *len);

/* One more than the largest id the tokenizer has (model vocabulary and added tokens). */
int64_t bt_tokenizer_vocab_size(const bt_tokenizer *t);
/* The id of a token (an added token's content, else a model vocabulary entry), or -1. */
int32_t bt_tokenizer_token_id(const bt_tokenizer *t, const char *token);
/* Whether this build can load byte-level tokenizers (PCRE2) and the NFC family of normalizers
 * (libunistring). */
int bt_tokenizer_have_regex(void);
int bt_tokenizer_have_unicode_normalization(void);

#endif
