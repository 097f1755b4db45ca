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

#include <math.h>
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

static int bad(const char **param, const char *name, err_t *e, const char *msg) {
    *param = name;
    return err_set(e, ERR_INVALID, "'" OAI_F("%s") "' %s", name, msg);
}

/* Number field in [lo, hi] (open ends when lo_open / hi_open). */
static int get_float(json_t *o, const char *name, double lo, bool lo_open, double hi, float *out, const char **param,
                     err_t *e) {
    json_t *v = oai_field(o, name);
    if (!v) return 0;
    if (!json_is_number(v)) return bad(param, name, e, "must be a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi) {
        *param = name;
        return err_set(e, ERR_INVALID, "'" OAI_F("%s") "' must be in %s%g, %g]; got %g", name, lo_open ? "(" : "[", lo, hi, x);
    }
    *out = (float)x;
    return 0;
}

/* Integer field in [lo, hi]; integral reals such as 16.0 are accepted. Sets
 * *present when the field is there. */
static int get_int(json_t *o, const char *name, long long lo, long long hi, long long *out, bool *present,
                   const char **param, err_t *e) {
    json_t *v = oai_field(o, name);
    if (present) *present = v != NULL;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) &&
               fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return bad(param, name, e, "must be an integer");
    }
    if (x < lo || x > hi) {
        *param = name;
        return err_set(e, ERR_INVALID, "'" OAI_F("%s") "' must be an integer in [%lld, %lld]; got %lld", name, lo, hi, x);
    }
    *out = x;
    return 0;
}

static int get_bool(json_t *o, const char *name, bool *out, const char **param, err_t *e) {
    json_t *v = oai_field(o, name);
    if (!v) return 0;
    if (!json_is_boolean(v)) return bad(param, name, e, "must be a boolean");
    *out = json_is_true(v);
    return 0;
}

/* A non-streamed answer holds every token's logprob and alternatives at
 * once, as JSON (~70 bytes an entry, several times that as jansson
 * values): top_logprobs 20 over a 32k-token answer was ~45 MB of text and
 * ten times that while building it, per choice (issue 26, "a byte budget
 * for every answer that scales with input"). So a non-streamed request
 * asks for at most OAI_MAX_LOGPROB_ENTRIES (chosen + alternatives, over
 * every choice): an explicit max_tokens past it is a 400 naming the limit,
 * an absent one becomes the most that fits (the answer ends with
 * finish_reason "length" there). A stream sends each token's entries as
 * they come and is not bounded. Call after n, stream and logprobs. */
static int logprob_budget(oai_params *p, const char **param, err_t *e) {
    if (p->n_logprobs < 0 || p->stream) return 0;
    long long per = (long long)(p->n_logprobs + 1) * p->n * MAX(p->n_prompts, 1);
    long long cap = OAI_MAX_LOGPROB_ENTRIES / per;
    if (p->max_tokens < 0) {
        p->max_tokens = (int)MAX(cap, 1);
        return 0;
    }
    if ((long long)p->max_tokens <= cap) return 0;
    *param = "max_tokens";
    return err_set(e, ERR_INVALID,
                   "'" OAI_F("max_tokens") "' %d with %d logprob entries per token (chosen + top_logprobs, over %lld choices) asks "
                   "for up to %lld entries in one answer; a non-streamed answer holds at most %d (max_tokens %lld "
                   "here): stream it, or ask for fewer",
                   p->max_tokens, p->n_logprobs + 1, (long long)p->n * MAX(p->n_prompts, 1),
                   (long long)p->max_tokens * per, OAI_MAX_LOGPROB_ENTRIES, cap);
}

