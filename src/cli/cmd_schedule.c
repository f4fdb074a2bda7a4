/* cli/cmd_schedule.c: `baton schedule`, a window onto sched/. It builds the schedule of the kind,
 * stages, micro-batches (and virtual chunks) asked for, optionally validates it out loud, prints the
 * grid (one row per device, one column per time slot of a unit-cost run) and one line with the
 * bubble of a run with unit costs (F = B = 1, split backward B = W = 1, step 0, instant transfers)
 * and the peak in-flight micro-batches per stage.
 *
 * Exit codes: 0 success or --help, 1 the library failed (message on stderr), 2 bad usage.
 * This is the only file of the schedule path that prints. */
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "baton/config.h"
#include "baton/status.h"
#include "cli/cli.h"
#include "cli/cmd_schedule.h"
#include "sched/sched.h"

#define CMD_NAME "baton schedule"

static void print_usage(FILE *to)
{
    fprintf(to,
            "usage: " CMD_NAME " --stages P --microbatches M [--schedule KIND] [--virtual V] "
            "[--validate]\n"
            "\n"
            "Builds a pipeline schedule and prints it as a grid: one row per stage, one column\n"
            "per time slot of a run with unit costs (forward = backward = optimizer step = 1\n"
            "slot, instant transfers). Cells use the notation <stage><op><micro-batch>:\n"
            "F forward, B backward (zb-h1, zbv: the input gradient), W weight gradient (zb-h1,\n"
            "zbv), U optimizer step; '.' is idle. Interleaved and zbv rows are devices and the\n"
            "stage in a cell is the logical stage: interleaved device d runs stages d, d+P, ...\n"
            "(chunk = stage / P); zbv device d runs stages d and 2P-1-d (a V).\n"
            "Then prints the bubble of that run with a free optimizer step, and the most\n"
            "micro-batches each stage holds at once.\n"
            "\n"
            "  -p, --stages P         pipeline stages (1..%d; logical: devices x V)\n"
            "  -m, --microbatches M   micro-batches per step (1..%d)\n"
            "  -s, --schedule KIND    gpipe, 1f1b (default), interleaved-1f1b, zb-h1, zbv or\n"
            "                         stream (forward only)\n"
            "  -V, --virtual V        interleaved-1f1b: model chunks per device (default 2;\n"
            "                         zbv: 2, the only value it takes)\n"
            "  -v, --validate         prove the schedule cannot hang and say so\n"
            "  -h, --help             show this help\n",
            BT_MAX_STAGES, BT_MAX_MICROBATCHES);
}

static int usage_error(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* Prints "baton schedule: <message> (see ...)" to stderr and returns the usage exit code. */
static int usage_error(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, CMD_NAME ": ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (see '" CMD_NAME " --help')\n");
    return 2;
}

static int parse_schedule_kind(const char *text, bt_schedule_kind *out)
{
    static const bt_schedule_kind kinds[] = {BT_SCHEDULE_GPIPE, BT_SCHEDULE_1F1B, BT_SCHEDULE_STREAM,
                                             BT_SCHEDULE_INTERLEAVED_1F1B, BT_SCHEDULE_ZB_H1, BT_SCHEDULE_ZBV};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcasecmp(text, bt_schedule_name(kinds[i])) == 0) {
            *out = kinds[i];
            return 0;
        }
    return -1;
}

/* Bubble of the unit-cost run with step 0: with equal costs (p-1)/(m+p-1) for GPipe and 1F1B. */
static int print_summary(const bt_schedule *sched)
{
    int p = sched->stages, rc = 1;
    bt_sim_result sim = {0};
    double *unit = malloc((size_t)p * sizeof *unit);
    if (!unit) {
        fprintf(stderr, CMD_NAME ": out of memory\n");
        return 1;
    }
    for (int s = 0; s < p; s++) unit[s] = 1.0;
    bt_sim_costs costs = {.fwd = unit, .bwd = unit, .wgt = unit, .step = 0.0};
    if (bt_simulate(sched, &costs, &sim) != BT_OK) {
        bt_cli_print_error("schedule");
        goto out;
    }
    printf("bubble %.4f with unit costs (F = B = %s1, step 0, instant transfers); "
           "peak in-flight micro-batches per stage:",
           sim.bubble, sched->split_backward ? "W = " : "");
    for (int s = 0; s < p; s++) printf(" %d", bt_schedule_max_inflight(sched, s));
    printf("\n");
    rc = 0;
out:
    bt_sim_result_free(&sim);
    free(unit);
    return rc;
}

