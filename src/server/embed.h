/*
 * embed.h — the embedding routes (embed.c):
 *
 *   POST /v1/embeddings     OpenAI: input (string, strings, token ids or
 *                           arrays of them), dimensions, encoding_format
 *                           ("float" | "base64")
 *   POST /api/embed         Ollama: input (string or strings), truncate,
 *                           dimensions
 *   POST /api/embeddings    Ollama's older form: prompt (one string)
 *
 * Vectors are L2-normalised; `dimensions` keeps the first N values and
 * renormalises. Encoder models (bert) run on the encoder thread; decoder
 * embedders (pooling_type last, e.g. Qwen3-Embedding) through the engine.
 * A model that is not an embedding model is a 400 naming it.
 *
 * Place in the flow: server/, HTTP threads, dispatched by routes.c (route
 * handlers: routes.h). Each answers exactly once, in its API's error shape.
 */
#ifndef KVLOOM_EMBED_H
#define KVLOOM_EMBED_H

#include "http.h"
#include "routes.h"

void embed_openai(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);
/* /api/embed, and the legacy /api/embeddings (prompt -> embedding). */
void embed_ollama(const route *rt, routes_ctx *root, routes_ctx *rc, http_exchange *x);
/* Positions one input may have: the engine's context, or an encoder's
 * training context. */
int embed_n_ctx(const routes_ctx *rc);

#endif
