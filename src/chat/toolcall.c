/*
 * toolcall.c — tool-call formats (see toolcall.h): detection from the chat
 * template, validation of the OpenAI `tools` array, the GBNF of the calls,
 * and the streaming output parser.
 *
 * Place in the flow: chat/, on HTTP threads; depends on base/, grammar/schema
 * (tool arguments) and jansson. Everything is reentrant; a tc_parser belongs
 * to one request.
 *
 * Decisions (the contract leaves them to this file):
 *   - Triggers of the lazy grammars: hermes "<tool_call>", mistral
 *     "[TOOL_CALLS]", generic "{\"tool_calls\"", llama3 "{\"". Llama 3.x
 *     writes its calls as bare JSON, usually without <|python_tag|>, so the
 *     trigger is the start of a JSON object; the parser in turn treats every
 *     '{' in the content of a llama3 output as a possible call (text that
 *     does not turn out to be {"name": ..., "parameters": ...} goes back to
 *     content), so grammar and parser agree on what a call is.
 *   - A tool without "parameters" takes no arguments: its grammar admits
 *     exactly "arguments": {} (OpenAI: omitting parameters defines a function
 *     with an empty parameter list).
 *   - CALL_START goes out as soon as the name is parsed (llama3: once the
 *     "parameters" value begins, since bare JSON with a "name" need not be
 *     a call); a call whose arguments come before its name starts when its
 *     object closes. Arguments given as a JSON string are passed on as the
 *     string's content (in one piece, when the object closes); a call
 *     without arguments gets "{}" (llama3: no "parameters", no call).
 *   - Ids: "call_" + 24 characters of [A-Za-z0-9] from a splitmix64 stream
 *     seeded by id_seed and the call index (the same seed and index always
 *     give the same id).
 *   - An incomplete call and a malformed call are not calls. A call cut by
 *     the length limit (`truncated`: max_tokens, the context) is dropped
 *     whole, with a call marker cut half-way: an agent framework must never
 *     see call markup as text (issue 24). A malformed call, or one that the
 *     model ended itself before it was complete, has its raw text, from the
 *     call marker on, as content. The events already streamed for such a call stay out there
 *     (a stream cannot take them back), so only calls with index < the count
 *     tc_parser_finish returns are complete; a non-streaming caller drops
 *     CALL_* events of higher index. After a call whose CALL_START went out
 *     breaks, the rest of the output is content.
 *   - Whitespace around call blocks is dropped: before a call marker, after a
 *     call block, around <think>...</think>.
 *   - `truncated` changes only what happens to an incomplete call's text: a
 *     complete call at the end of a truncated output (say its "</tool_call>"
 *     was cut) is still counted; the caller decides the finish_reason.
 *
 * The parser keeps the whole output in one buffer. Offsets into it:
 *
 *      emitted        held (may become a marker,     not examined yet
 *    (events out)     a call, or is whitespace)
 *   |--------------|-----------------------------|................|
 *   0           emit_pos                        pos          text.n
 *
 * and a state machine over the bytes from pos (the states below). A call's
 * bytes are scanned once, byte by byte (jskip tracks JSON nesting and
 * strings), and checked with jansson when its object closes.
 */
#include "toolcall.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../base/sbuf.h"
#include "../base/utf8.h"
#include "../grammar/schema.h"

/* ---- formats ---------------------------------------------------------- */

static const char *const format_names[] = {"none", "hermes", "llama3", "mistral", "generic", "harmony"};

tc_format tc_detect(const char *src) {
    if (!src) return TC_GENERIC;
    if (strstr(src, "<|channel|>") && strstr(src, "<|message|>")) return TC_HARMONY;
    if (strstr(src, "<tool_call>")) return TC_HERMES;
    if (strstr(src, "[TOOL_CALLS]")) return TC_MISTRAL;
    if (strstr(src, "<|python_tag|>")) return TC_LLAMA3;
    if (strstr(src, "\"parameters\"") &&
        (strstr(src, "<|start_header_id|>ipython") || strstr(src, "Environment: ipython")))
        return TC_LLAMA3;
    return TC_GENERIC;
}

const char *tc_format_name(tc_format f) {
    if ((unsigned)f >= ARRAY_LEN(format_names)) return "unknown";
    return format_names[f];
}

int tc_format_from_name(const char *name, tc_format *out, err_t *e) {
    for (size_t i = 0; name && i < ARRAY_LEN(format_names); i++) {
        if (strcmp(name, format_names[i]) == 0) {
            *out = (tc_format)i;
            return 0;
        }
    }
    return err_set(e, ERR_INVALID, "unknown tool-call format '%.64s' (choices: none, hermes, llama3, mistral, generic, harmony)",
                   name ? name : "");
}

/* ---- tools ------------------------------------------------------------ */

static bool name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return false;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
              c == '-'))
            return false;
    }
    return true;
}

int tc_check_tools(json_t *tools, err_t *e) {
    if (!json_is_array(tools)) return err_set(e, ERR_INVALID, ERR_F("tools") " must be an array");
    size_t n = json_array_size(tools);
    if (n == 0) return err_set(e, ERR_INVALID, ERR_F("tools") " must not be empty");
    if (n > TC_MAX_TOOLS) return err_set(e, ERR_INVALID, ERR_F("tools") " has %zu elements; at most %d", n, TC_MAX_TOOLS);
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(tools, i);
        if (!json_is_object(t)) return err_set(e, ERR_INVALID, ERR_F("tools[%zu]") " must be an object", i);
        const char *k;
        json_t *v;
        json_object_foreach(t, k, v) {
            if (strcmp(k, "type") != 0 && strcmp(k, "function") != 0)
                return err_set(e, ERR_INVALID, ERR_F("tools[%zu]") ": unknown field '%.64s'", i, k);
        }
        json_t *type = json_object_get(t, "type");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
            return err_set(e, ERR_INVALID, ERR_F("tools[%zu].type") " must be \"function\"", i);
        json_t *fn = json_object_get(t, "function");
        if (!json_is_object(fn)) return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function") " must be an object", i);
        json_object_foreach(fn, k, v) {
            if (strcmp(k, "name") != 0 && strcmp(k, "description") != 0 && strcmp(k, "parameters") != 0 &&
                strcmp(k, "strict") != 0)
                return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function") ": unknown field '%.64s'", i, k);
        }
        json_t *name = json_object_get(fn, "name");
        if (!name) return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.name") " is required", i);
        if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name) ||
            !name_ok(json_string_value(name)))
            return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.name") " must be 1 to 64 characters of [A-Za-z0-9_.-]", i);
        json_t *d = json_object_get(fn, "description");
        if (d && !json_is_string(d)) return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.description") " must be a string", i);
        json_t *s = json_object_get(fn, "strict");
        if (s && !json_is_boolean(s)) return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.strict") " must be a boolean", i);
        json_t *par = json_object_get(fn, "parameters");
        if (par) {
            if (!json_is_object(par))
                return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.parameters") " must be a JSON Schema object", i);
            json_t *pt = json_object_get(par, "type");
            if (pt && !(json_is_string(pt) && strcmp(json_string_value(pt), "object") == 0))
                return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.parameters.type") " must be \"object\"", i);
        }
        for (size_t j = 0; j < i; j++) {
            json_t *o = json_object_get(json_object_get(json_array_get(tools, j), "function"), "name");
            if (strcmp(json_string_value(o), json_string_value(name)) == 0)
                return err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.name") " '%s' repeats " ERR_F("tools[%zu]") "'s", i,
                               json_string_value(name), j);
        }
    }
    return 0;
}

