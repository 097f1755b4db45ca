/*
 * oai.c — validates OpenAI completion / chat request bodies into oai_params
 * and builds the OpenAI error object.
 *
 * Every rejection names the field (the message and oai_error.field), so a
 * client sees exactly what to fix; the message tags every field path it
 * names (OAI_F) so that each API names it in its own terms (api.h). Nothing
 * here asserts on request content. A JSON null
 * counts as an absent field, because many clients send nulls for unset
 * options.
 */
#include "oai.h"

#include "api.h"
#include "jfield.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../chat/toolcall.h"
#include "../grammar/regex.h"

/* ---- jansson's allocations ---- */

static _Thread_local unsigned long json_nomem;

static void *json_alloc(size_t n) {
    void *p = malloc(n);
    if (!p) json_nomem++;
    return p;
}

void oai_json_init(void) { json_set_alloc_funcs(json_alloc, free); }

unsigned long oai_json_nomem(void) { return json_nomem; }

static _Thread_local unsigned long json_mark;

void oai_json_mark(void) { json_mark = json_nomem; }

bool oai_json_failed(void) { return json_nomem != json_mark; }

char *oai_json_dump(const json_t *o) {
    if (!o) return NULL;
    unsigned long f0 = json_nomem;
    char *s = json_dumps(o, JSON_COMPACT);
    if (s && json_nomem != f0) {
        free(s);
        s = NULL;
    }
    return s;
}

json_t *oai_field(json_t *o, const char *name) {
    json_t *v = json_object_get(o, name);
    return (v && !json_is_null(v)) ? v : NULL;
}

json_t *oai_text_json(const char *p, size_t n) {
    json_t *s = json_stringn(p ? p : "", n);
    return s ? s : json_string("");
}

json_t *oai_buf_json(const sbuf *b) { return oai_text_json(b->p, b->n); }

/* oai_parse's paths are the internal ones (the OpenAI chat body's), tagged
 * so that each API writes them in its own terms; a refusal reports the
 * top-level field. */
static const jf_style oai_names = {.quote = JF_TAGGED, .params = true};

const char *const oai_efforts[OAI_N_EFFORTS] = {"none", "minimal", "low", "medium", "high", "xhigh"};

/* A number field in [lo, hi] (lo excluded when lo_open) into a float. */
static int get_float(const jf *b, json_t *body, const char *name, double lo, bool lo_open, double hi, float *out) {
    double x = *out;
    if (jf_num(b, body, name, lo, lo_open, hi, &x) < 0) return ERR_INVALID;
    *out = (float)x;
    return 0;
}

/* A non-streamed answer holds every token's logprob and alternatives at
 * once, as JSON (~70 bytes an entry, several times that as jansson
 * values): top_logprobs 20 over a 32k-token answer is ~45 MB of text and
 * ten times that while it is built, per choice (issue 26, "a byte budget
 * for every answer that scales with input"). So a non-streamed request
 * asks for at most OAI_MAX_LOGPROB_ENTRIES (chosen + alternatives, over
 * every choice): an explicit max_tokens past it is a 400 naming the limit,
 * an absent one becomes the most that fits (the answer ends with
 * finish_reason "length" there). A stream sends each token's entries as
 * they come and is not bounded. Call after n, stream and logprobs. */
static int logprob_budget(const jf *b, oai_params *p) {
    if (p->n_logprobs < 0 || p->stream) return 0;
    long long per = (long long)(p->n_logprobs + 1) * p->n * MAX(p->n_prompts, 1);
    long long cap = OAI_MAX_LOGPROB_ENTRIES / per;
    if (p->max_tokens < 0) {
        p->max_tokens = (int)MAX(cap, 1);
        return 0;
    }
    if ((long long)p->max_tokens <= cap) return 0;
    return jf_fail(b, "max_tokens",
                   "%d with %d logprob entries per token (chosen + top_logprobs, over %lld choices) asks "
                   "for up to %lld entries in one answer; a non-streamed answer holds at most %d (max_tokens %lld "
                   "here): stream it, or ask for fewer",
                   p->max_tokens, p->n_logprobs + 1, (long long)p->n * MAX(p->n_prompts, 1),
                   (long long)p->max_tokens * per, OAI_MAX_LOGPROB_ENTRIES, cap);
}