/* KV lifetime: prompt_cache_key / user (the session), kv_ttl, kv_hint. */
static int parse_kv(json_t *body, oai_params *p, const char **param, err_t *e) {
    json_t *k = oai_field(body, "prompt_cache_key");
    if (k && !json_is_string(k)) return bad(param, "prompt_cache_key", e, "must be a string");
    if (!k) k = oai_field(body, "user");
    if (k && json_is_string(k) && json_string_length(k)) p->session_key = xstrdup(json_string_value(k));
    k = oai_field(body, "user");
    if (k && json_is_string(k) && json_string_length(k)) p->user = xstrdup(json_string_value(k));
    json_t *v = oai_field(body, "priority");
    if (v) {
        /* only down: any client may say its work can wait, none may jump
         * the others (vLLM's field; lower is served first) */
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > OAI_MAX_PRIORITY)
            return bad(param, "priority", e, "must be an integer in [0, 1000] (0, the default: interactive; larger: "
                       "served after smaller ones)");
        p->priority = (int)json_integer_value(v);
    }
    v = oai_field(body, "cache_salt");
    if (v) {
        if (!json_is_string(v) || !json_string_length(v) || json_string_length(v) > 256)
            return bad(param, "cache_salt", e, "must be a non-empty string of at most 256 bytes");
        p->cache_salt = xstrdup(json_string_value(v));
    }
    v = oai_field(body, "kv_ttl");
    if (v) {
        double x = json_is_number(v) ? json_number_value(v) : -1;
        if (!json_is_number(v) || !isfinite(x) || x < 0 || x > 86400)
            return bad(param, "kv_ttl", e, "must be a number of seconds in [0, 86400] (0: release the context now)");
        p->kv_ttl = x;
    }
    v = oai_field(body, "kv_hint");
    if (v) {
        if (json_is_string(v) && !strcmp(json_string_value(v), "done")) {
            p->kv_done = true;
        } else if (json_is_object(v)) {
            json_t *n = oai_field(v, "next_use_s");
            double x = json_is_number(n) ? json_number_value(n) : -1;
            if (!json_is_number(n) || !isfinite(x) || x < 0 || x > 86400)
                return bad(param, "kv_hint", e, "next_use_s must be a number of seconds in [0, 86400]");
            p->kv_next_use = x;
        } else {
            return bad(param, "kv_hint", e, "must be \"done\" or an object {\"next_use_s\": seconds}");
        }
    }
    return 0;
}

/* An array of token ids; `where` names it in messages ("prompt", "prompt[0]"). */
static int parse_token_array(json_t *a, const char *where, int n_vocab, int32_t **out, int *n_out, const char **param,
                             err_t *e) {
    size_t n = json_array_size(a);
    if (n == 0) return bad(param, "prompt", e, "must not be empty");
    if (n > (1u << 24)) return bad(param, "prompt", e, "has too many tokens");
    int32_t *t = malloc(n * sizeof *t);
    if (!t) return err_set(e, ERR_NOMEM, "out of memory for %zu prompt tokens", n);
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            free(t);
            *param = "prompt";
            return err_set(e, ERR_INVALID, "'" OAI_F("%s[%zu]") "' must be a token id in [0, %d)", where, i, n_vocab);
        }
        t[i] = (int32_t)json_integer_value(v);
    }
    *out = t;
    *n_out = (int)n;
    return 0;
}

