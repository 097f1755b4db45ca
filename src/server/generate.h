/*
 * generate.h — one generation request from validated parameters to output
 * events, shared by every API the server speaks (each translates its request
 * into oai_params, and api_serve, api.h, makes its answer from these
 * events).
 *
 * Place in the flow: server/, on the HTTP thread that owns the request.
 *
 *   oai_params ─gen_start─▶ chat template (tools, mistral ids, generic
 *   tool prompt) or prompt ─▶ tokens ─▶ constraint (constrain.h) ─▶
 *   engine_submit ─▶ ... ─gen_poll─▶ tok_stream (UTF-8) ─▶ stop strings ─▶
 *   tool-call / reasoning parser (chat) ─▶ events
 *
 * Events are tc_event records (chat/toolcall.h): CONTENT text, REASONING
 * text, CALL_START (index, id, name) and CALL_ARGS fragments. Without tools
 * or reasoning, all text is CONTENT. Only calls with index < gen_n_calls()
 * (known once finished) are complete: a call cut by max_tokens has streamed
 * its start, but is not a call.
 *
 * Lifetime: gen_start → gen_poll ... → gen_done (logs the request line,
 * counts the status in /metrics, frees). gen_cancel when the client left.
 */
#ifndef KVLOOM_GENERATE_H
#define KVLOOM_GENERATE_H

#include <jansson.h>
#include <stdbool.h>

#include "../chat/toolcall.h"
#include "../sched/req.h"
#include "http.h"
#include "oai.h"
#include "routes.h"

typedef struct gen gen;

/* Starts generating for p (validated by oai_parse; only read). `path` names
 * the route in the log line (a static string); t0_ns is when the request
 * arrived. Returns NULL and fills *err when the request cannot run (the
 * HTTP status, 400 or 429; an error code such as "context_length_exceeded",
 * or NULL; the field at fault; the message, its field paths tagged: oai.h). */
gen *gen_start(routes_ctx *rc, http_exchange *x, const oai_params *p, const char *path, int64_t t0_ns, oai_error *err);

/* The engine request gen_start submits, built and not submitted: the
 * constraint (tools, tool_choice, response format, grammar), the rendered
 * and tokenized prompt (refused when it has n_ctx tokens or more), sampling,
 * limits, logprobs and KV lifetime fields. *think_open: the prompt leaves
 * the model inside <think>. *relaxed (when not NULL): the schema keywords
 * relaxed (constrain.h; malloc'd), or NULL when none. NULL with *err filled
 * when the request cannot run. The caller owns the req (req_unref).
 * fuzz/fuzz_request.c stops here. */
req *gen_request(routes_ctx *rc, const oai_params *p, int n_ctx, bool *think_open, char **relaxed, oai_error *err);

/* Adds the answer's headers that come from the request's constraint:
 * X-Kvloom-Schema-Relaxed, when a schema keyword could not be enforced and
 * was dropped (the report of constrain_request, percent-encoded outside
 * printable ASCII). Call after gen_start, before replying. */
void gen_add_headers(const gen *g, http_exchange *x);

/* One output token's logprobs, as data (each API writes its own shape): the
 * token, its logprob and its most likely alternatives (t.top_*), and the
 * byte of the output where its text starts. */
typedef struct gen_logprob {
    req_token t;
    size_t text_offset;
} gen_logprob;

typedef struct gen_logprobs {
    gen_logprob *v;
    int n, cap;
} gen_logprobs;

void gen_logprobs_free(gen_logprobs *l);

/* Waits up to timeout_ms for output and appends the new events to ev; with
 * lp (and a request that asked for logprobs), each new token's entry too.
 * Returns true once everything is out (then gen_finish_reason and gen_usage
 * are final). */
bool gen_poll(gen *g, int timeout_ms, tc_events *ev, gen_logprobs *lp);

/* "stop", "length", "tool_calls", or NULL when the generation failed or was
 * cancelled (see gen_error). "tool_calls" whenever there are complete calls,
 * also when max_tokens (or the context) then cut a further call, which is
 * dropped: the calls are the answer an agent acts on. */
const char *gen_finish_reason(const gen *g);
/* The output ended at max_tokens or the context (whatever the finish reason
 * says); once finished. */
bool gen_cut(const gen *g);
/* Complete tool calls (valid once finished). */
int gen_n_calls(const gen *g);
/* Why it failed ("the server is shutting down" when cancelled), and the HTTP
 * status to report it with (500 or 503). */
const char *gen_error(const gen *g, int *status);
void gen_usage(const gen *g, int *n_prompt, int *n_completion, int *n_cached);
/* Completions' echo: the prompt's text (token ids decoded, special tokens
 * left out), or NULL when the request did not ask. */
const char *gen_echo(const gen *g);
/* The sum of the logprobs of the tokens read so far: best_of's ranking
 * (0 unless the request was started with n_logprobs >= 0). */
double gen_logprob_sum(const gen *g);
/* A number unique to this request (for response ids) and its creation time. */
unsigned long long gen_serial(const gen *g);
long long gen_created(const gen *g);
/* clock_ns() when the engine produced the first token (0: none); read it
 * once finished. */
int64_t gen_first_token_ns(const gen *g);
/* The stop string that ended the text (owned by g), or NULL; once finished. */
const char *gen_stop_string(const gen *g);

/* The client went away: the engine drops the request. */
void gen_cancel(gen *g);
/* The stream's reader stopped taking tokens (blocked: --park-bytes of it wait
 * for the client) or goes on: the engine parks the request at once. */
void gen_reader_blocked(gen *g, bool blocked);
/* Logs "METHOD path status prompt=... cached=... generated=... ms", counts
 * the status, frees. NULL is a no-op. */
void gen_done(gen *g, const char *method, int status, bool stream);

/* The number of prompt tokens p would run with (rendered and tokenized as
 * gen_start does, nothing submitted), or -1 with *err filled. */
int gen_count_prompt(routes_ctx *rc, const oai_params *p, oai_error *err);

/* ---- helpers shared by the routes ---- */

/* Encodes text (special tokens parsed); a malloc'd array, or NULL (e set). */
int32_t *gen_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, int *n_out, err_t *e);
/* A token's text as a JSON string (invalid UTF-8 bytes become U+FFFD) and,
 * when bytes is not NULL, its raw bytes as an array of integers. */
json_t *gen_piece_json(const tokenizer *t, int32_t id, json_t **bytes);
/* A logprob as a JSON number (JSON has no -infinity: -9999 instead). */
json_t *gen_logprob_json(float x);

#endif