/* KV lifetime: prompt_cache_key / user (the session), kv_ttl, kv_hint. */
static int parse_kv(const jf *b, json_t *body, oai_params *p) {
    json_t *k, *v;
    if (jf_get(b, body, "prompt_cache_key", JF_STRING, NULL, &k) < 0) return ERR_INVALID;
    if (!k) k = oai_field(body, "user");
    if (json_is_string(k) && json_string_length(k)) p->session_key = xstrdup(json_string_value(k));
    k = oai_field(body, "user");
    if (json_is_string(k) && json_string_length(k)) p->user = xstrdup(json_string_value(k));
    /* only down: any client may say its work can wait, none may jump the
     * others (vLLM's field; lower is served first) */
    if (jf_int_in(b, body, "priority", 0, OAI_MAX_PRIORITY,
                  "an integer in [0, 1000] (0, the default: interactive; larger: served after smaller ones)", &v) < 0)
        return ERR_INVALID;
    if (v) p->priority = (int)json_integer_value(v);
    v = oai_field(body, "cache_salt");
    if (v && (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 256))
        return jf_fail(b, "cache_salt", "must be a non-empty string of at most 256 bytes");
    if (v) p->cache_salt = xstrdup(json_string_value(v));
    if (jf_num_in(b, body, "kv_ttl", 0, 86400, "a number of seconds in [0, 86400] (0: release the context now)", &v) < 0)
        return ERR_INVALID;
    if (v) p->kv_ttl = json_number_value(v);
    v = oai_field(body, "kv_hint");
    if (v) {
        if (json_is_string(v) && !strcmp(json_string_value(v), "done")) {
            p->kv_done = true;
        } else if (json_is_object(v)) {
            json_t *n = oai_field(v, "next_use_s");
            double x = json_is_number(n) ? json_number_value(n) : -1;
            if (!json_is_number(n) || !isfinite(x) || x < 0 || x > 86400)
                return jf_fail(b, "kv_hint", "next_use_s must be a number of seconds in [0, 86400]");
            p->kv_next_use = x;
        } else {
            return jf_fail(b, "kv_hint", "must be \"done\" or an object {\"next_use_s\": seconds}");
        }
    }
    return 0;
}

/* An array of token ids at w ("prompt", "prompt[1]"; b: the body's reader). */
static int parse_token_array(const jf *b, const jf *w, json_t *a, int n_vocab, int32_t **out, int *n_out) {
    size_t n = json_array_size(a);
    if (n == 0) return jf_fail(b, "prompt", "must not be empty");
    if (n > (1u << 24)) return jf_fail(b, "prompt", "has too many tokens");
    int32_t *t = malloc(n * sizeof *t);
    if (!t) return err_set(&b->err->e, ERR_NOMEM, "out of memory for %zu prompt tokens", n);
    if (jf_token_ids(w, a, n_vocab, t) < 0) {
        free(t);
        return ERR_INVALID;
    }
    *out = t;
    *n_out = (int)n;
    return 0;
}

static int parse_prompt(const jf *b, json_t *body, int n_vocab, oai_params *p) {
    json_t *v;
    if (jf_get(b, body, "prompt", JF_NEEDED, NULL, &v) < 0) return ERR_INVALID;
    if (json_is_string(v)) {
        p->prompt_text = xstrndup(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) return jf_fail(b, "prompt", "must be a string or an array of strings or token ids");
    size_t n = json_array_size(v);
    if (n == 0) return jf_fail(b, "prompt", "must not be empty");
    jf pr = jf_key(b, "prompt");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) return parse_token_array(b, &pr, v, n_vocab, &p->prompt_tokens, &p->n_prompt_tokens);
    if (n > OAI_MAX_PROMPTS) return jf_fail(&pr, NULL, "holds %zu prompts; at most %d in one request", n, OAI_MAX_PROMPTS);
    p->n_prompts = (int)n;
    for (size_t i = 1; i < n; i++) { /* checked here; oai_answer.c runs each one */
        json_t *pi = json_array_get(v, i);
        jf w = jf_index(&pr, i);
        if (json_is_string(pi) && json_is_string(first)) continue;
        if (!json_is_array(pi) || !json_is_array(first))
            return jf_fail(&w, NULL, "must be a %s, as " OAI_F("prompt[0]") " is",
                           json_is_string(first) ? "string" : "token id array");
        int32_t *ids = NULL;
        int n_ids = 0;
        int rc = parse_token_array(b, &w, pi, n_vocab, &ids, &n_ids);
        free(ids);
        if (rc < 0) return rc;
    }
    if (json_is_string(first)) {
        p->prompt_text = xstrndup(json_string_value(first), json_string_length(first));
        return 0;
    }
    jf w0 = jf_index(&pr, 0);
    if (json_is_array(first)) return parse_token_array(b, &w0, first, n_vocab, &p->prompt_tokens, &p->n_prompt_tokens);
    return jf_fail(b, "prompt", "must be a string or an array of strings or token ids");
}

/* Whether an assistant message before messages[upto] holds a tool call with
 * this id. */
static bool tool_call_id_known(json_t *msgs, size_t upto, const char *id) {
    for (size_t i = 0; i < upto; i++) {
        json_t *m = json_array_get(msgs, i);
        json_t *calls = json_object_get(m, "tool_calls");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            json_t *cid = json_object_get(json_array_get(calls, j), "id");
            if (json_is_string(cid) && strcmp(json_string_value(cid), id) == 0) return true;
        }
    }
    return false;
}

