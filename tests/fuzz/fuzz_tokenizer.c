/* tests/fuzz/fuzz_tokenizer.c: libFuzzer harness for Hugging Face tokenizers (src/tok): the input
 * is a tokenizer.json, then a NUL byte and a text (no NUL: a fixed text). The file goes through
 * every check of the loader (tok/load.c: keys, types, paths, merges, added-token ids, regexes
 * through PCRE2); a file that loads encodes the text (which may not be UTF-8) with and without
 * the special tokens, decodes the ids both ways, and decodes ids made from the text's bytes
 * (most of them not tokens: an error, never a crash). Seeds (tests/fuzz/corpus/fuzz_tokenizer/,
 * written once with tokenizers 0.19.1): a Llama 3 style byte-level BPE with specials, lstrip and
 * rstrip tokens and a BOS template, a GPT-2 regex one with NFC, and a Llama 2 style one with byte
 * fallback, each followed by a text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tok/tok.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void decode_all(const bt_tokenizer *t, const int32_t *ids, size_t n)
{
    for (int skip = 0; skip < 2; skip++) {
        char *text = NULL;
        size_t len = 0;
        if (bt_tokenizer_decode(t, ids, n, skip, &text, &len) == BT_OK && strlen(text) > len) abort();
        free(text);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t json_n = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : "Hello world, it's 2024!\n\tcafe\xCC\x81 <mask>";
    size_t text_n = nul ? size - json_n - 1 : strlen(text);
    bt_tokenizer *t = NULL;
    if (bt_tokenizer_from_json((const char *)data, json_n, NULL, 0, "fuzz.json", &t) != BT_OK) return 0;
    for (int special = 0; special < 2; special++) {
        bt_tok_ids ids = {0};
        if (bt_tokenizer_encode(t, text, text_n, special, &ids) == BT_OK) decode_all(t, ids.ids, ids.n);
        free(ids.ids);
    }
    int32_t made[64];
    size_t n = text_n < 64 ? text_n : 64;
    int64_t v = bt_tokenizer_vocab_size(t);
    for (size_t i = 0; i < n; i++) made[i] = (int32_t)(((unsigned char)text[i] * 131) % (v + 2)) - 1;
    decode_all(t, made, n);
    bt_tokenizer_destroy(t);
    return 0;
}