/* ---- grammar ---------------------------------------------------------- */

/* Appends n bytes to a malloc'd NUL-terminated string (schema.h's layout). */
static void str_add(char **buf, size_t *len, const char *s, size_t n) {
    *buf = xrealloc(*buf, *len + n + 1);
    memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
}
static void str_puts(char **buf, size_t *len, const char *s) { str_add(buf, len, s, strlen(s)); }

/* Appends s as a GBNF string literal. */
static void str_lit(char **buf, size_t *len, const char *s) {
    str_add(buf, len, "\"", 1);
    for (; *s; s++) {
        char esc[8];
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') {
            esc[0] = '\\', esc[1] = (char)c, esc[2] = 0;
        } else if (c == '\n') {
            strcpy(esc, "\\n");
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02X", c);
        } else {
            esc[0] = (char)c, esc[1] = 0;
        }
        str_puts(buf, len, esc);
    }
    str_add(buf, len, "\"", 1);
}

/* The lazy grammar's trigger per format (see the top of the file). */
static const char *format_trigger(tc_format f) {
    switch (f) {
    case TC_HERMES: return "<tool_call>";
    case TC_MISTRAL: return "[TOOL_CALLS]";
    case TC_LLAMA3: return "{\"";
    case TC_GENERIC: return "{\"tool_calls\"";
    case TC_HARMONY: return "to=functions.";
    default: return NULL;
    }
}

/* root for each format. CALL is the rule of one call object; for llama3
 * lazy the trigger `{"` has eaten the first two bytes, and the rest of the
 * first call is tc-call-rest (name": ...}). */
static void grammar_root(tc_format f, bool parallel, bool lazy, char **g, size_t *n) {
    const char *more = parallel ? "*" : "";
    char line[512];
    switch (f) {
    case TC_HERMES:
        snprintf(line, sizeof line, "root ::= %s tc-call \"\\n</tool_call>\"%s%s\n",
                 lazy ? "\"\\n\"" : "\"<tool_call>\\n\"",
                 parallel ? " ( \"\\n<tool_call>\\n\" tc-call \"\\n</tool_call>\" )" : "", more);
        break;
    case TC_MISTRAL:
        snprintf(line, sizeof line, "root ::= %s tc-call%s%s \"]\"\n", lazy ? "\" [\"" : "\"[TOOL_CALLS] [\"",
                 parallel ? " ( \", \" tc-call )" : "", more);
        break;
    case TC_LLAMA3:
        snprintf(line, sizeof line, "root ::= %s%s%s\n", lazy ? "\"name\\\": \" tc-call-rest" : "tc-call",
                 parallel ? " ( \"; \" tc-call )" : "", more);
        break;
    case TC_HARMONY: /* one call per message: <|call|> ends the generation */
        snprintf(line, sizeof line, "root ::= %stc-call-rest\n", lazy ? "" : "\"<|channel|>commentary to=functions.\" ");
        break;
    default: /* TC_GENERIC */
        snprintf(line, sizeof line, "root ::= %s tc-call%s%s \"]}\"\n", lazy ? "\": [\"" : "\"{\\\"tool_calls\\\": [\"",
                 parallel ? " ( \", \" tc-call )" : "", more);
        break;
    }
    str_puts(g, n, line);
}

int tc_grammar(tc_format f, json_t *tools, const char *only, bool parallel, bool lazy, char **gbnf, char **trigger,
               err_t *e) {
    return tc_grammar_relax(f, tools, only, parallel, lazy, gbnf, trigger, NULL, e);
}

int tc_grammar_relax(tc_format f, json_t *tools, const char *only, bool parallel, bool lazy, char **gbnf,
                     char **trigger, char **relaxed, err_t *e) {
    if (relaxed) *relaxed = NULL;
    *gbnf = NULL;
    if (trigger) *trigger = NULL;
    if (f != TC_HERMES && f != TC_LLAMA3 && f != TC_MISTRAL && f != TC_GENERIC && f != TC_HARMONY)
        return err_set(e, ERR_INVALID, "tool-call format '%s' has no call syntax", tc_format_name(f));
    int rc = tc_check_tools(tools, e);
    if (rc < 0) return rc;
    size_t n_tools = json_array_size(tools);
    if (only) {
        size_t i = 0;
        for (; i < n_tools; i++) {
            json_t *nm = json_object_get(json_object_get(json_array_get(tools, i), "function"), "name");
            if (strcmp(json_string_value(nm), only) == 0) break;
        }
        if (i == n_tools) return err_set(e, ERR_INVALID, ERR_F("tool_choice") " names '%.64s', which is not in " ERR_F("tools"), only);
    }
    char *g = NULL;
    size_t n = 0;
    grammar_root(f, parallel, lazy, &g, &n);
    if (f == TC_HARMONY) /* after "to=functions.": the name, the rest of the header, the body */
        str_puts(&g, &n,
                 /* "json" never touches the name (the parser reads the
                  * name up to a space or '<': "get_weatherjson" was a
                  * call of an unknown tool, seen by the Agents SDK on a
                  * random gpt-oss model) */
                 "tc-hm-head ::= \"<|channel|>commentary\"? (\" \"? \"<|constrain|>json\" | \" json\" | \" \")? "
                 "\"<|message|>\"\n"
                 "tc-call-rest ::= (");
    else
        str_puts(&g, &n, "tc-call ::= \"{\\\"name\\\": \" tc-call-rest\ntc-call-rest ::= (");
    int k = 0;
    for (size_t i = 0; i < n_tools; i++) {
        const char *nm = json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
        if (only && strcmp(nm, only) != 0) continue;
        char rule[32];
        snprintf(rule, sizeof rule, "%s tc-fn-%zu", k++ ? " |" : "", i);
        str_puts(&g, &n, rule);
    }
    str_puts(&g, &n, f == TC_HARMONY ? " )\n" : " ) \"}\"\n");
    const char *args_key = f == TC_LLAMA3 ? "parameters" : "arguments";
    for (size_t i = 0; i < n_tools; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        const char *nm = json_string_value(json_object_get(fn, "name"));
        if (only && strcmp(nm, only) != 0) continue;
        char head[160], args_rule[32], lit[128];
        snprintf(args_rule, sizeof args_rule, "tc-args-%zu", i);
        snprintf(head, sizeof head, "tc-fn-%zu ::= ", i);
        str_puts(&g, &n, head);
        /* The name has been checked: [A-Za-z0-9_.-]{1,64}, nothing to escape. */
        if (f == TC_HARMONY)
            snprintf(lit, sizeof lit, "%s", nm);
        else
            snprintf(lit, sizeof lit, "\"%s\", \"%s\": ", nm, args_key);
        str_lit(&g, &n, lit);
        str_puts(&g, &n, f == TC_HARMONY ? " tc-hm-head " : " ");
        str_puts(&g, &n, args_rule);
        str_puts(&g, &n, "\n");
        json_t *par = json_object_get(fn, "parameters");
        if (!par) {
            str_puts(&g, &n, args_rule);
            str_puts(&g, &n, " ::= \"{}\"\n");
            continue;
        }
        /* relaxed unless the tool asks for strictness (or the caller wants no relaxing) */
        bool strict = !relaxed || json_is_true(json_object_get(fn, "strict"));
        char *r = NULL;
        rc = schema_compile(par, args_rule, strict, &r, &g, &n, e);
        if (rc < 0) {
            err_prefix(e, ERR_F("tools[%zu].function.parameters"), i);
            free(g);
            if (relaxed) {
                free(*relaxed);
                *relaxed = NULL;
            }
            return rc;
        }
        if (r) {
            size_t old = *relaxed ? strlen(*relaxed) : 0, add = strlen(r) + 64;
            *relaxed = xrealloc(*relaxed, old + add);
            snprintf(*relaxed + old, add, "%stools[%zu].function.parameters: %s", old ? "; " : "", i, r);
            free(r);
        }
    }
    *gbnf = g;
    if (trigger && lazy) *trigger = xstrdup(format_trigger(f));
    return 0;
}

