/* cli/cmd_generate.c: `baton generate MODEL --weights CKPT --prompt TEXT --tokens N`: samples text
 * from a language model trained by `baton run` on text data. The vocabulary comes from vocab.txt
 * beside the weights (the checkpoint directory `run` wrote). The engine is built as `run` places
 * the model (--stages, --devices, the file's parallel: section), and the tokens stream through its
 * stages (bt_generate_batch); several prompts (--prompt repeated, --prompts FILE with one per
 * line) are in flight at once, prompt i sampling with seed + i. Prints each prompt and what
 * follows, then the tokens per second overall and per prompt; --no-kv-cache reruns the whole
 * window for every token through the engine's forward (the comparison the KV cache is measured
 * against). --score N scores N windows of T + 1 tokens spread evenly over the validation split of
 * the model's text data, with the decoder (bt_generate_score) and with the engine's forward, and
 * prints both mean losses. The engine computes in the model's train.precision, as the training
 * run and its evaluation did (bf16: the decoder and the forward both in bf16).
 *
 * Under mpirun (docs/distributed.md) it runs as one rank per stage of one pipeline (D = 1): each
 * rank builds the distributed engine, loads only its own stage's weights, and decodes its own
 * layers, the rows and tokens moving between ranks as MPI messages (exec/decode_dist.h); rank 0
 * prints, the other ranks' output goes to /dev/null. The ranks first compare what they were given
 * (cli/agree.h: the model, the weights and vocabulary by content, --tokens, --temperature, --top-k,
 * --seed, every prompt's text): ranks that differ are refused, exit 2, naming the first field that
 * differs. More ranks than stages (D > 1) are refused,
 * naming N, D and P (exit 2); a failed rank ends the whole job (bt_cli_dist_finish). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/agree.h"
#include "cli/cli.h"
#include "cli/run_dist.h"
#include "core/error.h"
#include "core/strutil.h"
#include "dist/dist.h"
#include "exec/engine_dist.h"
#include "io/text.h"
#include "plan/plan.h"
#include "train/checkpoint.h"
#include "train/lm.h"

/* --temperature's range (0: greedy), named in the message when a value is outside it. */
#define MAX_TEMPERATURE 1e6
#define MAX_TEMPERATURE_TEXT "1e6"

static void usage(FILE *f)
{
    fprintf(f, "usage: baton generate MODEL.yaml --weights CKPT [--prompt TEXT]... [--prompts FILE] [--tokens N]\n"
               "                      [--temperature T] [--top-k K] [--seed S] [--no-kv-cache] [--devices LIST]\n"
               "                      [--stages N] [--score N] [--watchdog SECONDS] [--plugin LIB.so]\n"
               "\n"
               "Samples N tokens (default 200) after each prompt (default a newline) from a language model trained\n"
               "on text data, the tokens streaming through the model's pipeline stages. CKPT is the checkpoint\n"
               "directory `baton run --checkpoint-dir` wrote (its latest checkpoint, one file or sharded, and\n"
               "vocab.txt), or a .safetensors file or a sharded checkpoint's .index.json with vocab.txt beside it.\n"
               "  --prompt TEXT     a prompt; repeat it for several, all in flight through the stages at once\n"
               "  --prompts FILE    one prompt per line (after those of --prompt); prompt i samples with seed S + i\n"
               "  --temperature T   0 (greedy) to 1e6 (default 1)   --top-k K   sample among the K most likely (0: all)\n"
               "  --no-kv-cache     recompute the whole context for every token (slower; for comparison)\n"
               "  --score N         instead: the mean per-token loss of N validation windows, by the\n"
               "                    decoder and by the engine's forward\n"
               "  --watchdog S      fail when a stage waits S seconds for its next item (default 60)\n"
               "  --plugin LIB.so   load a library of custom ops first (its baton_plugin_register registers them)\n"
               "Under mpirun -np P (P: the model's stages) each rank decodes its own stage's layers with its own\n"
               "weights; rank 0 prints. Data-parallel replicas (more ranks than stages) are refused.\n");
}