/* messages[i] (m, at mr): an assistant message's tool_calls, a tool
 * message's tool_call_id. */
static int check_tool_messages(const jf *mr, json_t *msgs, size_t i, json_t *m) {
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *calls = oai_field(m, "tool_calls");
    if (calls) {
        if (strcmp(role, "assistant") != 0) return jf_fail(mr, "tool_calls", "is only allowed in assistant messages");
        if (!json_is_array(calls)) return jf_fail(mr, "tool_calls", "must be an array");
        jf cs = jf_key(mr, "tool_calls");
        for (size_t j = 0; j < json_array_size(calls); j++) {
            json_t *c = json_array_get(calls, j);
            jf cr = jf_index(&cs, j);
            json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
            json_t *type = json_is_object(c) ? oai_field(c, "type") : NULL;
            if (!json_is_object(c) || !json_is_string(json_object_get(c, "id"))) return jf_fail(&cr, "id", "must be a string");
            if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
                return jf_fail(&cr, "type", "must be \"function\"");
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return jf_fail(&cr, "function.name", "must be a string");
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args) && !json_is_object(args))
                return jf_fail(&cr, "function.arguments", "must be a string or an object");
        }
    }
    if (strcmp(role, "tool") == 0) {
        json_t *id = json_object_get(m, "tool_call_id");
        if (!json_is_string(id)) return jf_fail(mr, "tool_call_id", "must be a string (the id of the call it answers)");
        if (!tool_call_id_known(msgs, i, json_string_value(id)))
            return jf_fail(mr, "tool_call_id", "'%.100s' matches no tool call of an earlier assistant message",
                           json_string_value(id));
    }
    return 0;
}

static int parse_messages(const jf *b, json_t *body, oai_params *p) {
    json_t *v;
    if (jf_get(b, body, "messages", JF_ARRAY | JF_NONEMPTY | JF_NEEDED, NULL, &v) < 0) return ERR_INVALID;
    jf ms = jf_key(b, "messages");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i), *role, *c;
        jf mr = jf_index(&ms, i);
        if (!json_is_object(m)) return jf_fail(&mr, NULL, "must be an object");
        if (jf_get(&mr, m, "role", JF_STRING | JF_REQUIRED, NULL, &role) < 0) return ERR_INVALID;
        if (jf_get(&mr, m, "content", JF_STRING | JF_ARRAY, "a string, an array of parts or null", &c) < 0)
            return ERR_INVALID;
        jf cs = jf_key(&mr, "content");
        for (size_t j = 0; json_is_array(c) && j < json_array_size(c); j++) {
            json_t *part = json_array_get(c, j);
            json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
            jf pr = jf_index(&cs, j);
            if (!json_is_string(type)) return jf_fail(&pr, NULL, "must be an object with a 'type'");
            if (strcmp(json_string_value(type), "text") != 0)
                return jf_fail(&pr, "type", "'%s' is not supported (text only)", json_string_value(type));
            if (!json_is_string(json_object_get(part, "text"))) return jf_fail(&pr, "text", "must be a string");
        }
        int rc = check_tool_messages(&mr, v, i, m);
        if (rc < 0) return rc;
    }
    p->messages = json_incref(v);
    json_t *tools;
    if (jf_get(b, body, "tools", JF_ARRAY, NULL, &tools) < 0) return ERR_INVALID;
    if (tools) {
        jf ts = jf_key(b, "tools");
        for (size_t i = 0; i < json_array_size(tools); i++) {
            jf tr = jf_index(&ts, i);
            if (!json_is_object(json_array_get(tools, i)))
                return jf_fail(&tr, NULL, "must be an object {\"type\":\"function\",\"function\":{...}}");
        }
        if (tc_check_tools(tools, &b->err->e) < 0) {
            b->err->field = "tools";
            return ERR_INVALID;
        }
        if (json_array_size(tools)) p->tools = json_incref(tools);
    }
    /* extension (vLLM, llama.cpp): extra variables for the chat template,
     * e.g. {"enable_thinking": false} for Qwen3 */
    json_t *kw;
    if (jf_get(b, body, "chat_template_kwargs", JF_OBJECT, NULL, &kw) < 0) return ERR_INVALID;
    if (kw) p->template_kwargs = json_incref(kw);
    /* OpenAI's reasoning_effort: "none" turns a reasoning template's
     * thinking off, any other level on (a template that does not reason
     * ignores the variable); chat_template_kwargs.enable_thinking wins. It
     * also reaches the template as the variable reasoning_effort, which
     * gpt-oss's template writes into its system message ("Reasoning:
     * high"); that template knows low, medium and high, so the other levels
     * map to the nearest; a reasoning_effort in chat_template_kwargs wins. */
    static const char *const harmony[] = {"low", "low", "low", "medium", "high", "high"};
    int i = -1;
    if (jf_enum(b, body, "reasoning_effort", oai_efforts, OAI_N_EFFORTS, &i) < 0) return ERR_INVALID;
    if (i >= 0) {
        json_t *copy = p->template_kwargs ? json_copy(p->template_kwargs) : json_object(); /* the body's stays as sent */
        if (!copy) return jf_fail(b, "reasoning_effort", "out of memory");
        if (!json_object_get(copy, "enable_thinking")) json_object_set_new(copy, "enable_thinking", json_boolean(i != 0));
        if (!json_object_get(copy, "reasoning_effort")) json_object_set_new(copy, "reasoning_effort", json_string(harmony[i]));
        if (p->template_kwargs) json_decref(p->template_kwargs);
        p->template_kwargs = copy;
    }
    return 0;
}

