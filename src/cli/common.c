/* cli/common.c: what the subcommands share: loading a model with command-line flags turned into
 * overrides (so flags are validated exactly like the file), error reporting and number formats. */
#include <ctype.h>
#include <getopt.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/strutil.h"

int bt_cli_exit_code(bt_status status)
{
    switch (status) {
    case BT_OK: return BT_EXIT_OK;
    case BT_ERR_MODEL:
    case BT_ERR_SHAPE:
    case BT_ERR_INVALID_ARG:
    case BT_ERR_SCHEDULE: return BT_EXIT_USAGE;
    default: return BT_EXIT_RUNTIME;
    }
}

void bt_cli_print_error(const char *cmd)
{
    /* one write: stderr is unbuffered, and under mpirun the ranks' lines would interleave
     * mid-word if the message went out a character at a time */
    char msg[4096], line[4200];
    snprintf(line, sizeof line, "baton %s: %s\n", cmd, bt_cli_escape(bt_last_error(), msg, sizeof msg));
    fputs(line, stderr);
}

int bt_cli_fail(const char *cmd, bt_status status)
{
    bt_cli_print_error(cmd);
    return bt_cli_exit_code(status);
}

const char *bt_cli_escape(const char *s, char *buf, size_t size)
{
    size_t o = 0;
    if (!s) s = "";
    for (const unsigned char *p = (const unsigned char *)s; *p && o + 5 < size; p++) {
        if (*p < 0x20 || *p == 0x7f) o += (size_t)snprintf(buf + o, size - o, "\\x%02x", *p);
        else buf[o++] = (char)*p;
    }
    if (size) buf[o < size ? o : size - 1] = '\0';
    return buf;
}

int bt_cli_take_positional(const char *cmd, int argc, char **argv, int first, bt_cli_model_opts *o)
{
    for (int i = first; i < argc; i++) {
        if (strchr(argv[i], '=')) {
            if (o->n_overrides == (int)(sizeof o->overrides / sizeof o->overrides[0])) {
                fprintf(stderr, "baton %s: too many KEY=VALUE overrides\n", cmd);
                return BT_EXIT_USAGE;
            }
            o->overrides[o->n_overrides++] = argv[i];
        } else if (!o->path) {
            o->path = argv[i];
        } else {
            fprintf(stderr, "baton %s: unexpected argument '%s'\n", cmd, argv[i]);
            return BT_EXIT_USAGE;
        }
    }
    if (!o->path) {
        fprintf(stderr, "baton %s: no model file given (try baton %s --help)\n", cmd, cmd);
        return BT_EXIT_USAGE;
    }
    return BT_EXIT_OK;
}

/* --recompute: none (no layer), stage (every layer) or a comma-separated list of layer names,
 * replacing what the file said. A model that does not train cannot honour it: an error. */
static bt_status apply_recompute(const bt_cli_model_opts *o, bt_model *m)
{
    if (!m->train.enabled)
        return bt_error(BT_ERR_INVALID_ARG, "--recompute applies to training, and %s has no train: section",
                        o->path);
    int all = strcmp(o->recompute, "stage") == 0, none = strcmp(o->recompute, "none") == 0;
    BT_TRY(bt_graph_set_recompute(m->graph, -1, all));
    if (all || none) return BT_OK;
    const char *p = o->recompute;
    for (;;) {
        size_t len = strcspn(p, ",");
        char name[256];
        if (len == 0 || len >= sizeof name)
            return bt_error(BT_ERR_INVALID_ARG, "--recompute must be none, stage or layer names "
                            "separated by commas, not '%s'", o->recompute);
        memcpy(name, p, len);
        name[len] = '\0';
        int layer = bt_graph_find_layer(m->graph, name);
        if (layer < 0)
            return bt_error(BT_ERR_INVALID_ARG, "--recompute names '%s', which is no layer of %s", name, o->path);
        BT_TRY(bt_graph_set_recompute(m->graph, layer, 1));
        p += len;
        if (!*p) return BT_OK;
        p++;
    }
}

/* What the file (with the KEY=VALUE overrides, before the flags) says: parallel: auto, and whether
 * it trains (has train:). Both 0 where it does not load: the load with the flags then says why. */
static void file_peek(const bt_cli_model_opts *o, int *is_auto, int *trains)
{
    bt_model *m = NULL;
    int ok = bt_model_load(o->path, o->overrides, o->n_overrides, &m) == BT_OK;
    *is_auto = ok && m->parallel.auto_layout;
    *trains = ok && m->train.enabled;
    bt_model_destroy(m);
}

