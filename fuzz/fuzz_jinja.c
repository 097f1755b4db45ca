/*
 * fuzz_jinja.c — libFuzzer target for the chat-template engine: the input
 * bytes are a template; it is parsed and, when it parses, rendered with a
 * fixed context shaped like a chat request (messages with tool calls,
 * tools, tokens, flags). Any outcome but a crash, a hang or a leak is
 * fine: the engine must turn every input into a result or an error, within
 * its caps (jinja.h: steps, depth, memory, output).
 * Corpus: fuzz/corpus/fuzz_jinja/ (real chat templates and fragments).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "chat/jinja.h"

static const char CONTEXT[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are a bot.\"},"
    "{\"role\": \"user\", \"content\": \" Hi <tool_response>x</tool_response> \"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\nhm\\n</think>\\n\\nok\", \"reasoning_content\": null},"
    "{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"call12345\", \"type\": \"function\","
    "  \"function\": {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": [1, 2.5, true, null]}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"call12345\", \"content\": \"{\\\"temp\\\": 21}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"part\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
    "  \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    "\"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false,"
    "\"n\": 3, \"f\": 0.5, \"s\": \"h\\u00e9llo\"}";

static json_t *ctx;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 65536) return 0;
    if (!ctx) {
        json_error_t je;
        ctx = json_loads(CONTEXT, 0, &je);
        if (!ctx) abort();
    }
    jinja_tmpl *t = NULL;
    err_t e = {0};
    if (jinja_parse((const char *)data, size, &t, &e) == 0) {
        char *out = NULL;
        size_t len = 0;
        if (jinja_render(t, ctx, &out, &len, &e) == 0) {
            if (!out || strlen(out) > len) abort(); /* length must cover the string */
            free(out);
        } else if (out) {
            abort(); /* an error leaves no output */
        }
        jinja_free(t);
    } else if (t) {
        abort(); /* a parse error leaves no template */
    }
    return 0;
}