static int parse_stop(const jf *b, json_t *body, oai_params *p) {
    json_t *v = oai_field(body, "stop");
    if (!v) return 0;
    jf sr = jf_key(b, "stop");
    if (json_is_string(v)) {
        if (json_string_length(v) > OAI_MAX_STOP_BYTES)
            return jf_fail(&sr, NULL, "has %zu bytes; at most %d", json_string_length(v), OAI_MAX_STOP_BYTES);
        if (json_string_length(v) > 0) p->stop[p->n_stop++] = xstrndup(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) return jf_fail(&sr, NULL, "must be a string or an array of strings");
    if (json_array_size(v) > OAI_MAX_STOP) return jf_fail(&sr, NULL, "may hold at most %d strings", OAI_MAX_STOP);
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        jf er = jf_index(&sr, i);
        if (!json_is_string(s)) return jf_fail(&er, NULL, "must be a string");
        if (json_string_length(s) > OAI_MAX_STOP_BYTES)
            return jf_fail(&er, NULL, "has %zu bytes; at most %d", json_string_length(s), OAI_MAX_STOP_BYTES);
        if (json_string_length(s) > 0) p->stop[p->n_stop++] = xstrndup(json_string_value(s), json_string_length(s));
    }
    return 0;
}

/* tool_choice and parallel_tool_calls (after tools). */
static int parse_tool_choice(const jf *b, json_t *body, oai_params *p) {
    if (jf_bool(b, body, "parallel_tool_calls", &p->parallel_tool_calls) < 0) return ERR_INVALID;
    json_t *v = oai_field(body, "tool_choice");
    if (!v) return 0;
    jf tr = jf_key(b, "tool_choice");
    if (json_is_string(v)) {
        const char *c = json_string_value(v);
        if (!strcmp(c, "auto")) p->tool_choice = OAI_TOOLS_AUTO;
        else if (!strcmp(c, "none")) p->tool_choice = OAI_TOOLS_NONE;
        else if (!strcmp(c, "required")) p->tool_choice = OAI_TOOLS_REQUIRED;
        else return jf_fail(&tr, NULL, "must be \"auto\", \"none\", \"required\" or a function; got \"%.64s\"", c);
    } else if (json_is_object(v)) {
        json_t *type = oai_field(v, "type"), *fn = oai_field(v, "function");
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
            return jf_fail(&tr, "type", "must be \"function\"");
        if (!json_is_string(name)) return jf_fail(&tr, "function.name", "must be a string");
        p->tool_choice = OAI_TOOLS_NAMED;
        p->tool_name = xstrdup(json_string_value(name));
    } else {
        return jf_fail(&tr, NULL, "must be a string or an object");
    }
    if ((p->tool_choice == OAI_TOOLS_REQUIRED || p->tool_choice == OAI_TOOLS_NAMED) && !p->tools)
        return jf_fail(&tr, NULL, "asks for a tool call but '" OAI_F("tools") "' is empty or missing");
    if (p->tool_choice == OAI_TOOLS_NAMED) {
        bool found = false;
        for (size_t i = 0; i < json_array_size(p->tools); i++) {
            json_t *n = json_object_get(json_object_get(json_array_get(p->tools, i), "function"), "name");
            if (json_is_string(n) && strcmp(json_string_value(n), p->tool_name) == 0) found = true;
        }
        if (!found)
            return jf_fail(&tr, NULL, "names the function '%.64s', which is not in '" OAI_F("tools") "'", p->tool_name);
    }
    return 0;
}

/* Takes schema (a reference) as the request's output constraint from field
 * `param`: ERR_INVALID (the reference dropped) unless an object or a bool. */
static int take_schema(oai_params *p, json_t *schema, const char *param) {
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        json_decref(schema);
        return ERR_INVALID;
    }
    p->format = OAI_FORMAT_SCHEMA;
    p->schema = schema;
    p->schema_param = param;
    return 0;
}