char *tc_generic_system_prompt(json_t *tools) {
    char *s = NULL;
    size_t n = 0;
    str_puts(&s, &n,
             "You can call the following tools. Each is given as JSON: its name, what it does, and the JSON Schema "
             "of its arguments (\"parameters\").\n\n");
    for (size_t i = 0; i < json_array_size(tools); i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (!json_is_object(fn)) continue;
        char *d = json_dumps(fn, 0);
        if (!d) continue;
        str_puts(&s, &n, d);
        str_puts(&s, &n, "\n");
        free(d);
    }
    str_puts(&s, &n,
             "\nTo call tools, answer with only this JSON object and nothing after it:\n"
             "{\"tool_calls\": [{\"name\": \"<tool name>\", \"arguments\": {<the arguments>}}]}\n"
             "(to call several tools at once, put several such objects in the list). The results will be given "
             "to you in the next message. To answer without calling a tool, write the answer as plain text.");
    return s;
}

/* ---- events ----------------------------------------------------------- */

void tc_events_clear(tc_events *ev) {
    for (int i = 0; i < ev->n; i++) {
        free(ev->v[i].text);
        free(ev->v[i].id);
        free(ev->v[i].name);
    }
    ev->n = 0;
}

void tc_events_free(tc_events *ev) {
    tc_events_clear(ev);
    free(ev->v);
    ev->v = NULL;
    ev->cap = 0;
}

/* ---- JSON value scanner ----------------------------------------------
 * Fed one byte at a time, it follows one JSON value's structure (nesting,
 * strings and escapes) well enough to know where the value ends and to
 * reject what can never become JSON; tokens (numbers, true/false/null) are
 * only taken as runs of [A-Za-z0-9.+-] — jansson checks the whole call when
 * it closes. */

enum { J_VALUE, J_ARR_FIRST, J_OBJ_FIRST, J_OBJ_KEY, J_KEY, J_COLON, J_STR, J_SCALAR, J_AFTER };
enum { JR_MORE, JR_DONE, JR_DONE_BEFORE, JR_ERROR }; /* DONE_BEFORE: ended before this byte */

#define TC_MAX_DEPTH 256

typedef struct jskip {
    int st;
    bool esc;
    int depth;
    char stack[TC_MAX_DEPTH]; /* 'o' object, 'a' array */
} jskip;

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static bool is_scalar(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '+' ||
           c == '-';
}

static int jskip_end_value(jskip *j) {
    if (j->depth == 0) return JR_DONE;
    j->st = J_AFTER;
    return JR_MORE;
}

static int jskip_byte(jskip *j, char c) {
    switch (j->st) {
    case J_VALUE:
        if (is_ws(c)) return JR_MORE;
        if (c == '{' || c == '[') {
            if (j->depth == TC_MAX_DEPTH) return JR_ERROR;
            j->stack[j->depth++] = c == '{' ? 'o' : 'a';
            j->st = c == '{' ? J_OBJ_FIRST : J_ARR_FIRST;
            return JR_MORE;
        }
        if (c == '"') {
            j->st = J_STR;
            j->esc = false;
            return JR_MORE;
        }
        if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
            j->st = J_SCALAR;
            return JR_MORE;
        }
        return JR_ERROR;
    case J_ARR_FIRST:
        if (is_ws(c)) return JR_MORE;
        if (c == ']') {
            j->depth--;
            return jskip_end_value(j);
        }
        j->st = J_VALUE;
        return jskip_byte(j, c);
    case J_OBJ_FIRST:
    case J_OBJ_KEY:
        if (is_ws(c)) return JR_MORE;
        if (c == '}' && j->st == J_OBJ_FIRST) {
            j->depth--;
            return jskip_end_value(j);
        }
        if (c != '"') return JR_ERROR;
        j->st = J_KEY;
        j->esc = false;
        return JR_MORE;
    case J_KEY:
    case J_STR:
        if (j->esc) {
            j->esc = false;
        } else if (c == '\\') {
            j->esc = true;
        } else if (c == '"') {
            if (j->st == J_KEY) {
                j->st = J_COLON;
                return JR_MORE;
            }
            return jskip_end_value(j);
        }
        return JR_MORE;
    case J_COLON:
        if (is_ws(c)) return JR_MORE;
        if (c != ':') return JR_ERROR;
        j->st = J_VALUE;
        return JR_MORE;
    case J_SCALAR:
        if (is_scalar(c)) return JR_MORE;
        if (j->depth == 0) return JR_DONE_BEFORE;
        j->st = J_AFTER;
        return jskip_byte(j, c);
    case J_AFTER:
        if (is_ws(c)) return JR_MORE;
        if (c == ',') {
            j->st = j->stack[j->depth - 1] == 'o' ? J_OBJ_KEY : J_VALUE;
            return JR_MORE;
        }
        if ((c == '}' && j->stack[j->depth - 1] == 'o') || (c == ']' && j->stack[j->depth - 1] == 'a')) {
            j->depth--;
            return jskip_end_value(j);
        }
        return JR_ERROR;
    }
    PANIC("jskip state %d", j->st);
}