/* The prompts: --prompt's, then --prompts FILE's lines (each non-empty). */
typedef struct prompt_list {
    char **text;
    int n, cap;
} prompt_list;

static int add_prompt(prompt_list *l, const char *text, size_t len)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 8;
        char **t = realloc(l->text, (size_t)cap * sizeof *t);
        if (!t) return 0;
        l->text = t;
        l->cap = cap;
    }
    if (!(l->text[l->n] = malloc(len + 1))) return 0;
    memcpy(l->text[l->n], text, len);
    l->text[l->n++][len] = '\0';
    return 1;
}

static void free_prompts(prompt_list *l)
{
    for (int i = 0; i < l->n; i++) free(l->text[i]);
    free(l->text);
}

static int read_prompts(const char *path, prompt_list *l)
{
    unsigned char *text = NULL;
    size_t n = 0;
    bt_status st = bt_text_read(path, &text, &n);
    if (st != BT_OK) {
        bt_cli_print_error("generate");
        return BT_EXIT_USAGE;
    }
    int rc = BT_EXIT_OK, line = 0;
    for (size_t at = 0; at < n && rc == BT_EXIT_OK;) {
        const unsigned char *nl = memchr(text + at, '\n', n - at);
        size_t end = nl ? (size_t)(nl - text) : n;
        line++;
        const unsigned char *nul = memchr(text + at, '\0', end - at);
        if (end == at) {
            fprintf(stderr, "baton generate: --prompts %s: line %d is empty (every line is a prompt)\n", path, line);
            rc = BT_EXIT_USAGE;
        } else if (nul) {
            fprintf(stderr, "baton generate: --prompts %s: line %d (prompt %d) has a NUL byte at offset %zu of the "
                    "line (byte %zu of the file): a prompt is text\n", path, line, l->n + 1, (size_t)(nul - text) - at,
                    (size_t)(nul - text));
            rc = BT_EXIT_USAGE;
        } else if (!add_prompt(l, (const char *)text + at, end - at)) {
            rc = bt_cli_fail("generate", bt_error(BT_ERR_NOMEM, "out of memory"));
        }
        at = end + 1;
    }
    if (rc == BT_EXIT_OK && line == 0) {
        fprintf(stderr, "baton generate: --prompts %s holds no prompt\n", path);
        rc = BT_EXIT_USAGE;
    }
    free(text);
    return rc;
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
    if (n_val < (size_t)T + 1) {
        fprintf(stderr, "baton generate: --score: the validation split of %s has %zu tokens (val_fraction %g of %zu), "
                "fewer than the T + 1 = %lld a window needs\n", src->path, n_val, src->val_fraction, n,
                (long long)T + 1);
        rc = BT_EXIT_USAGE;
        goto done;
    }
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
    const bt_dtype prec = m->train.precision;
    printf("%lld validation windows of %lld tokens: mean loss %.4f by the KV-cache decoder, %.4f by the engine's "
           "forward%s%s%s\n", n_windows, (long long)T, sum_dec / (double)n_windows, sum_fwd / (double)n_windows,
           prec != BT_F32 ? " (precision " : "", prec != BT_F32 ? bt_dtype_name(prec) : "", prec != BT_F32 ? ")" : "");
    rc = BT_EXIT_OK;
done:
    free(text), free(tok), free(win), free(idx), free(lab);
    return rc;
}

/* Under a launcher (mpirun, srun): brings MPI up, compares every rank's record a (the first
 * collective) and makes this rank's layout, one rank per stage of one pipeline. Exit code:
 * BT_EXIT_USAGE for MPI missing from the build, ranks that differ, or a rank count that is not
 * the model's stage count (every rank finds the same; rank 0 says it). */
