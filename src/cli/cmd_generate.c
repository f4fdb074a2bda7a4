/* cli/cmd_generate.c: `baton generate MODEL --weights CKPT --prompt TEXT --tokens N`: samples text
 * from a language model trained by `baton run` on text data. The vocabulary comes from vocab.txt
 * beside the weights (the checkpoint directory `run` wrote). Prints the prompt and what follows,
 * then the tokens per second; --no-kv-cache reruns the whole window for every token through the
 * engine's forward (the comparison the KV cache is measured against). --score N scores N windows
 * of T + 1 tokens spread evenly over the validation split of the model's text data, with the
 * cached decoder (bt_generate_score) and with the engine's forward, and prints both mean losses. */
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
               "latest checkpoint, one file or sharded, and vocab.txt), or a .safetensors file or a\n"
               "sharded checkpoint's .index.json with vocab.txt beside it.\n"
               "  --temperature T   > 0 (default 1)      --top-k K   sample among the K most likely (0: all)\n"
               "  --no-kv-cache     recompute the whole context for every token (slower; for comparison)\n"
               "  --score N         instead: the mean per-token loss of N validation windows, by the\n"
               "                    decoder and by the engine's forward\n");
}

/* vocab.txt in the directory CKPT, or beside the file CKPT (a .safetensors file or a sharded
 * checkpoint's .index.json). */
static char *vocab_path(const char *weights)
{
    size_t n = strlen(weights);
    if ((n > 12 && strcmp(weights + n - 12, ".safetensors") == 0) ||
        (n > 11 && strcmp(weights + n - 11, ".index.json") == 0)) {
        const char *slash = strrchr(weights, '/');
        return slash ? bt_strfmt("%.*s/vocab.txt", (int)(slash - weights), weights) : bt_strdup("vocab.txt");
    }
    return bt_strfmt("%s/vocab.txt", weights);
}

/* --score N: N windows spread over the validation split, scored by the decoder and the forward. */
static int score_windows(const bt_model *m, bt_engine *e, const bt_vocab *vocab, long long n_windows)
{
    const bt_data_source *src = &m->data.train;
    if (src->kind != BT_DATA_TEXT || m->data.eval.kind != BT_DATA_NONE) {
        fprintf(stderr, "baton generate: --score needs a model whose data.train is type text (and no data.eval)\n");
        return BT_EXIT_USAGE;
    }
    unsigned char *text = NULL;
    size_t n = 0;
    uint16_t *tok = NULL;
    int32_t *win = NULL, *idx = NULL, *lab = NULL;
    int rc = BT_EXIT_RUNTIME;
    bt_input_info in0;
    bt_graph_input(m->graph, 0, &in0);
    const int64_t T = in0.shape.dim[0];
    bt_status st = bt_text_read(src->path, &text, &n);
    if (st == BT_OK) {
        tok = malloc(n * sizeof *tok + 2);
        st = tok ? bt_vocab_encode(vocab, text, n, tok) : bt_error(BT_ERR_NOMEM, "out of memory");
    }
    win = malloc((size_t)(T + 1) * sizeof *win);
    idx = malloc((size_t)T * sizeof *idx);
    lab = malloc((size_t)T * sizeof *lab);
    if (st == BT_OK && (!win || !idx || !lab)) st = bt_error(BT_ERR_NOMEM, "out of memory");
    if (st != BT_OK) {
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    const size_t n_val = (size_t)((double)n * src->val_fraction), first = n - n_val;
    const size_t starts = n_val - (size_t)T - 1;
    double sum_dec = 0, sum_fwd = 0;
    bt_input_info in1;
    bt_graph_input(m->graph, 1, &in1);
    for (long long w = 0; w < n_windows; w++) {
        const size_t at = first + (size_t)((double)w * (double)starts / (double)n_windows);
        for (int64_t k = 0; k <= T; k++) win[k] = tok[at + (size_t)k];
        double loss;
        if ((st = bt_generate_score(e, m->graph, win, T + 1, &loss)) != BT_OK) {
            rc = bt_cli_fail("generate", st);
            goto done;
        }
        sum_dec += loss;
        memcpy(idx, win, (size_t)T * sizeof *idx);
        memcpy(lab, win + 1, (size_t)T * sizeof *lab);
        bt_feed feeds[2] = {{in0.name, idx, BT_I32}, {in1.name, lab, BT_I32}};
        float out1;
        bt_step_result r;
        if ((st = bt_engine_forward(e, feeds, 2, &out1, &r)) != BT_OK) {
            rc = bt_cli_fail("generate", st);
            goto done;
        }
        sum_fwd += out1;
    }
    printf("%lld validation windows of %lld tokens: mean loss %.4f by the KV-cache decoder, %.4f by the engine's "
           "forward\n", n_windows, (long long)T, sum_dec / (double)n_windows, sum_fwd / (double)n_windows);
    rc = BT_EXIT_OK;
done:
    free(text), free(tok), free(win), free(idx), free(lab);
    return rc;
}

int bt_cmd_generate(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, 'w'}, {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'},  {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},   {"seed", required_argument, NULL, 's'},
        {"no-kv-cache", no_argument, NULL, 'N'},   {"devices", required_argument, NULL, 'd'},
        {"stages", required_argument, NULL, 'S'},  {"help", no_argument, NULL, 'h'},
        {"score", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0}};
    bt_cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    const char *weights = NULL, *prompt = "\n";
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 200;
    long long ll, score = 0;
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
        case 'C':
            if ((rc = bt_cli_parse_int("generate", "--score", optarg, 1, 1000000, &score)) != BT_EXIT_OK) return rc;
            break;
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
    /* a directory, a .safetensors file or an index: the loader takes each (train/ckpt_source.h) */
    if ((st = bt_engine_create(m->graph, &p, &e)) != BT_OK ||
        (st = bt_checkpoint_load_weights(e, m->graph, weights)) != BT_OK) {
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    if (score > 0) {
        rc = score_windows(m, e, &vocab, score);
        goto done;
    }
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