int bt_cmd_schedule(int argc, char **argv)
{
    static const struct option options[] = {
        {"stages", required_argument, NULL, 'p'},
        {"microbatches", required_argument, NULL, 'm'},
        {"schedule", required_argument, NULL, 's'},
        {"validate", no_argument, NULL, 'v'},
        {"virtual", required_argument, NULL, 'V'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int stages = 0, microbatches = 0, validate = 0, virtual_stages = 0, opt;
    bt_schedule_kind kind = BT_SCHEDULE_1F1B;
    bt_schedule *sched = NULL;
    char *grid = NULL;
    int rc = 1;

    optind = 0; /* GNU: rescan from scratch, whatever parsed argv before */
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":p:m:s:vV:h", options, NULL)) != -1) {
        switch (opt) {
        case 'p':
            if (bt_cli_parse_int32("schedule", "--stages", optarg, 1, BT_MAX_STAGES, &stages) != BT_EXIT_OK)
                return BT_EXIT_USAGE;
            break;
        case 'm':
            if (bt_cli_parse_int32("schedule", "--microbatches", optarg, 1, BT_MAX_MICROBATCHES, &microbatches) !=
                BT_EXIT_OK)
                return BT_EXIT_USAGE;
            break;
        case 's':
            if (parse_schedule_kind(optarg, &kind) != 0)
                return usage_error("unknown schedule '%s' (gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv or stream)",
                                   optarg);
            break;
        case 'V':
            if (bt_cli_parse_int32("schedule", "--virtual", optarg, 1, BT_MAX_STAGES, &virtual_stages) != BT_EXIT_OK)
                return BT_EXIT_USAGE;
            break;
        case 'v': validate = 1; break;
        case 'h': print_usage(stdout); return 0;
        case ':': return usage_error("%s needs a value", argv[optind - 1]);
        default:
            if (optopt) return usage_error("unknown option '-%c'", optopt);
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (stages == 0) return usage_error("missing --stages");
    if (microbatches == 0) return usage_error("missing --microbatches");

    if (virtual_stages > 1 && kind != BT_SCHEDULE_INTERLEAVED_1F1B && kind != BT_SCHEDULE_ZBV)
        return usage_error("--virtual %d needs --schedule interleaved-1f1b (or zbv: 2)", virtual_stages);
    if (virtual_stages == 0) virtual_stages = kind == BT_SCHEDULE_INTERLEAVED_1F1B ? 2 : bt_schedule_default_virtual(kind, 0);
    if (bt_schedule_check_shape(kind, stages, microbatches, virtual_stages) != BT_OK) {
        bt_cli_print_error("schedule");
        return BT_EXIT_USAGE;
    }
    if (bt_schedule_build_virtual(kind, stages, microbatches, virtual_stages, &sched) != BT_OK) goto fail;
    if (validate) {
        if (bt_schedule_validate(sched) != BT_OK) goto fail;
        int total = 0;
        for (int s = 0; s < stages; s++) total += sched->len[s];
        printf("valid: %d instructions on %d stages, every send paired with its receive, "
               "no wait cycle\n",
               total, stages);
    }
    grid = bt_schedule_format_grid(sched);
    if (!grid) goto fail;
    if (sched->devices < stages)
        printf("%s schedule, %d stages on %d devices (virtual %d), %d micro-batches\n",
               bt_schedule_name(kind), stages, sched->devices, virtual_stages, microbatches);
    else
        printf("%s schedule, %d stages, %d micro-batches\n", bt_schedule_name(kind), stages,
               microbatches);
    fputs(grid, stdout);
    rc = print_summary(sched);
    goto out;

fail:
    bt_cli_print_error("schedule");
    rc = 1;
out:
    free(grid);
    bt_schedule_destroy(sched);
    return rc;
}