int bt_cli_refuse_hf_weights(const char *cmd, bt_model **m, int training)
{
    if (!*m || !(*m)->hf_dir) return BT_EXIT_OK;
    char shown[1024];
    if (strcmp(cmd, "generate") == 0) {
        fprintf(stderr,
                "baton generate: %s is a Hugging Face directory: generate does not use its tokenizer "
                "yet, so it cannot read a prompt the model understands (predict takes token ids: "
                "--input ids.npy; baton tokenize makes them)\n",
                bt_cli_escape((*m)->hf_dir, shown, sizeof shown));
    } else if (training) {
        fprintf(stderr,
                "baton run: %s is a Hugging Face directory: fine-tuning it (from its weights, on text its "
                "tokenizer reads, exported under its names) is not built yet, and a run from random "
                "weights would ignore the checkpoint; predict serves it on token ids\n",
                bt_cli_escape((*m)->hf_dir, shown, sizeof shown));
    } else if (bt_model_hf_check_weights(*m, 0) != BT_OK) {
        fprintf(stderr, "baton %s: %s\n", cmd, bt_last_error());
    } else {
        return BT_EXIT_OK;
    }
    bt_model_destroy(*m);
    *m = NULL;
    return BT_EXIT_USAGE;
}

int bt_cli_load_model(const char *cmd, const bt_cli_model_opts *o, bt_model **out)
{
    const char *ov[100];
    char *flags[10] = {NULL};
    int n = 0, nf = 0, is_auto = 0, trains = 0;
    *out = NULL;
    int prc = bt_cli_load_plugins(cmd, o);
    if (prc != BT_EXIT_OK) return prc;
    /* heap copies: a long --layout must never be cut short */
    if (o->devices) flags[nf++] = bt_strfmt("parallel.devices=%s", o->devices);
    if (o->stages > 0) flags[nf++] = bt_strfmt("parallel.pipeline.stages=%d", o->stages);
    if (o->microbatches > 0) flags[nf++] = bt_strfmt("parallel.pipeline.microbatches=%d", o->microbatches);
    if (o->schedule) flags[nf++] = bt_strfmt("parallel.pipeline.schedule=%s", o->schedule);
    if (o->virtual_stages > 0) flags[nf++] = bt_strfmt("parallel.pipeline.virtual=%d", o->virtual_stages);
    if (o->partition) flags[nf++] = bt_strfmt("parallel.pipeline.partition=%s", o->partition);
    if (o->balance) flags[nf++] = bt_strfmt("parallel.pipeline.partition={balance: [%s]}", o->balance);
    if (o->layout) flags[nf++] = bt_strfmt("parallel.pipeline.partition={layout: \"%s\"}", o->layout);
    const int layout_flags = nf;
    if (nf > 0 || o->batch > 0) file_peek(o, &is_auto, &trains);
    /* --batch beats train.batch, so the loader checks --microbatches against it, not the file's */
    if (o->batch > 0 && trains) flags[nf++] = bt_strfmt("train.batch=%lld", o->batch);
    bt_status st = BT_OK;
    for (int i = 0; i < o->n_overrides && n < 64; i++) ov[n++] = o->overrides[i];
    /* layout flags on a parallel: auto model replace auto with the layout they give (docs/cli.md) */
    if (layout_flags > 0 && is_auto) ov[n++] = "parallel={}";
    for (int i = 0; i < nf; i++) {
        if (!flags[i]) st = bt_error(BT_ERR_NOMEM, "out of memory");
        ov[n++] = flags[i];
    }
    if (st == BT_OK) st = bt_model_load(o->path, ov, n, out);
    for (int i = 0; i < nf; i++) free(flags[i]);
    if (st == BT_OK && o->recompute) st = apply_recompute(o, *out);
    if (st != BT_OK) {
        if (*out) bt_model_destroy(*out);
        *out = NULL;
        bt_cli_print_error(cmd);
        return BT_EXIT_USAGE;
    }
    /* --devices without --stages: one stage per device given (--devices cpu:0 runs the model as
     * one stage), unless the file's partition fixes the stages (balance, layout, stage: N). */
    bt_parallel_config *pc = &(*out)->parallel;
    if (o->devices && o->stages == 0 && pc->partition != BT_PARTITION_BALANCE &&
        pc->partition != BT_PARTITION_LAYOUT && pc->partition != BT_PARTITION_PINNED)
        pc->stages = 0;
    return BT_EXIT_OK;
}

/* Reads text as a whole decimal integer: an optional '-', then digits only (no spaces, no '+',
 * nothing after them). *neg and *mag get the sign and magnitude; 0 when it is not one or the
 * magnitude overflows 64 bits. */
static int read_integer(const char *text, int *neg, uint64_t *mag)
{
    const char *p = text;
    *neg = *p == '-';
    if (*neg) p++;
    if (!isdigit((unsigned char)*p)) return 0;
    uint64_t v = 0;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10) return 0;
        v = v * 10 + d;
    }
    *mag = v;
    return *p == '\0';
}

/* "baton CMD: OPTION: must be RANGE, got TEXT" (TEXT quoted unless it is a plain number), then
 * the one-line hint. */
static int bad_integer(const char *cmd, const char *option, const char *text, const char *range)
{
    int plain = *text != '\0' && strspn(text, "-0123456789") == strlen(text);
    fprintf(stderr, "baton %s: %s: must be %s, got %s", cmd, option, range, plain ? "" : "'");
    bt_cli_print_escaped(stderr, text);
    fprintf(stderr, "%s\n", plain ? "" : "'");
    bt_cli_hint(cmd);
    return BT_EXIT_USAGE;
}