/* vLLM's guided decoding fields, onto the same grammar engine: guided_json
 * (a schema, or its JSON text) is json_schema; guided_choice (strings) a
 * grammar of exactly those alternatives; guided_grammar a GBNF grammar (the
 * format llama.cpp and vLLM's xgrammar backend share; vLLM's Lark EBNF is
 * not taken); guided_regex a regular expression (regex.h's ECMA subset)
 * the whole output matches, as vLLM's backends do: ^ and $ change nothing.
 * At most one of them, and none beside the other constraints (n_set of
 * those were given). */
static int parse_guided(const jf *b, json_t *body, oai_params *p, int n_set) {
    if (oai_field(body, "guided_whitespace_pattern"))
        return jf_fail(b, "guided_whitespace_pattern", "is not supported (JSON is written without spaces)");
    static const char *const fields[] = {"guided_json", "guided_choice", "guided_grammar", "guided_regex"};
    const char *which = NULL;
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        if (!oai_field(body, fields[i])) continue;
        if (which || n_set)
            return jf_fail(b, fields[i], "cannot be combined with another constraint (guided_*, grammar, json_schema, response_format)");
        which = fields[i];
    }
    if (!which) return 0;
    json_t *v = oai_field(body, which);
    jf g = jf_key(b, which);
    if (!strcmp(which, "guided_json")) {
        json_t *schema = NULL;
        if (json_is_string(v)) {
            json_error_t je;
            schema = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, &je);
            if (!schema) return jf_fail(&g, NULL, "is not valid JSON at line %d column %d: %s", je.line, je.column, je.text);
        } else {
            schema = json_incref(v);
        }
        if (take_schema(p, schema, "guided_json") < 0) return jf_fail(&g, NULL, "must be a JSON Schema object (or its JSON text)");
    } else if (!strcmp(which, "guided_regex")) {
        if (!json_is_string(v) || json_string_length(v) == 0) return jf_fail(&g, NULL, "must be a non-empty string");
        regex_pat pat;
        int rc = regex_parse(json_string_value(v), json_string_length(v), 0, &pat, &b->err->e);
        if (rc < 0) {
            b->err->field = which;
            err_prefix(&b->err->e, "'" OAI_F("guided_regex") "'");
            return rc;
        }
        sbuf gb = {0};
        sbuf_puts(&gb, "root ::= ");
        size_t k = gb.n;
        regex_emit_raw(&gb, pat.r);
        if (gb.n == k) sbuf_puts(&gb, "\"\""); /* matches only the empty string */
        regex_pat_free(&pat);
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = gb.p;
    } else if (!strcmp(which, "guided_grammar")) {
        if (!json_is_string(v) || json_string_length(v) == 0) return jf_fail(&g, NULL, "must be a non-empty string (GBNF)");
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = xstrndup(json_string_value(v), json_string_length(v));
    } else {
        size_t n = json_array_size(v);
        if (!json_is_array(v) || n == 0 || n > OAI_MAX_CHOICES)
            return jf_fail(&g, NULL, "must be an array of 1 to %d strings", OAI_MAX_CHOICES);
        sbuf gb = {0};
        sbuf_printf(&gb, "root ::= ");
        for (size_t i = 0; i < n; i++) {
            json_t *c = json_array_get(v, i);
            const char *t = json_string_value(c);
            if (!json_is_string(c) || json_string_length(c) == 0 || strlen(t) != json_string_length(c)) {
                sbuf_free(&gb);
                jf e = jf_index(&g, i);
                return jf_fail(&e, NULL, "must be a non-empty string without NUL");
            }
            sbuf_printf(&gb, "%s\"", i ? " | " : "");
            for (const char *q = t; *q; q++) {
                unsigned char ch = (unsigned char)*q;
                if (ch == '"' || ch == '\\') sbuf_printf(&gb, "\\%c", ch);
                else if (ch < 0x20 || ch == 0x7f) sbuf_printf(&gb, "\\x%02X", ch);
                else sbuf_put(&gb, q, 1);
            }
            sbuf_put(&gb, "\"", 1);
        }
        sbuf_put(&gb, "", 1); /* NUL */
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = gb.p;
    }
    return 0;
}

