/*
 * toolcall.h — the tool-call formats of the model families kvloom runs: which
 * one a chat template speaks, the grammar that constrains a call, and the
 * parser that turns generated text back into OpenAI tool_calls (also piece by
 * piece, for streaming), with reasoning (<think>...</think>) split apart.
 *
 * Place in the flow: chat/, on HTTP threads. At load the server picks the
 * format from the chat template (tc_detect, logged; `--tool-format` forces
 * one). Per request: tc_grammar builds the GBNF for the allowed calls (the
 * arguments through schema.h); the engine constrains the output with it,
 * from the first token (tool_choice required / named) or from the call
 * marker on (auto: a lazy grammar whose trigger is tc_grammar's *trigger);
 * the generated text goes through a tc_parser, which emits content,
 * reasoning and call events.
 *
 * Formats (what the model writes):
 *   TC_HERMES   Qwen2.5 / Qwen3 / Hermes:
 *               <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *               (several calls: one block after another, separated by "\n")
 *   TC_LLAMA3   Llama 3.1 / 3.2 JSON: {"name": "f", "parameters": {...}}
 *               (the whole answer is the call; with a "<|python_tag|>"
 *               prefix also accepted; several calls separated by "; ")
 *   TC_MISTRAL  [TOOL_CALLS][{"name": "f", "arguments": {...}}, ...]
 *   TC_HARMONY  gpt-oss (OpenAI harmony): the output is a series of messages
 *               [<|start|>assistant][ to=R]<|channel|>C[ to=R][ <|constrain|>T]
 *               <|message|>BODY then <|end|> (another message follows),
 *               <|call|> or <|return|> (end of generation). Channel
 *               "analysis" is reasoning, "final" and "commentary" are
 *               content, and a message addressed to=functions.NAME is a call
 *               whose BODY is the arguments JSON (whatever its channel).
 *   TC_GENERIC  templates without a call syntax of their own:
 *               {"tool_calls": [{"name": "f", "arguments": {...}}]}
 *               (the template is told about it through a system message
 *               that tc_generic_system_prompt writes)
 *
 * Thread safety: everything here is reentrant; a tc_parser belongs to one
 * request.
 */
#ifndef KVLOOM_TOOLCALL_H
#define KVLOOM_TOOLCALL_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "../base/base.h"

typedef enum tc_format { TC_NONE = 0, TC_HERMES, TC_LLAMA3, TC_MISTRAL, TC_GENERIC, TC_HARMONY } tc_format;

/* The format a chat template's text speaks (TC_GENERIC when it speaks none
 * of the others, including NULL). */
tc_format tc_detect(const char *template_src);
const char *tc_format_name(tc_format f); /* "hermes", "llama3", ... */
/* Parses a name given to --tool-format; ERR_INVALID (naming the choices). */
int tc_format_from_name(const char *name, tc_format *out, err_t *e);

/* Checks an OpenAI `tools` array: each {"type":"function","function":{"name":
 * string of [A-Za-z0-9_.-]{1,64}, "description"?: string, "parameters"?:
 * object schema, "strict"?: bool}}; names unique. Errors name the element
 * ("tools[2].function.name must be ..."), ERR_INVALID. */
int tc_check_tools(json_t *tools, err_t *e);
#define TC_MAX_TOOLS 128 /* OpenAI's limit on the length of `tools` */

/* The GBNF (grammar.h) of one or more calls in format f to the tools in
 * `tools` (checked), or only to the one named `only` when not NULL; with
 * `parallel` several calls may follow each other. With lazy, the grammar
 * starts right after the call marker (*trigger, a malloc'd string:
 * "<tool_call>" for hermes, "[TOOL_CALLS]" for mistral, "{\"tool_calls\""
 * for generic, "{\"" for llama3, whose calls are bare JSON: see toolcall.c;
 * "to=functions." for harmony, whose grammar then covers the rest of the
 * header, "<|message|>" and the arguments; harmony writes one call per
 * message, so `parallel` changes nothing there)
 * and the model may write free text before it; without, the grammar covers
 * the whole output (*trigger = NULL). A tool without "parameters" takes
 * exactly {} as its arguments. The grammar's output ends with the call(s):
 * nothing may follow but end-of-generation. Errors (ERR_UNSUPPORTED /
 * ERR_INVALID) name the tool and the schema keyword
 * ("tools[0].function.parameters: unsupported JSON Schema keyword ..."). */