static int dist_setup(const bt_model *m, const bt_engine_params *p, const bt_agree *a, bt_cli_dist *d)
{
    memset(d, 0, sizeof *d);
    const char *var = NULL;
    const int launched = bt_dist_launched(&var);
    if (launched <= 1) return BT_EXIT_OK; /* one process: parallel.data is training's, as for predict */
    if (!bt_dist_built()) {
        fprintf(stderr, "baton generate: started as one of %d ranks (%s), but this baton was built without MPI: "
                "install libopenmpi-dev and openmpi-bin (scripts/install-deps.sh) and configure again\n",
                launched, var);
        return BT_EXIT_USAGE;
    }
    bt_plan *plan = NULL;
    bt_status st = bt_plan_build(m->graph, &p->parallel, &plan);
    if (st != BT_OK) return bt_cli_fail("generate", st);
    const int stages = plan->stages;
    bt_plan_destroy(plan);
    int rank = 0, size = 1;
    st = bt_dist_init(&rank, &size);
    d->mpi_up = 1;
    if (st != BT_OK) return bt_cli_fail("generate", st);
    int rc = bt_cli_agree("generate", a, p->watchdog_s, &d->mpi_up); /* the first collective */
    if (rc != BT_EXIT_OK) return rc;
    if (size != stages) {
        char replicas[64] = "";
        if (size % stages == 0)
            snprintf(replicas, sizeof replicas, ", not D = %d data-parallel replicas", size / stages);
        if (rank == 0)
            fprintf(stderr, "baton generate: N = %d ranks for the model's P = %d pipeline stages: generate runs one "
                    "pipeline, one rank per stage (D = 1%s); start it as mpirun -np %d baton generate ...\n", size,
                    stages, replicas, stages);
        bt_dist_finalize();
        d->mpi_up = 0;
        return BT_EXIT_USAGE;
    }
    st = bt_dist_layout_make(size, rank, 1, stages, &d->layout);
    if (st != BT_OK) return bt_cli_fail("generate", st);
    d->on = 1;
    if (rank != 0 && !freopen("/dev/null", "w", stdout)) {
        fprintf(stderr, "baton generate: rank %d: cannot redirect its output to /dev/null\n", rank);
        return BT_EXIT_RUNTIME;
    }
    return BT_EXIT_OK;
}

/* What every rank of a generate job must share: the weights and vocabulary by content, the
 * sampling options and every prompt's text, then the engine's fields. */
static void generate_record(const bt_model *m, const bt_engine_params *p, const char *weights, const char *vocab,
                            const bt_generate_params *gp, long long score, const prompt_list *prompts, bt_agree *a)
{
    bt_agree_str(a, "command", "generate");
    bt_cli_agree_weights(a, "--weights", weights);
    bt_agree_file(a, "vocab.txt (beside --weights)", vocab, 0);
    bt_agree_int(a, "--tokens", (long long)gp->tokens);
    bt_agree_num(a, "--temperature", gp->temperature);
    bt_agree_int(a, "--top-k", gp->top_k);
    bt_agree_int(a, "--seed (sampling)", (long long)gp->seed);
    bt_agree_int(a, "--no-kv-cache", !gp->kv_cache);
    bt_agree_int(a, "--score", score);
    if (score > 0) bt_cli_agree_data(a, "data.train", &m->data.train); /* the windows it scores */
    bt_agree_int(a, "prompts (--prompt, --prompts: how many)", prompts->n);
    for (int q = 0; q < prompts->n; q++) {
        char field[64];
        snprintf(field, sizeof field, "prompt %d", q + 1);
        bt_agree_fmt(a, field, "'%s'", prompts->text[q]);
    }
    bt_engine_agree_fields(a, m->graph, p);
}