static int parse_prompt(json_t *body, int n_vocab, oai_params *p, const char **param, err_t *e) {
    json_t *v = oai_field(body, "prompt");
    if (!v) return bad(param, "prompt", e, "is required");
    if (json_is_string(v)) {
        p->prompt_text = xstrndup(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) return bad(param, "prompt", e, "must be a string or an array of strings or token ids");
    size_t n = json_array_size(v);
    if (n == 0) return bad(param, "prompt", e, "must not be empty");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) return parse_token_array(v, "prompt", n_vocab, &p->prompt_tokens, &p->n_prompt_tokens, param, e);
    if (n > OAI_MAX_PROMPTS) {
        *param = "prompt";
        return err_set(e, ERR_INVALID, "'" OAI_F("prompt") "' holds %zu prompts; at most %d in one request", n, OAI_MAX_PROMPTS);
    }
    p->n_prompts = (int)n;
    for (size_t i = 1; i < n; i++) { /* checked here; oai_answer.c runs each one */
        json_t *pi = json_array_get(v, i);
        char name[32];
        snprintf(name, sizeof name, "prompt[%zu]", i);
        if (json_is_string(pi) && json_is_string(first)) continue;
        if (!json_is_array(pi) || !json_is_array(first)) {
            *param = "prompt";
            return err_set(e, ERR_INVALID, "'" OAI_F("%s") "' must be a %s, as " OAI_F("prompt[0]") " is", name,
                           json_is_string(first) ? "string" : "token id array");
        }
        int32_t *ids = NULL;
        int n_ids = 0;
        int rc = parse_token_array(pi, name, n_vocab, &ids, &n_ids, param, e);
        free(ids);
        if (rc < 0) return rc;
    }
    if (json_is_string(first)) {
        p->prompt_text = xstrndup(json_string_value(first), json_string_length(first));
        return 0;
    }
    if (json_is_array(first))
        return parse_token_array(first, "prompt[0]", n_vocab, &p->prompt_tokens, &p->n_prompt_tokens, param, e);
    return bad(param, "prompt", e, "must be a string or an array of strings or token ids");
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

/* messages[i] (m): an assistant message's tool_calls, a tool message's
 * tool_call_id. */
static int check_tool_messages(json_t *msgs, size_t i, json_t *m, err_t *e) {
    const char *role = json_string_value(json_object_get(m, "role"));
    json_t *calls = oai_field(m, "tool_calls");
    if (calls) {
        if (strcmp(role, "assistant") != 0)
            return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_calls") "' is only allowed in assistant messages", i);
        if (!json_is_array(calls)) return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_calls") "' must be an array", i);
        for (size_t j = 0; j < json_array_size(calls); j++) {
            json_t *c = json_array_get(calls, j);
            json_t *fn = json_is_object(c) ? json_object_get(c, "function") : NULL;
            json_t *type = json_is_object(c) ? oai_field(c, "type") : NULL;
            if (!json_is_object(c) || !json_is_string(json_object_get(c, "id")))
                return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_calls[%zu].id") "' must be a string", i, j);
            if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
                return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_calls[%zu].type") "' must be \"function\"", i, j);
            if (!json_is_object(fn) || !json_is_string(json_object_get(fn, "name")))
                return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_calls[%zu].function.name") "' must be a string", i, j);
            json_t *args = json_object_get(fn, "arguments");
            if (!json_is_string(args) && !json_is_object(args))
                return err_set(e, ERR_INVALID,
                               "'" OAI_F("messages[%zu].tool_calls[%zu].function.arguments") "' must be a string or an object", i,
                               j);
        }
    }
    if (strcmp(role, "tool") == 0) {
        json_t *id = json_object_get(m, "tool_call_id");
        if (!json_is_string(id))
            return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].tool_call_id") "' must be a string (the id of the call it answers)",
                           i);
        if (!tool_call_id_known(msgs, i, json_string_value(id)))
            return err_set(e, ERR_INVALID,
                           "'" OAI_F("messages[%zu].tool_call_id") "' '%.100s' matches no tool call of an earlier assistant message",
                           i, json_string_value(id));
    }
    return 0;
}

static int parse_messages(json_t *body, oai_params *p, const char **param, err_t *e) {
    json_t *v = oai_field(body, "messages");
    if (!v) return bad(param, "messages", e, "is required");
    if (!json_is_array(v) || json_array_size(v) == 0) return bad(param, "messages", e, "must be a non-empty array");
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *m = json_array_get(v, i);
        *param = "messages";
        if (!json_is_object(m)) return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu]") "' must be an object", i);
        json_t *role = json_object_get(m, "role");
        if (!json_is_string(role)) return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].role") "' must be a string", i);
        json_t *c = json_object_get(m, "content");
        if (c && !json_is_null(c) && !json_is_string(c) && !json_is_array(c))
            return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].content") "' must be a string, an array of parts or null", i);
        if (json_is_array(c)) {
            for (size_t j = 0; j < json_array_size(c); j++) {
                json_t *part = json_array_get(c, j);
                json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
                if (!json_is_string(type))
                    return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].content[%zu]") "' must be an object with a 'type'", i, j);
                if (strcmp(json_string_value(type), "text") != 0)
                    return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].content[%zu].type") "' '%s' is not supported (text only)", i,
                                   j, json_string_value(type));
                if (!json_is_string(json_object_get(part, "text")))
                    return err_set(e, ERR_INVALID, "'" OAI_F("messages[%zu].content[%zu].text") "' must be a string", i, j);
            }
        }
        int rc = check_tool_messages(v, i, m, e);
        if (rc < 0) return rc;
    }
    p->messages = json_incref(v);
    json_t *tools = oai_field(body, "tools");
    if (tools) {
        if (!json_is_array(tools)) return bad(param, "tools", e, "must be an array");
        for (size_t i = 0; i < json_array_size(tools); i++)
            if (!json_is_object(json_array_get(tools, i))) {
                *param = "tools";
                return err_set(e, ERR_INVALID, "'" OAI_F("tools[%zu]") "' must be an object {\"type\":\"function\",\"function\":{...}}", i);
            }
        if (tc_check_tools(tools, e) < 0) {
            *param = "tools";
            return ERR_INVALID;
        }
        if (json_array_size(tools)) p->tools = json_incref(tools);
    }
    /* extension (vLLM, llama.cpp): extra variables for the chat template,
     * e.g. {"enable_thinking": false} for Qwen3 */
    json_t *kw = oai_field(body, "chat_template_kwargs");
    if (kw) {
        if (!json_is_object(kw)) return bad(param, "chat_template_kwargs", e, "must be an object");
        p->template_kwargs = json_incref(kw);
    }
    /* OpenAI's reasoning_effort: "none" turns a reasoning template's
     * thinking off, any other level on (a template that does not reason
     * ignores the variable); chat_template_kwargs.enable_thinking wins. It
     * also reaches the template as the variable reasoning_effort, which
     * gpt-oss's template writes into its system message ("Reasoning:
     * high"); that template knows low, medium and high, so the other levels
     * map to the nearest; a reasoning_effort in chat_template_kwargs wins. */
    json_t *effort = oai_field(body, "reasoning_effort");
    if (effort) {
        static const char *const levels[] = {"none", "minimal", "low", "medium", "high", "xhigh"};
        static const char *const harmony[] = {"low", "low", "low", "medium", "high", "high"};
        size_t i = 0;
        while (json_is_string(effort) && i < ARRAY_LEN(levels) && strcmp(json_string_value(effort), levels[i])) i++;
        if (!json_is_string(effort) || i == ARRAY_LEN(levels))
            return bad(param, "reasoning_effort", e, "must be \"none\", \"minimal\", \"low\", \"medium\", \"high\" or \"xhigh\"");
        json_t *copy = p->template_kwargs ? json_copy(p->template_kwargs) : json_object(); /* the body's stays as sent */
        if (!copy) return bad(param, "reasoning_effort", e, "out of memory");
        if (!json_object_get(copy, "enable_thinking")) json_object_set_new(copy, "enable_thinking", json_boolean(i != 0));
        if (!json_object_get(copy, "reasoning_effort")) json_object_set_new(copy, "reasoning_effort", json_string(harmony[i]));
        if (p->template_kwargs) json_decref(p->template_kwargs);
        p->template_kwargs = copy;
    }
    return 0;
}

