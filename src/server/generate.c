/*
 * generate.c — a generation request from oai_params to output events (see
 * generate.h): prompt rendering and tokenization, the constraint, submission,
 * and the reading side (detokenizer, stop strings, tool-call parser).
 *
 * Thread: the HTTP thread that owns the request; the engine fills the req.
 */
#include "generate.h"
#include "models.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../sched/kvpolicy.h"
#include "../chat/chat.h"
#include "constrain.h"
#include "stop.h"

/* Encodes text; returns a malloc'd array and its length, or NULL (ERR set). */
int32_t *gen_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, int *n_out, err_t *e) {
    int cap = (int)MIN(len + 8, (size_t)1 << 20);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return err_set(e, ERR_NOMEM, "out of memory"), NULL;
    int n = tok_encode(t, text, len, add_bos, true, ids, cap);
    if (n > cap) {
        int32_t *ids2 = realloc(ids, (size_t)n * sizeof *ids);
        if (!ids2) {
            free(ids);
            return err_set(e, ERR_NOMEM, "out of memory"), NULL;
        }
        ids = ids2;
        n = tok_encode(t, text, len, add_bos, true, ids, n);
    }
    if (n < 0) {
        free(ids);
        err_set(e, ERR_INVALID, "the text cannot be tokenized (too long?)");
        return NULL;
    }
    *n_out = n;
    return ids;
}