int bt_cli_bad_value(const char *cmd, const char *option, const char *range, const char *text)
{
    return bad_integer(cmd, option, text ? text : "", range);
}

void bt_cli_hint(const char *cmd)
{
    fprintf(stderr, "(baton %s --help lists the options and their ranges)\n", cmd);
}

int bt_cli_bad_option(const char *cmd, int argc, char **argv, int opt)
{
    const char *arg = optind - 1 < argc && optind >= 1 ? argv[optind - 1] : "?";
    if (opt == ':')
        fprintf(stderr, "baton %s: %s needs a value\n", cmd, arg);
    else {
        fprintf(stderr, "baton %s: unknown option '", cmd);
        bt_cli_print_escaped(stderr, arg);
        fprintf(stderr, "'\n");
    }
    bt_cli_hint(cmd);
    return BT_EXIT_USAGE;
}

int bt_cli_parse_int(const char *cmd, const char *option, const char *text, long long lo, long long hi,
                     long long *out)
{
    char range[96];
    if (lo == 1 && hi == LLONG_MAX) snprintf(range, sizeof range, "a positive integer");
    else if (lo == 0 && hi == LLONG_MAX) snprintf(range, sizeof range, "an integer of 0 or more");
    else if (hi == LLONG_MAX) snprintf(range, sizeof range, "an integer of at least %lld", lo);
    else if (lo == 1) snprintf(range, sizeof range, "a positive integer up to %lld", hi);
    else snprintf(range, sizeof range, "an integer from %lld to %lld", lo, hi);
    int neg;
    uint64_t mag;
    if (!text || !read_integer(text, &neg, &mag)) return bad_integer(cmd, option, text ? text : "", range);
    long long v;
    if (neg) {
        if (mag > (uint64_t)LLONG_MAX + 1) return bad_integer(cmd, option, text, range);
        v = mag == (uint64_t)LLONG_MAX + 1 ? LLONG_MIN : -(long long)mag;
    } else {
        if (mag > (uint64_t)LLONG_MAX) return bad_integer(cmd, option, text, range);
        v = (long long)mag;
    }
    if (v < lo || v > hi) return bad_integer(cmd, option, text, range);
    *out = v;
    return BT_EXIT_OK;
}

int bt_cli_parse_int32(const char *cmd, const char *option, const char *text, int lo, int hi, int *out)
{
    long long v;
    int rc = bt_cli_parse_int(cmd, option, text, lo, hi, &v);
    if (rc == BT_EXIT_OK) *out = (int)v;
    return rc;
}

int bt_cli_parse_u64(const char *cmd, const char *option, const char *text, unsigned long long *out)
{
    int neg;
    uint64_t mag;
    if (!text || !read_integer(text, &neg, &mag) || (neg && mag != 0))
        return bad_integer(cmd, option, text ? text : "", "an integer from 0 to 18446744073709551615");
    *out = mag;
    return BT_EXIT_OK;
}

void bt_cli_print_escaped(FILE *f, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; p && *p; p++) {
        if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\x%02x", *p);
        else fputc(*p, f);
    }
}

void bt_cli_print_json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p == 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

int bt_cli_plain_file_name(const char *s)
{
    if (!s || !*s || s[0] == '.') return 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if (*p == '/' || *p == '\\' || *p < 0x20 || *p == 0x7f) return 0;
    return strlen(s) <= 200;
}

int bt_cli_parse_bytes(const char *s, unsigned long long *out)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || !(v > 0)) return 0;
    double mult = 1;
    switch (toupper((unsigned char)*end)) {
    case 'K': mult = 1024.0, end++; break;
    case 'M': mult = 1024.0 * 1024, end++; break;
    case 'G': mult = 1024.0 * 1024 * 1024, end++; break;
    case 'T': mult = 1024.0 * 1024 * 1024 * 1024, end++; break;
    default: break;
    }
    if (mult > 1 && *end == 'i') end++;
    if (*end == 'B' || *end == 'b') end++;
    if (*end || v * mult > 1.8e19) return 0;
    *out = (unsigned long long)(v * mult);
    return *out > 0;
}

const char *bt_cli_group(long long v, char *buf, size_t size)
{
    char raw[32];
    snprintf(raw, sizeof raw, "%lld", v < 0 ? -v : v);
    size_t len = strlen(raw), o = 0;
    if (v < 0 && o + 1 < size) buf[o++] = '-';
    for (size_t i = 0; i < len && o + 2 < size; i++) {
        buf[o++] = raw[i];
        if ((len - i - 1) % 3 == 0 && i + 1 < len) buf[o++] = ',';
    }
    buf[o] = '\0';
    return buf;
}

const char *bt_cli_bytes(double b, char *buf, size_t size)
{
    snprintf(buf, size, "%s", bt_bytes_text_of(b).s);
    return buf;
}
