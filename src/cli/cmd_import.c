/* cli/cmd_import.c: `baton import DIR [-o MODEL.yaml] [--context N]`: the baton model file
 * equivalent to a Hugging Face directory (its config.json read strictly: bt_model_hf_yaml), printed
 * or written (atomically) so that the layout and training settings can be edited as for any model.
 * Every other command reads the directory the same way without it. A setting of config.json that
 * baton does not implement is exit 2 naming the key and its value. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/outputs.h"
#include "io/atomic_file.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: baton import DIR [-o MODEL.yaml] [--context N]\n"
               "\n"
               "Writes the baton model file of a Hugging Face checkpoint directory (config.json of a\n"
               "LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM or GPT2LMHeadModel): its layers\n"
               "with the checkpoint's parameter names, and a parallel: section to edit.\n"
               "  -o, --output FILE   write it there (default: standard output)\n"
               "  --context N         positions per sample (default: the model's maximum, up to 512)\n"
               "  -h, --help          this help\n"
               "docs/hf.md says which architectures and settings are implemented; others are refused.\n");
}

int bt_cmd_import(int argc, char **argv)
{
    static const struct option longopts[] = {{"output", required_argument, NULL, 'o'},
                                             {"context", required_argument, NULL, 'c'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    const char *output = NULL;
    long long context = 0;
    int c, rc;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:", longopts, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (!*optarg) return bt_cli_bad_value("import", "--output", "a file name", optarg);
            output = optarg;
            break;
        case 'c':
            if ((rc = bt_cli_parse_int("import", "--context", optarg, 1, 1 << 24, &context)) != BT_EXIT_OK)
                return rc;
            break;
        case 'h': usage(stdout); return BT_EXIT_OK;
        default: return bt_cli_bad_option("import", argc, argv, c);
        }
    }
    if (argc - optind != 1) {
        fprintf(stderr, "baton import: %s (baton import DIR [-o MODEL.yaml])\n",
                argc - optind < 1 ? "no directory given" : "more than one directory given");
        return BT_EXIT_USAGE;
    }
    const char *dir = argv[optind];
    char cfg[4096];
    if (snprintf(cfg, sizeof cfg, "%s/config.json", dir) >= (int)sizeof cfg) {
        fprintf(stderr, "baton import: %s: path too long\n", dir);
        return BT_EXIT_USAGE;
    }
    if (output) { /* never over the directory's own files */
        bt_cli_inputs in;
        bt_cli_inputs_init(&in, "import");
        bt_cli_inputs_add(&in, "the model's config", cfg);
        rc = bt_cli_outputs_check(&in, "--output", output);
        bt_cli_inputs_free(&in);
        if (rc != BT_EXIT_OK) return rc;
    }
    char *yaml = NULL;
    bt_status st = bt_model_hf_yaml(dir, context, &yaml);
    if (st != BT_OK) return bt_cli_fail("import", st);
    if (!output) {
        fputs(yaml, stdout);
        rc = fflush(stdout) == 0 ? BT_EXIT_OK : BT_EXIT_USAGE;
    } else {
        st = bt_atomic_file_write_all(output, yaml, strlen(yaml));
        rc = st == BT_OK ? BT_EXIT_OK : bt_cli_fail("import", st);
        if (st == BT_OK) fprintf(stderr, "baton import: wrote %s\n", output);
    }
    free(yaml);
    return rc;
}
