/*
 * oai.h — the OpenAI request bodies: parsing and validating /v1/completions
 * and /v1/chat/completions JSON into plain parameters, and the error object.
 *
 * Place in the flow: server/, on an HTTP thread, right after the body has
 * been read and before tokenization. Nothing here touches the engine.
 *
 * Validation rules (each failure names the field, e.g. "'temperature' must
 * be in [0, 2]; got 3", and sets oai_error.field to "temperature"):
 *   model string (any name accepted) · prompt string | [string] | [int] |
 *   [[int]] (completions; up to OAI_MAX_PROMPTS strings or id arrays) ·
 *   echo bool, suffix string (one text prompt), best_of integer [n,
 *   OAI_MAX_N] (not with stream) (completions) · messages non-empty array of objects with a string
 *   role (chat) · max_tokens / max_completion_tokens integer >= 1 ·
 *   temperature [0, 2] · top_p (0, 1] · top_k integer >= -1 · min_p [0, 1] ·
 *   presence_penalty, frequency_penalty [-2, 2] · repetition_penalty (0, 10] ·
 *   seed integer · stop string | array of up to 16 strings · stream bool ·
 *   stream_options object {include_usage bool} · logprobs int [0, 20]
 *   (completions) or bool (chat) with top_logprobs int [0, 20] · n integer
 *   [1, OAI_MAX_N] (n (best_of) x prompts <= OAI_MAX_FORKS) ·
 *   user string · ignore_eos bool · prompt_cache_key string · kv_ttl number
 *   [0, 86400] · kv_hint "done" | {"next_use_s": number [0, 86400]}. A null value counts as absent; unknown
 *   fields are ignored.
 *
 * Tools and structured output:
 *   tools (chat) an array checked by tc_check_tools · tool_choice "auto" |
 *   "none" | "required" | {"type":"function","function":{"name":N}} with N
 *   one of the tools ("required" and a name need tools) ·
 *   parallel_tool_calls bool · messages: role "tool" needs a string
 *   tool_call_id that an earlier assistant message's tool_calls holds;
 *   assistant tool_calls entries need id, type "function", function.name
 *   (string) and function.arguments (string or object) · response_format
 *   {"type":"text"} | {"type":"json_object"} | {"type":"json_schema",
 *   "json_schema":{"name":S,"schema":object|bool,"strict":bool}} ·
 *   json_schema (llama-server) object|bool · grammar (llama-server) GBNF
 *   string · jump_forward bool (extension; default true) · speculative
 *   bool (extension; default true: false turns off --spec). At most one of
 *   grammar, json_schema and a JSON response_format. vLLM's guided_json
 *   (schema or its text), guided_choice (strings), guided_grammar (GBNF)
 *   map onto the same formats, and guided_regex (a regular expression,
 *   grammar/regex.h) onto a grammar (at most one constraint in all). The
 *   schema and the grammar themselves are
 *   compiled later (gen_request: constrain.h), where their errors are named
 *   too.
 *
 * logit_bias: an object of token id (a decimal string) -> bias in
 * [-100, 100], at most OAI_MAX_BIAS entries; -100 bans the token.
 * Refused by name (400), never ignored: best_of other than 1 on chat,
 * echo with logprobs (the prompt's own logprobs are not computed), best_of
 * above n with stream, suffix without one text prompt.
 * reasoning_effort (chat) "none" | "minimal" | "low" | "medium" | "high" |
 * "xhigh" sets chat_template_kwargs.enable_thinking (false for "none")
 * unless chat_template_kwargs has it.
 */
#ifndef KVLOOM_OAI_H
#define KVLOOM_OAI_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "../base/base.h"
#include "../sample/sample.h"
#include "http.h"

typedef enum oai_kind { OAI_COMPLETION = 0, OAI_CHAT = 1 } oai_kind;

typedef enum oai_tool_choice {
    OAI_TOOLS_AUTO = 0, /* the model may answer or call (the default)          */
    OAI_TOOLS_NONE,     /* no calls                                           */
    OAI_TOOLS_REQUIRED, /* one call or more, to any tool                      */
    OAI_TOOLS_NAMED,    /* a call to tool_name                                */
} oai_tool_choice;

typedef enum oai_format {
    OAI_FORMAT_TEXT = 0,   /* unconstrained                                    */
    OAI_FORMAT_JSON_OBJECT,/* response_format json_object                      */
    OAI_FORMAT_SCHEMA,     /* response_format json_schema, or json_schema       */
    OAI_FORMAT_GRAMMAR,    /* grammar (GBNF)                                    */
} oai_format;

