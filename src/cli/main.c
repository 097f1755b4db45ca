/*
 * main.c — the kvloom program: parses the subcommand and its flags and calls
 * into the library. The only file that calls exit().
 *
 *   kvloom run      [-m MODEL] [-p PROMPT] [-n N] [sampling flags] [-t THREADS]
 *   kvloom info     MODEL
 *   kvloom tokenize -m MODEL [--no-bos] [--special] [--stdin | TEXT]
 *   kvloom gen      (--preset NAME | shape flags) [--type T] -o OUT
 *   kvloom quantize IN OUT TYPE
 *   kvloom serve    [-m MODEL] [--host H] [--port P] ...
 *   kvloom bench    -m MODEL [-t N] [--pp 512] [--tg 128] [--depth D] [-r REPS]
 * `kvloom --help` and `kvloom COMMAND -h|--help` print the usage on stdout
 * and exit 0; usage errors print it on stderr and exit 2.
 */
#include <errno.h>
#include <stddef.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../base/base.h"
#include "../base/flags.h"
#include "../kern/kern.h"
#include "../model/model.h"
#include "../sample/sample.h"
#include "../sched/draft.h"
#include "../sched/engine.h"
#include "../sched/req.h"
#include "../server/server.h"
#include "../tok/tok.h"
#include "cli.h"

/* `kvloom --help` prints this on stdout (exit 0); a missing or unknown
 * command prints it on stderr (exit 2). Every subcommand answers -h/--help
 * with its own usage on stdout and exit status 0. */
static void usage(FILE *out) {
    fprintf(out,
            "usage: kvloom COMMAND [options]   (kvloom COMMAND --help: that command's usage)\n"
            "  run       generate text:   kvloom run [-m MODEL.gguf] [-p PROMPT] [-n N] [--temp T] [--top-k K]\n"
            "            [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [-t THREADS]\n"
            "  info      describe a model: kvloom info MODEL.gguf\n"
            "  tokenize  kvloom tokenize -m MODEL.gguf [--no-bos] [--special] [--stdin | TEXT]\n"
            "  gen       random-weight model at a real shape: kvloom gen --preset NAME --type T -o OUT.gguf\n"
            "  quantize  kvloom quantize IN.gguf OUT.gguf TYPE\n"
            "  serve     OpenAI-compatible server (kvloom serve --help)\n"
            "  bench     speed: kvloom bench -m MODEL.gguf [-t N] [--pp 512] [--tg 128] [--depth D] [-r REPS]\n"
            "  --version the release\n"
            "With no -m, run and serve use the model shipped in the repository (" SERVER_DEFAULT_MODEL ").\n");
}

/* True for the two spellings of the help flag. */
static bool is_help(const char *a) { return strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0; }

/* SERVER_DEFAULT_MODEL (server.h: the one definition of the shipped model's
 * path) found from the binary (cli__data_path). */
static const char *default_model(void) {
    static char path[PATH_MAX + 64];
    return cli__data_path(SERVER_DEFAULT_MODEL, path, sizeof path);
}

