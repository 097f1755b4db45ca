/*
 * chat.c — chat templates: validates OpenAI-style messages, builds the
 * template context the way transformers' apply_chat_template does, and
 * renders the model's template (or the ChatML fallback) with jinja.c.
 *
 * Place in the flow: tok/, per /v1/chat/completions request.
 *
 * Context given to the template (as transformers builds it):
 *   messages               the validated messages; content parts joined
 *                          into a string with "\n"; a null assistant content
 *                          kept, or "" on a retry when the template fails
 *   tools                  the tools array, or none when absent
 *   add_generation_prompt  bool
 *   bos_token, eos_token   when the caller gives them (else undefined)
 *   ...extra               caller's extra variables (enable_thinking...)
 * Invariant: the caller's JSON is never modified; the normalised copy is
 * freed before chat_render returns.
 */
#include "chat/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

struct chat_tmpl {
    jinja_tmpl *tmpl;
    char *fallback_reason; /* NULL: the model's own template */
    bool one_call;         /* refuses two tool calls in one message */
};

/* The fallback: plain ChatML. Assistant tool calls are written Hermes-style
 * (<tool_call>{"name": ..., "arguments": ...}</tool_call>), tool results as
 * a "tool" turn; tools, when given, are listed in a system turn. */
static const char CHATML_TEMPLATE[] =
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages and messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": <function-name>, \"arguments\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (tools and loop.first and message.role == 'system') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content }}"
    "{%- for tc in message.tool_calls or [] %}"
    "{%- set f = tc.function if tc.function is defined else tc %}"
    "{{- ('\\n' if (message.content or not loop.first) else '') + '<tool_call>\\n{\"name\": \"' + f.name + '\", \"arguments\": ' }}"
    "{{- f.arguments if f.arguments is string else (f.arguments | default({}) | tojson) }}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

/* Whether the template renders a conversation whose assistant message
 * holds n tool calls (then their results and a generation prompt). */
static bool renders_calls(const chat_tmpl *t, int n) {
    json_t *tools = json_pack("[{s:s, s:{s:s, s:s, s:{s:s, s:{s:{s:s}}}}}]", "type", "function", "function", "name",
                              "probe", "description", "probe", "parameters", "type", "object", "properties", "a",
                              "type", "integer");
    json_t *calls = json_array(), *msgs = json_array();
    json_array_append_new(msgs, json_pack("{s:s, s:s}", "role", "user", "content", "probe"));
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "call_%d", i);
        json_array_append_new(calls, json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", id, "type", "function", "function",
                                               "name", "probe", "arguments", "{\"a\": 1}"));
    }
    json_array_append_new(msgs, json_pack("{s:s, s:n, s:o}", "role", "assistant", "content", "tool_calls", calls));
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof id, "call_%d", i);
        json_array_append_new(msgs, json_pack("{s:s, s:s, s:s}", "role", "tool", "tool_call_id", id, "content", "1"));
    }
    chat_opts o = {.add_generation_prompt = true, .tools = tools};
    char *out = NULL;
    err_t e = {0};
    const bool ok = tools && chat_render(t, msgs, &o, &out, &e) == 0;
    free(out);
    json_decref(msgs);
    json_decref(tools);
    return ok;
}

int chat_tmpl_new(const char *template_src, chat_tmpl **out, err_t *e) {
    chat_tmpl *t = xcalloc(1, sizeof *t);
    char reason[512];
    reason[0] = 0;
    if (template_src && *template_src) {
        err_t pe = {0};
        if (jinja_parse(template_src, strlen(template_src), &t->tmpl, &pe) == 0) {
            /* Llama 3.1/3.2's templates raise_exception on a message with
             * two calls: then a server asks the model for one call per
             * answer, else the client's next turn (the calls sent back)
             * could not be rendered. A template that cannot render even
             * one call is not marked (it has no tool calls at all). */
            t->one_call = renders_calls(t, 1) && !renders_calls(t, 2);
            *out = t;
            return 0;
        }
        snprintf(reason, sizeof reason, "template not supported: %s", pe.msg);
    } else {
        snprintf(reason, sizeof reason, "model has no chat template");
    }
    err_t fe = {0};
    if (jinja_parse(CHATML_TEMPLATE, sizeof CHATML_TEMPLATE - 1, &t->tmpl, &fe) != 0)
        PANIC("built-in ChatML template does not parse: %s", fe.msg);
    t->fallback_reason = xstrdup(reason);
    (void)e;
    *out = t;
    return 0;
}