/* ---- the parser --------------------------------------------------------
 *
 *   THINK_START ──"<think>"──▶ REASON_LEAD ─▶ REASON ──"</think>"──▶ AFTER_THINK ─┐
 *        └──(anything else)──────────────────────────────────────────────▶ TEXT ◀─┘
 *
 *   TEXT ──marker──▶ OPEN ─▶ CALL ─▶ AFTER_CALL ─▶ TEXT (whitespace dropped)
 *   hermes   "<tool_call>" OPEN '{' CALL (AFTER_CALL CALL)* AFTER_CALL
 *            "</tool_call>" (H_CLOSE)
 *   mistral  "[TOOL_CALLS]" OPEN '[' (ARR_ELEM CALL AFTER_CALL ',')* ']'
 *            or OPEN '{' CALL (one call without the list)
 *   llama3   "<|python_tag|>" OPEN, or '{' straight into CALL;
 *            AFTER_CALL ';' L_SEP CALL ...
 *   generic  '{' G_KEY "\"tool_calls\"" G_COLON ':' G_ARR '[' (ARR_ELEM CALL
 *            AFTER_CALL ',')* ']' G_CLOSE '}'
 *
 * A byte that breaks the syntax before the current call's CALL_START went
 * out turns the held text back into content (revert) and TEXT goes on from
 * that byte; after it went out the rest of the output is content (BROKEN).
 */

enum {
    S_THINK_START,
    S_REASON_LEAD,
    S_REASON,
    S_AFTER_THINK,
    S_TEXT,
    S_OPEN,
    S_G_KEY,
    S_G_COLON,
    S_G_ARR,
    S_ARR_ELEM,
    S_CALL,
    S_AFTER_CALL,
    S_H_CLOSE,
    S_L_SEP,
    S_G_CLOSE,
    S_BROKEN,
    S_HM_HEAD, /* harmony: a message header, up to <|message|> */
    S_HM_BODY, /* harmony: a message body, up to its terminator */
};

/* States of the call object itself (inside S_CALL). */
enum { C_OPEN, C_KEY_FIRST, C_KEY_NEXT, C_KEY, C_COLON, C_VAL_START, C_VAL, C_AFTER };
enum { K_OTHER, K_NAME, K_ARGS };
enum { M_HERMES, M_MISTRAL, M_PYTAG, M_BRACE };

typedef struct marker {
    const char *s;
    size_t n;
    int kind;
} marker;

static const marker markers_hermes[] = {{"<tool_call>", 11, M_HERMES}};
static const marker markers_mistral[] = {{"[TOOL_CALLS]", 12, M_MISTRAL}};
static const marker markers_llama3[] = {{"<|python_tag|>", 14, M_PYTAG}, {"{", 1, M_BRACE}};
static const marker markers_generic[] = {{"{", 1, M_BRACE}};

static const char THINK_OPEN[] = "<think>", THINK_CLOSE[] = "</think>", HERMES_CLOSE[] = "</tool_call>",
                  GENERIC_KEY[] = "\"tool_calls\"";

struct tc_parser {
    tc_format fmt;
    bool tools_on, reasoning;
    unsigned long long id_seed;
    const marker *markers;
    int n_markers;

    sbuf text; /* the whole output so far (see the diagram at the top) */
    size_t pos, emit_pos;
    int st;
    bool skip_ws; /* TEXT: drop leading whitespace (after a call block) */
    bool finished;
    int n_calls;  /* complete calls; also the index of the current one */
    int ev_base;  /* first event of this feed in `out` (events merge only within a feed) */

    /* the call block */
    size_t block_from; /* where its marker starts */
    int calls_in_block;
    bool in_array;
    size_t lit_from; /* S_H_CLOSE / S_G_KEY: literal matching */
    size_t lit_i;

    /* the current call */
    int cst;
    size_t call_from; /* raw text of this call (content if it fails) */
    size_t obj_start;
    bool started; /* CALL_START went out */
    int key_kind;
    size_t key_start;
    bool kesc;
    jskip js;
    bool have_name;
    size_t name_start, name_end;
    bool have_args, args_done;
    char args_type; /* first byte of the arguments value */
    char args_key[12];
    size_t args_start, args_end, args_emitted;

    /* harmony (S_HM_*): the current message */
    size_t hm_head;   /* where its header starts                 */
    int hm_kind;      /* HM_CONTENT, HM_REASON or HM_CALL        */
};

tc_parser *tc_parser_new(tc_format f, bool tools_on, bool reasoning, bool think_open, unsigned long long id_seed) {
    tc_parser *p = xcalloc(1, sizeof *p);
    p->fmt = f;
    p->tools_on = tools_on;
    p->reasoning = reasoning;
    p->id_seed = id_seed;
    if (tools_on) {
        switch (f) {
        case TC_HERMES: p->markers = markers_hermes, p->n_markers = 1; break;
        case TC_MISTRAL: p->markers = markers_mistral, p->n_markers = 1; break;
        case TC_LLAMA3: p->markers = markers_llama3, p->n_markers = 2; break;
        case TC_GENERIC: p->markers = markers_generic, p->n_markers = 1; break;
        default: break;
        }
    }
    p->st = !reasoning ? S_TEXT : think_open ? S_REASON_LEAD : S_THINK_START;
    if (f == TC_HARMONY) p->st = S_HM_HEAD;
    sbuf_put(&p->text, "", 0);
    return p;
}

void tc_parser_free(tc_parser *p) {
    if (!p) return;
    sbuf_free(&p->text);
    free(p);
}

static void push_event(tc_parser *p, tc_events *out, tc_event_kind kind, const char *text, size_t n, const char *id,
                       const char *name) {
    if (kind != TC_EV_CALL_START && n == 0) return;
    int index = kind == TC_EV_CALL_START || kind == TC_EV_CALL_ARGS ? p->n_calls : 0;
    if (kind != TC_EV_CALL_START && out->n > p->ev_base) {
        tc_event *last = &out->v[out->n - 1];
        if (last->kind == kind && last->index == index) {
            last->text = xrealloc(last->text, last->n + n + 1);
            memcpy(last->text + last->n, text, n);
            last->n += n;
            last->text[last->n] = 0;
            return;
        }
    }
    if (out->n == out->cap) {
        out->cap = out->cap ? out->cap * 2 : 16;
        out->v = xrealloc(out->v, (size_t)out->cap * sizeof *out->v);
    }
    tc_event *ev = &out->v[out->n++];
    memset(ev, 0, sizeof *ev);
    ev->kind = kind;
    ev->index = index;
    ev->text = xstrndup(text ? text : "", n);
    ev->n = n;
    if (id) ev->id = xstrdup(id);
    if (name) ev->name = xstrdup(name);
}