json_t *gen_piece_json(const tokenizer *t, int32_t id, json_t **bytes) {
    char buf[256];
    int n = tok_piece(t, id, buf, (int)sizeof buf);
    if (n < 0) n = 0;
    if (n > (int)sizeof buf) n = (int)sizeof buf;
    if (bytes) {
        *bytes = json_array();
        for (int i = 0; i < n; i++) json_array_append_new(*bytes, json_integer((unsigned char)buf[i]));
    }
    json_t *s = json_stringn(buf, (size_t)n);
    if (s) return s;
    /* Not valid UTF-8 (a byte token): replace what does not decode. */
    char out[256 * 3 + 1];
    size_t k = 0;
    for (int i = 0; i < n;) {
        unsigned char c = (unsigned char)buf[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (len && i + len <= n) {
            json_t *probe = json_stringn(buf + i, (size_t)len);
            if (probe) {
                json_decref(probe);
                memcpy(out + k, buf + i, (size_t)len);
                k += (size_t)len;
                i += len;
                continue;
            }
        }
        memcpy(out + k, "\xEF\xBF\xBD", 3);
        k += 3;
        i++;
    }
    return json_stringn(out, k);
}

/* A log-probability as JSON: -inf (a token the grammar refused) as -9999,
 * the value OpenAI uses for "impossible". */
json_t *gen_logprob_json(float x) { return json_real(isfinite(x) ? (double)x : -9999.0); }

/* ---- the request's state on the HTTP side ---- */

struct gen {
    routes_ctx *rc;
    req *r;
    oai_kind kind;
    int n_logprobs;
    unsigned long long serial;
    long long created;
    int64_t t0_ns;
    const char *path;
    tok_stream ts;
    char *piece;          /* tok_stream output scratch                      */
    int piece_cap;
    stop_matcher *sm;
    int n_seen;           /* tokens consumed from the req                   */
    int n_completion;     /* tokens reported in usage                       */
    size_t text_offset;   /* bytes of detokenized text so far (logprobs)     */
    bool stop_hit;        /* a stop string ended the text                   */
    bool finished;        /* nothing more will come                         */
    req_finish finish;
    char error[256];
    tc_parser *tp;        /* chat with tools or reasoning, else NULL         */
    int n_calls;          /* complete calls (finish "tool_calls")           */
    char call0[64];       /* the first call's tool name (KV pin prediction)  */
    char *relaxed;        /* schema keywords relaxed (gen_add_headers) or NULL */
    char *echo;           /* completions' echo: the prompt's text, or NULL   */
    double logprob_sum;   /* of the tokens taken (when the req has logprobs) */
};

void gen_logprobs_free(gen_logprobs *l) {
    free(l->v);
    memset(l, 0, sizeof *l);
}

/* The generation has ended (g->finished just set): its latency goes to the
 * histograms now, before the client has its last bytes (so /metrics read
 * after an answer counts it). t_first_ns is the engine's, read after the
 * tokens it came with. */
static void observe_end(gen *g) {
    const req *r = g->r;
    if (!r->t_first_ns || g->n_completion < 1) return;
    double tpot = -1;
    if (g->n_completion > 1) tpot = (double)(clock_ns() - r->t_first_ns) / 1e9 / (g->n_completion - 1);
    metrics_observe(g->rc->met, (double)(r->t_first_ns - r->t_submit_ns) / 1e9, tpot);
}

/* Waits up to timeout_ms for output; appends new text to `text` and, when lp
 * is not NULL, logprobs entries. Sets g->finished at the end. */
static void gen_pump(gen *g, int timeout_ms, sbuf *text, gen_logprobs *lp) {
    if (g->finished) return;
    req_finish fin;
    int n = req_wait(g->r, g->n_seen, timeout_ms, &fin);
    if (n > g->n_seen && !g->stop_hit) {
        int k = n - g->n_seen;
        req_token *toks = xmalloc((size_t)k * sizeof *toks);
        req_copy_tokens(g->r, g->n_seen, k, toks);
        for (int i = 0; i < k && !g->stop_hit; i++) {
            int m = tok_stream_push(&g->ts, toks[i].id, g->piece, g->piece_cap);
            if (m < 0) m = 0;
            g->n_completion++;
            if (g->r->n_logprobs >= 0) g->logprob_sum += toks[i].logprob;
            if (lp && g->n_logprobs >= 0) {
                if (lp->n == lp->cap) {
                    lp->cap = lp->cap ? lp->cap * 2 : 16;
                    lp->v = xrealloc(lp->v, (size_t)lp->cap * sizeof *lp->v);
                }
                lp->v[lp->n++] = (gen_logprob){.t = toks[i], .text_offset = g->text_offset};
            }
            g->text_offset += (size_t)m;
            const char *out;
            size_t out_n;
            if (stop_feed(g->sm, g->piece, (size_t)m, &out, &out_n)) {
                g->stop_hit = true;
                req_stop(g->r);
            }
            sbuf_put(text, out, out_n);
        }
        free(toks);
    }
    g->n_seen = n;
    if (g->stop_hit) {
        g->finished = true;
        g->finish = REQ_FINISH_STOP;
        observe_end(g);
        return;
    }
    if (fin != REQ_RUNNING && req_wait(g->r, g->n_seen, 0, &fin) == g->n_seen) {
        /* Everything consumed: flush the held bytes and the held stop prefix. */
        int m = tok_stream_flush(&g->ts, g->piece, g->piece_cap);
        const char *out;
        size_t out_n;
        if (m > 0 && stop_feed(g->sm, g->piece, (size_t)m, &out, &out_n)) {
            sbuf_put(text, out, out_n);
            g->stop_hit = true;
            fin = REQ_FINISH_STOP;
        } else {
            if (m > 0) sbuf_put(text, out, out_n);
            stop_flush(g->sm, &out, &out_n);
            sbuf_put(text, out, out_n);
        }
        g->finished = true;
        g->finish = fin;
        req_get_finish(g->r, NULL, g->error, sizeof g->error);
        if (fin != REQ_FINISH_CANCEL) observe_end(g);
    }
}

/* ---- the prompt ---- */

/* Mistral's template accepts only tool-call ids of 9 letters and digits:
 * other ids are mapped to 9 characters derived from them (a call and the
 * tool message answering it map alike). */
static void mistral_id(json_t *o, const char *key) {
    json_t *v = json_object_get(o, key);
    if (!json_is_string(v)) return;
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n == 9 && strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789") == 9) return;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    static const char an[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char id[10];
    for (int i = 0; i < 9; i++, h /= 62) id[i] = an[h % 62];
    id[9] = 0;
    json_object_set_new(o, key, json_string(id));
}

/* The messages as the template should see them: tool-call arguments sent as
 * JSON text become objects (templates such as Llama 3's write them with
 * tojson, and ours writes the same canonical text the grammar produced, so
 * the next turn's prompt still matches the cached one); for templates
 * without a tool syntax of their own, the tools and the call format go into
 * the system message. A new reference. */
static json_t *template_messages(routes_ctx *rc, const oai_params *p) {
    json_t *msgs = json_deep_copy(p->messages);
    if (!msgs) return NULL;
    for (size_t i = 0; i < json_array_size(msgs); i++) {
        json_t *calls = json_object_get(json_array_get(msgs, i), "tool_calls");
        if (rc->tool_format == TC_MISTRAL) mistral_id(json_array_get(msgs, i), "tool_call_id");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            if (rc->tool_format == TC_MISTRAL) mistral_id(json_array_get(calls, j), "id");
            json_t *fn = json_object_get(json_array_get(calls, j), "function");
            json_t *a = json_object_get(fn, "arguments");
            if (!json_is_string(a)) continue;
            json_t *obj = json_loadb(json_string_value(a), json_string_length(a), 0, NULL);
            if (json_is_object(obj))
                json_object_set_new(fn, "arguments", obj);
            else
                json_decref(obj);
        }
    }
    if (!rc->template_calls) {
        /* A template that does not write assistant tool calls (ChatML
         * fallback, SmolLM2...) would drop them: write them into the content
         * in the generic syntax, as the model produced them. */
        for (size_t i = 0; i < json_array_size(msgs); i++) {
            json_t *m = json_array_get(msgs, i);
            json_t *calls = json_object_get(m, "tool_calls");
            if (!json_array_size(calls)) continue;
            json_t *list = json_array();
            for (size_t j = 0; j < json_array_size(calls); j++) {
                json_t *fn = json_object_get(json_array_get(calls, j), "function");
                json_array_append_new(list, json_pack("{s:O, s:O}", "name", json_object_get(fn, "name"), "arguments",
                                                      json_object_get(fn, "arguments")));
            }
            json_t *wrap = json_pack("{s:o}", "tool_calls", list);
            char *text = json_dumps(wrap, JSON_PRESERVE_ORDER); /* ", " and ": ", as the grammar writes */
            json_decref(wrap);
            json_t *c = json_object_get(m, "content");
            size_t n = (json_is_string(c) ? json_string_length(c) : 0) + strlen(text) + 2;
            char *joined = xmalloc(n);
            snprintf(joined, n, "%s%s%s", json_is_string(c) ? json_string_value(c) : "",
                     json_is_string(c) && json_string_length(c) ? "\n" : "", text);
            json_object_set_new(m, "content", json_string(joined));
            json_object_del(m, "tool_calls");
            free(joined);
            free(text);
        }
    }
    if (rc->tool_format == TC_GENERIC && p->tools && p->tool_choice != OAI_TOOLS_NONE) {
        char *sys = tc_generic_system_prompt(p->tools);
        json_t *first = json_array_get(msgs, 0);
        json_t *role = json_object_get(first, "role");
        json_t *c = json_object_get(first, "content");
        if (json_is_string(role) && !strcmp(json_string_value(role), "system") && json_is_string(c)) {
            size_t n = json_string_length(c) + strlen(sys) + 3;
            char *joined = xmalloc(n);
            snprintf(joined, n, "%s\n\n%s", json_string_value(c), sys);
            json_object_set_new(first, "content", json_string(joined));
            free(joined);
        } else {
            json_array_insert_new(msgs, 0, json_pack("{s:s, s:s}", "role", "system", "content", sys));
        }
        free(sys);
    }
    return msgs;
}