const char *chat_tmpl_fallback_reason(const chat_tmpl *t) { return t ? t->fallback_reason : NULL; }

bool chat_tmpl_one_call(const chat_tmpl *t) { return t && t->one_call; }

void chat_tmpl_free(chat_tmpl *t) {
    if (!t) return;
    jinja_free(t->tmpl);
    free(t->fallback_reason);
    free(t);
}

/* Content → a string, or an error naming messages[i].content. A null or
 * missing content (allowed when may_be_null) gives *out = NULL when
 * keep_null, else "". */
static int normalize_content(json_t *content, size_t i, bool may_be_null, bool keep_null, json_t **out, err_t *e) {
    if (!content || json_is_null(content)) {
        if (!may_be_null) return err_set(e, ERR_INVALID, "messages[%zu].content: missing", i);
        *out = keep_null ? NULL : json_string("");
        return 0;
    }
    if (json_is_string(content)) {
        *out = json_incref(content);
        return 0;
    }
    if (!json_is_array(content))
        return err_set(e, ERR_INVALID, "messages[%zu].content: must be a string or an array of parts", i);
    size_t total = 0, j;
    json_t *part;
    json_array_foreach(content, j, part) {
        if (!json_is_object(part)) return err_set(e, ERR_INVALID, "messages[%zu].content[%zu]: must be an object", i, j);
        const char *type = json_string_value(json_object_get(part, "type"));
        if (!type) return err_set(e, ERR_INVALID, "messages[%zu].content[%zu].type: missing or not a string", i, j);
        if (strcmp(type, "text") != 0)
            return err_set(e, ERR_UNSUPPORTED, "messages[%zu].content[%zu].type: '%.40s' parts are not supported (only text)", i, j, type);
        json_t *text = json_object_get(part, "text");
        if (!json_is_string(text)) return err_set(e, ERR_INVALID, "messages[%zu].content[%zu].text: missing or not a string", i, j);
        total += json_string_length(text) + 1;
    }
    char *buf = malloc(total + 1);
    if (!buf) return err_set(e, ERR_NOMEM, "messages[%zu].content: too large", i);
    size_t n = 0;
    json_array_foreach(content, j, part) {
        json_t *text = json_object_get(part, "text");
        if (j) buf[n++] = '\n';
        memcpy(buf + n, json_string_value(text), json_string_length(text));
        n += json_string_length(text);
    }
    *out = json_stringn(buf, n);
    free(buf);
    if (!*out) return err_set(e, ERR_INVALID, "messages[%zu].content: text is not valid UTF-8", i);
    return 0;
}

static int check_tool_calls(json_t *calls, size_t i, err_t *e) {
    if (!json_is_array(calls)) return err_set(e, ERR_INVALID, "messages[%zu].tool_calls: must be an array", i);
    size_t j;
    json_t *c;
    json_array_foreach(calls, j, c) {
        if (!json_is_object(c)) return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu]: must be an object", i, j);
        json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
        if (id && !json_is_string(id)) return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu].id: must be a string", i, j);
        if (type && !(json_is_string(type) && strcmp(json_string_value(type), "function") == 0))
            return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu].type: must be \"function\"", i, j);
        if (!json_is_object(fn)) return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu].function: missing or not an object", i, j);
        if (!json_is_string(json_object_get(fn, "name")))
            return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu].function.name: missing or not a string", i, j);
        json_t *args = json_object_get(fn, "arguments");
        if (args && !json_is_string(args) && !json_is_object(args))
            return err_set(e, ERR_INVALID, "messages[%zu].tool_calls[%zu].function.arguments: must be a JSON string or an object", i, j);
    }
    return 0;
}

/* Validates the messages and returns a normalised deep copy in *out;
 * *n_null counts assistant messages whose content is null or missing (kept
 * as given when keep_null, else made ""). */
