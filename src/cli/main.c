/* cli/main.c: the `baton` command: dispatches to a subcommand. Only this file (through the
 * subcommands' return values) decides the exit code: 0 ok, 2 usage or model error, 1 runtime. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/cmd_schedule.h"
#include "io/atomic_file.h"

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
            "  predict MODEL.yaml   outputs, accuracy and latency of trained weights on npy inputs\n"
            "  profile MODEL.yaml   measure each layer's time and memory on devices\n"
            "  plan MODEL.yaml      choose stage cuts and devices from measured costs\n"
            "  generate MODEL.yaml  sample text from a trained language model (--weights CKPT)\n"
            "  import DIR           the baton model file of a Hugging Face directory (config.json)\n"
            "  tokenize MODEL       token ids of a text by a Hugging Face tokenizer.json (--decode: back)\n"
            "  plot RUN.jsonl ...   draw runs' JSON records as an SVG report (-o FILE)\n"
            "  schedule             print a pipeline schedule as a grid (--stages, --microbatches)\n"
            "  ops                  list the ops models can use\n"
            "  devices              list the CPU and GPUs a run can use\n"
            "  help [COMMAND]       this help, or a command's\n"
            "\n"
            "`baton COMMAND --help` describes each command. Version " BATON_VERSION ".\n");
}

typedef struct command {
    const char *name;
    int (*run)(int argc, char **argv);
} command;

static const command commands[] = {
    {"check", bt_cmd_check},     {"run", bt_cmd_run},   {"schedule", bt_cmd_schedule},
    {"ops", bt_cmd_ops},         {"profile", bt_cmd_profile}, {"plan", bt_cmd_plan},
    {"devices", bt_cmd_devices}, {"plot", bt_cmd_plot},   {"predict", bt_cmd_predict},
    {"generate", bt_cmd_generate},
    {"tokenize", bt_cmd_tokenize},
    {"import", bt_cmd_import},
};

static const command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(commands[i].name, name) == 0) return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return BT_EXIT_USAGE;
    }
    const char *name = argv[1];
    /* SIGINT, SIGTERM, SIGHUP still end the process, but remove a checkpoint being written first */
    bt_atomic_file_remove_on_signals();
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || (strcmp(name, "help") == 0 && argc < 3)) {
        usage(stdout);
        return BT_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("baton " BATON_VERSION "\n");
        return BT_EXIT_OK;
    }
    if (strcmp(name, "help") == 0) {
        const command *c = find_command(argv[2]);
        char *help_argv[] = {argv[2], "--help", NULL};
        if (c) return c->run(2, help_argv);
        name = argv[2];
    } else {
        const command *c = find_command(name);
        if (c) return c->run(argc - 1, argv + 1);
    }
    fprintf(stderr, "baton: unknown command '%s' (try baton --help)\n", name);
    return BT_EXIT_USAGE;
}