/* Renders the messages with the model's chat template (or ChatML). */
static int render_chat(routes_ctx *rc, const oai_params *p, char **out, err_t *e) {
    const tokenizer *t = rc->tok;
    chat_opts co = {0};
    co.bos_token = tok_bos(t) >= 0 ? tok_piece_str(t, tok_bos(t)) : NULL;
    co.eos_token = tok_eos(t) >= 0 ? tok_piece_str(t, tok_eos(t)) : NULL;
    co.add_generation_prompt = true;
    co.tools = p->tools;
    co.extra = p->template_kwargs;
    json_t *msgs = template_messages(rc, p);
    if (!msgs) return err_set(e, ERR_NOMEM, "out of memory copying the messages");
    /* A prefill: the conversation up to the answer's header, then its
     * beginning as plain text (the answer continues it). */
    json_t *prefill = NULL;
    size_t n_msgs = json_array_size(msgs);
    json_t *last = json_array_get(msgs, n_msgs ? n_msgs - 1 : 0);
    json_t *role = json_object_get(last, "role"), *content = json_object_get(last, "content");
    if (p->continue_final && n_msgs > 1 && json_is_string(role) && !strcmp(json_string_value(role), "assistant") &&
        json_is_string(content) && !json_object_get(last, "tool_calls")) {
        prefill = json_incref(content);
        json_array_remove(msgs, n_msgs - 1);
    }
    int r = chat_render(rc->chat, msgs, &co, out, e);
    json_decref(msgs);
    if (r == 0 && prefill && json_string_length(prefill)) {
        size_t n = strlen(*out), k = json_string_length(prefill);
        *out = xrealloc(*out, n + k + 1);
        memcpy(*out + n, json_string_value(prefill), k);
        (*out)[n + k] = 0;
    }
    json_decref(prefill);
    return r;
}