_Noreturn static void die(const char *fmt, const char *arg) {
    fprintf(stderr, "kvloom: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    exit(2);
}

/* ---- run ---- */

static bool run_is_eog(void *ctx, int32_t id) { return tok_is_eog((const tokenizer *)ctx, id); }

/* run's options (its flag table's fields). */
typedef struct run_opts {
    const char *model_path, *prompt, *draft_path;
    long n_predict, threads, spec_max;
    float spec_cost;
    draft_kind spec;
    bool spec_given; /* --draft-model alone means --spec draft */
    sampler_params sp;
} run_opts;

#define RO(field) offsetof(run_opts, field)
static int run_seed(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    long x;
    if (!parse_long(v, 0, LONG_MAX, &x)) return err_set(e, ERR_INVALID, "--seed: expected a non-negative integer, got '%s'", v);
    ((run_opts *)opts)->sp.seed = (uint64_t)x;
    return 0;
}
static int run_spec(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    if (draft_kind_parse(v, &((run_opts *)opts)->spec, e) < 0) return err_prefix(e, "--spec"), ERR_INVALID;
    ((run_opts *)opts)->spec_given = true;
    return 0;
}
static int run_spec_cost(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    float *c = &((run_opts *)opts)->spec_cost;
    if (!parse_float(v, c) || !(*c > 0)) return err_set(e, ERR_INVALID, "--spec-token-cost: expected a cost > 0, got '%s'", v);
    return 0;
}

static const flag_row run_flags[] = {
    FLAG_ROW("-m", NULL, "MODEL.gguf", "the model (default: the shipped " SERVER_DEFAULT_MODEL ")", FLAG_STR,
             RO(model_path)),
    FLAG_ROW("-p", NULL, "PROMPT", "generate after PROMPT (printed first; default \"\")", FLAG_STR, RO(prompt)),
    FLAG_ROW("-n", NULL, "N", "at most N new tokens (default 256)", FLAG_LONG, RO(n_predict), 0, 1 << 24, "a count"),
    FLAG_ROW("--temp", NULL, "T", "temperature (default 0.8; 0: greedy)", FLAG_FLOAT, RO(sp.temperature)),
    FLAG_ROW("--top-k", NULL, "K", "top-k (default 40)", FLAG_INT, RO(sp.top_k), 0, INT_MAX, "an integer"),
    FLAG_ROW("--top-p", NULL, "P", "top-p (default 0.95)", FLAG_FLOAT, RO(sp.top_p)),
    FLAG_ROW("--min-p", NULL, "P", "min-p (default 0.05)", FLAG_FLOAT, RO(sp.min_p)),
    FLAG_ROW("--repeat-penalty", NULL, "R", "repetition penalty (default 1: none)", FLAG_FLOAT, RO(sp.repeat_penalty)),
    FLAG_ROW("--seed", NULL, "S", "sampling seed (default: a random one)", FLAG_FN, .set = run_seed),
    FLAG_ROW("-t", NULL, "THREADS", "compute threads (default: the CPUs, up to 8)", FLAG_LONG, RO(threads), 1, 1024,
             "a thread count"),
    FLAG_ROW("--spec", NULL, "off|ngram|suffix|draft", "speculative decoding's drafter (default ngram: exact, the output is --spec off's with the same seed)",
             FLAG_FN, .set = run_spec),
    FLAG_ROW("--spec-max", NULL, "K", "draft tokens per step at most (default 8)", FLAG_LONG, RO(spec_max), 1, DRAFT_MAX,
             "a count in [1, 32]"),
    FLAG_ROW("--draft-model", NULL, "FILE.gguf", "--spec draft's model (implies --spec draft)", FLAG_STR, RO(draft_path)),
    FLAG_ROW("--spec-token-cost", NULL, "C", "a draft token's cost relative to a step's (testing; default: learnt)",
             FLAG_FN, .set = run_spec_cost),
};
#undef RO

static int cmd_run(int argc, char **argv) {
    run_opts ro = {.prompt = "", .n_predict = 256, .spec_max = 8, .spec = DRAFT_NGRAM, .sp = sampler_defaults()};
    ro.sp.temperature = 0.8f;
    ro.sp.top_k = 40;
    ro.sp.top_p = 0.95f;
    ro.sp.min_p = 0.05f;
    ro.sp.seed = (uint64_t)clock_ns();
    static const flag_cmd run_cmd = {"run", "usage: kvloom run [options]: generates text after PROMPT with the model\n",
                                     NULL, run_flags, ARRAY_LEN(run_flags)};
    err_t e = {0};
    int rc0 = flags_parse(&run_cmd, argc, argv, &ro, &e);
    if (rc0 > 0) return 0; /* --help */
    if (rc0 < 0) die("%s", e.msg);
    const char *model_path = ro.model_path, *prompt = ro.prompt, *draft_path = ro.draft_path;
    long n_predict = ro.n_predict, threads = ro.threads, spec_max = ro.spec_max;
    float spec_cost = ro.spec_cost;
    draft_kind spec = ro.spec;
    bool spec_given = ro.spec_given;
    sampler_params sp = ro.sp;
    if (sampler_params_check(&sp, &e)) die("%s", e.msg);
    if (draft_path && !spec_given) spec = DRAFT_MODEL;
    if (spec == DRAFT_MODEL && !draft_path) die("--spec draft needs --draft-model FILE.gguf%s", "");
    if (draft_path && spec != DRAFT_MODEL) die("--draft-model drafts with --spec draft, not --spec %s", draft_kind_name(spec));
    if (!model_path) model_path = default_model();
    if (threads == 0) threads = MIN(sysconf(_SC_NPROCESSORS_ONLN), 8);

    model *m;
    if (model_load(model_path, &m, &e)) {
        fprintf(stderr, "kvloom: %s: %s\n", model_path, e.msg);
        return 1;
    }
    tokenizer *tk;
    if (tok_load(m->gguf, &tk, &e)) {
        fprintf(stderr, "kvloom: %s: %s\n", model_path, e.msg);
        model_free(m);
        return 1;
    }
    const model_config *c = &m->cfg;
    size_t plen = strlen(prompt);
    int rc = 1;
    engine *en = NULL;
    req *r = NULL;
    model *dm = NULL;
    if (draft_path && server_load_draft(draft_path, tk, model_path, &dm, &e) < 0) {
        fprintf(stderr, "kvloom: %s\n", e.msg);
        goto out;
    }
    int n_prompt = tok_encode(tk, prompt, plen, tok_add_bos(tk), false, NULL, 0);
    if (n_prompt < 0) {
        fprintf(stderr, "kvloom: cannot tokenize the prompt\n");
        goto out;
    }
    if (n_prompt == 0) { /* a model without BOS and an empty prompt */
        fprintf(stderr, "kvloom: the prompt is empty and the model has no BOS token\n");
        goto out;
    }
    if (n_prompt > c->n_ctx_train) {
        fprintf(stderr, "kvloom: the prompt has %d tokens, more than the model's context of %d\n", n_prompt,
                c->n_ctx_train);
        goto out;
    }
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)n_prompt);
    tok_encode(tk, prompt, plen, tok_add_bos(tk), false, ids, n_prompt);
    fputs(prompt, stdout);
    fflush(stdout);
    if (n_predict == 0) {
        free(ids);
        fputc('\n', stdout);
        rc = 0;
        goto out;
    }

    /* The serving engine (src/sched) runs the one request: the same
     * prefill, decode and sampling path as `kvloom serve`, with a pool that
     * holds exactly its context. */
    int n_ctx = (int)MIN((long)c->n_ctx_train, (long)n_prompt + n_predict);
    engine_opts eo = engine_defaults();
    eo.n_threads = (int)threads;
    eo.n_ctx = n_ctx;
    eo.kv_mem_bytes = model_kv_block_bytes(m, eo.block_tokens) * (size_t)((n_ctx + eo.block_tokens - 1) / eo.block_tokens + 2);
    eo.max_running = 1;
    eo.spec = spec;
    eo.spec_max = (int)spec_max;
    eo.draft_model = dm;
    eo.spec_token_cost = spec_cost;
    eo.is_eog = run_is_eog;
    eo.eog_ctx = tk;
    if (engine_new(m, &eo, &en, &e)) {
        free(ids);
        fprintf(stderr, "kvloom: %s\n", e.msg);
        goto out;
    }
    r = req_new(ids, n_prompt); /* takes ids */
    r->sp = sp;
    r->max_tokens = (int)n_predict;
    if (engine_submit(en, r, &e)) {
        fprintf(stderr, "kvloom: %s\n", e.msg);
        goto out;
    }
    tok_stream ts;
    tok_stream_init(&ts, tk, true);
    int buf_cap = tok_stream_max_out(tk);
    char *buf = xmalloc((size_t)buf_cap);
    for (int i = 0; i < n_prompt; i++) tok_stream_push(&ts, r->prompt[i], buf, buf_cap); /* printed as given */
    int n_seen = 0;
    req_finish fin = REQ_RUNNING;
    for (;;) {
        int n = req_wait(r, n_seen, -1, &fin);
        for (; n_seen < n; n_seen++) {
            req_token t;
            req_copy_tokens(r, n_seen, 1, &t);
            int nb = tok_stream_push(&ts, t.id, buf, buf_cap);
            if (nb > 0) fwrite(buf, 1, (size_t)nb, stdout);
        }
        fflush(stdout);
        if (fin != REQ_RUNNING && req_wait(r, n_seen, 0, &fin) == n_seen) break;
    }
    int nb = tok_stream_flush(&ts, buf, buf_cap);
    if (nb > 0) fwrite(buf, 1, (size_t)nb, stdout);
    free(buf);
    fputc('\n', stdout);
    fflush(stdout); /* before the stderr summary */
    /* the engine's timings: submission, first token (the prefill), end */
    double t0 = (double)r->t_submit_ns / 1e6, t2 = (double)clock_ns() / 1e6;
    double t1 = r->t_first_ns ? (double)r->t_first_ns / 1e6 : t2;
    char msg[256] = "";
    req_get_finish(r, NULL, msg, sizeof msg);
    rc = fin == REQ_FINISH_ERROR;
    if (rc) fprintf(stderr, "kvloom: %s\n", msg);
    fprintf(stderr, "kvloom: prompt %d tokens in %.1f ms (%.1f t/s), generated %d tokens in %.1f ms (%.1f t/s), %s kernels, %ld threads\n",
            n_prompt, t1 - t0, n_prompt / ((t1 - t0) / 1000 + 1e-9), n_seen, t2 - t1,
            n_seen / ((t2 - t1) / 1000 + 1e-9), kern->name, threads);
    if (spec != DRAFT_OFF) {
        engine_stats st;
        engine_get_stats(en, &st);
        fprintf(stderr, "kvloom: --spec %s: %llu of %llu drafts accepted, %d tokens in %d forward passes\n",
                draft_kind_name(spec), (unsigned long long)st.spec_accepted_tokens_total[spec],
                (unsigned long long)st.spec_drafted_tokens_total[spec], n_seen, r->n_forward_steps);
    }
