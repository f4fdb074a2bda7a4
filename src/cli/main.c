/* cli/main.c: the `baton` command: dispatches to a subcommand. Only this file (through the
 * subcommands' return values) decides the exit code: 0 ok, 2 usage or model error, 1 runtime. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_schedule.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: baton COMMAND [ARGS]\n"
            "\n"
            "baton runs models as pipelines of stages on CPUs and GPUs.\n"
            "\n"
            "commands:\n"
            "  check MODEL.yaml     validate a model; print its layers and pipeline plan\n"
            "  run MODEL.yaml       train (or serve) a model as a pipeline\n"
            "  profile MODEL.yaml   measure each layer's time and memory on devices\n"
            "  plan MODEL.yaml      choose stage cuts and devices from measured costs\n"
            "  schedule             print a pipeline schedule as a grid (--stages, --microbatches)\n"
            "  ops                  list the ops models can use\n"
            "  help [COMMAND]       this help, or a command's\n"
            "\n"
            "`baton COMMAND --help` describes each command. Version " BATON_VERSION ".\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return BT_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0) {
        usage(stdout);
        return BT_EXIT_OK;
    }
    if (strcmp(cmd, "help") == 0) {
        if (argc < 3) {
            usage(stdout);
            return BT_EXIT_OK;
        }
        char *help_argv[] = {argv[2], "--help", NULL};
        cmd = argv[2];
        argv = help_argv;
        argc = 2;
        if (strcmp(cmd, "check") == 0) return bt_cmd_check(argc, argv);
        if (strcmp(cmd, "run") == 0) return bt_cmd_run(argc, argv);
        if (strcmp(cmd, "schedule") == 0) return bt_cmd_schedule(argc, argv);
        if (strcmp(cmd, "ops") == 0) return bt_cmd_ops(argc, argv);
        if (strcmp(cmd, "profile") == 0) return bt_cmd_profile(argc, argv);
        if (strcmp(cmd, "plan") == 0) return bt_cmd_plan(argc, argv);
    } else {
        if (strcmp(cmd, "--version") == 0) {
            printf("baton " BATON_VERSION "\n");
            return BT_EXIT_OK;
        }
        if (strcmp(cmd, "check") == 0) return bt_cmd_check(argc - 1, argv + 1);
        if (strcmp(cmd, "run") == 0) return bt_cmd_run(argc - 1, argv + 1);
        if (strcmp(cmd, "schedule") == 0) return bt_cmd_schedule(argc - 1, argv + 1);
        if (strcmp(cmd, "ops") == 0) return bt_cmd_ops(argc - 1, argv + 1);
        if (strcmp(cmd, "profile") == 0) return bt_cmd_profile(argc - 1, argv + 1);
        if (strcmp(cmd, "plan") == 0) return bt_cmd_plan(argc - 1, argv + 1);
    }
    fprintf(stderr, "baton: unknown command '%s' (try baton --help)\n", cmd);
    return BT_EXIT_USAGE;
}