/* Prints each prompt and its tokens, then the rates: overall first (the line bench/ reads). */
static int print_results(const prompt_list *prompts, const bt_vocab *vocab, const bt_generate_params *gp,
                         int32_t *const *out, const bt_generate_stats *per, const bt_generate_stats *total, int ranks)
{
    const int k = prompts->n;
    for (int q = 0; q < k; q++) {
        if (k > 1) printf("%s--- prompt %d of %d ---\n", q ? "\n" : "", q + 1, k);
        fputs(prompts->text[q], stdout);
        for (int64_t t = 0; t < gp->tokens; t++) {
            if (out[q][t] < 0 || out[q][t] >= vocab->size)
                return bt_cli_fail("generate", bt_error(BT_ERR_INVALID_ARG, "token %d is outside vocab.txt's %d",
                                                        (int)out[q][t], vocab->size));
            fputc(vocab->byte[out[q][t]], stdout);
        }
        fputc('\n', stdout);
    }
    char how[200], ranks_text[48];
    snprintf(ranks_text, sizeof ranks_text, " across %d ranks (mpi)", ranks);
    if (!gp->kv_cache) snprintf(how, sizeof how, "no KV cache: the window rerun per token");
    else
        snprintf(how, sizeof how, "KV cache, %d stage%s%s, %d prompt%s in flight, stages busy %.0f%%", total->stages,
                 total->stages == 1 ? "" : "s", ranks > 1 ? ranks_text : "", k, k == 1 ? "" : "s",
                 100.0 * total->busy);
    if (k == 1) {
        printf("\n%lld tokens in %.1f ms: %.1f tokens/s (%s; prompt %zu tokens in %.1f ms)\n", (long long)gp->tokens,
               per[0].generate_ms, per[0].tokens_per_s, how, strlen(prompts->text[0]), per[0].prompt_ms);
        return BT_EXIT_OK;
    }
    printf("\n%lld tokens in %.1f ms: %.1f tokens/s overall (%s)\n", (long long)gp->tokens * k, total->generate_ms,
           total->tokens_per_s, how);
    for (int q = 0; q < k; q++)
        printf("  prompt %d: %lld tokens in %.1f ms, %.1f tokens/s (prompt of %zu tokens read by %.1f ms)\n", q + 1,
               (long long)gp->tokens, per[q].generate_ms, per[q].tokens_per_s, strlen(prompts->text[q]),
               per[q].prompt_ms);
    return BT_EXIT_OK;
}