static size_t rtrim_ws(const char *b, size_t from, size_t to) {
    while (to > from && is_ws(b[to - 1])) to--;
    return to;
}

static void emit_text(tc_parser *p, tc_events *out, tc_event_kind kind, size_t to) {
    if (to > p->emit_pos) push_event(p, out, kind, p->text.p + p->emit_pos, to - p->emit_pos, NULL, NULL);
    if (to > p->emit_pos) p->emit_pos = to;
}

static void make_id(unsigned long long seed, int index, char out[30]) {
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t s = (uint64_t)seed ^ ((uint64_t)(index + 1) * 0xd1b54a32d192ed03ull);
    memcpy(out, "call_", 5);
    for (int i = 0; i < 24; i++) out[5 + i] = al[splitmix64_next(&s) % 62];
    out[29] = 0;
}

/* Decodes the JSON string literal [a, b) (quotes included); NULL if it is
 * not a non-empty string without NUL. */
static char *decode_name(const char *s, size_t n) {
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_DECODE_ANY, &je);
    char *r = NULL;
    if (json_is_string(v) && json_string_length(v) > 0 && strlen(json_string_value(v)) == json_string_length(v))
        r = xstrdup(json_string_value(v));
    json_decref(v);
    return r;
}

static void call_start(tc_parser *p, tc_events *out, const char *name) {
    char id[30];
    make_id(p->id_seed, p->n_calls, id);
    push_event(p, out, TC_EV_CALL_START, NULL, 0, id, name);
    p->started = true;
    p->emit_pos = p->call_from; /* the call owns its raw text from here on */
}

/* Streams the arguments scanned so far (an object's raw text). */
static void emit_args(tc_parser *p, tc_events *out, bool all) {
    if (!p->started || p->args_type != '{') return;
    size_t end = p->args_done ? p->args_end : p->pos;
    if (!all) end = utf8_floor(p->text.p, p->args_emitted, end);
    if (end > p->args_emitted) {
        push_event(p, out, TC_EV_CALL_ARGS, p->text.p + p->args_emitted, end - p->args_emitted, NULL, NULL);
        p->args_emitted = end;
    }
}

static void to_text(tc_parser *p, size_t at, bool skip_ws) {
    p->pos = p->emit_pos = at;
    p->st = S_TEXT;
    p->skip_ws = skip_ws;
}

/* The syntax broke at byte `at` (not part of the call). */
static void fail_at(tc_parser *p, tc_events *out, size_t at) {
    if (p->started) {
        emit_args(p, out, true); /* all that was scanned, whatever the pieces */
        p->st = S_BROKEN; /* emit_pos is the call's start: the rest is content */
        p->started = false;
        return;
    }
    emit_text(p, out, TC_EV_CONTENT, at);
    to_text(p, at, false);
}

static void begin_call(tc_parser *p, size_t at) {
    if (p->calls_in_block > 0) p->emit_pos = at;
    p->call_from = p->calls_in_block > 0 ? at : p->block_from;
    p->pos = at;
    p->st = S_CALL;
    p->cst = C_OPEN;
    p->started = false;
    p->have_name = p->have_args = p->args_done = false;
    p->args_type = 0;
}

/* The call object closed at obj_end: check it with jansson, report it. */
static void finish_call(tc_parser *p, tc_events *out, size_t obj_end) {
    json_error_t je;
    json_t *o = json_loadb(p->text.p + p->obj_start, obj_end - p->obj_start, JSON_REJECT_DUPLICATES, &je);
    json_t *nm = json_object_get(o, "name");
    bool ok = json_is_string(nm) && json_string_length(nm) > 0 &&
              strlen(json_string_value(nm)) == json_string_length(nm);
    if (ok && p->have_args) ok = p->args_type == '{' || p->args_type == '"';
    if (ok && !p->have_args && p->fmt == TC_LLAMA3) ok = false; /* bare JSON needs "parameters" */
    if (!ok) {
        json_decref(o);
        fail_at(p, out, obj_end);
        return;
    }
    if (!p->started) call_start(p, out, json_string_value(nm));
    if (!p->have_args) {
        push_event(p, out, TC_EV_CALL_ARGS, "{}", 2, NULL, NULL);
    } else if (p->args_type == '"') {
        json_t *a = json_object_get(o, p->args_key);
        push_event(p, out, TC_EV_CALL_ARGS, json_string_value(a), json_string_length(a), NULL, NULL);
    } else {
        emit_args(p, out, true);
    }
    json_decref(o);
    p->n_calls++;
    p->calls_in_block++;
    p->started = false;
    p->pos = p->emit_pos = obj_end;
    p->st = S_AFTER_CALL;
}

static void key_classify(tc_parser *p, size_t end) {
    const char *k = p->text.p + p->key_start;
    size_t n = end - p->key_start;
    p->key_kind = K_OTHER;
    if (n == 4 && memcmp(k, "name", 4) == 0) p->key_kind = K_NAME;
    if ((n == 9 && memcmp(k, "arguments", 9) == 0) || (n == 10 && memcmp(k, "parameters", 10) == 0)) {
        p->key_kind = K_ARGS;
        memcpy(p->args_key, k, n);
        p->args_key[n] = 0;
    }
}

/* Starts the call (CALL_START) when its name is known: with a call marker
 * as soon as the name is parsed; for llama3, whose calls are bare JSON, once
 * the "parameters" value begins too (before that it may be any JSON). */
static void try_start(tc_parser *p, tc_events *out) {
    if (p->started || !p->have_name) return;
    if (p->fmt == TC_LLAMA3 && !(p->have_args && (p->args_type == '{' || p->args_type == '"'))) return;
    char *nm = decode_name(p->text.p + p->name_start, p->name_end - p->name_start);
    if (nm) call_start(p, out, nm);
    free(nm);
}

static void value_end(tc_parser *p, tc_events *out, size_t end) {
    if (p->key_kind == K_NAME) {
        p->have_name = true;
        p->name_end = end;
        try_start(p, out);
    } else if (p->key_kind == K_ARGS) {
        p->args_done = true;
        p->args_end = end;
    }
    p->cst = C_AFTER;
}

/* One byte of the call object at p->pos. Returns false when the call ended
 * (completed or failed: the state has moved on). */