/* The rendered prompt leaves the model inside <think> (its answer starts
 * with reasoning). */
static bool ends_in_think(const char *text) {
    size_t n = strlen(text);
    while (n && (text[n - 1] == '\n' || text[n - 1] == ' ')) n--;
    return n >= 7 && memcmp(text + n - 7, "<think>", 7) == 0;
}


/* ---- starting ---- */

/* Fill-in-the-middle (completions' suffix), prefix-suffix-middle order as
 * the code models are trained: [BOS] PRE prompt SUF suffix MID; the model
 * writes the middle. A vocabulary without the three tokens is a 400. */
static int32_t *fim_prompt(routes_ctx *rc, const oai_params *p, int *n_out, oai_error *err) {
    int32_t fim[3];
    if (!tok_fim(rc->tok, fim)) {
        err->field = "suffix";
        err_set(&err->e, ERR_INVALID,
                "the model '%s' has no fill-in-the-middle tokens (<|fim_prefix|>, <fim_prefix>, <PRE> or the GGUF's "
                "fim_pre/suf/mid token ids): '" ERR_F("suffix") "' needs a code model trained for it",
                rc->model_id);
        return NULL;
    }
    int n_pre = 0, n_suf = 0;
    int32_t *pre = gen_encode(rc->tok, p->prompt_text, strlen(p->prompt_text), false, &n_pre, &err->e);
    int32_t *suf = pre ? gen_encode(rc->tok, p->suffix, strlen(p->suffix), false, &n_suf, &err->e) : NULL;
    int32_t *ids = NULL;
    if (suf) {
        int bos = tok_add_bos(rc->tok) && tok_bos(rc->tok) >= 0, k = 0;
        ids = xmalloc((size_t)(bos + n_pre + n_suf + 3) * sizeof *ids);
        if (bos) ids[k++] = tok_bos(rc->tok);
        ids[k++] = fim[0];
        memcpy(ids + k, pre, (size_t)n_pre * sizeof *ids);
        k += n_pre;
        ids[k++] = fim[1];
        memcpy(ids + k, suf, (size_t)n_suf * sizeof *ids);
        k += n_suf;
        ids[k++] = fim[2];
        *n_out = k;
    }
    free(pre);
    free(suf);
    return ids;
}

/* The prompt's tokens for p (a malloc'd array; NULL and f filled on error);
 * *think_open: the rendered chat prompt leaves the model inside <think>. */
/* A text that needs more than n_ctx tokens whatever its tokenization (every
 * token covers at most max_piece_bytes): refused before tokenizing it, which
 * for megabytes costs seconds of CPU and hundreds of MB (issue 26 finding
 * 13). True when refused (f filled). */
static bool text_too_long(const routes_ctx *rc, size_t len, int n_ctx, oai_error *err) {
    if (rc->max_piece_bytes <= 0 || n_ctx <= 0 || len / (size_t)rc->max_piece_bytes < (size_t)n_ctx) return false;
    err_set(&err->e, ERR_INVALID,
            "the prompt has at least %zu tokens (%zu bytes, at most %d per token); this model's context is %d tokens",
            len / (size_t)rc->max_piece_bytes, len, rc->max_piece_bytes, n_ctx);
    err->code = "context_length_exceeded";
    return true;
}

/* Cut slack of the streaming count: a prefix cut before a whitespace byte
 * ends where the pre-tokenizers split words anyway, so its tokens are the
 * whole text's first ones, but for a special token's spelling or a
 * SentencePiece merge across the cut (a few tokens at most). */
#define GEN_COUNT_SLACK 8