int bt_cmd_generate(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"weights", required_argument, NULL, 'w'}, {"prompt", required_argument, NULL, 'p'},
        {"tokens", required_argument, NULL, 'n'},  {"temperature", required_argument, NULL, 't'},
        {"top-k", required_argument, NULL, 'k'},   {"seed", required_argument, NULL, 's'},
        {"no-kv-cache", no_argument, NULL, 'N'},   {"devices", required_argument, NULL, 'd'},
        {"stages", required_argument, NULL, 'S'},  {"help", no_argument, NULL, 'h'},
        {"score", required_argument, NULL, 'C'},   {"prompts", required_argument, NULL, 'P'},
        {"watchdog", required_argument, NULL, 'W'}, {"plugin", required_argument, NULL, 'U'},
        {NULL, 0, NULL, 0}};
    bt_cli_model_opts mo;
    memset(&mo, 0, sizeof mo);
    const char *weights = NULL, *prompts_file = NULL, *tokens_given = NULL;
    prompt_list prompts = {0};
    bt_generate_params gp;
    bt_generate_params_init(&gp);
    gp.tokens = 200;
    long long ll, score = 0;
    double watchdog_s = 60;
    unsigned long long seed;
    int rc, opt;
    optind = 1;
    opterr = 0; /* baton's own option messages (bt_cli_bad_option), as every command's */
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'w': weights = optarg; break;
        case 'p':
            if (*optarg == '\0') {
                fprintf(stderr, "baton generate: --prompt must not be empty\n");
                free_prompts(&prompts);
                return BT_EXIT_USAGE;
            }
            if (!add_prompt(&prompts, optarg, strlen(optarg))) {
                free_prompts(&prompts);
                return bt_cli_fail("generate", bt_error(BT_ERR_NOMEM, "out of memory"));
            }
            break;
        case 'P': prompts_file = optarg; break;
        case 'n':
            if ((rc = bt_cli_parse_int("generate", "--tokens", optarg, 0, 1000000, &ll)) != BT_EXIT_OK) goto parse_fail;
            gp.tokens = ll;
            tokens_given = optarg;
            break;
        case 't': {
            char *end;
            gp.temperature = strtod(optarg, &end);
            if (*optarg == '\0' || *end != '\0' || !(gp.temperature >= 0) || gp.temperature > MAX_TEMPERATURE) {
                rc = bt_cli_bad_value("generate", "--temperature", "a number from 0 (greedy) to " MAX_TEMPERATURE_TEXT,
                                      optarg);
                goto parse_fail;
            }
            break;
        }
        case 'k':
            if ((rc = bt_cli_parse_int32("generate", "--top-k", optarg, 0, 1 << 20, &gp.top_k)) != BT_EXIT_OK)
                goto parse_fail;
            break;
        case 's':
            if ((rc = bt_cli_parse_u64("generate", "--seed", optarg, &seed)) != BT_EXIT_OK) goto parse_fail;
            gp.seed = seed;
            break;
        case 'N': gp.kv_cache = 0; break;
        case 'C':
            if ((rc = bt_cli_parse_int("generate", "--score", optarg, 1, 1000000, &score)) != BT_EXIT_OK)
                goto parse_fail;
            break;
        case 'W': {
            char *end;
            watchdog_s = strtod(optarg, &end);
            if (end == optarg || *end || !(watchdog_s > 0 && watchdog_s <= BT_WATCHDOG_MAX_S)) {
                rc = bt_cli_bad_value("generate", "--watchdog", "seconds above 0 and at most 1e+09", optarg);
                goto parse_fail;
            }
            break;
        }
        case 'd': mo.devices = optarg; break;
        case 'S':
            if ((rc = bt_cli_parse_int32("generate", "--stages", optarg, 1, BT_MAX_STAGES, &mo.stages)) != BT_EXIT_OK)
                goto parse_fail;
            break;
        case 'U':
            if ((rc = bt_cli_add_plugin("generate", &mo, optarg)) != BT_EXIT_OK) goto parse_fail;
            break;
        case 'h': usage(stdout); free_prompts(&prompts); return BT_EXIT_OK;
        default: rc = bt_cli_bad_option("generate", argc, argv, opt); goto parse_fail;
        }
    }
    if ((rc = bt_cli_take_positional("generate", argc, argv, optind, &mo)) != BT_EXIT_OK) goto parse_fail;
    if (!weights) {
        fprintf(stderr, "baton generate: --weights CKPT is required (a checkpoint `baton run` wrote)\n");
        rc = BT_EXIT_USAGE;
        goto parse_fail;
    }
    if (score > 0 && (prompts.n > 0 || prompts_file || tokens_given)) {
        fprintf(stderr, "baton generate: --score scores validation windows; it takes no %s\n",
                prompts.n > 0 ? "--prompt" : prompts_file ? "--prompts" : "--tokens");
        rc = BT_EXIT_USAGE;
        goto parse_fail;
    }
    if (prompts_file && (rc = read_prompts(prompts_file, &prompts)) != BT_EXIT_OK) goto parse_fail;
    if (prompts.n == 0 && !add_prompt(&prompts, "\n", 1)) {
        rc = bt_cli_fail("generate", bt_error(BT_ERR_NOMEM, "out of memory"));
        goto parse_fail;
    }
    bt_model *m = NULL;
    if ((rc = bt_cli_load_model("generate", &mo, &m)) != BT_EXIT_OK ||
        (rc = bt_cli_refuse_hf_weights("generate", &m, 0)) != BT_EXIT_OK)
        goto parse_fail;
    bt_engine *e = NULL;
    bt_cli_dist dist = {0};
    const int k = prompts.n;
    int32_t **ids = calloc((size_t)k, sizeof *ids), **out = calloc((size_t)k, sizeof *out);
    int64_t *lens = calloc((size_t)k, sizeof *lens);
    bt_generate_stats *per = calloc((size_t)k, sizeof *per), total;
    bt_vocab vocab;
    char *vp = bt_lm_vocab_path(weights);
    bt_agree rec; /* under a launcher: what every rank must share (cli/agree.h) */
    bt_agree_init(&rec);
    bt_status st = vp ? bt_vocab_load(vp, &vocab) : bt_error(BT_ERR_NOMEM, "out of memory");
    if (st == BT_OK) st = bt_lm_check_vocab_file(m, &vocab, vp);
    if (st != BT_OK) {
        free(vp);
        rc = BT_EXIT_USAGE;
        bt_cli_print_error("generate");
        goto done;
    }
    gp.vocab = vocab.size; /* the model's logits may be wider: their other ids name no byte */
    bt_engine_params p;
    bt_engine_params_init(&p);
    p.parallel = m->parallel;
    p.parallel.microbatches = 1;
    p.batch = 1;
    p.training = 0;
    p.seed = 0;
    p.watchdog_s = watchdog_s;
    p.precision = m->train.precision; /* decode and forward compute as training and its eval did */
    if (bt_dist_launched(NULL) > 1) generate_record(m, &p, weights, vp, &gp, score, &prompts, &rec);
    free(vp);
    rc = dist_setup(m, &p, &rec, &dist);
    bt_agree_free(&rec);
    if (rc != BT_EXIT_OK) goto done;
    if (!ids || !out || !lens || !per) st = bt_error(BT_ERR_NOMEM, "out of memory");
    /* a directory, a .safetensors file or an index: the loader takes each (train/ckpt_source.h);
     * across processes each rank writes only its own stage's tensors */
    if (st == BT_OK)
        st = dist.on ? bt_engine_create_dist(m->graph, &p, &dist.layout, &e) : bt_engine_create(m->graph, &p, &e);
    if (st != BT_OK || (st = bt_checkpoint_load_weights(e, m->graph, weights)) != BT_OK) {
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    if (score > 0) {
        rc = score_windows(m, e, &vocab, score);
        goto done;
    }
    for (int q = 0; q < k; q++) {
        const size_t n = strlen(prompts.text[q]);
        ids[q] = malloc((n + 1) * sizeof **ids);
        out[q] = malloc(((size_t)gp.tokens + 1) * sizeof **out);
        if (!ids[q] || !out[q]) {
            rc = bt_cli_fail("generate", bt_error(BT_ERR_NOMEM, "out of memory"));
            goto done;
        }
        for (size_t i = 0; i < n; i++) {
            int tok = vocab.token[(unsigned char)prompts.text[q][i]];
            if (tok < 0) {
                char which[32] = "";
                if (k > 1) snprintf(which, sizeof which, " %d", q + 1);
                fprintf(stderr, "baton generate: prompt%s: byte 0x%02x at %zu is not in the model's vocabulary\n",
                        which, (unsigned char)prompts.text[q][i], i);
                rc = BT_EXIT_USAGE;
                goto done;
            }
            ids[q][i] = tok;
        }
        lens[q] = (int64_t)n;
    }
    if ((st = bt_generate_batch(e, m->graph, k, (const int32_t *const *)ids, lens, &gp, out, per, &total)) != BT_OK) {
        rc = bt_cli_fail("generate", st);
        goto done;
    }
    rc = print_results(&prompts, &vocab, &gp, out, per, &total, bt_engine_ranks(e));
done:
    for (int q = 0; q < k; q++) {
        if (ids) free(ids[q]);
        if (out) free(out[q]);
    }
    free(ids), free(out), free(lens), free(per);
    bt_engine_destroy(e);
    bt_model_destroy(m);
    free_prompts(&prompts);
    return bt_cli_dist_finish(&dist, rc); /* a failed rank ends every rank of the job */
parse_fail:
    free_prompts(&prompts);
    return rc;
}