static bool call_byte(tc_parser *p, tc_events *out) {
    char c = p->text.p[p->pos];
    switch (p->cst) {
    case C_OPEN:
        if (is_ws(c)) break;
        if (c != '{') return fail_at(p, out, p->pos), false;
        p->obj_start = p->pos;
        p->cst = C_KEY_FIRST;
        break;
    case C_KEY_FIRST:
    case C_KEY_NEXT:
        if (is_ws(c)) break;
        if (c == '}' && p->cst == C_KEY_FIRST) return finish_call(p, out, p->pos + 1), false;
        if (c != '"') return fail_at(p, out, p->pos), false;
        p->key_start = p->pos + 1;
        p->kesc = false;
        p->cst = C_KEY;
        break;
    case C_KEY:
        if (p->kesc) {
            p->kesc = false;
        } else if (c == '\\') {
            p->kesc = true;
        } else if (c == '"') {
            key_classify(p, p->pos);
            p->cst = C_COLON;
        }
        break;
    case C_COLON:
        if (is_ws(c)) break;
        if (c != ':') return fail_at(p, out, p->pos), false;
        p->cst = C_VAL_START;
        break;
    case C_VAL_START:
        if (is_ws(c)) break;
        if (p->key_kind == K_NAME) {
            if (c != '"') return fail_at(p, out, p->pos), false;
            if (p->have_name) p->key_kind = K_OTHER; /* a repeat: jansson rejects the object */
            else p->name_start = p->pos;
        } else if (p->key_kind == K_ARGS) {
            if (p->have_args) {
                p->key_kind = K_OTHER;
            } else {
                p->have_args = true;
                p->args_type = c;
                p->args_start = p->args_emitted = p->pos;
                try_start(p, out);
            }
        }
        memset(&p->js, 0, offsetof(jskip, stack));
        p->js.st = J_VALUE;
        p->cst = C_VAL;
        /* fall through */
    case C_VAL: {
        int r = jskip_byte(&p->js, c);
        if (r == JR_ERROR) return fail_at(p, out, p->pos), false;
        if (r == JR_DONE) value_end(p, out, p->pos + 1);
        if (r == JR_DONE_BEFORE) {
            value_end(p, out, p->pos);
            return call_byte(p, out); /* this byte is the object's */
        }
        break;
    }
    case C_AFTER:
        if (is_ws(c)) break;
        if (c == ',') {
            p->cst = C_KEY_NEXT;
            break;
        }
        if (c == '}') return finish_call(p, out, p->pos + 1), false;
        return fail_at(p, out, p->pos), false;
    }
    p->pos++;
    return true;
}

/* TEXT: content up to the next marker, holding what may still become one
 * (and the whitespace before it). Returns true when it found a marker. */
static bool step_text(tc_parser *p, tc_events *out) {
    if (p->skip_ws) {
        while (p->pos < p->text.n && is_ws(p->text.p[p->pos])) p->pos++;
        p->emit_pos = p->pos;
        if (p->pos == p->text.n) return false;
        p->skip_ws = false;
    }
    if (p->n_markers == 0) {
        emit_text(p, out, TC_EV_CONTENT, utf8_floor(p->text.p, p->emit_pos, p->text.n));
        p->pos = p->text.n;
        return false;
    }
    size_t i = p->pos;
    const marker *found = NULL;
    for (; i < p->text.n && !found; i++) {
        bool partial = false;
        for (int m = 0; m < p->n_markers; m++) {
            const marker *mk = &p->markers[m];
            size_t k = MIN(mk->n, p->text.n - i);
            if (p->text.p[i] != mk->s[0] || memcmp(p->text.p + i, mk->s, k) != 0) continue;
            if (k == mk->n) {
                found = mk;
                break;
            }
            partial = true;
        }
        if (found || partial) break;
    }
    /* i: the marker's start, or the start of a possible one, or n */
    size_t e = rtrim_ws(p->text.p, p->emit_pos, i);
    if (!found) e = utf8_floor(p->text.p, p->emit_pos, e);
    emit_text(p, out, TC_EV_CONTENT, e);
    p->pos = i;
    if (!found) return false;
    p->block_from = i;
    p->calls_in_block = 0;
    p->in_array = false;
    switch (found->kind) {
    case M_BRACE:
        if (p->fmt == TC_LLAMA3) {
            begin_call(p, i);
        } else {
            p->pos = i + 1;
            p->st = S_G_KEY;
            p->lit_i = 0;
        }
        break;
    default:
        p->pos = i + found->n;
        p->st = S_OPEN;
        break;
    }
    return true;
}

/* REASON: reasoning up to "</think>", holding a possible start of it and
 * the whitespace before it. */
static bool step_reason(tc_parser *p, tc_events *out) {
    size_t i = p->pos, tn = sizeof THINK_CLOSE - 1;
    for (; i < p->text.n; i++) {
        size_t k = MIN(tn, p->text.n - i);
        if (memcmp(p->text.p + i, THINK_CLOSE, k) == 0) break;
    }
    if (i + tn <= p->text.n) { /* found */
        emit_text(p, out, TC_EV_REASONING, rtrim_ws(p->text.p, p->emit_pos, i));
        p->pos = p->emit_pos = i + tn;
        p->st = S_AFTER_THINK;
        return true;
    }
    emit_text(p, out, TC_EV_REASONING, utf8_floor(p->text.p, p->emit_pos, rtrim_ws(p->text.p, p->emit_pos, i)));
    p->pos = i;
    return false;
}

/* ---- harmony -----------------------------------------------------------
 *
 *   HM_HEAD ──"<|message|>"──▶ HM_BODY ──<|end|> <|call|> <|return|>──▶ HM_HEAD
 *      │                          └──"<|start|>"──▶ HM_HEAD (a header that starts there)
 *      └──(not a header)──▶ HM_BODY as content, the header bytes included
 *
 * A header is held whole until its <|message|> (at most HM_MAX_HEAD bytes)
 * and then read: the channel after <|channel|>, the recipient after "to=".
 * Headers and terminators are dropped; bodies are streamed as they come,
 * holding back what may be the start of a terminator. A call's body is its
 * arguments; CALL_START goes out with the header, and the body is checked
 * with jansson when it ends (a JSON object: a call; anything else: the
 * call's raw text, header included, and the rest of the output are
 * content, as for the other formats). */