/* response_format, json_schema, grammar, jump_forward, speculative. */
static int parse_format(const jf *b, json_t *body, oai_params *p) {
    if (jf_bool(b, body, "jump_forward", &p->jump_forward) < 0) return ERR_INVALID;
    if (jf_bool(b, body, "speculative", &p->speculative) < 0) return ERR_INVALID;
    int n_set = 0;
    json_t *rf = oai_field(body, "response_format");
    if (rf) {
        jf fr = jf_key(b, "response_format");
        const char *t;
        if (jf_typed(&fr, rf, &t) < 0) return ERR_INVALID;
        if (!strcmp(t, "text")) {
        } else if (!strcmp(t, "json_object")) {
            p->format = OAI_FORMAT_JSON_OBJECT;
            n_set++;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js, *name, *strict;
            jf jr = jf_key(&fr, "json_schema");
            if (jf_get(&fr, rf, "json_schema", JF_OBJECT | JF_REQUIRED, NULL, &js) < 0 ||
                jf_get(&jr, js, "name", JF_STRING, NULL, &name) < 0 || jf_get(&jr, js, "strict", JF_BOOL, NULL, &strict) < 0)
                return ERR_INVALID;
            json_t *schema = oai_field(js, "schema");
            if (!schema) schema = json_true(); /* no schema: any JSON value */
            else json_incref(schema);
            if (take_schema(p, schema, "response_format") < 0) return jf_fail(&jr, "schema", "must be an object");
            p->schema_strict = json_is_true(strict);
            n_set++;
        } else {
            return jf_fail(&fr, "type", "must be \"text\", \"json_object\" or \"json_schema\"; got \"%.64s\"", t);
        }
    }
    json_t *js = oai_field(body, "json_schema");
    if (js) {
        if (!json_is_object(js) && !json_is_boolean(js)) return jf_fail(b, "json_schema", "must be an object");
        if (n_set)
            return api_bad(b->err, "json_schema", "give either '" OAI_F("json_schema") "' or a JSON '" OAI_F("response_format") "', not both");
        p->format = OAI_FORMAT_SCHEMA;
        p->schema = json_incref(js);
        p->schema_param = "json_schema";
        n_set++;
    }
    json_t *g;
    if (jf_get(b, body, "grammar", JF_STRING, "a string (GBNF)", &g) < 0) return ERR_INVALID;
    if (g) {
        if (n_set)
            return api_bad(b->err, "grammar", "give only one of '" OAI_F("grammar") "', '" OAI_F("json_schema") "' and a JSON '" OAI_F("response_format") "'");
        if (json_string_length(g) == 0) return jf_fail(b, "grammar", "is empty");
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = xstrndup(json_string_value(g), json_string_length(g));
        n_set++;
    }
    return parse_guided(b, body, p, n_set);
}

/* logit_bias {"<token id>": bias, ...}. */
static int parse_bias(const jf *b, json_t *body, int n_vocab, oai_params *p) {
    json_t *v;
    if (jf_get(b, body, "logit_bias", JF_OBJECT, "an object of token id -> bias", &v) < 0) return ERR_INVALID;
    if (!v) return 0;
    size_t n = json_object_size(v);
    if (n > OAI_MAX_BIAS) return jf_fail(b, "logit_bias", "has %zu entries; at most %d", n, OAI_MAX_BIAS);
    if (n == 0) return 0;
    p->bias_ids = xmalloc(n * sizeof *p->bias_ids);
    p->bias_vals = xmalloc(n * sizeof *p->bias_vals);
    const char *key;
    json_t *x;
    json_object_foreach(v, key, x) {
        long id;
        if (!parse_long(key, 0, (long)n_vocab - 1, &id))
            return jf_fail(b, "logit_bias", "key '%.32s' is not a token id in [0, %d)", key, n_vocab);
        if (!json_is_number(x) || json_number_value(x) < -100 || json_number_value(x) > 100)
            return api_bad(b->err, "logit_bias", "'" OAI_F("logit_bias[\"%s\"]") "' must be a number in [-100, 100]", key);
        double bias = json_number_value(x);
        p->bias_ids[p->n_bias] = (int32_t)id;
        p->bias_vals[p->n_bias++] = bias <= -100 ? -INFINITY : (float)bias; /* -100 bans, as OpenAI says */
    }
    return 0;
}

/* The completions-only fields: echo, suffix (fill-in-the-middle; whether
 * the model can is gen_start's to say), best_of (>= n; OpenAI refuses it
 * with stream, and so do we: the best is known only at the end). */
static int parse_completion_extras(const jf *b, json_t *body, oai_params *p) {
    json_t *v;
    long long x;
    bool present;
    if (jf_bool(b, body, "echo", &p->echo) < 0) return ERR_INVALID;
    if (p->echo && p->n_logprobs >= 0)
        return jf_fail(b, "echo", "with '" OAI_F("logprobs") "' is not supported (the prompt's own logprobs are not computed)");
    if (jf_get(b, body, "suffix", JF_STRING, NULL, &v) < 0) return ERR_INVALID;
    if (v && json_string_length(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v)) return jf_fail(b, "suffix", "must not hold NUL");
        if (p->n_prompts > 1 || !p->prompt_text) return jf_fail(b, "suffix", "needs one text prompt (the part before the gap)");
        p->suffix = xstrdup(json_string_value(v));
    }
    if (jf_int(b, body, "best_of", 1, OAI_MAX_N, &x, &present) < 0) return ERR_INVALID;
    p->best_of = present ? (int)x : p->n;
    if (p->best_of < p->n) return jf_fail(b, "best_of", "must be at least '" OAI_F("n") "'");
    if (p->best_of > p->n && p->stream) return jf_fail(b, "best_of", "above n cannot be streamed (send stream: false)");
    if (p->best_of * MAX(p->n_prompts, 1) > OAI_MAX_FORKS)
        return jf_fail(b, "best_of", "x prompts is %d; at most %d generations in one request", p->best_of * p->n_prompts,
                       OAI_MAX_FORKS);
    return 0;
}