/* The streaming count (issue 26 finding 13): within text_too_long's bound a
 * text may still be megabytes (the longest token of a large vocabulary is
 * hundreds of bytes) and far more tokens than the context. A text longer
 * than 4 bytes per context token has its prefixes of 4, 8, 16 ... bytes
 * per context token counted first (cut before a whitespace byte); one of
 * more than n_ctx + GEN_COUNT_SLACK tokens refuses the prompt, so the work
 * is bounded by the bytes of about the context's first 2 x n_ctx tokens,
 * not by the text; a prompt that fits costs at most 2 more tokenizations
 * of itself, and only when it averages over 4 bytes per token. True when
 * refused (f filled). */
static bool count_too_long(const routes_ctx *rc, const char *text, size_t len, bool add_bos, int n_ctx, oai_error *err) {
    if (n_ctx <= 0) return false;
    for (size_t cut = (size_t)n_ctx * 4; cut < len; cut *= 2) {
        size_t c = cut;
        while (c > cut / 2 && !isspace((unsigned char)text[c])) c--;
        if (c <= cut / 2) c = cut; /* no whitespace: a word cut in two counts at most one token more */
        int n = tok_encode(rc->tok, text, c, add_bos, true, NULL, 0);
        if (n >= 0 && n > n_ctx + GEN_COUNT_SLACK) {
            err_set(&err->e, ERR_INVALID,
                    "the prompt has more than %d tokens in its first %zu of %zu bytes; this model's context is %d "
                    "tokens",
                    n - GEN_COUNT_SLACK, c, len, n_ctx);
            err->code = "context_length_exceeded";
            return true;
        }
    }
    return false;
}

/* n_ctx: a text longer than text_too_long allows is refused untokenized
 * (0: no limit, e.g. to count tokens). */
static int32_t *prompt_ids(routes_ctx *rc, const oai_params *p, int n_ctx, int *n_out, bool *think_open, oai_error *err) {
    const bool chat = p->kind == OAI_CHAT;
    int32_t *ids = NULL;
    int n_ids = 0;
    *think_open = false;
    err->status = 400;
    err->field = chat ? "messages" : "prompt"; /* the field any error below is about */
    if (chat) {
        char *text = NULL;
        if (render_chat(rc, p, &text, &err->e) < 0) return NULL;
        *think_open = rc->reasoning && ends_in_think(text);
        /* Templates that want BOS write it themselves; otherwise add it as
         * plain completions do. */
        const char *bos = tok_bos(rc->tok) >= 0 ? tok_piece_str(rc->tok, tok_bos(rc->tok)) : NULL;
        bool add_bos = tok_add_bos(rc->tok) && !(bos && *bos && strncmp(text, bos, strlen(bos)) == 0);
        if (text_too_long(rc, strlen(text), n_ctx, err) || count_too_long(rc, text, strlen(text), add_bos, n_ctx, err)) {
            free(text);
            return NULL;
        }
        ids = gen_encode(rc->tok, text, strlen(text), add_bos, &n_ids, &err->e);
        free(text);
    } else if (p->prompt_tokens) {
        ids = xmalloc((size_t)p->n_prompt_tokens * sizeof *ids);
        memcpy(ids, p->prompt_tokens, (size_t)p->n_prompt_tokens * sizeof *ids);
        n_ids = p->n_prompt_tokens;
    } else if (p->suffix) {
        if (text_too_long(rc, strlen(p->prompt_text) + strlen(p->suffix), n_ctx, err)) return NULL;
        ids = fim_prompt(rc, p, &n_ids, err);
    } else {
        if (text_too_long(rc, strlen(p->prompt_text), n_ctx, err) ||
            count_too_long(rc, p->prompt_text, strlen(p->prompt_text), tok_add_bos(rc->tok), n_ctx, err))
            return NULL;
        ids = gen_encode(rc->tok, p->prompt_text, strlen(p->prompt_text), tok_add_bos(rc->tok), &n_ids, &err->e);
    }
    if (!ids) return NULL;
    if (n_ids == 0) {
        err_set(&err->e, ERR_INVALID, "the prompt is empty after tokenization");
        free(ids);
        return NULL;
    }
    *n_out = n_ids;
    return ids;
}

int gen_count_prompt(routes_ctx *rc, const oai_params *p, oai_error *err) {
    memset(err, 0, sizeof *err);
    bool think_open;
    int n = 0;
    int32_t *ids = prompt_ids(rc, p, 0, &n, &think_open, err);
    if (!ids) return -1;
    free(ids);
    return n;
}

