/*
 * chat.h — turns an OpenAI-style list of chat messages into the prompt text
 * a model was trained on, using the model's own chat template
 * (tokenizer.chat_template in the GGUF) rendered by the Jinja engine
 * (jinja.h), the way Hugging Face transformers' apply_chat_template does.
 *
 * Place in the flow: tok/. The server calls chat_render for every
 * /v1/chat/completions request, then tokenizes the result.
 *
 *   load:    chat_tmpl_new(template or NULL) ──▶ chat_tmpl (model's template,
 *                                                 or the ChatML fallback)
 *   request: messages + chat_opts ──validate──▶ normalised messages
 *                                 ──jinja_render──▶ prompt text
 *
 * Fallback: a model without a template, or whose template uses something
 * outside our Jinja subset (or does not parse), gets the ChatML template
 * ("<|im_start|>role\ncontent<|im_end|>\n"..., see docs/chat-templates.md);
 * chat_tmpl_fallback_reason() says why, so the server can log it at load.
 *
 * Messages (a non-empty array, validated; errors name the field:
 * "messages[2].role: ..."):
 *   role     "system" | "developer" (rendered as system) | "user" |
 *            "assistant" | "tool"
 *   content  a string; an array of {"type":"text","text":...} parts (joined
 *            with "\n"; other part types are ERR_UNSUPPORTED); null or
 *            missing only for an assistant message: passed as given (as
 *            transformers does), and if the template then fails, rendered
 *            again with "" (templates such as Qwen3's need a string)
 *   assistant tool_calls  [{"id", "type":"function", "function":{"name",
 *            "arguments"}}] — arguments passed to the template as given (a
 *            JSON string, or an object), exactly as transformers does
 *   tool     tool_call_id (a string, when present)
 * Other fields (name, reasoning_content...) are passed through unchanged.
 *
 * Thread safety: a chat_tmpl is immutable; chat_render may run on any
 * number of threads at once.
 */
#ifndef KVLOOM_CHAT_H
#define KVLOOM_CHAT_H

#include <jansson.h>
#include <stdbool.h>

#include "base/base.h"

typedef struct chat_opts {
    const char *bos_token;      /* the template's bos_token; NULL: undefined    */
    const char *eos_token;      /* the template's eos_token; NULL: undefined    */
    bool add_generation_prompt; /* end with the assistant turn's header       */
    json_t *tools;              /* OpenAI tools array, or NULL (→ tools=none) */
    json_t *extra;              /* extra template variables (e.g.
                                   {"enable_thinking": false}), or NULL; they
                                   cannot override messages/tools/tokens      */
} chat_opts;

typedef struct chat_tmpl chat_tmpl;

/* Parses a model's chat template. `template_src` may be NULL (no template
 * in the model). Never fails on the template's content: a missing or
 * unsupported template yields the ChatML fallback and a reason (see
 * chat_tmpl_fallback_reason). Returns 0 and sets *out (free with
 * chat_tmpl_free). `e` is kept for future hard errors. */
int chat_tmpl_new(const char *template_src, chat_tmpl **out, err_t *e);

/* NULL when the model's own template is used; otherwise a sentence saying
 * why the ChatML fallback is used (e.g. "template not supported: 3:17:
 * unsupported filter 'wordwrap'"). Owned by the template. */
const char *chat_tmpl_fallback_reason(const chat_tmpl *t);

/* True when the template renders an assistant message with one tool call
 * but refuses one with two (Llama 3.1 and 3.2 raise "This model only
 * supports single tool-calls at once!"): probed once by chat_tmpl_new. A
 * server then allows one call per answer (parallel_tool_calls false), so
 * the calls a client sends back can be rendered. */
bool chat_tmpl_one_call(const chat_tmpl *t);

/* Frees a template; NULL is a no-op. */
void chat_tmpl_free(chat_tmpl *t);

/* Renders `messages` (a JSON array, only read) with options `o` (may be
 * NULL: no tokens, no tools, no generation prompt). On success *out is a
 * malloc'd NUL-terminated prompt the caller frees, and 0 is returned. On
 * failure *out is NULL and a negative code is returned: ERR_INVALID for a
 * malformed message (e names the field: "messages[1].content: must be a
 * string or an array of parts"), a string with a NUL character (the prompt
 * is a C string), or a template error such as
 * raise_exception ("raise_exception: Conversation roles must alternate..."),
 * ERR_UNSUPPORTED for content parts other than text, ERR_RANGE when the
 * template hit a rendering cap. */
int chat_render(const chat_tmpl *t, json_t *messages, const chat_opts *o, char **out, err_t *e);

#endif
