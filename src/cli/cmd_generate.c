/* cli/cmd_generate.c: `baton generate MODEL --weights CKPT --prompt TEXT --tokens N`: samples text
 * from a language model trained by `baton run` on text data. The vocabulary comes from vocab.txt
 * beside the weights (the checkpoint directory `run` wrote). Prints the prompt and what follows,
 * then the tokens per second; --no-kv-cache reruns the whole window for every token through the
 * engine's forward (the comparison the KV cache is measured against). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/error.h"
#include "core/strutil.h"
#include "io/text.h"
#include "train/checkpoint.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: baton generate MODEL.yaml --weights CKPT [--prompt TEXT] [--tokens N] [--temperature T]\n"
               "                      [--top-k K] [--seed S] [--no-kv-cache] [--devices LIST] [--stages N]\n"
               "\n"
               "Samples N tokens (default 200) after TEXT (default a newline) from a language model trained on\n"
               "text data. CKPT is the checkpoint directory `baton run --checkpoint-dir` wrote (its\n"
               "checkpoint.safetensors and vocab.txt) or a .safetensors file with vocab.txt beside it.\n"
               "  --temperature T   > 0 (default 1)      --top-k K   sample among the K most likely (0: all)\n"
               "  --no-kv-cache     recompute the whole context for every token (slower; for comparison)\n");
}

/* vocab.txt in the directory CKPT, or beside the file CKPT. */
static char *vocab_path(const char *weights)
{
    size_t n = strlen(weights);
    if (n > 12 && strcmp(weights + n - 12, ".safetensors") == 0) {
        const char *slash = strrchr(weights, '/');
        return slash ? bt_strfmt("%.*s/vocab.txt", (int)(slash - weights), weights) : bt_strdup("vocab.txt");
    }
    return bt_strfmt("%s/vocab.txt", weights);
}

int bt_cmd_generate(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, 'w'}, {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'},  {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},   {"seed", required_argument, NULL, 's'},
        {"no-kv-cache", no_argument, NULL, 'N'},   {"devices", required_argument, NULL, 'd'},
        {"stages", required_argument, NULL, 'S'},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    bt_cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    const char *weights = NULL, *prompt = "\n";
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 200;
    long long ll;
    unsigned long long seed;
    int rc, opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'w': weights = optarg; break;
        case 'p': prompt = optarg; break;
        case 'n':
            if ((rc = bt_cli_parse_int("generate", "--tokens", optarg, 0, 1000000, &ll)) != BT_EXIT_OK) return rc;
            gp.tokens = ll;
            break;
        case 't': {
            char *end;
            gp.temperature = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(gp.temperature > 0) || gp.temperature > 1e6) {
                fprintf(stderr, "baton generate: --temperature wants a number above 0, not '%s'\n", optarg);
                return BT_EXIT_USAGE;
            }
            break;
        }
        case 'k':
            if ((rc = bt_cli_parse_int32("generate", "--top-k", optarg, 0, 1 << 20, &gp.top_k)) != BT_EXIT_OK) return rc;
            break;
        case 's':
            if ((rc = bt_cli_parse_u64("generate", "--seed", optarg, &seed)) != BT_EXIT_OK) return rc;
            gp.seed = seed;
            break;
        case 'N': gp.kv_cache = 0; break;
        case 'd': mo.devices = optarg; break;
        case 'S':
            if ((rc = bt_cli_parse_int32("generate", "--stages", optarg, 1, BT_MAX_STAGES, &mo.stages)) != BT_EXIT_OK)
                return rc;
            break;
        case 'h': usage(stdout); return BT_EXIT_OK;
        default: fprintf(stderr, "baton generate: see baton generate --help\n"); return BT_EXIT_USAGE;
        }
    }
    if ((rc = bt_cli_take_positional("generate", argc, argv, optind, &mo)) != BT_EXIT_OK) return rc;
    if (!weights) {
        fprintf(stderr, "baton generate: --weights CKPT is required (a checkpoint `baton run` wrote)\n");
        return BT_EXIT_USAGE;
    }
    bt_model *m = NULL;
    if ((rc = bt_cli_load_model("generate", &mo, &m)) != BT_EXIT_OK) return rc;
    bt_engine *e = NULL;
    int32_t *ids = NULL, *out = NULL;
    bt_vocab vocab;
    char *vp = vocab_path(weights);
    bt_status st = vp ? bt_vocab_load(vp, &vocab) : bt_error(BT_ERR_NOMEM, "out of memory");
    free(vp);
    if (st != BT_OK) {
        rc = BT_EXIT_USAGE;
        bt_cli_print_error("generate");
        goto done;
    }
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.parallel.microbatches = 1;
    p.batch = 1;
    p.training = 0;
    p.seed = 0;
    const size_t wl = strlen(weights);
    char *file = wl > 12 && strcmp(weights + wl - 12, ".safetensors") == 0
                     ? bt_strdup(weights)
                     : bt_strfmt("%s/" BT_CHECKPOINT_FILE, weights);
    if (!file) st = bt_error(BT_ERR_NOMEM, "out of memory");
    if (st != BT_OK || (st = bt_engine_create(m->graph, &p, &e)) != BT_OK ||
        (st = bt_checkpoint_load_weights(e, m->graph, file)) != BT_OK) {
        free(file);
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    free(file);
    const size_t n_prompt = strlen(prompt);
    ids = malloc((n_prompt + 1) * sizeof *ids);
    out = malloc(((size_t)gp.tokens + 1) * sizeof *out);
    if (!ids || !out) {
        rc = bt_cli_fail("generate", bt_error(BT_ERR_NOMEM, "out of memory"));
        goto done;
    }
    for (size_t i = 0; i < n_prompt; i++) {
        int tok = vocab.token[(unsigned char)prompt[i]];
        if (tok < 0) {
            fprintf(stderr, "baton generate: --prompt: byte 0x%02x at %zu is not in the model's vocabulary\n",
                    (unsigned char)prompt[i], i);
            rc = BT_EXIT_USAGE;
            goto done;
        }
        ids[i] = tok;
    }
    if (n_prompt == 0) {
        fprintf(stderr, "baton generate: --prompt must not be empty\n");
        rc = BT_EXIT_USAGE;
        goto done;
    }
    bt_generate_stats gs;
    if ((st = bt_generate(e, m->graph, ids, (int64_t)n_prompt, &gp, out, &gs)) != BT_OK) {
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    fwrite(prompt, 1, n_prompt, stdout);
    for (int64_t k = 0; k < gp.tokens; k++) {
        if (out[k] < 0 || out[k] >= vocab.size) {
            rc = bt_cli_fail("generate", bt_error(BT_ERR_INVALID_ARG, "token %d is outside vocab.txt's %d", (int)out[k],
                                                  vocab.size));
            goto done;
        }
        fputc(vocab.byte[out[k]], stdout);
    }
    printf("\n\n%lld tokens in %.1f ms: %.1f tokens/s (%s, prompt %zu tokens in %.1f ms)\n", (long long)gp.tokens,
           gs.generate_ms, gs.tokens_per_s, gp.kv_cache ? "KV cache" : "no KV cache: the window rerun per token",
           n_prompt, gs.prompt_ms);
    rc = BT_EXIT_OK;
done:
    free(ids);
    free(out);
    bt_engine_destroy(e);
    bt_model_destroy(m);
    return rc;
}
