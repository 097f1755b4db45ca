/*
 * constrain.h — from a request's tools, tool_choice and output format to the
 * grammar the engine enforces (grammar/grammar.h), with a cache of compiled
 * grammars so that an agent that sends the same tools every turn compiles
 * them once and keeps their mask cache warm.
 *
 * Place in the flow: server/, on HTTP threads, after oai_parse and before
 * engine_submit.
 *
 *   tool_choice required / named ─▶ tc_grammar (whole output)        ┐
 *   tool_choice auto (tools)     ─▶ tc_grammar (lazy, after trigger) ├─▶ GBNF
 *   response_format / json_schema ─▶ schema_to_gbnf                   │   ─▶ cache
 *   grammar (GBNF)               ─────────────────────────────────────┘   ─▶ grammar
 *
 * With tools on auto and a JSON response_format, the output is either the
 * calls or the JSON answer (one grammar with both, from the first token).
 *
 * Thread safety: a constrainer is shared by all HTTP threads (its cache has a
 * mutex); the grammars it hands out are refcounted.
 */
#ifndef KVLOOM_CONSTRAIN_H
#define KVLOOM_CONSTRAIN_H

#include "../chat/toolcall.h"
#include "../grammar/grammar.h"
#include "../tok/tok.h"
#include "oai.h"

/* The byte trie of a tokenizer's vocabulary for grammar masks: control and
 * unused tokens never appear inside constrained text, except the
 * end-of-generation ones, which end it. */
gvocab *constrain_vocab_new(const tokenizer *tk);

typedef struct constrainer constrainer;

/* `n_cache` compiled grammars are kept (least recently used go first), and
 * the mask and DFA caches of all of them together hold at most cache_bytes
 * (0: CONSTRAIN_DEFAULT_CACHE_BYTES): each grammar's own budget is
 * cache_bytes / n_cache (grammar_set_cache_bytes). A grammar evicted while
 * requests still use it lives until they end. */
#define CONSTRAIN_DEFAULT_CACHE_BYTES ((size_t)1 << 30)
constrainer *constrainer_new(int n_cache, size_t cache_bytes);
void constrainer_free(constrainer *c);

/* The grammar for request p in tool-call format f: *g gets a reference (the
 * caller owns it) or NULL when the output is free; *trigger a malloc'd lazy
 * trigger or NULL. On a bad schema or grammar returns ERR_INVALID /
 * ERR_UNSUPPORTED with a message naming the field and *param the request
 * field ("response_format", "json_schema", "grammar", "tools"). Schemas
 * are compiled relaxed (schema.h) unless strict: a tool with "strict": true,
 * response_format json_schema with "strict": true; *relaxed receives NULL or
 * a malloc'd report of what was dropped ("tools: tools[0].function.parameters:
 * format at /properties/url"), logged once per compiled grammar. */
int constrain_request(constrainer *c, const oai_params *p, tc_format f, grammar **g, char **trigger,
                      const char **param, char **relaxed, err_t *e);

/* The mask and DFA caches of the cached grammars no request holds now
 * (those in use are the engine's mem_grammar_caches), as of their last
 * use (grammar_cache_bytes). Any thread. */
size_t constrainer_idle_bytes(constrainer *c);

#endif