out:
    req_unref(r);
    engine_free(en);
    model_free(dm);
    tok_free(tk);
    model_free(m);
    return rc;
}

/* ---- info ---- */

static int cmd_info(int argc, char **argv) {
    const char *info_usage = "usage: kvloom info MODEL.gguf\n"
                             "  prints the model's shape, tokenizer, metadata and tensors\n";
    if (argc == 1 && is_help(argv[0])) {
        fputs(info_usage, stdout);
        return 0;
    }
    if (argc != 1) {
        fputs(info_usage, stderr);
        return 2;
    }
    err_t e = {0};
    gguf_ctx *g;
    if (gguf_open(argv[0], &g, &e)) {
        fprintf(stderr, "kvloom: %s\n", e.msg);
        return 1;
    }
    printf("file: %s\nGGUF version %u, %lld metadata keys, %lld tensors, alignment %u\n", argv[0], gguf_version(g),
           (long long)gguf_n_kv(g), (long long)gguf_n_tensors(g), gguf_alignment(g));
    model *m = NULL;
    if (gguf_n_tensors(g) > 0) {
        gguf_ctx *g2;
        if (gguf_open(argv[0], &g2, &e) == 0 && model_load_gguf(g2, &m, &e) != 0) {
            gguf_free(g2);
            printf("model: cannot be run: %s\n", e.msg);
        }
    }
    if (m) {
        const model_config *c = &m->cfg;
        printf("architecture: %s\n", c->arch_name);
        printf("  n_vocab %d, n_embd %d, n_layer %d, n_head %d, n_head_kv %d, head_dim %d, n_ff %d\n", c->n_vocab,
               c->n_embd, c->n_layer, c->n_head, c->n_head_kv, c->head_dim, c->n_ff);
        printf("  context %d, rms_eps %g, rope %s base %g dims %d scale %g%s%s%s%s\n", c->n_ctx_train, c->rms_eps,
               c->rope == ROPE_NORM ? "normal" : "neox", c->rope_theta, c->n_rot, c->rope_scale,
               c->has_rope_freqs ? ", rope_freqs" : "", c->has_qkv_bias ? ", qkv bias" : "",
               c->has_qk_norm ? ", q/k norm" : "", c->tied_output ? ", tied output" : "");
    }
    tokenizer *tk;
    if (tok_load(g, &tk, &e) == 0) {
        printf("tokenizer: %s, %d tokens, bos %d, eos %d, add_bos %s, chat template %s\n", tok_model_name(tk),
               tok_n_vocab(tk), tok_bos(tk), tok_eos(tk), tok_add_bos(tk) ? "yes" : "no",
               tok_chat_template(tk) ? "yes" : "no");
        tok_free(tk);
    } else {
        printf("tokenizer: %s\n", e.msg);
    }
    printf("metadata:\n");
    char buf[512];
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        gguf_kv_format(g, i, buf, sizeof buf);
        printf("  %.*s = %s\n", (int)k.len, k.ptr, buf);
    }
    printf("tensors:\n");
    uint64_t total = 0;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        printf("  %-32.*s %-5s [", (int)t->name.len, t->name.ptr, dtype_name(t->type));
        for (uint32_t d = 0; d < t->n_dims; d++) printf("%s%lld", d ? ", " : "", (long long)t->dims[d]);
        printf("] %llu bytes\n", (unsigned long long)t->n_bytes);
        total += t->n_bytes;
    }
    printf("total weight bytes: %llu (%.2f MiB)\n", (unsigned long long)total, total / 1048576.0);
    model_free(m);
    gguf_free(g);
    return 0;
}

