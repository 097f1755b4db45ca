/*
 * models.h — the models a server serves, by name (models.c).
 *
 * Each model is an entry: its name (the file name without .gguf, or its
 * --alias), its file, and while it is loaded its routes_ctx (model,
 * tokenizer, chat template, engine or encoder thread). The list comes from
 * repeated -m (each with the --alias that follows it) and --models-dir.
 *
 *   unloaded ──first request / POST /models/load──▶ loaded
 *      ▲                                              │
 *      └── LRU beyond --models-max, --models-idle, ───┘
 *          POST /models/unload (only with no request in flight)
 *
 * A request holds a reference on its model from routes_handle until its
 * answer is written (gen_done for generations): a model with references is
 * never unloaded. One model: every name maps to it, and it is loaded at
 * start.
 *
 * KV budget: an explicit --kv-mem is the total, split evenly over the
 * --models-max slots; by default each model gets one full context at load
 * time (server.c's rule), out of the memory free then divided by the free
 * slots. Each engine has its own prefix tree, so prefixes never cross
 * models; with --kv-disk each model has its own subdirectory (its name).
 *
 * Thread safety: every function may be called from any thread (one mutex).
 * A load runs with the mutex released (the entry marked loading, its slot
 * taken): requests to the other models are served meanwhile, and the
 * requests for the model being loaded wait for that one load.
 */
#ifndef KVLOOM_MODELS_H
#define KVLOOM_MODELS_H

#include <jansson.h>

#include "routes.h"
#include "server.h"

/* At most this many models in one list. */
#define MODELS_MAX 256

typedef struct models models;
typedef struct models_entry models_entry;

/* Builds the list from o (loads nothing). `shared` holds what every
 * model's routes_ctx shares (options, metrics, the response store, the
 * start time); it must outlive the list. Errors: a bad --models-dir, two
 * models with one name, no model at all. */
int models_new(const server_opts *o, const routes_ctx *shared, models **out, err_t *e);
int models_count(const models *ms);

/* The loaded model for `name` (NULL or any name when one model is served)
 * with a reference; loads it on first use (first unloading the least
 * recently used idle model when --models-max are loaded). NULL on failure
 * with the HTTP status (404 unknown name, 503 cannot load now) and msg. */
routes_ctx *models_acquire(models *ms, const char *name, int *status, char *msg, size_t cap);
/* Drops the reference models_acquire took (rc->entry; NULL entry: no-op). */
void models_release(routes_ctx *rc);
/* One more reference to rc, which the caller holds one of (the forks of
 * one request: each generation releases its own). */
void models_retain(routes_ctx *rc);

/* Explicit load / unload (POST /models/load, /models/unload): 0, or the
 * HTTP status (404 unknown, 409 busy, 503) with msg. */
int models_load(models *ms, const char *name, int *status, char *msg, size_t cap);
int models_unload(models *ms, const char *name, int *status, char *msg, size_t cap);

/* Unloads models idle for --models-idle seconds (0: never); the server's
 * main loop calls it about once a second. */
void models_tick(models *ms);

/* Engine statistics of the loaded models, for /metrics and /load: only
 * `name`'s (none while it is not loaded) or, name NULL, every loaded
 * model's, at most cap of them, with their names in names[] (valid as long
 * as the list). Returns how many, or -1 when `name` is not served. An
 * encoder reports zeros (it has no KV pool). Never loads. */
int models_stats(models *ms, const char *name, engine_stats *st, const char **names, int cap);

/* Listings: the OpenAI /v1/models list (each with "status": "loaded" or
 * "unloaded"), Ollama's /api/tags (every model) and /api/ps (loaded ones). */
enum { MODELS_OPENAI, MODELS_OLLAMA_TAGS, MODELS_OLLAMA_PS };
json_t *models_list_json(models *ms, int style);

/* Stops every engine (their requests end as cancelled); then models_free. */
void models_stop(models *ms);
void models_free(models *ms); /* NULL is a no-op */

#endif