req *gen_request(routes_ctx *rc, const oai_params *p, int n_ctx, bool *think_open, char **relaxed, oai_error *err) {
    memset(err, 0, sizeof *err);
    grammar *gr = NULL;
    char *trigger = NULL;
    int32_t *ids = NULL;
    int n_ids = 0;
    *think_open = false;
    err->status = 400;
    char *report = NULL;
    /* a template that refuses two calls in a message gets one per answer
     * (whatever parallel_tool_calls says: the client would send them back) */
    const oai_params *pc = p;
    oai_params one;
    if (rc->one_call && p->parallel_tool_calls) {
        one = *p;
        one.parallel_tool_calls = false;
        pc = &one;
    }
    if (constrain_request(rc->cons, pc, rc->tool_format, &gr, &trigger, &err->field, &report, &err->e) < 0) goto fail;
    ids = prompt_ids(rc, p, n_ctx, &n_ids, think_open, err);
    if (!ids) goto fail;
    if (n_ids >= n_ctx) {
        /* rc->m is absent where a request is only parsed (test_gen_request) */
        err_set(&err->e, ERR_INVALID, "the prompt has %d tokens; this model's context is %d tokens (--ctx raises it, up to "
                "the model's %d)", n_ids, n_ctx, rc->m ? rc->m->cfg.n_ctx_train : n_ctx);
        err->code = "context_length_exceeded";
        goto fail;
    }
    req *r = req_new(ids, n_ids);
    r->grammar = gr;
    r->grammar_trigger = trigger;
    r->no_jump_forward = !p->jump_forward;
    r->no_spec = !p->speculative;
    if (r->grammar_trigger && rc->tool_format == TC_HARMONY) {
        /* harmony: "to=functions." inside a message body (the analysis) is
         * not a call; only headers address calls (the parser agrees) */
        r->trigger_skip_open = "<|message|>";
        r->trigger_skip_close = "<|end|>";
    } else if (r->grammar_trigger && rc->reasoning) {
        /* a call marker inside the reasoning is not a call (the parser
         * agrees) */
        r->trigger_skip_open = "<think>";
        r->trigger_skip_close = "</think>";
        r->trigger_skip_now = *think_open;
    }
    r->sp = p->sp;
    if (!p->seed_set) r->sp.seed = (uint64_t)clock_ns() ^ (atomic_fetch_add(&rc->next_id, 1) * 0x9E3779B97F4A7C15ull);
    r->max_tokens = p->max_tokens > 0 ? p->max_tokens : INT32_MAX;
    r->ignore_eos = p->ignore_eos;
    r->n_logprobs = p->n_logprobs;
    if (p->n_bias) {
        r->bias_ids = xmalloc((size_t)p->n_bias * sizeof *r->bias_ids);
        r->bias_vals = xmalloc((size_t)p->n_bias * sizeof *r->bias_vals);
        memcpy(r->bias_ids, p->bias_ids, (size_t)p->n_bias * sizeof *r->bias_ids);
        memcpy(r->bias_vals, p->bias_vals, (size_t)p->n_bias * sizeof *r->bias_vals);
        r->n_bias = p->n_bias;
    }
    /* an agent's turn is extended by its next one (chat, or completions
     * whose prompts grow, as agent loops on llama-server's API do): pin it
     * (agent policy) unless the request says otherwise */
    r->kv_pin = true;
    r->kv_session = kvpolicy_session_hash(p->session_key);
    r->kv_ttl_s = p->kv_ttl;
    r->kv_next_use_s = p->kv_next_use;
    r->kv_done = p->kv_done;
    r->priority = p->priority;
    r->no_stall = p->no_stall;
    if (relaxed) *relaxed = report;
    else free(report);
    return r;
fail:
    free(report);
    free(ids);
    grammar_unref(gr);
    free(trigger);
    return NULL;
}

