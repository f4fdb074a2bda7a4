/* cli/cmd_tokenize.c: `baton tokenize MODEL [--text T | --file F] [--decode]`: a Hugging Face
 * tokenizer (MODEL: a directory holding tokenizer.json, or that file; tokenizer_config.json beside
 * it is read too) run on a text. Encoding prints the ids as decimal numbers separated by spaces on
 * one line, with the post-processor's tokens (BOS) unless --no-special; --decode reads such ids
 * (any whitespace between them) and prints their text, bytes exact and nothing added, special
 * tokens left out unless --keep-special. The input is --text's, --file's or standard input's. A
 * file's feature that src/tok does not implement, an id without a token, or a text that is not
 * UTF-8 is exit 2 naming it. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "tok/tok.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: baton tokenize MODEL [--text T | --file F] [--decode] [--no-special] [--keep-special]\n"
               "\n"
               "Runs a Hugging Face tokenizer: MODEL is a directory holding tokenizer.json (and perhaps\n"
               "tokenizer_config.json), or the tokenizer.json file. Prints the token ids of the text as decimal\n"
               "numbers separated by spaces on one line, with the BOS/EOS tokens the tokenizer adds.\n"
               "  --text T         the text to tokenize (default: standard input)\n"
               "  --file F         read the text from F\n"
               "  --decode         the input is token ids (separated by spaces or newlines): print their text,\n"
               "                   bytes exact, nothing added; special tokens (BOS, EOS, ...) are left out\n"
               "  --no-special     encode without the tokens the post-processor adds (BOS, EOS)\n"
               "  --keep-special   with --decode: keep the special tokens' text\n"
               "docs/tokenizers.md lists the tokenizer.json features baton implements; any other is refused.\n");
}

/* The whole of f into *out (malloc'ed), *n bytes. 0 on success, else errno. */
static int slurp(FILE *f, char **out, size_t *n)
{
    size_t cap = 1 << 16, len = 0, k;
    char *buf = malloc(cap);
    if (!buf) return ENOMEM;
    while ((k = fread(buf + len, 1, cap - len, f)) > 0) {
        len += k;
        if (len == cap) {
            char *b = realloc(buf, cap * 2);
            if (!b) {
                free(buf);
                return ENOMEM;
            }
            buf = b;
            cap *= 2;
        }
    }
    if (ferror(f)) {
        int e = errno ? errno : EIO;
        free(buf);
        return e;
    }
    *out = buf;
    *n = len;
    return 0;
}

static const char *ordinal(size_t i)
{
    return i % 100 >= 11 && i % 100 <= 13 ? "th" : i % 10 == 1 ? "st" : i % 10 == 2 ? "nd" : i % 10 == 3 ? "rd" : "th";
}