static int normalize_messages(json_t *messages, bool keep_null, json_t **out, size_t *n_null, err_t *e) {
    *n_null = 0;
    if (!json_is_array(messages)) return err_set(e, ERR_INVALID, "messages: must be an array");
    if (json_array_size(messages) == 0) return err_set(e, ERR_INVALID, "messages: must not be empty");
    json_t *res = json_array();
    size_t i;
    json_t *m;
    int rc = 0;
    json_array_foreach(messages, i, m) {
        if (!json_is_object(m)) { rc = err_set(e, ERR_INVALID, "messages[%zu]: must be an object", i); break; }
        json_t *role = json_object_get(m, "role");
        if (!role) { rc = err_set(e, ERR_INVALID, "messages[%zu].role: missing", i); break; }
        if (!json_is_string(role)) { rc = err_set(e, ERR_INVALID, "messages[%zu].role: must be a string", i); break; }
        const char *r = json_string_value(role);
        bool is_asst = strcmp(r, "assistant") == 0, is_tool = strcmp(r, "tool") == 0;
        bool is_dev = strcmp(r, "developer") == 0;
        if (!is_asst && !is_tool && !is_dev && strcmp(r, "system") != 0 && strcmp(r, "user") != 0) {
            rc = err_set(e, ERR_INVALID, "messages[%zu].role: unknown role '%.40s' (expected system, user, assistant or tool)", i, r);
            break;
        }
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            if (!is_asst) { rc = err_set(e, ERR_INVALID, "messages[%zu].tool_calls: only assistant messages have tool calls", i); break; }
            if ((rc = check_tool_calls(calls, i, e))) break;
        }
        json_t *tcid = json_object_get(m, "tool_call_id");
        if (tcid && !json_is_string(tcid)) { rc = err_set(e, ERR_INVALID, "messages[%zu].tool_call_id: must be a string", i); break; }
        json_t *content = NULL;
        if ((rc = normalize_content(json_object_get(m, "content"), i, is_asst, keep_null, &content, e))) break;
        json_t *copy = json_deep_copy(m);
        if (content) json_object_set_new(copy, "content", content);
        json_t *given = json_object_get(m, "content");
        *n_null += !given || json_is_null(given);
        if (is_dev) json_object_set_new(copy, "role", json_string("system"));
        json_array_append_new(res, copy);
    }
    if (rc) {
        json_decref(res);
        return rc;
    }
    *out = res;
    return 0;
}

int chat_render(const chat_tmpl *t, json_t *messages, const chat_opts *o, char **out, err_t *e) {
    *out = NULL;
    if (!t) return err_set(e, ERR_INVALID, "no chat template");
    chat_opts none = {0};
    if (!o) o = &none;
    if (o->tools && !json_is_null(o->tools) && !json_is_array(o->tools)) return err_set(e, ERR_INVALID, "tools: must be an array");
    if (o->extra && !json_is_object(o->extra)) return err_set(e, ERR_INVALID, "chat template extra variables must be a JSON object");
    /* First as transformers does: a null content stays null. Templates that
     * treat content as a string (Qwen3: '</think>' in message.content) fail
     * on that; then the render is retried with null content as "". */
    int rc = 0;
    size_t out_len = 0;
    for (int pass = 0; pass < 2; pass++) {
        json_t *msgs = NULL;
        size_t n_null;
        err_t pe = {0};
        int prc = normalize_messages(messages, pass == 0, &msgs, &n_null, pass == 0 ? e : &pe);
        if (prc) return prc;
        json_t *ctx = json_object();
        if (o->extra) json_object_update(ctx, o->extra);
        json_object_set_new(ctx, "messages", msgs);
        json_object_set(ctx, "tools", o->tools ? o->tools : json_null());
        json_object_set_new(ctx, "add_generation_prompt", json_boolean(o->add_generation_prompt));
        if (o->bos_token) json_object_set_new(ctx, "bos_token", json_string(o->bos_token));
        else json_object_del(ctx, "bos_token");
        if (o->eos_token) json_object_set_new(ctx, "eos_token", json_string(o->eos_token));
        else json_object_del(ctx, "eos_token");
        prc = jinja_render(t->tmpl, ctx, out, &out_len, pass == 0 ? e : &pe);
        json_decref(ctx);
        if (pass == 0) {
            rc = prc;
            if (!rc || n_null == 0 || rc != ERR_INVALID) break;
        } else if (prc == 0) {
            rc = 0; /* the retry worked: forget the first error */
        }
    }
    if (rc) {
        err_prefix(e, "chat template");
        return rc;
    }
    if (strlen(*out) != out_len) { /* the prompt is a C string: no NUL inside */
        free(*out);
        *out = NULL;
        return err_set(e, ERR_INVALID, "messages: a string contains a NUL character (\\u0000)");
    }
    return 0;
}