int tc_grammar(tc_format f, json_t *tools, const char *only, bool parallel, bool lazy, char **gbnf, char **trigger,
               err_t *e);
/* tc_grammar, with each tool's schema compiled relaxed unless the tool says
 * "strict": true (schema.h, schema_compile): *relaxed receives NULL or a
 * malloc'd report of the dropped keywords, "tools[1].function.parameters:
 * format at /properties/url; tools[3]...". */
int tc_grammar_relax(tc_format f, json_t *tools, const char *only, bool parallel, bool lazy, char **gbnf,
                     char **trigger, char **relaxed, err_t *e);

/* For TC_GENERIC: the system-prompt text that tells the model the tools and
 * the call syntax (malloc'd). */
char *tc_generic_system_prompt(json_t *tools);

/* ---- parsing the output ---- */

typedef enum tc_event_kind {
    TC_EV_CONTENT = 0,   /* text for message.content                          */
    TC_EV_REASONING,     /* text for message.reasoning_content                */
    TC_EV_CALL_START,    /* a new call: index, id, name                       */
    TC_EV_CALL_ARGS,     /* a fragment of the current call's arguments (JSON) */
} tc_event_kind;

typedef struct tc_event {
    tc_event_kind kind;
    int index;           /* call index (CALL_*)                               */
    char *text;          /* content / reasoning / argument bytes (malloc'd)   */
    size_t n;
    char *id;            /* CALL_START: "call_..." (malloc'd)                 */
    char *name;          /* CALL_START: function name (malloc'd)              */
} tc_event;

typedef struct tc_events {
    tc_event *v;
    int n, cap;
} tc_events;
void tc_events_clear(tc_events *ev); /* frees the strings, n = 0          */
void tc_events_free(tc_events *ev);

typedef struct tc_parser tc_parser;

/* A parser for the output of one request. `tools_on`: calls are recognised
 * (false: all text is content, but reasoning is still split); `reasoning`:
 * split <think>...</think> (also when the prompt already opened <think>:
 * `think_open`). Harmony always splits its channels (its raw output is not
 * readable), whatever `reasoning` and `think_open` say; with tools off a
 * message to=functions.NAME is content. `id_seed` makes the call ids
 * ("call_" + 24 characters) unique per request. */
tc_parser *tc_parser_new(tc_format f, bool tools_on, bool reasoning, bool think_open, unsigned long long id_seed);
void tc_parser_free(tc_parser *p);

/* Feeds the next piece of generated text (any split, even inside a marker
 * or a UTF-8 character); appends the events it makes final to `out`. Text
 * that may still turn out to be a marker or a call is held back, never
 * shown as content. Argument fragments of a call are emitted as they
 * arrive once its name is known; their concatenation is the arguments JSON
 * text exactly as generated. */
void tc_parser_feed(tc_parser *p, const char *text, size_t n, tc_events *out);

/* The end of the output: flushes what was held. A call that did not
 * complete is not reported as a call. `truncated` (finish_reason "length"):
 * its text (from its marker on, also a marker cut half-way) is dropped;
 * otherwise what was held, the incomplete call's raw text included, is given
 * as content. Returns the number of complete calls parsed so
 * far (so the caller sets finish_reason "tool_calls" when > 0 and the output
 * was not truncated). A malformed call (its JSON does not parse, or has no
 * string name) is returned as content, never as an invented call.
 * An incomplete or malformed call whose CALL_START was already emitted keeps
 * the events streamed for it (its raw text then also comes as content, and
 * the rest of the output is content); it is always the last index, so the
 * complete calls are exactly those with index < the returned count. */
int tc_parser_finish(tc_parser *p, bool truncated, tc_events *out);

#endif
