/* io/text.h: text data for language models. A character vocabulary built from a text file (the
 * distinct bytes in byte order, as nanoGPT's shakespeare_char prepares it) or the 256 bytes
 * themselves, saved beside a checkpoint as one line of JSON-free text (`vocab.txt`: the count,
 * then the bytes as two hex digits each); token shards in llm.c's .bin format (a header of 256
 * little-endian int32: magic 20240520, version 1, token count; then uint16 tokens); and
 * seq_len windows with next-token labels drawn from a token array split into train and
 * validation parts (the first 1 - val_fraction of the tokens train, the rest validate).
 * Plain C, no graph: the trainer and the benchmarks feed what these return as i32 inputs. */
#ifndef BT_IO_TEXT_H
#define BT_IO_TEXT_H

#include <stddef.h>
#include <stdint.h>

#include "baton/status.h"

#define BT_LLMC_MAGIC 20240520
#define BT_LLMC_VERSION 1

typedef struct bt_vocab {
    int size;              /* tokens: 1..256 */
    unsigned char byte[256]; /* token -> byte */
    int16_t token[256];      /* byte -> token, -1 where the byte is not in the vocabulary */
} bt_vocab;

/* Every distinct byte of text[0..n) in byte order (bytes: 0: characters; 1: all 256 bytes). */
void bt_vocab_build(const unsigned char *text, size_t n, int bytes, bt_vocab *out);
/* tokens[i] = vocab token of text[i]; a byte outside the vocabulary is BT_ERR_INVALID_ARG naming
 * its offset. */
bt_status bt_vocab_encode(const bt_vocab *v, const unsigned char *text, size_t n, uint16_t *tokens);
/* Writes (atomically: io/atomic_file.h) / reads vocab.txt (see above); reading checks it completely. */
bt_status bt_vocab_save(const bt_vocab *v, const char *path);
bt_status bt_vocab_load(const char *path, bt_vocab *out);

/* The whole file in *out (malloc'ed, caller frees), *n bytes. */
bt_status bt_text_read(const char *path, unsigned char **out, size_t *n);
/* llm.c token shards: write n tokens; read a shard into *out (malloc'ed), checking the header
 * and that the file holds exactly the tokens it announces. */
bt_status bt_tokens_write_bin(const char *path, const uint16_t *tokens, size_t n);
bt_status bt_tokens_read_bin(const char *path, uint16_t **out, size_t *n);

/* batch windows of seq_len tokens starting at offsets drawn from *rng within tokens[0..n)
 * (n > seq_len): idx[b, t] = tokens[o_b + t], label[b, t] = tokens[o_b + t + 1]. */
void bt_text_windows(const uint16_t *tokens, size_t n, int seq_len, int batch, uint64_t *rng,
                     int32_t *idx, int32_t *label);

#endif