#define OAI_MAX_STOP 16
/* n (choices per prompt) at most, prompts in one /v1/completions request at
 * most, and generations of one request (n x prompts) at most. */
#define OAI_MAX_N 16
#define OAI_MAX_PROMPTS 16
#define OAI_MAX_FORKS 64
/* guided_choice alternatives at most. */
#define OAI_MAX_CHOICES 1024
/* logit_bias entries at most (OpenAI's limit). */
#define OAI_MAX_BIAS 300
/* logprob entries (chosen + alternatives) in one non-streamed answer */
#define OAI_MAX_LOGPROB_ENTRIES 262144
/* `priority` at most (only down from 0: no client may go before others) */
#define OAI_MAX_PRIORITY 1000
/* Bytes of one stop string at most: the matcher holds back up to that much
 * output per request, and no real stop string comes near it. */
#define OAI_MAX_STOP_BYTES 1024

typedef struct oai_params {
    oai_kind kind;
    char *prompt_text;       /* completions with a text prompt (owned) or NULL   */
    int32_t *prompt_tokens;  /* completions with token ids (owned) or NULL       */
    int n_prompt_tokens;
    int n_prompts;           /* completions: prompts in `prompt` (>= 1); the
                                fields above hold the first (oai_answer.c
                                parses each as a request of its own)         */
    int n;                   /* choices per prompt, [1, OAI_MAX_N]            */
    int best_of;             /* completions: generations per prompt, the n with
                                the highest cumulative logprob answered (>= n;
                                n when absent; not with stream)              */
    bool echo;               /* completions: the prompt before the text       */
    char *suffix;            /* completions: fill-in-the-middle, the text after
                                the gap (owned) or NULL                      */
    int32_t *bias_ids;       /* logit_bias: token ids (owned) ...              */
    float *bias_vals;        /* ... and their biases (-INFINITY: -100, a ban)  */
    int n_bias;
    json_t *messages;        /* chat: the messages array (a reference is held)   */
    json_t *tools;           /* chat: tools array or NULL (reference held)       */
    oai_tool_choice tool_choice;
    char *tool_name;         /* OAI_TOOLS_NAMED: the function (owned)            */
    bool parallel_tool_calls;/* default true                                     */
    oai_format format;
    json_t *schema;          /* OAI_FORMAT_SCHEMA: the schema (reference held)   */
    const char *schema_param;/* "response_format" or "json_schema"               */
    bool schema_strict;      /* response_format.json_schema.strict is true: a
                                keyword that cannot be enforced is a 400, not
                                relaxed (docs/grammar.md)                    */
    char *grammar;           /* OAI_FORMAT_GRAMMAR: GBNF text (owned)            */
    bool jump_forward;       /* default true                                     */
    bool speculative;        /* default true: speculative decoding when the server
                                runs a drafter (--spec); false turns it off      */
    json_t *template_kwargs; /* chat: chat_template_kwargs object or NULL (held)  */
    int max_tokens;          /* -1 when absent                                   */
    sampler_params sp;
    bool seed_set;
    char *stop[OAI_MAX_STOP];/* non-empty stop strings (owned)                   */
    int n_stop;
    bool stream;
    bool include_usage;      /* stream_options.include_usage                     */
    bool ignore_eos;
    int n_logprobs;          /* -1: none; else how many alternatives per token  */
    /* KV lifetime (sched/kvpolicy.h) */
    char *session_key;       /* prompt_cache_key, else user (owned) or NULL      */
    double kv_ttl;           /* kv_ttl seconds; -1 when absent                   */
    double kv_next_use;      /* kv_hint.next_use_s; -1 when absent               */
    bool kv_done;            /* kv_hint "done"                                   */
    /* Tenants (docs/server.md, "Many clients"): the `user` field (owned or
     * NULL; without API keys it names the client), the priority class
     * (`priority`, 0..OAI_MAX_PRIORITY; 0 default: interactive; larger: batch work
     * served after) and the prefix cache's partition (`cache_salt`, owned
     * or NULL). */
    char *user;
    int priority;
    char *cache_salt;
    bool no_stall;           /* set by the server for the forks of a non-streamed
                                answer (req.no_stall), never from the body     */
    bool continue_final;     /* chat: a final assistant message is a prefill the
                                answer continues (set by the Anthropic route)  */
} oai_params;