static int parse_stop(json_t *body, oai_params *p, const char **param, err_t *e) {
    json_t *v = oai_field(body, "stop");
    if (!v) return 0;
    if (json_is_string(v)) {
        if (json_string_length(v) > OAI_MAX_STOP_BYTES) {
            *param = "stop";
            return err_set(e, ERR_INVALID, "'" OAI_F("stop") "' has %zu bytes; at most %d", json_string_length(v), OAI_MAX_STOP_BYTES);
        }
        if (json_string_length(v) > 0) p->stop[p->n_stop++] = xstrndup(json_string_value(v), json_string_length(v));
        return 0;
    }
    if (!json_is_array(v)) return bad(param, "stop", e, "must be a string or an array of strings");
    if (json_array_size(v) > OAI_MAX_STOP) {
        *param = "stop";
        return err_set(e, ERR_INVALID, "'" OAI_F("stop") "' may hold at most %d strings", OAI_MAX_STOP);
    }
    for (size_t i = 0; i < json_array_size(v); i++) {
        json_t *s = json_array_get(v, i);
        if (!json_is_string(s)) {
            *param = "stop";
            return err_set(e, ERR_INVALID, "'" OAI_F("stop[%zu]") "' must be a string", i);
        }
        if (json_string_length(s) > OAI_MAX_STOP_BYTES) {
            *param = "stop";
            return err_set(e, ERR_INVALID, "'" OAI_F("stop[%zu]") "' has %zu bytes; at most %d", i, json_string_length(s),
                           OAI_MAX_STOP_BYTES);
        }
        if (json_string_length(s) > 0) p->stop[p->n_stop++] = xstrndup(json_string_value(s), json_string_length(s));
    }
    return 0;
}

