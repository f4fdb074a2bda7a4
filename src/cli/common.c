/* cli/common.c: what the subcommands share: loading a model with command-line flags turned into
 * overrides (so flags are validated exactly like the file), error reporting and number formats. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"

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

int bt_cli_fail(const char *cmd, bt_status status)
{
    fprintf(stderr, "baton %s: %s\n", cmd, bt_last_error());
    return bt_cli_exit_code(status);
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

int bt_cli_load_model(const char *cmd, const bt_cli_model_opts *o, bt_model **out)
{
    const char *ov[96];
    char flags[8][512];
    int n = 0, nf = 0;
    if (o->devices) snprintf(flags[nf], sizeof flags[nf], "parallel.devices=%s", o->devices), ov[n++] = flags[nf++];
    if (o->stages > 0) snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.stages=%d", o->stages), ov[n++] = flags[nf++];
    if (o->microbatches > 0)
        snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.microbatches=%d", o->microbatches), ov[n++] = flags[nf++];
    if (o->schedule) snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.schedule=%s", o->schedule), ov[n++] = flags[nf++];
    if (o->partition) snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.partition=%s", o->partition), ov[n++] = flags[nf++];
    if (o->balance) snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.partition={balance: [%s]}", o->balance), ov[n++] = flags[nf++];
    if (o->layout) snprintf(flags[nf], sizeof flags[nf], "parallel.pipeline.partition={layout: \"%s\"}", o->layout), ov[n++] = flags[nf++];
    for (int i = 0; i < o->n_overrides && n < 96; i++) ov[n++] = o->overrides[i];
    bt_status st = bt_model_load(o->path, ov, n, out);
    if (st != BT_OK) {
        fprintf(stderr, "baton %s: %s\n", cmd, bt_last_error());
        return BT_EXIT_USAGE;
    }
    return BT_EXIT_OK;
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
    const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) b /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", b, unit[u]);
    return buf;
}