enum { HM_CONTENT, HM_REASON, HM_CALL };
#define HM_MAX_HEAD 256
static const char HM_MESSAGE[] = "<|message|>";
static const char *const hm_openers[] = {"<|start|>", "<|channel|>", "<|constrain|>", " to=", "to="};
static const char *const hm_terms[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

/* Index of the first of `strs` that matches at b[0, avail): a whole match
 * sets *whole; -1 when none matches even partly. */
static int hm_match(const char *b, size_t avail, const char *const *strs, int n, bool *whole) {
    int partial = -1;
    for (int i = 0; i < n; i++) {
        size_t k = MIN(strlen(strs[i]), avail);
        if (memcmp(b, strs[i], k) != 0) continue;
        if (k == strlen(strs[i])) {
            *whole = true;
            return i;
        }
        if (partial < 0) partial = i;
    }
    *whole = false;
    return partial;
}

/* The word at h after `key` ([A-Za-z0-9_.-]; "to=" must start the header or
 * follow a space or '>'), copied to out; false if absent or too long. */
static bool hm_field(const char *h, const char *key, char *out, size_t cap) {
    for (const char *k = strstr(h, key); k; k = strstr(k + 1, key)) {
        if (key[0] == 't' && k > h && k[-1] != ' ' && k[-1] != '>') continue;
        const char *v = k + strlen(key);
        size_t n = 0;
        while (v[n] && v[n] != ' ' && v[n] != '<' && v[n] != '\t' && v[n] != '\n') n++;
        if (n == 0 || n >= cap) return false;
        memcpy(out, v, n);
        out[n] = 0;
        return true;
    }
    return false;
}

/* The header [hm_head, m) is complete: what its body is. */
static void hm_header(tc_parser *p, tc_events *out, size_t m) {
    char h[HM_MAX_HEAD + 1], channel[64] = "", to[96] = "";
    memcpy(h, p->text.p + p->hm_head, m - p->hm_head);
    h[m - p->hm_head] = 0;
    hm_field(h, "<|channel|>", channel, sizeof channel);
    const size_t body = m + sizeof HM_MESSAGE - 1;
    p->hm_kind = strcmp(channel, "analysis") == 0 ? HM_REASON : HM_CONTENT;
    if (hm_field(h, "to=", to, sizeof to) && p->tools_on && strncmp(to, "functions.", 10) == 0 && name_ok(to + 10)) {
        p->hm_kind = HM_CALL;
        p->call_from = p->hm_head;
        call_start(p, out, to + 10); /* emit_pos = call_from: the call owns its raw text */
        p->args_start = p->args_emitted = body;
    } else {
        p->emit_pos = body;
    }
    p->pos = body;
    p->st = S_HM_BODY;
}

/* The body ended at `end` (a terminator or the end of the output): a call's
 * arguments are checked. */
static void hm_body_end(tc_parser *p, tc_events *out, size_t end) {
    if (p->hm_kind != HM_CALL) {
        emit_text(p, out, p->hm_kind == HM_REASON ? TC_EV_REASONING : TC_EV_CONTENT, end);
        return;
    }
    if (end > p->args_emitted) push_event(p, out, TC_EV_CALL_ARGS, p->text.p + p->args_emitted, end - p->args_emitted, NULL, NULL);
    p->args_emitted = end;
    json_error_t je;
    json_t *a = json_loadb(p->text.p + p->args_start, end - p->args_start, JSON_REJECT_DUPLICATES, &je);
    const bool ok = json_is_object(a);
    json_decref(a);
    p->started = false;
    if (!ok) {
        p->st = S_BROKEN; /* emit_pos is the call's start: the rest is content */
        return;
    }
    p->n_calls++;
    p->emit_pos = end;
}

static void hm_run(tc_parser *p, tc_events *out) {
    for (;;) {
        if (p->st == S_BROKEN) {
            emit_text(p, out, TC_EV_CONTENT, utf8_floor(p->text.p, p->emit_pos, p->text.n));
            p->pos = p->text.n;
            return;
        }
        if (p->st == S_HM_HEAD) {
            const char *h = p->text.p + p->hm_head;
            const size_t avail = p->text.n - p->hm_head;
            if (avail == 0) return;
            bool whole;
            const char *m = hm_match(h, avail, hm_openers, (int)ARRAY_LEN(hm_openers), &whole) < 0
                                ? NULL
                                : memmem(h, avail, HM_MESSAGE, sizeof HM_MESSAGE - 1);
            if (m && (size_t)(m - h) <= HM_MAX_HEAD) {
                hm_header(p, out, (size_t)(m - p->text.p));
                continue;
            }
            bool bad = hm_match(h, avail, hm_openers, (int)ARRAY_LEN(hm_openers), &whole) < 0 || avail > HM_MAX_HEAD;
            for (size_t t = 0; !bad && t < 3; t++) bad = memmem(h, avail, hm_terms[t], strlen(hm_terms[t])) != NULL;
            if (!bad) return; /* wait for the rest of the header */
            p->hm_kind = HM_CONTENT; /* not a header: text, shown as it is */
            p->emit_pos = p->hm_head;
            /* a <|start|> it begins with is its text (else it would start the same header again) */
            p->pos = p->hm_head + (memcmp(h, hm_terms[3], MIN(avail, strlen(hm_terms[3]))) == 0 ? MIN(avail, strlen(hm_terms[3])) : 0);
            p->st = S_HM_BODY;
            continue;
        }
        /* S_HM_BODY: up to the first terminator, or a possible start of one */
        size_t i = p->pos;
        int term = -1;
        bool whole = false;
        for (; i < p->text.n; i++) {
            if (p->text.p[i] != '<') continue;
            term = hm_match(p->text.p + i, p->text.n - i, hm_terms, (int)ARRAY_LEN(hm_terms), &whole);
            if (term >= 0) break;
        }
        if (!whole) { /* stream what is decided */
            const size_t from = p->hm_kind == HM_CALL ? p->args_emitted : p->emit_pos;
            const size_t end = utf8_floor(p->text.p, from, i);
            if (p->hm_kind == HM_CALL && end > p->args_emitted) {
                push_event(p, out, TC_EV_CALL_ARGS, p->text.p + p->args_emitted, end - p->args_emitted, NULL, NULL);
                p->args_emitted = end;
            } else if (p->hm_kind != HM_CALL) {
                emit_text(p, out, p->hm_kind == HM_REASON ? TC_EV_REASONING : TC_EV_CONTENT, end);
            }
            p->pos = i;
            return;
        }
        hm_body_end(p, out, i);
        if (p->st == S_BROKEN) continue;
        p->hm_head = hm_terms[term][2] == 's' ? i : i + strlen(hm_terms[term]); /* <|start|> begins the next header */
        p->pos = p->emit_pos = p->hm_head;
        p->st = S_HM_HEAD;
    }
}

/* Runs the state machine over the bytes from pos as far as they decide. */
static void run(tc_parser *p, tc_events *out) {
    if (p->fmt == TC_HARMONY) {
        hm_run(p, out);
        return;
    }
    for (;;) {
        if (p->st == S_TEXT) {
            if (!step_text(p, out)) break;
            continue;
        }
        if (p->st == S_REASON) {
            if (!step_reason(p, out)) break;
            continue;
        }
        if (p->st == S_BROKEN) {
            emit_text(p, out, TC_EV_CONTENT, utf8_floor(p->text.p, p->emit_pos, p->text.n));
            p->pos = p->text.n;
            break;
        }
        if (p->st == S_THINK_START) {
            size_t k = 0;
            while (k < p->text.n && is_ws(p->text.p[k])) k++;
            size_t avail = MIN(p->text.n - k, sizeof THINK_OPEN - 1);
            if (memcmp(p->text.p + k, THINK_OPEN, avail) != 0) {
                to_text(p, 0, false);
            } else if (avail == sizeof THINK_OPEN - 1) {
                p->pos = p->emit_pos = k + avail;
                p->st = S_REASON_LEAD;
            } else {
                break;
            }
            continue;
        }
        if (p->pos >= p->text.n) break;
        char c = p->text.p[p->pos];
        switch (p->st) {
        case S_REASON_LEAD:
        case S_AFTER_THINK:
            if (is_ws(c)) {
                p->pos++;
                p->emit_pos = p->pos;
            } else if (p->st == S_REASON_LEAD) {
                p->st = S_REASON;
            } else {
                to_text(p, p->pos, false);
            }
            break;
        case S_OPEN:
            if (is_ws(c)) {
                p->pos++;
            } else if (c == '[' && p->fmt == TC_MISTRAL) {
                p->in_array = true;
                p->pos++;
                p->st = S_ARR_ELEM;
            } else if (c == '{') {
                begin_call(p, p->pos);
            } else {
                fail_at(p, out, p->pos);
            }
            break;
        case S_G_KEY:
            if (p->lit_i == 0 && is_ws(c)) {
                p->pos++;
            } else if (c == GENERIC_KEY[p->lit_i]) {
                p->pos++;
                if (++p->lit_i == sizeof GENERIC_KEY - 1) p->st = S_G_COLON;
            } else {
                fail_at(p, out, p->pos);
            }
            break;
        case S_G_COLON:
        case S_G_ARR:
            if (is_ws(c)) {
                p->pos++;
            } else if (c == (p->st == S_G_COLON ? ':' : '[')) {
                p->pos++;
                p->in_array = p->st == S_G_ARR;
                p->st = p->st == S_G_COLON ? S_G_ARR : S_ARR_ELEM;
            } else {
                fail_at(p, out, p->pos);
            }
            break;
        case S_ARR_ELEM:
        case S_L_SEP:
            if (is_ws(c)) p->pos++;
            else if (c == '{') begin_call(p, p->pos);
            else fail_at(p, out, p->pos);
            break;
        case S_CALL:
            while (p->st == S_CALL && p->pos < p->text.n && call_byte(p, out)) {
            }
            break;
        case S_AFTER_CALL:
            if (is_ws(c)) {
                p->pos++;
            } else if (p->fmt == TC_HERMES && c == '<') {
                p->lit_from = p->pos;
                p->lit_i = 0;
                p->st = S_H_CLOSE;
            } else if (p->fmt == TC_HERMES && c == '{') {
                begin_call(p, p->pos); /* several objects in one block */
            } else if (p->fmt == TC_LLAMA3 && c == ';') {
                p->pos++;
                p->st = S_L_SEP;
            } else if (p->in_array && c == ',') {
                p->pos++;
                p->st = S_ARR_ELEM;
            } else if (p->in_array && c == ']') {
                p->pos++;
                if (p->fmt == TC_GENERIC) p->st = S_G_CLOSE;
                else to_text(p, p->pos, true);
            } else {
                to_text(p, p->pos, true);
            }
            break;
        case S_H_CLOSE:
            if (c == HERMES_CLOSE[p->lit_i]) {
                p->pos++;
                if (++p->lit_i == sizeof HERMES_CLOSE - 1) to_text(p, p->pos, true);
            } else {
                to_text(p, p->lit_from, false);
            }
            break;
        case S_G_CLOSE:
            if (is_ws(c)) {
                p->pos++;
            } else {
                to_text(p, c == '}' ? p->pos + 1 : p->pos, true);
            }
            break;
        default: PANIC("tc_parser state %d", p->st);
        }
    }
    if (p->st == S_CALL) emit_args(p, out, false);
}

void tc_parser_feed(tc_parser *p, const char *text, size_t n, tc_events *out) {
    if (p->finished || n == 0) return;
    sbuf_put(&p->text, text, n);
    p->ev_base = out->n;
    run(p, out);
}

int tc_parser_finish(tc_parser *p, bool truncated, tc_events *out) {
    if (p->finished) return p->n_calls;
    p->finished = true;
    p->ev_base = out->n;
    if (p->st == S_HM_BODY) {
        hm_body_end(p, out, p->text.n); /* a held partial terminator is body text */
        if (p->st != S_BROKEN) p->st = S_HM_HEAD, p->hm_head = p->text.n;
    }
    switch (p->st) {
    case S_REASON_LEAD:
    case S_AFTER_THINK: break;
    case S_REASON: emit_text(p, out, TC_EV_REASONING, rtrim_ws(p->text.p, p->emit_pos, p->text.n)); break;
    case S_AFTER_CALL:
    case S_H_CLOSE:
    case S_G_CLOSE:
    case S_L_SEP: break; /* the rest of a complete block's syntax */
    case S_HM_HEAD: p->emit_pos = p->hm_head; /* an unfinished header is content */
        emit_text(p, out, TC_EV_CONTENT, p->text.n);
        break;
    case S_ARR_ELEM:
        if (p->calls_in_block > 0) break;
        /* fall through */
    case S_CALL:
        emit_args(p, out, true);
        /* fall through */
    case S_OPEN:
    case S_G_KEY:
    case S_G_COLON:
    case S_G_ARR:
        /* an incomplete call (emit_pos is its start): cut by the length
         * limit it is dropped, never shown as text; otherwise (the output
         * ended inside it) its raw text is content */
        if (!truncated) emit_text(p, out, TC_EV_CONTENT, p->text.n);
        break;
    case S_TEXT:
        /* held: whitespace, then from pos the start of a possible marker; a
         * marker cut by the length limit is dropped with the space before it */
        emit_text(p, out, TC_EV_CONTENT, truncated && p->pos < p->text.n ? rtrim_ws(p->text.p, p->emit_pos, p->pos) : p->text.n);
        break;
    default:
        /* held text; a broken call's raw text (emit_pos is its start) */
        emit_text(p, out, TC_EV_CONTENT, p->text.n);
        break;
    }
    p->pos = p->text.n;
    return p->n_calls;
}