/* tool_choice and parallel_tool_calls (after tools). */
static int parse_tool_choice(json_t *body, oai_params *p, const char **param, err_t *e) {
    if (get_bool(body, "parallel_tool_calls", &p->parallel_tool_calls, param, e) < 0) return ERR_INVALID;
    json_t *v = oai_field(body, "tool_choice");
    if (!v) return 0;
    *param = "tool_choice";
    if (json_is_string(v)) {
        const char *c = json_string_value(v);
        if (!strcmp(c, "auto")) p->tool_choice = OAI_TOOLS_AUTO;
        else if (!strcmp(c, "none")) p->tool_choice = OAI_TOOLS_NONE;
        else if (!strcmp(c, "required")) p->tool_choice = OAI_TOOLS_REQUIRED;
        else
            return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice") "' must be \"auto\", \"none\", \"required\" or a function; got \"%.64s\"",
                           c);
    } else if (json_is_object(v)) {
        json_t *type = oai_field(v, "type"), *fn = oai_field(v, "function");
        json_t *name = json_is_object(fn) ? json_object_get(fn, "name") : NULL;
        if (type && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
            return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice.type") "' must be \"function\"");
        if (!json_is_string(name)) return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice.function.name") "' must be a string");
        p->tool_choice = OAI_TOOLS_NAMED;
        p->tool_name = xstrdup(json_string_value(name));
    } else {
        return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice") "' must be a string or an object");
    }
    if ((p->tool_choice == OAI_TOOLS_REQUIRED || p->tool_choice == OAI_TOOLS_NAMED) && !p->tools)
        return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice") "' asks for a tool call but '" OAI_F("tools") "' is empty or missing");
    if (p->tool_choice == OAI_TOOLS_NAMED) {
        bool found = false;
        for (size_t i = 0; i < json_array_size(p->tools); i++) {
            json_t *n = json_object_get(json_object_get(json_array_get(p->tools, i), "function"), "name");
            if (json_is_string(n) && strcmp(json_string_value(n), p->tool_name) == 0) found = true;
        }
        if (!found)
            return err_set(e, ERR_INVALID, "'" OAI_F("tool_choice") "' names the function '%.64s', which is not in '" OAI_F("tools") "'",
                           p->tool_name);
    }
    *param = NULL;
    return 0;
}

/* Takes schema (a reference) as the request's output constraint from field
 * `param`: ERR_INVALID (the reference dropped) unless an object or a bool. */