/* A field path inside an error message, tagged so that each API writes it
 * in its own terms (api_error_text, api.h): "'" OAI_F("messages[%zu].role")
 * "' must be a string" (base.h's ERR_F). */
#define OAI_TAG ERR_TAG
#define OAI_F(path) ERR_F(path)

/* Why a request is refused before it reaches the engine (oai_parse,
 * gen_start, an API's own translation): the HTTP status (400; 429; 503 out
 * of memory), an error code (an identifier, e.g.
 * "context_length_exceeded", or NULL), the top-level field at fault in
 * internal terms (the OpenAI chat body's name, a static string, or NULL),
 * and e: ERR_NOMEM when memory ran out, the message with its field paths
 * tagged (OAI_F). */
typedef struct oai_error {
    int status;
    const char *code;
    const char *field;
    err_t e;
} oai_error;

/* Parses and validates a request body. `n_vocab` bounds token ids in a token
 * prompt. On error returns ERR_INVALID (or ERR_RANGE, ERR_NOMEM) and fills
 * *err (status 400, or 503 when memory ran out). On success *p owns its
 * allocations: release them with oai_params_free. */
int oai_parse(json_t *body, oai_kind kind, int n_vocab, oai_params *p, oai_error *err);
void oai_params_free(oai_params *p);

/* {"error":{"message":msg,"type":type,"param":param|null,"code":code|null}}
 * as a malloc'd string. */
char *oai_error_json(const char *msg, const char *type, const char *param, const char *code);

/* Answers x with status and oai_error_json (its type from the status;
 * a 429 carries Retry-After: 1): api_reply_error with api_openai. */
void oai_reply_error(http_exchange *x, int status, const char *msg, const char *param, const char *code);

/* The error "type" OpenAI uses for an HTTP status (400 -> invalid_request_error,
 * 401 -> authentication_error, 404 -> not_found_error, 429 ->
 * rate_limit_error, 5xx -> server_error ...). */
const char *oai_error_type(int status);

/* A body may hold at most this many JSON values (elements, members): a
 * small body of "[0,0,0,...]" becomes ~40 bytes per value once parsed. */
#define OAI_MAX_JSON_VALUES (256 * 1024)

/* Parses the request body as a JSON object (duplicate keys refused) and
 * releases the body (http_body_release). On failure returns NULL with the
 * message in msg (invalid JSON with line, column and byte; not an object;
 * more than OAI_MAX_JSON_VALUES values, counted before parsing). */
json_t *oai_load_body(http_exchange *x, char *msg, size_t cap);

/* Out of memory inside jansson. jansson reports a failed allocation only
 * sometimes: json_loadb may call it a syntax error, json_object_set_new
 * drops the member, and json_dumps (2.14) may return a text with bytes
 * missing. So the server routes jansson's allocations through
 * oai_json_init's allocator, which counts failures per thread: a reader or
 * builder compares oai_json_nomem() before and after its work on one
 * thread, and treats any change as out of memory (503/500), never as a
 * client's error or a whole answer. */
/* Installs the counting allocator (malloc/free underneath). Call once
 * before any other thread uses jansson (server_main does). */
void oai_json_init(void);
/* Failed jansson allocations on the calling thread so far. */
unsigned long oai_json_nomem(void);
/* A request's checkpoint: marks the calling thread's count now (a
 * request's handler starts from one, routes_handle's, and so does each
 * step of a stream, api.c's), and whether jansson failed on this thread
 * since. */
void oai_json_mark(void);
bool oai_json_failed(void);
/* json_dumps(o, JSON_COMPACT), or NULL when o is NULL or an allocation failed
 * while dumping (the text would be incomplete). */
char *oai_json_dump(const json_t *o);

/* reasoning_effort's levels ("none" first: thinking off), as the chat and
 * Responses routes take them. */
#define OAI_N_EFFORTS 6
extern const char *const oai_efforts[OAI_N_EFFORTS];

/* JSON helpers shared by the request readers and answer writers of every
 * API (oai.c, api_*.c):
 * a field's value, or NULL when absent or null (null counts as absent); */
json_t *oai_field(json_t *o, const char *name);
/* a JSON string of the n bytes at p ("" when they are not valid UTF-8,
 * which generated text can be mid-character); */
json_t *oai_text_json(const char *p, size_t n);
/* the same for a buffer's bytes. */
json_t *oai_buf_json(const sbuf *b);

#endif