static int parse_body(json_t *body, oai_kind kind, int n_vocab, oai_params *p, oai_error *err);

int oai_parse(json_t *body, oai_kind kind, int n_vocab, oai_params *p, oai_error *err) {
    memset(err, 0, sizeof *err);
    int rc = parse_body(body, kind, n_vocab, p, err);
    if (rc < 0) err->status = rc == ERR_NOMEM ? 503 : 400;
    return rc;
}

static int parse_body(json_t *body, oai_kind kind, int n_vocab, oai_params *p, oai_error *err) {
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->n = 1;
    p->n_prompts = kind == OAI_COMPLETION ? 1 : 0;
    p->max_tokens = -1;
    p->n_logprobs = -1;
    p->sp = sampler_defaults();
    p->sp.repeat_last_n = -1; /* OpenAI penalties count the whole output */
    p->parallel_tool_calls = true;
    p->jump_forward = true;
    p->speculative = true;
    p->kv_ttl = -1;
    p->kv_next_use = -1;
    int rc = ERR_INVALID;
    if (!json_is_object(body)) {
        rc = err_set(&err->e, ERR_INVALID, "the request body must be a JSON object");
        goto fail;
    }
    jf bd = jf_body(&oai_names, err), *b = &bd;
    json_t *v;
    long long x;
    bool present;
    if (jf_get(b, body, "model", JF_STRING, NULL, &v) < 0 || jf_get(b, body, "user", JF_STRING, NULL, &v) < 0 ||
        (rc = parse_kv(b, body, p)) < 0)
        goto fail;
    rc = kind == OAI_COMPLETION ? parse_prompt(b, body, n_vocab, p) : parse_messages(b, body, p);
    if (rc < 0) goto fail;
    if (kind == OAI_CHAT && (rc = parse_tool_choice(b, body, p)) < 0) goto fail;
    if ((rc = parse_format(b, body, p)) < 0) goto fail;
    rc = ERR_INVALID;
    /* both are checked; chat's max_completion_tokens wins when both are set */
    if (jf_int(b, body, "max_tokens", 1, INT32_MAX, &x, &present) < 0) goto fail;
    if (present) p->max_tokens = (int)x;
    if (kind == OAI_CHAT && jf_int(b, body, "max_completion_tokens", 1, INT32_MAX, &x, &present) < 0) goto fail;
    if (kind == OAI_CHAT && present) p->max_tokens = (int)x;
    if (get_float(b, body, "temperature", 0, false, 2, &p->sp.temperature) < 0 ||
        get_float(b, body, "top_p", 0, true, 1, &p->sp.top_p) < 0 || jf_int(b, body, "top_k", -1, INT32_MAX, &x, &present) < 0)
        goto fail;
    if (present) p->sp.top_k = x < 0 ? 0 : (int)x;
    if (get_float(b, body, "min_p", 0, false, 1, &p->sp.min_p) < 0 ||
        get_float(b, body, "presence_penalty", -2, false, 2, &p->sp.presence_penalty) < 0 ||
        get_float(b, body, "frequency_penalty", -2, false, 2, &p->sp.frequency_penalty) < 0 ||
        get_float(b, body, "repetition_penalty", 0, true, 10, &p->sp.repeat_penalty) < 0 ||
        jf_int(b, body, "seed", INT64_MIN, INT64_MAX, &x, &p->seed_set) < 0)
        goto fail;
    if (p->seed_set) p->sp.seed = (uint64_t)x;
    if (jf_int(b, body, "n", 1, OAI_MAX_N, &x, &present) < 0) goto fail;
    if (present) p->n = (int)x;
    if (p->n * MAX(p->n_prompts, 1) > OAI_MAX_FORKS) {
        jf_fail(b, "n", "x prompts is %d; at most %d generations in one request", p->n * p->n_prompts, OAI_MAX_FORKS);
        goto fail;
    }
    if (parse_bias(b, body, n_vocab, p) < 0 || jf_bool(b, body, "stream", &p->stream) < 0 ||
        jf_get(b, body, "stream_options", JF_OBJECT, NULL, &v) < 0)
        goto fail;
    jf so = jf_key(b, "stream_options");
    so.param = "stream_options.include_usage";
    if (jf_bool(&so, v, "include_usage", &p->include_usage) < 0 || jf_bool(b, body, "ignore_eos", &p->ignore_eos) < 0 ||
        parse_stop(b, body, p) < 0)
        goto fail;
    if (kind == OAI_COMPLETION) {
        if (jf_int(b, body, "logprobs", 0, 20, &x, &present) < 0) goto fail;
        if (present) p->n_logprobs = (int)x;
    } else {
        bool lp = false;
        if (jf_bool(b, body, "logprobs", &lp) < 0 || jf_int(b, body, "top_logprobs", 0, 20, &x, &present) < 0) goto fail;
        if (present && !lp) {
            jf_fail(b, "top_logprobs", "requires '" OAI_F("logprobs") "' to be true");
            goto fail;
        }
        if (lp) p->n_logprobs = present ? (int)x : 0;
    }
    if (logprob_budget(b, p) < 0) goto fail;
    p->best_of = p->n;
    if (kind == OAI_COMPLETION && parse_completion_extras(b, body, p) < 0) goto fail;
    if (kind == OAI_CHAT && (v = oai_field(body, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1)) {
        jf_fail(b, "best_of", "is a /v1/completions field (chat takes '" OAI_F("n") "')");
        goto fail;
    }
    if ((rc = sampler_params_check(&p->sp, &err->e)) < 0) {
        err->field = NULL;
        goto fail;
    }
    return 0;
fail:
    oai_params_free(p);
    return rc;
}

void oai_params_free(oai_params *p) {
    free(p->prompt_text);
    free(p->prompt_tokens);
    free(p->suffix);
    if (p->messages) json_decref(p->messages);
    if (p->tools) json_decref(p->tools);
    if (p->template_kwargs) json_decref(p->template_kwargs);
    if (p->schema) json_decref(p->schema);
    free(p->tool_name);
    free(p->grammar);
    free(p->session_key);
    free(p->user);
    free(p->cache_salt);
    free(p->bias_ids);
    free(p->bias_vals);
    for (int i = 0; i < p->n_stop; i++) free(p->stop[i]);
    memset(p, 0, sizeof *p);
    p->max_tokens = -1;
    p->n_logprobs = -1;
}

/* A JSON string of s; bytes that are not valid UTF-8 (a path or a value
 * quoted from the request) become '?'. */
static json_t *safe_string(const char *s) {
    json_t *j = json_string(s ? s : "");
    if (j) return j;
    char *c = xstrdup(s);
    for (char *p = c; *p; p++)
        if ((unsigned char)*p >= 0x80) *p = '?';
    j = json_string(c);
    free(c);
    return j ? j : json_string("");
}

char *oai_error_json(const char *msg, const char *type, const char *param, const char *code) {
    json_t *o = json_pack("{s:{s:o, s:o, s:o, s:o}}", "error", "message", safe_string(msg), "type", safe_string(type),
                          "param", param ? safe_string(param) : json_null(), "code",
                          code ? safe_string(code) : json_null());
    char *s = oai_json_dump(o);
    json_decref(o);
    if (!s) s = xstrdup("{\"error\":{\"message\":\"internal error\",\"type\":\"server_error\",\"param\":null,\"code\":null}}");
    return s;
}

const char *oai_error_type(int status) {
    switch (status) {
    case 400: return "invalid_request_error";
    case 401: return "authentication_error";
    case 403: return "permission_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "invalid_request_error";
    case 429: return "rate_limit_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

/* Counts the values of a JSON text without parsing it: every element and
 * member starts after '[', '{', ',' or ':' outside strings (an upper bound,
 * exact enough for a cap). Stops counting past `limit`. */
static size_t json_count_values(const char *b, size_t n, size_t limit) {
    size_t k = 1;
    bool in_str = false;
    for (size_t i = 0; i < n && k <= limit; i++) {
        char c = b[i];
        if (in_str) {
            if (c == '\\') i++;
            else if (c == '"') in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{' || c == ',' || c == ':') {
            k++;
        }
    }
    return k;
}

json_t *oai_load_body(http_exchange *x, char *msg, size_t cap) {
    size_t n;
    const char *b = http_body(x, &n);
    json_t *o = NULL;
    size_t k = json_count_values(b, n, OAI_MAX_JSON_VALUES);
    if (k > OAI_MAX_JSON_VALUES) {
        snprintf(msg, cap, "the request body holds more than %d JSON values", OAI_MAX_JSON_VALUES);
    } else {
        json_error_t je;
        o = json_loadb(b, n, JSON_REJECT_DUPLICATES, &je);
        if (!o)
            snprintf(msg, cap, "invalid JSON in the request body at line %d column %d (byte %d): %s", je.line, je.column,
                     je.position, je.text);
        else if (!json_is_object(o)) {
            json_decref(o);
            o = NULL;
            snprintf(msg, cap, "the request body must be a JSON object");
        }
    }
    http_body_release(x);
    return o;
}

void oai_reply_error(http_exchange *x, int status, const char *msg, const char *param, const char *code) {
    api_reply_error(&api_openai, x, status, msg, param, code);
}