gen *gen_start(routes_ctx *rc, http_exchange *x, const oai_params *p, const char *path, int64_t t0_ns, oai_error *err) {
    bool think_open = false;
    if (!rc->en) { /* an encoder (bert) embeds and never generates */
        err->status = 400;
        err->field = "model";
        err->code = "model_not_supported";
        err_set(&err->e, ERR_INVALID, "the model '%s' is an embedding model: it answers /v1/embeddings only",
                rc->model_id);
        return NULL;
    }
    char *relaxed = NULL;
    req *r = gen_request(rc, p, engine_n_ctx(rc->en), &think_open, &relaxed, err);
    if (!r) return NULL;
    r->client = routes_client_id(rc, x, p->user);
    r->priority = routes_priority(rc, x, r->priority);
    r->cache_salt = routes_cache_salt(rc, x, p->cache_salt);
    /* a session (its pin, its kv_hint) is the client's own: another client
     * naming the same prompt_cache_key releases nothing of it */
    if (r->kv_session) r->kv_session = hash_bytes(&r->client, sizeof r->client, r->kv_session) | 1;
    int src = engine_submit(rc->en, r, &err->e);
    if (src < 0) {
        if (src == ERR_RANGE) {
            err->status = 429;
            err->field = NULL;
            /* this client's own limit, or everyone's queue */
            err->code = strstr(err->e.msg, "client-max-queued") ? "client_queue_full"
                          : strstr(err->e.msg, "per-client")      ? "client_limit"
                                                                    : "queue_full";
        } else if (src == ERR_INVALID) {
            err->code = "context_length_exceeded";
        }
        req_unref(r);
        free(relaxed);
        return NULL;
    }

    gen *g = xcalloc(1, sizeof *g);
    g->rc = rc;
    g->r = r;
    g->kind = p->kind;
    g->n_logprobs = p->n_logprobs;
    g->serial = atomic_fetch_add(&rc->next_id, 1);
    g->created = (long long)time(NULL);
    g->t0_ns = t0_ns;
    g->path = path;
    if (relaxed && strlen(relaxed) > 1023) relaxed[1023] = 0; /* the header's bound */
    g->relaxed = relaxed;
    if (p->echo && p->prompt_text) {
        g->echo = xstrdup(p->prompt_text);
    } else if (p->echo) { /* token ids: their text, special tokens left out */
        int need = tok_decode(rc->tok, p->prompt_tokens, p->n_prompt_tokens, true, NULL, 0);
        g->echo = xmalloc((size_t)(need > 0 ? need : 0) + 1);
        g->echo[0] = 0;
        if (need > 0) tok_decode(rc->tok, p->prompt_tokens, p->n_prompt_tokens, true, g->echo, need + 1);
    }
    tok_stream_init(&g->ts, rc->tok, true);
    g->piece_cap = tok_stream_max_out(rc->tok) + 8;
    g->piece = xmalloc((size_t)g->piece_cap);
    /* A prompt that ends with BOS (an empty text prompt) starts a fresh text:
     * the SentencePiece leading space of the first piece is dropped. */
    if (r->n_prompt > 0 && r->prompt[r->n_prompt - 1] == tok_bos(rc->tok))
        tok_stream_push(&g->ts, r->prompt[r->n_prompt - 1], g->piece, g->piece_cap);
    g->sm = stop_new(p->stop, p->n_stop);
    bool tools_on = p->tools && p->tool_choice != OAI_TOOLS_NONE;
    if (p->kind == OAI_CHAT && (tools_on || rc->reasoning))
        g->tp = tc_parser_new(rc->tool_format, tools_on, rc->reasoning, think_open,
                              (unsigned long long)rc->created * 1000003ull + g->serial);
    return g;
}

void gen_add_headers(const gen *g, http_exchange *x) {
    if (!g->relaxed) return;
    /* header-safe: printable ASCII but '%' as is, the rest %XX */
    char v[1024 * 3 + 1];
    size_t n = 0;
    for (const unsigned char *c = (const unsigned char *)g->relaxed; *c && n + 4 < sizeof v; c++) {
        if (*c >= 0x20 && *c < 0x7f && *c != '%') v[n++] = (char)*c;
        else n += (size_t)snprintf(v + n, sizeof v - n, "%%%02X", *c);
    }
    v[n] = 0;
    http_add_header(x, "X-Kvloom-Schema-Relaxed", v);
}

/* ---- reading ---- */