/* ---- tokenize ---- */

static int cmd_tokenize(int argc, char **argv) {
    const char *model_path = NULL, *text = NULL;
    bool bos = true, special = false, from_stdin = false;
    for (int i = 0; i < argc; i++) {
        if (is_help(argv[i])) {
            printf("usage: kvloom tokenize [-m MODEL.gguf] [--no-bos] [--special] [--stdin | TEXT]\n"
                   "  prints the token ids of TEXT (or of standard input) on one line;\n"
                   "  --no-bos: no BOS even if the model adds one; --special: control tokens in the text match\n");
            return 0;
        }
        if (strcmp(argv[i], "-m") == 0 && i + 1 < argc) model_path = argv[++i];
        else if (strcmp(argv[i], "--no-bos") == 0) bos = false;
        else if (strcmp(argv[i], "--special") == 0) special = true;
        else if (strcmp(argv[i], "--stdin") == 0) from_stdin = true;
        else if (!text && argv[i][0] != '-') text = argv[i];
        else die("tokenize: unexpected argument '%s'", argv[i]);
    }
    if (!model_path) model_path = default_model();
    char *owned = NULL;
    size_t len = 0;
    if (from_stdin) {
        size_t cap = 1 << 16;
        owned = xmalloc(cap);
        size_t got;
        while ((got = fread(owned + len, 1, cap - len, stdin)) > 0)
            if ((len += got) == cap) owned = xrealloc(owned, cap *= 2);
        text = owned;
    } else if (!text) {
        die("%s", "tokenize: give TEXT or --stdin");
    } else {
        len = strlen(text);
    }
    err_t e = {0};
    gguf_ctx *g;
    tokenizer *tk;
    if (gguf_open(model_path, &g, &e) || tok_load(g, &tk, &e)) {
        fprintf(stderr, "kvloom: %s: %s\n", model_path, e.msg);
        return 1;
    }
    int n = tok_encode(tk, text, len, bos && tok_add_bos(tk), special, NULL, 0);
    if (n < 0) {
        fprintf(stderr, "kvloom: tokenize failed\n");
        return 1;
    }
    int32_t *ids = xmalloc(sizeof(int32_t) * (size_t)(n + 1));
    tok_encode(tk, text, len, bos && tok_add_bos(tk), special, ids, n);
    for (int i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    free(owned);
    tok_free(tk);
    gguf_free(g);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2 || is_help(argv[1])) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "version")) {
        printf("kvloom %s\n", KVLOOM_VERSION);
        return 0;
    }
    const char *lvl = getenv("KVLOOM_LOG");
    if (lvl && strcmp(lvl, "debug") == 0) log_level = LOG_DEBUG;
    if (kern_init(NULL) != 0) {
        fprintf(stderr, "kvloom: KVLOOM_KERNELS=%s is not available on this machine\n", getenv("KVLOOM_KERNELS"));
        return 2;
    }
    const char *cmd = argv[1];
    int sub_argc = argc - 2;
    char **sub_argv = argv + 2;
    if (strcmp(cmd, "run") == 0) return cmd_run(sub_argc, sub_argv);
    if (strcmp(cmd, "info") == 0) return cmd_info(sub_argc, sub_argv);
    if (strcmp(cmd, "tokenize") == 0) return cmd_tokenize(sub_argc, sub_argv);
    if (strcmp(cmd, "gen") == 0) return cli__gen(sub_argc, sub_argv);
    if (strcmp(cmd, "quantize") == 0) return cli__quantize(sub_argc, sub_argv);
    if (strcmp(cmd, "serve") == 0) {
        server_opts o;
        server_opts_default(&o);
        err_t e = {0};
        int rc = server_parse_args(sub_argc, sub_argv, &o, &e);
        if (rc < 0) {
            fprintf(stderr, "kvloom serve: %s\n", e.msg);
            return 2;
        }
        if (rc > 0) return 0; /* --help was printed */
        if (!o.model_path) o.model_path = default_model();
        return server_main(&o) < 0 ? 1 : 0;
    }
    if (strcmp(cmd, "bench") == 0) return cli__bench(sub_argc, sub_argv);
    fprintf(stderr, "kvloom: unknown command '%s'\n", cmd);
    usage(stderr);
    return 2;
}