/* Ids from text: decimal numbers separated by whitespace. Exit code. */
static int parse_ids(const char *s, size_t n, bt_tok_ids *out)
{
    size_t i = 0;
    while (i < n) {
        while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
        if (i == n) break;
        size_t b = i;
        while (i < n && !(s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r')) i++;
        long long v = 0;
        int ok = i - b <= 10;
        for (size_t k = b; k < i && ok; k++) {
            ok = s[k] >= '0' && s[k] <= '9';
            v = v * 10 + (s[k] - '0');
        }
        if (!ok || v > INT32_MAX) {
            char word[48];
            size_t len = i - b < 40 ? i - b : 40;
            memcpy(word, s + b, len);
            word[len] = '\0';
            fprintf(stderr, "baton tokenize: --decode: the %zu%s id, \"", out->n + 1, ordinal(out->n + 1));
            bt_cli_print_escaped(stderr, word);
            fprintf(stderr, "%s\", is not a token id (a decimal number from 0 to %d)\n", i - b > 40 ? "..." : "", INT32_MAX);
            return BT_EXIT_USAGE;
        }
        int32_t *p = out->n == out->cap ? realloc(out->ids, (out->cap ? 2 * out->cap : 256) * sizeof *p) : out->ids;
        if (!p) {
            fprintf(stderr, "baton tokenize: out of memory\n");
            return BT_EXIT_RUNTIME;
        }
        if (out->n == out->cap) out->cap = out->cap ? 2 * out->cap : 256;
        out->ids = p;
        out->ids[out->n++] = (int32_t)v;
    }
    return BT_EXIT_OK;
}

static int print_ids(const bt_tok_ids *ids)
{
    for (size_t i = 0; i < ids->n; i++)
        if (printf(i ? " %d" : "%d", (int)ids->ids[i]) < 0) return 0;
    return putchar('\n') != EOF;
}

int bt_cmd_tokenize(int argc, char **argv)
{
    static const struct option longopts[] = {{"text", required_argument, NULL, 't'},
                                             {"file", required_argument, NULL, 'f'},
                                             {"decode", no_argument, NULL, 'd'},
                                             {"no-special", no_argument, NULL, 'n'},
                                             {"keep-special", no_argument, NULL, 'k'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *text = NULL, *file = NULL;
    int decode = 0, no_special = 0, keep_special = 0, c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (c) {
        case 't': text = optarg; break;
        case 'f': file = optarg; break;
        case 'd': decode = 1; break;
        case 'n': no_special = 1; break;
        case 'k': keep_special = 1; break;
        case 'h': usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("tokenize", argc, argv, c);
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "baton tokenize: %s (baton tokenize MODEL [--text T | --file F] [--decode])\n",
                argc - optind < 1 ? "no tokenizer given" : "more than one tokenizer given");
        return BT_EXIT_USAGE;
    }
    if (text && file) {
        fprintf(stderr, "baton tokenize: --text and --file both give the input: give one\n");
        return BT_EXIT_USAGE;
    }
    if (no_special && decode) {
        fprintf(stderr, "baton tokenize: --no-special is for encoding (with --decode, --keep-special keeps them)\n");
        return BT_EXIT_USAGE;
    }
    if (keep_special && !decode) {
        fprintf(stderr, "baton tokenize: --keep-special needs --decode\n");
        return BT_EXIT_USAGE;
    }
    char *input = NULL, *out_text = NULL;
    size_t input_n = 0, out_n = 0;
    bt_tok_ids ids = {0};
    bt_tokenizer *tok = NULL;
    int rc = BT_EXIT_OK;
    if (text) {
        input_n = strlen(text);
    } else {
        FILE *f = file ? fopen(file, "rb") : stdin;
        if (!f) {
            fprintf(stderr, "baton tokenize: --file ");
            bt_cli_print_escaped(stderr, file);
            fprintf(stderr, ": %s\n", strerror(errno));
            return errno == ENOENT || errno == EISDIR ? BT_EXIT_USAGE : BT_EXIT_RUNTIME;
        }
        int e = slurp(f, &input, &input_n);
        if (file) fclose(f);
        if (e) {
            fprintf(stderr, "baton tokenize: cannot read %s: %s\n", file ? file : "standard input", strerror(e));
            return e == EISDIR ? BT_EXIT_USAGE : BT_EXIT_RUNTIME;
        }
    }
    const char *in = text ? text : input;
    bt_status st = bt_tokenizer_load(argv[optind], &tok);
    if (st != BT_OK) {
        rc = bt_cli_fail("tokenize", st);
        goto done;
    }
    if (decode) {
        if ((rc = parse_ids(in, input_n, &ids)) != BT_EXIT_OK) goto done;
        st = bt_tokenizer_decode(tok, ids.ids, ids.n, !keep_special, &out_text, &out_n);
        if (st != BT_OK) {
            rc = bt_cli_fail("tokenize", st);
            goto done;
        }
        if (fwrite(out_text, 1, out_n, stdout) != out_n) rc = BT_EXIT_RUNTIME;
    } else {
        st = bt_tokenizer_encode(tok, in, input_n, !no_special, &ids);
        if (st != BT_OK) {
            rc = bt_cli_fail("tokenize", st);
            goto done;
        }
        if (!print_ids(&ids)) rc = BT_EXIT_RUNTIME;
    }
    if (fflush(stdout) != 0) rc = BT_EXIT_RUNTIME;
    if (rc == BT_EXIT_RUNTIME) fprintf(stderr, "baton tokenize: cannot write the output: %s\n", strerror(errno));
done:
    bt_tokenizer_destroy(tok);
    free(ids.ids);
    free(input);
    free(out_text);
    return rc;
}