bool gen_poll(gen *g, int timeout_ms, tc_events *ev, gen_logprobs *lp) {
    if (g->finished) return true;
    sbuf text = {0};
    gen_pump(g, timeout_ms, &text, lp);
    if (g->tp) {
        int from = ev->n;
        if (text.n) tc_parser_feed(g->tp, text.p, text.n, ev);
        if (g->finished) g->n_calls = tc_parser_finish(g->tp, g->finish == REQ_FINISH_LENGTH, ev);
        for (int i = from; i < ev->n && !g->call0[0]; i++)
            if (ev->v[i].kind == TC_EV_CALL_START && ev->v[i].index == 0 && ev->v[i].name)
                snprintf(g->call0, sizeof g->call0, "%s", ev->v[i].name);
        /* the turn ended in a call: its KV pin is predicted for that tool */
        if (g->finished && g->n_calls > 0 && g->call0[0]) engine_turn_tool(g->rc->en, g->r, g->call0);
    } else if (text.n) {
        if (ev->n == ev->cap) {
            ev->cap = ev->cap ? ev->cap * 2 : 8;
            ev->v = xrealloc(ev->v, (size_t)ev->cap * sizeof *ev->v);
        }
        tc_event *e = &ev->v[ev->n++];
        memset(e, 0, sizeof *e);
        e->kind = TC_EV_CONTENT;
        e->text = text.p; /* taken */
        e->n = text.n;
        text.p = NULL;
    }
    sbuf_free(&text);
    return g->finished;
}

const char *gen_finish_reason(const gen *g) {
    if (!g->finished) return NULL;
    /* complete calls win over a cut (the cut call itself was dropped): an
     * agent loop runs the calls it got (the AI SDK runs none of a "length"
     * step) and the model can write the lost call again next turn
     * (docs/server.md, "Decision: tool_calls") */
    if (g->n_calls > 0 && (g->finish == REQ_FINISH_STOP || g->finish == REQ_FINISH_LENGTH)) return "tool_calls";
    switch (g->finish) {
    case REQ_FINISH_STOP: return "stop";
    case REQ_FINISH_LENGTH: return "length";
    default: return NULL;
    }
}

int gen_n_calls(const gen *g) { return g->n_calls; }

bool gen_cut(const gen *g) { return g->finished && g->finish == REQ_FINISH_LENGTH; }

const char *gen_error(const gen *g, int *status) {
    /* a grammar over the mask budget is the request's own doing */
    if (status)
        *status = g->finish == REQ_FINISH_CANCEL                                           ? 503
                  : !strncmp(g->error, REQ_ERR_MASK_BUDGET, strlen(REQ_ERR_MASK_BUDGET)) ? 400
                                                                                           : 500;
    return g->error[0] ? g->error : "the server is shutting down";
}

const char *gen_echo(const gen *g) { return g->echo; }

double gen_logprob_sum(const gen *g) { return g->logprob_sum; }

void gen_usage(const gen *g, int *n_prompt, int *n_completion, int *n_cached) {
    int c = 0;
    req_get_finish(g->r, &c, NULL, 0);
    if (n_prompt) *n_prompt = g->r->n_prompt;
    if (n_completion) *n_completion = g->n_completion;
    if (n_cached) *n_cached = c;
}

unsigned long long gen_serial(const gen *g) { return g->serial; }
long long gen_created(const gen *g) { return g->created; }
int64_t gen_first_token_ns(const gen *g) { return g->finished ? g->r->t_first_ns : 0; }
const char *gen_stop_string(const gen *g) { return g->finished ? stop_which(g->sm) : NULL; }

void gen_cancel(gen *g) { req_cancel(g->r); }

void gen_reader_blocked(gen *g, bool blocked) { atomic_store(&g->r->reader_blocked, blocked); }

void gen_done(gen *g, const char *method, int status, bool stream) {
    if (!g) return;
    metrics_count(g->rc->met, status);
    int n_cached = 0;
    req_get_finish(g->r, &n_cached, NULL, 0);
    log_info("%s %s %d prompt=%d cached=%d generated=%d %.1fms%s", method, g->path, status, g->r->n_prompt, n_cached,
             g->n_completion, (double)(clock_ns() - g->t0_ns) / 1e6, stream ? " stream" : "");
    tc_parser_free(g->tp);
    stop_free(g->sm);
    free(g->piece);
    free(g->relaxed);
    free(g->echo);
    req_unref(g->r);
    models_release(g->rc); /* the reference routes_handle took (models.h) */
    free(g);
}
