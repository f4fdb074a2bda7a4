/* io/text.c: character vocabularies, llm.c token shards and next-token windows (see text.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/error.h"
#include "core/util.h"
#include "io/atomic_file.h"
#include "io/text.h"

void bt_vocab_build(const unsigned char *text, size_t n, int bytes, bt_vocab *out)
{
    int seen[256] = {0};
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < n; i++) seen[text[i]] = 1;
    for (int b = 0; b < 256; b++) {
        out->token[b] = -1;
        if (bytes || seen[b]) {
            out->token[b] = (int16_t)out->size;
            out->byte[out->size++] = (unsigned char)b;
        }
    }
}

bt_status bt_vocab_encode(const bt_vocab *v, const unsigned char *text, size_t n, uint16_t *tokens)
{
    for (size_t i = 0; i < n; i++) {
        if (v->token[text[i]] < 0)
            return bt_error(BT_ERR_INVALID_ARG, "text: byte 0x%02x at offset %zu is not in the vocabulary of %d",
                            text[i], i, v->size);
        tokens[i] = (uint16_t)v->token[text[i]];
    }
    return BT_OK;
}

bt_status bt_vocab_save(const bt_vocab *v, const char *path)
{
    char line[4 + 1 + 2 * 256 + 2]; /* "256 " and two hex digits per byte, then '\n' */
    int n = snprintf(line, sizeof line, "%d ", v->size);
    for (int k = 0; k < v->size; k++) n += snprintf(line + n, sizeof line - (size_t)n, "%02x", v->byte[k]);
    line[n++] = '\n';
    return bt_atomic_file_write_all(path, line, (size_t)n);
}

bt_status bt_vocab_load(const char *path, bt_vocab *out)
{
    unsigned char *text = NULL;
    size_t n = 0;
    BT_TRY(bt_text_read(path, &text, &n));
    int size = 0, used = 0;
    bt_status st = BT_OK;
    memset(out, 0, sizeof *out);
    for (int b = 0; b < 256; b++) out->token[b] = -1;
    if (sscanf((const char *)text, "%d %n", &size, &used) != 1 || size < 1 || size > 256 ||
        n < (size_t)used + 2 * (size_t)size) {
        st = bt_error(BT_ERR_IO, "%s: not a vocabulary file (a count from 1 to 256, then two hex digits per byte)", path);
        goto done;
    }
    for (int k = 0; k < size; k++) {
        unsigned b;
        char hex[3] = {(char)text[used + 2 * k], (char)text[used + 2 * k + 1], 0};
        char *end;
        b = (unsigned)strtoul(hex, &end, 16);
        if (*end != 0 || out->token[b] >= 0 || (k > 0 && b <= out->byte[k - 1])) {
            st = bt_error(BT_ERR_IO, "%s: byte %d of the vocabulary ('%s') is not a new byte in increasing order", path, k, hex);
            goto done;
        }
        out->byte[k] = (unsigned char)b;
        out->token[b] = (int16_t)k;
    }
    out->size = size;
done:
    free(text);
    return st;
}

bt_status bt_text_read(const char *path, unsigned char **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return bt_error(BT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    unsigned char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        unsigned char *bigger = realloc(buf, 2 * cap + 1);
        if (!bigger) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = bigger;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf) return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    if (err) {
        free(buf);
        return bt_error(BT_ERR_IO, "%s: read error", path);
    }
    buf[len] = 0;
    *out = buf;
    *n = len;
    return BT_OK;
}

bt_status bt_tokens_write_bin(const char *path, const uint16_t *tokens, size_t n)
{
    if (n > INT32_MAX) return bt_error(BT_ERR_INVALID_ARG, "%s: %zu tokens do not fit one shard", path, n);
    int32_t header[256] = {BT_LLMC_MAGIC, BT_LLMC_VERSION, (int32_t)n};
    FILE *f = fopen(path, "wb");
    if (!f) return bt_error(BT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    int ok = fwrite(header, sizeof header, 1, f) == 1 && fwrite(tokens, 2, n, f) == n;
    if (fclose(f) != 0 || !ok) return bt_error(BT_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    return BT_OK;
}

bt_status bt_tokens_read_bin(const char *path, uint16_t **out, size_t *n)
{
    unsigned char *raw = NULL;
    size_t len = 0;
    *out = NULL;
    *n = 0;
    BT_TRY(bt_text_read(path, &raw, &len));
    int32_t header[256];
    if (len < sizeof header) {
        free(raw);
        return bt_error(BT_ERR_IO, "%s: %zu bytes, shorter than an llm.c header (1024)", path, len);
    }
    memcpy(header, raw, sizeof header);
    if (header[0] != BT_LLMC_MAGIC || header[1] != BT_LLMC_VERSION || header[2] < 0 ||
        len != sizeof header + 2 * (size_t)header[2]) {
        bt_status st = bt_error(BT_ERR_IO,
                                "%s: not an llm.c token shard (magic %d, version %d, %d tokens in a file of "
                                "%zu bytes; expected magic %d, version %d, 1024 + 2 * tokens bytes)",
                                path, header[0], header[1], header[2], len, BT_LLMC_MAGIC, BT_LLMC_VERSION);
        free(raw);
        return st;
    }
    *n = (size_t)header[2];
    *out = malloc(*n * 2 + 2);
    if (!*out) {
        free(raw);
        return bt_error(BT_ERR_NOMEM, "%s: out of memory", path);
    }
    memcpy(*out, raw + sizeof header, *n * 2);
    free(raw);
    return BT_OK;
}

void bt_text_windows(const uint16_t *tokens, size_t n, int seq_len, int batch, uint64_t *rng,
                     int32_t *idx, int32_t *label)
{
    const uint64_t starts = (uint64_t)(n - (size_t)seq_len);
    for (int b = 0; b < batch; b++) {
        const size_t o = (size_t)(bt_rng_next(rng) % starts);
        for (int t = 0; t < seq_len; t++) {
            idx[b * seq_len + t] = tokens[o + (size_t)t];
            label[b * seq_len + t] = tokens[o + (size_t)t + 1];
        }
    }
}