static int take_schema(oai_params *p, json_t *schema, const char *param, err_t *e) {
    if (!json_is_object(schema) && !json_is_boolean(schema)) {
        json_decref(schema);
        return ERR_INVALID;
    }
    p->format = OAI_FORMAT_SCHEMA;
    p->schema = schema;
    p->schema_param = param;
    (void)e;
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
static int parse_guided(json_t *body, oai_params *p, int n_set, const char **param, err_t *e) {
    if (oai_field(body, "guided_whitespace_pattern"))
        return bad(param, "guided_whitespace_pattern", e, "is not supported (JSON is written without spaces)");
    static const char *const fields[] = {"guided_json", "guided_choice", "guided_grammar", "guided_regex"};
    const char *which = NULL;
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        if (!oai_field(body, fields[i])) continue;
        if (which || n_set)
            return bad(param, fields[i], e,
                       "cannot be combined with another constraint (guided_*, grammar, json_schema, response_format)");
        which = fields[i];
    }
    if (!which) return 0;
    json_t *v = oai_field(body, which);
    *param = which;
    if (!strcmp(which, "guided_json")) {
        json_t *schema = NULL;
        if (json_is_string(v)) {
            json_error_t je;
            schema = json_loadb(json_string_value(v), json_string_length(v), JSON_REJECT_DUPLICATES, &je);
            if (!schema)
                return err_set(e, ERR_INVALID, "'" OAI_F("guided_json") "' is not valid JSON at line %d column %d: %s", je.line,
                               je.column, je.text);
        } else {
            schema = json_incref(v);
        }
        if (take_schema(p, schema, "guided_json", e) < 0)
            return err_set(e, ERR_INVALID, "'" OAI_F("guided_json") "' must be a JSON Schema object (or its JSON text)");
    } else if (!strcmp(which, "guided_regex")) {
        if (!json_is_string(v) || json_string_length(v) == 0)
            return err_set(e, ERR_INVALID, "'" OAI_F("guided_regex") "' must be a non-empty string");
        regex_pat pat;
        int rc = regex_parse(json_string_value(v), json_string_length(v), 0, &pat, e);
        if (rc < 0) {
            err_prefix(e, "'" OAI_F("guided_regex") "'");
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
        if (!json_is_string(v) || json_string_length(v) == 0)
            return err_set(e, ERR_INVALID, "'" OAI_F("guided_grammar") "' must be a non-empty string (GBNF)");
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = xstrndup(json_string_value(v), json_string_length(v));
    } else {
        size_t n = json_array_size(v);
        if (!json_is_array(v) || n == 0 || n > OAI_MAX_CHOICES)
            return err_set(e, ERR_INVALID, "'" OAI_F("guided_choice") "' must be an array of 1 to %d strings", OAI_MAX_CHOICES);
        sbuf gb = {0};
        sbuf_printf(&gb, "root ::= ");
        for (size_t i = 0; i < n; i++) {
            json_t *c = json_array_get(v, i);
            const char *t = json_string_value(c);
            if (!json_is_string(c) || json_string_length(c) == 0 || strlen(t) != json_string_length(c)) {
                sbuf_free(&gb);
                return err_set(e, ERR_INVALID, "'" OAI_F("guided_choice[%zu]") "' must be a non-empty string without NUL", i);
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
static int parse_format(json_t *body, oai_params *p, const char **param, err_t *e) {
    if (get_bool(body, "jump_forward", &p->jump_forward, param, e) < 0) return ERR_INVALID;
    if (get_bool(body, "speculative", &p->speculative, param, e) < 0) return ERR_INVALID;
    int n_set = 0;
    json_t *rf = oai_field(body, "response_format");
    if (rf) {
        *param = "response_format";
        json_t *type = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
        if (!json_is_string(type))
            return err_set(e, ERR_INVALID, "'" OAI_F("response_format") "' must be an object with a string 'type'");
        const char *t = json_string_value(type);
        if (!strcmp(t, "text")) {
        } else if (!strcmp(t, "json_object")) {
            p->format = OAI_FORMAT_JSON_OBJECT;
            n_set++;
        } else if (!strcmp(t, "json_schema")) {
            json_t *js = oai_field(rf, "json_schema");
            if (!json_is_object(js)) return err_set(e, ERR_INVALID, "'" OAI_F("response_format.json_schema") "' must be an object");
            json_t *name = oai_field(js, "name"), *strict = oai_field(js, "strict");
            if (name && !json_is_string(name))
                return err_set(e, ERR_INVALID, "'" OAI_F("response_format.json_schema.name") "' must be a string");
            if (strict && !json_is_boolean(strict))
                return err_set(e, ERR_INVALID, "'" OAI_F("response_format.json_schema.strict") "' must be a boolean");
            json_t *schema = oai_field(js, "schema");
            if (!schema) schema = json_true(); /* no schema: any JSON value */
            else json_incref(schema);
            if (take_schema(p, schema, "response_format", e) < 0)
                return err_set(e, ERR_INVALID, "'" OAI_F("response_format.json_schema.schema") "' must be an object");
            p->schema_strict = json_is_true(strict);
            n_set++;
        } else {
            return err_set(e, ERR_INVALID,
                           "'" OAI_F("response_format.type") "' must be \"text\", \"json_object\" or \"json_schema\"; got \"%.64s\"", t);
        }
    }
    json_t *js = oai_field(body, "json_schema");
    if (js) {
        *param = "json_schema";
        if (!json_is_object(js) && !json_is_boolean(js)) return err_set(e, ERR_INVALID, "'" OAI_F("json_schema") "' must be an object");
        if (n_set) return err_set(e, ERR_INVALID, "give either '" OAI_F("json_schema") "' or a JSON '" OAI_F("response_format") "', not both");
        p->format = OAI_FORMAT_SCHEMA;
        p->schema = json_incref(js);
        p->schema_param = "json_schema";
        n_set++;
    }
    json_t *g = oai_field(body, "grammar");
    if (g) {
        *param = "grammar";
        if (!json_is_string(g)) return err_set(e, ERR_INVALID, "'" OAI_F("grammar") "' must be a string (GBNF)");
        if (n_set) return err_set(e, ERR_INVALID, "give only one of '" OAI_F("grammar") "', '" OAI_F("json_schema") "' and a JSON '" OAI_F("response_format") "'");
        if (json_string_length(g) == 0) return err_set(e, ERR_INVALID, "'" OAI_F("grammar") "' is empty");
        p->format = OAI_FORMAT_GRAMMAR;
        p->grammar = xstrndup(json_string_value(g), json_string_length(g));
        n_set++;
    }
    int rc = parse_guided(body, p, n_set, param, e);
    if (rc < 0) return rc;
    *param = NULL;
    return 0;
}

/* logit_bias {"<token id>": bias, ...}. */
static int parse_bias(json_t *body, int n_vocab, oai_params *p, const char **param, err_t *e) {
    json_t *v = oai_field(body, "logit_bias");
    if (!v) return 0;
    *param = "logit_bias";
    if (!json_is_object(v)) return err_set(e, ERR_INVALID, "'" OAI_F("logit_bias") "' must be an object of token id -> bias");
    size_t n = json_object_size(v);
    if (n > OAI_MAX_BIAS) return err_set(e, ERR_INVALID, "'" OAI_F("logit_bias") "' has %zu entries; at most %d", n, OAI_MAX_BIAS);
    if (n == 0) return *param = NULL, 0;
    p->bias_ids = xmalloc(n * sizeof *p->bias_ids);
    p->bias_vals = xmalloc(n * sizeof *p->bias_vals);
    const char *key;
    json_t *b;
    json_object_foreach(v, key, b) {
        long id;
        if (!parse_long(key, 0, (long)n_vocab - 1, &id))
            return err_set(e, ERR_INVALID, "'" OAI_F("logit_bias") "' key '%.32s' is not a token id in [0, %d)", key, n_vocab);
        if (!json_is_number(b) || json_number_value(b) < -100 || json_number_value(b) > 100)
            return err_set(e, ERR_INVALID, "'" OAI_F("logit_bias[\"%s\"]") "' must be a number in [-100, 100]", key);
        double x = json_number_value(b);
        p->bias_ids[p->n_bias] = (int32_t)id;
        p->bias_vals[p->n_bias++] = x <= -100 ? -INFINITY : (float)x; /* -100 bans, as OpenAI says */
    }
    *param = NULL;
    return 0;
}

/* The completions-only fields: echo, suffix (fill-in-the-middle; whether
 * the model can is gen_start's to say), best_of (>= n; OpenAI refuses it
 * with stream, and so do we: the best is known only at the end). */
static int parse_completion_extras(json_t *body, oai_params *p, const char **param, err_t *e) {
    json_t *v;
    long long x;
    bool present;
    int rc;
    if ((rc = get_bool(body, "echo", &p->echo, param, e)) < 0) return rc;
    if (p->echo && p->n_logprobs >= 0)
        return bad(param, "echo", e, "with '" OAI_F("logprobs") "' is not supported (the prompt's own logprobs are not computed)");
    if ((v = oai_field(body, "suffix")) && !json_is_string(v)) return bad(param, "suffix", e, "must be a string");
    if (v && json_string_length(v)) {
        if (strlen(json_string_value(v)) != json_string_length(v)) return bad(param, "suffix", e, "must not hold NUL");
        if (p->n_prompts > 1 || !p->prompt_text)
            return bad(param, "suffix", e, "needs one text prompt (the part before the gap)");
        p->suffix = xstrdup(json_string_value(v));
    }
    if ((rc = get_int(body, "best_of", 1, OAI_MAX_N, &x, &present, param, e)) < 0) return rc;
    p->best_of = present ? (int)x : p->n;
    if (p->best_of < p->n) return bad(param, "best_of", e, "must be at least '" OAI_F("n") "'");
    if (p->best_of > p->n && p->stream) return bad(param, "best_of", e, "above n cannot be streamed (send stream: false)");
    if (p->best_of * MAX(p->n_prompts, 1) > OAI_MAX_FORKS) {
        *param = "best_of";
        return err_set(e, ERR_INVALID, "'" OAI_F("best_of") "' x prompts is %d; at most %d generations in one request",
                       p->best_of * p->n_prompts, OAI_MAX_FORKS);
    }
    return 0;
}

static int parse_body(json_t *body, oai_kind kind, int n_vocab, oai_params *p, const char **param, err_t *e);

int oai_parse(json_t *body, oai_kind kind, int n_vocab, oai_params *p, oai_error *err) {
    memset(err, 0, sizeof *err);
    int rc = parse_body(body, kind, n_vocab, p, &err->field, &err->e);
    if (rc < 0) err->status = rc == ERR_NOMEM ? 503 : 400;
    return rc;
}

static int parse_body(json_t *body, oai_kind kind, int n_vocab, oai_params *p, const char **param, err_t *e) {
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
    *param = NULL;
    int rc;
    if (!json_is_object(body)) {
        *param = NULL;
        rc = err_set(e, ERR_INVALID, "the request body must be a JSON object");
        goto fail;
    }
    json_t *v;
    if ((v = oai_field(body, "model")) && !json_is_string(v)) {
        rc = bad(param, "model", e, "must be a string");
        goto fail;
    }
    if ((v = oai_field(body, "user")) && !json_is_string(v)) {
        rc = bad(param, "user", e, "must be a string");
        goto fail;
    }
    if ((rc = parse_kv(body, p, param, e)) < 0) goto fail;
    rc = kind == OAI_COMPLETION ? parse_prompt(body, n_vocab, p, param, e) : parse_messages(body, p, param, e);
    if (rc < 0) goto fail;
    if (kind == OAI_CHAT && (rc = parse_tool_choice(body, p, param, e)) < 0) goto fail;
    if ((rc = parse_format(body, p, param, e)) < 0) goto fail;

    long long x;
    bool present;
    /* both are checked; chat's max_completion_tokens wins when both are set */
    if ((rc = get_int(body, "max_tokens", 1, INT32_MAX, &x, &present, param, e)) < 0) goto fail;
    if (present) p->max_tokens = (int)x;
    if (kind == OAI_CHAT && (rc = get_int(body, "max_completion_tokens", 1, INT32_MAX, &x, &present, param, e)) < 0)
        goto fail;
    if (kind == OAI_CHAT && present) p->max_tokens = (int)x;
    if ((rc = get_float(body, "temperature", 0, false, 2, &p->sp.temperature, param, e)) < 0) goto fail;
    if ((rc = get_float(body, "top_p", 0, true, 1, &p->sp.top_p, param, e)) < 0) goto fail;
    if ((rc = get_int(body, "top_k", -1, INT32_MAX, &x, &present, param, e)) < 0) goto fail;
    if (present) p->sp.top_k = x < 0 ? 0 : (int)x;
    if ((rc = get_float(body, "min_p", 0, false, 1, &p->sp.min_p, param, e)) < 0) goto fail;
    if ((rc = get_float(body, "presence_penalty", -2, false, 2, &p->sp.presence_penalty, param, e)) < 0) goto fail;
    if ((rc = get_float(body, "frequency_penalty", -2, false, 2, &p->sp.frequency_penalty, param, e)) < 0) goto fail;
    if ((rc = get_float(body, "repetition_penalty", 0, true, 10, &p->sp.repeat_penalty, param, e)) < 0) goto fail;
    if ((rc = get_int(body, "seed", INT64_MIN, INT64_MAX, &x, &p->seed_set, param, e)) < 0) goto fail;
    if (p->seed_set) p->sp.seed = (uint64_t)x;
    if ((rc = get_int(body, "n", 1, OAI_MAX_N, &x, &present, param, e)) < 0) goto fail;
    if (present) p->n = (int)x;
    if (p->n * MAX(p->n_prompts, 1) > OAI_MAX_FORKS) {
        *param = "n";
        rc = err_set(e, ERR_INVALID, "'" OAI_F("n") "' x prompts is %d; at most %d generations in one request", p->n * p->n_prompts,
                     OAI_MAX_FORKS);
        goto fail;
    }
    if ((rc = parse_bias(body, n_vocab, p, param, e)) < 0) goto fail;
    if ((rc = get_bool(body, "stream", &p->stream, param, e)) < 0) goto fail;
    if ((v = oai_field(body, "stream_options"))) {
        if (!json_is_object(v)) {
            rc = bad(param, "stream_options", e, "must be an object");
            goto fail;
        }
        json_t *iu = oai_field(v, "include_usage");
        if (iu && !json_is_boolean(iu)) {
            rc = bad(param, "stream_options.include_usage", e, "must be a boolean");
            goto fail;
        }
        p->include_usage = iu && json_is_true(iu);
    }
    if ((rc = get_bool(body, "ignore_eos", &p->ignore_eos, param, e)) < 0) goto fail;
    if ((rc = parse_stop(body, p, param, e)) < 0) goto fail;
    if (kind == OAI_COMPLETION) {
        if ((rc = get_int(body, "logprobs", 0, 20, &x, &present, param, e)) < 0) goto fail;
        if (present) p->n_logprobs = (int)x;
    } else {
        bool lp = false;
        if ((rc = get_bool(body, "logprobs", &lp, param, e)) < 0) goto fail;
        if ((rc = get_int(body, "top_logprobs", 0, 20, &x, &present, param, e)) < 0) goto fail;
        if (present && !lp) {
            rc = bad(param, "top_logprobs", e, "requires '" OAI_F("logprobs") "' to be true");
            goto fail;
        }
        if (lp) p->n_logprobs = present ? (int)x : 0;
    }
    if ((rc = logprob_budget(p, param, e)) < 0) goto fail;
    p->best_of = p->n;
    if (kind == OAI_COMPLETION && (rc = parse_completion_extras(body, p, param, e)) < 0) goto fail;
    if (kind == OAI_CHAT && (v = oai_field(body, "best_of")) && !(json_is_integer(v) && json_integer_value(v) == 1)) {
        rc = bad(param, "best_of", e, "is a /v1/completions field (chat takes '" OAI_F("n") "')");
        goto fail;
    }
    if ((rc = sampler_params_check(&p->sp, e)) < 0) {
        *param = NULL;
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
