/*
 * models.c — the served models by name (models.h): the list, loading one
 * (model, tokenizer, chat template, grammar vocabulary, engine or encoder
 * thread), references, LRU and idle unloading, the listings.
 */
#include "models.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../chat/chat.h"
#include "../sched/encoder.h"
#include "apis.h"
#include "constrain.h"

struct models_entry {
    models *ms;
    char name[256];
    char *path;          /* owned                                         */
    const char *alias;   /* --alias given for it (argv), or NULL          */
    routes_ctx *rc;      /* loaded: its context; NULL unloaded            */
    bool loading;        /* a thread is loading it, without mu (models.h) */
    int refs;            /* requests holding it                           */
    int64_t last_used_ns;
    int64_t load_ms;     /* how long its last load took                   */
    /* owned while loaded */
    model *m;
    tokenizer *tk;
    void *chat;
    char *tmpl_file;
    gvocab *gv;
    engine *en;
    encoder *enc;
    model *draft;        /* --draft-model, or NULL                        */
    uint64_t mem_tables; /* tokenizer, grammar vocabulary, the file outside its
                            tensors (kvloom_memory_bytes{part="tables"})   */
    uint64_t mem_model_meta; /* of which the file outside its tensors     */
    char kv_dir[1024];
};

struct models {
    const server_opts *o;
    const routes_ctx *shared;
    models_entry *v[MODELS_MAX];
    int n, n_loaded, max_loaded; /* n_loaded counts the ones loading too */
    bool stopped;
    pthread_mutex_t mu;
    pthread_cond_t loaded; /* broadcast when a load ends */
};

/* The default KV pool (no --kv-mem): one full context of the model plus a
 * block, at least SERVER_KV_MIN_BYTES, so that any prompt the context takes
 * also fits the pool. Bounded by what the machine can give: the available
 * memory less the weights (mapped, paged in as they are read) and 1 GiB of
 * headroom, at most 3/4 of it, and 85% of physical memory (the engine
 * refuses above 90%); when one context does
 * not fit that, the largest pool that does, with a warning that names the
 * flags. With several models, the free memory is shared by the free slots
 * (models.h). */
static size_t kv_auto_bytes(const model *m, const server_opts *o, int free_slots) {
    const int B = o->block_tokens, n_ctx = o->n_ctx > 0 ? o->n_ctx : m->cfg.n_ctx_train;
    const uint64_t bb = model_kv_block_bytes_type(m, B, o->kv_type);
    uint64_t want = bb * (uint64_t)((n_ctx + B - 1) / B + 1);
    if (want < SERVER_KV_MIN_BYTES) want = SERVER_KV_MIN_BYTES;
    uint64_t avail = model_mem_available(), cap = want;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (pages > 0 && page > 0) cap = MIN(cap, (uint64_t)pages * (uint64_t)page / 100 * 85);
    if (avail) {
        uint64_t spare = avail > m->weight_bytes + (1ull << 30) ? avail - m->weight_bytes - (1ull << 30) : 0;
        cap = MIN(cap, MIN(spare, avail / 4 * 3) / (uint64_t)(free_slots > 0 ? free_slots : 1)); /* the machine may be shared */
    }
    cap = MAX(cap, 2 * bb); /* the engine's least */
    if (cap < want && want > SERVER_KV_MIN_BYTES)
        log_warn("serve: one full context (%d tokens) needs %.1f GiB of KV cache but %.1f GiB is free: the pool holds "
                 "%llu tokens; a longer prompt is refused (--ctx to shorten the context, --kv-mem to set the pool)",
                 n_ctx, (double)want / (1 << 30), (double)avail / (1 << 30),
                 (unsigned long long)(cap / bb > 1 ? (cap / bb - 1) * (uint64_t)B : 0));
    return (size_t)MIN(cap, want);
}

static bool eog_cb(void *ctx, int32_t id) { return tok_is_eog((const tokenizer *)ctx, id); }

static int piece_cb(void *ctx, int32_t id, char *buf, int cap) { return tok_piece((const tokenizer *)ctx, id, buf, cap); }

static int tokenize_cb(void *ctx, const char *text, size_t n, int32_t *out, int cap) {
    return tok_encode_continuation((const tokenizer *)ctx, text, n, out, cap);
}

static void name_from_path(const char *path, char *out, size_t cap) {
    const char *b = strrchr(path, '/');
    b = b ? b + 1 : path;
    snprintf(out, cap, "%s", b);
    char *dot = strrchr(out, '.');
    if (dot && !strcmp(dot, ".gguf")) *dot = 0;
}

static int add_entry(models *ms, const char *path, const char *alias, err_t *e) {
    if (ms->n == MODELS_MAX) return err_set(e, ERR_RANGE, "more than %d models", MODELS_MAX);
    models_entry *en = xcalloc(1, sizeof *en);
    en->ms = ms;
    en->path = xstrdup(path);
    en->alias = alias;
    if (alias) snprintf(en->name, sizeof en->name, "%s", alias);
    else name_from_path(path, en->name, sizeof en->name);
    for (int i = 0; i < ms->n; i++)
        if (!strcmp(ms->v[i]->name, en->name)) {
            int r = err_set(e, ERR_INVALID, "two models are named '%s' ('%s' and '%s'): give one an --alias", en->name,
                            ms->v[i]->path, path);
            free(en->path);
            free(en);
            return r;
        }
    ms->v[ms->n++] = en;
    return 0;
}

static int by_name(const void *a, const void *b) {
    return strcmp((*(models_entry *const *)a)->name, (*(models_entry *const *)b)->name);
}

int models_new(const server_opts *o, const routes_ctx *shared, models **out, err_t *e) {
    *out = NULL;
    models *ms = xcalloc(1, sizeof *ms);
    ms->o = o;
    ms->shared = shared;
    pthread_mutex_init(&ms->mu, NULL);
    pthread_cond_init(&ms->loaded, NULL);
    int r = 0;
    for (int i = 0; i < o->n_models && !r; i++) r = add_entry(ms, o->model_paths[i], o->model_aliases[i], e);
    if (!r && o->models_dir) {
        DIR *d = opendir(o->models_dir);
        if (!d) r = err_set(e, ERR_IO, "--models-dir '%s': %s", o->models_dir, strerror(errno));
        int first = ms->n;
        for (struct dirent *de; d && !r && (de = readdir(d));) {
            size_t k = strlen(de->d_name);
            if (k < 6 || strcmp(de->d_name + k - 5, ".gguf") || de->d_name[0] == '.') continue;
            char p[4096];
            snprintf(p, sizeof p, "%s/%s", o->models_dir, de->d_name);
            r = add_entry(ms, p, NULL, e);
        }
        if (d) closedir(d);
        if (!r) qsort(ms->v + first, (size_t)(ms->n - first), sizeof *ms->v, by_name);
        if (!r && ms->n == 0) r = err_set(e, ERR_NOTFOUND, "--models-dir '%s' holds no .gguf file", o->models_dir);
    }
    if (!r && ms->n == 0) r = add_entry(ms, SERVER_DEFAULT_MODEL, o->alias, e);
    ms->max_loaded = o->models_max > 0 ? o->models_max : SERVER_MODELS_MAX_DEFAULT;
    if (r) {
        models_free(ms);
        return r;
    }
    *out = ms;
    return 0;
}

int models_count(const models *ms) { return ms->n; }

/* ---- loading ---- */

static void entry_unload(models_entry *en) {
    if (en->en) engine_stop(en->en);
    if (en->enc) encoder_stop(en->enc);
    engine_free(en->en);
    encoder_free(en->enc);
    model_free(en->draft); /* after its engine */
    en->draft = NULL;
    if (en->rc) constrainer_free(en->rc->cons);
    free(en->rc);
    chat_tmpl_free(en->chat);
    free(en->tmpl_file);
    gvocab_free(en->gv);
    tok_free(en->tk);
    model_free(en->m);
    en->en = NULL, en->enc = NULL, en->rc = NULL, en->chat = NULL, en->tmpl_file = NULL, en->gv = NULL;
    en->tk = NULL, en->m = NULL;
}

/* Loads en without mu (en->loading keeps every other thread off its
 * fields): builds its routes_ctx in *out, which the caller publishes as
 * en->rc under mu. free_slots: the resident slots not taken when the load
 * began (the KV budget's share). 0, or <0 with e (the half-built parts
 * freed). */
static int entry_load(models *ms, models_entry *en, int free_slots, routes_ctx **out, err_t *e) {
    const server_opts *o = ms->o;
    const char *path = en->path;
    int64_t t0 = clock_ns();
    int rcode;
    *out = NULL;
    if (o->load_delay_ms > 0) { /* testing: a load slow enough to serve beside */
        struct timespec ts = {o->load_delay_ms / 1000, (long)(o->load_delay_ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    if ((rcode = model_load(path, &en->m, e)) < 0) {
        err_prefix(e, "cannot load model");
        goto fail;
    }
    {
        char note[512];
        if (model_mem_note(en->m, note, sizeof note)) log_warn("serve: %s: %s", en->name, note);
        else log_info("serve: %s: %s", en->name, note);
    }
    if ((rcode = tok_load(en->m->gguf, &en->tk, e)) < 0) {
        err_prefix(e, "cannot load the tokenizer");
        goto fail;
    }
    const char *tmpl_src = tok_chat_template(en->tk);
    if (o->chat_template_file) {
        size_t n;
        if ((rcode = file_read_all(o->chat_template_file, &en->tmpl_file, &n, e)) < 0) {
            err_prefix(e, "--chat-template-file");
            goto fail;
        }
        tmpl_src = en->tmpl_file;
    }
    if ((rcode = chat_tmpl_new(tmpl_src, (chat_tmpl **)&en->chat, e)) < 0) {
        err_prefix(e, "chat template");
        goto fail;
    }
    void *chat = en->chat;
    if (chat_tmpl_fallback_reason(chat) && o->chat_template_file) {
        /* a template the user chose must work: falling back would quietly
         * lose its tool calling (issue 24) */
        const char *why = chat_tmpl_fallback_reason(chat), *colon = strstr(why, ": ");
        int line = 0, col = 0, k = 0;
        if (colon && sscanf(colon + 2, "%d:%d: %n", &line, &col, &k) == 2 && k > 0)
            rcode = err_set(e, ERR_INVALID, "--chat-template-file %s does not parse: line %d, column %d: %s",
                            o->chat_template_file, line, col, colon + 2 + k);
        else if (!en->tmpl_file || !*en->tmpl_file)
            rcode = err_set(e, ERR_INVALID, "--chat-template-file %s is empty", o->chat_template_file);
        else
            rcode = err_set(e, ERR_INVALID, "--chat-template-file %s does not parse: %s", o->chat_template_file, why);
        goto fail;
    }
    if (chat_tmpl_fallback_reason(chat))
        log_warn("serve: %s: chat: the ChatML fallback (%s): prompts use <|im_start|> turns, not the model's own "
                 "format; tool calls use the generic JSON format explained in a system message; no reasoning split "
                 "(--chat-template-file F to give a template)",
                 en->name, chat_tmpl_fallback_reason(chat));
    tc_format tool_format = chat_tmpl_fallback_reason(chat) ? TC_GENERIC : tc_detect(tmpl_src);
    if (o->tool_format && strcmp(o->tool_format, "auto") != 0 && tc_format_from_name(o->tool_format, &tool_format, e) < 0) {
        err_prefix(e, "--tool-format");
        rcode = ERR_INVALID;
        goto fail;
    }
    bool reasoning = !chat_tmpl_fallback_reason(chat) && tmpl_src && strstr(tmpl_src, "<think>");
    log_info("serve: %s: tool calls in the %s format (%s)%s%s", en->name, tc_format_name(tool_format),
             o->tool_format && strcmp(o->tool_format, "auto") ? "--tool-format" : "from the chat template",
             reasoning ? "; reasoning split at <think>" : "",
             chat_tmpl_one_call(chat) ? "; one call per answer (the template refuses two in a message)" : "");
    int64_t t_gv = clock_ns();
    en->gv = constrain_vocab_new(en->tk);
    log_info("serve: grammar vocabulary of %d tokens in %.1f ms", tok_n_vocab(en->tk), (double)(clock_ns() - t_gv) / 1e6);
    /* the mapped file's metadata (the tokenizer's strings, the template) is
     * read at load: resident beside the tensors */
    en->mem_model_meta = gguf_file_size(en->m->gguf) - en->m->weight_bytes;
    en->mem_tables = tok_bytes(en->tk) + gvocab_bytes(en->gv) + en->mem_model_meta;
    engine_opts eo = engine_defaults();
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    eo.n_threads = o->n_threads > 0 ? o->n_threads : (int)(ncpu > 0 ? ncpu : 1);
    /* the KV budget (models.h): an explicit total split over the slots, or
     * one context out of what the free slots may take of the free memory */
    int slots = ms->n > 1 ? ms->max_loaded : 1;
    eo.kv_mem_bytes = o->kv_mem_bytes ? o->kv_mem_bytes / (size_t)slots
                                      : kv_auto_bytes(en->m, o, ms->n > 1 ? free_slots : 1);
    eo.block_tokens = o->block_tokens;
    eo.kv_type = o->kv_type;
    eo.max_batch_tokens = o->max_batch_tokens;
    eo.max_running = o->max_running;
    eo.max_queue = o->max_queue;
    eo.client_max_queued = o->client_max_queued >= 0 ? o->client_max_queued : o->max_queue - o->max_queue / 4;
    eo.client_max_running = o->client_max_running;
    eo.client_max_kv = o->client_max_kv;
    eo.client_max_parked = o->client_max_parked;
    eo.park_ms = (int)(o->park_timeout_s * 1000);
    eo.mask_budget_us = (int)MIN(o->mask_budget_ms * 1000, (double)INT32_MAX);
    eo.n_ctx = o->n_ctx;
    eo.is_eog = eog_cb;
    eo.eog_ctx = en->tk;
    eo.check = o->check;
    eo.kv_disk_dir = o->kv_disk_dir;
    if (o->kv_disk_dir && ms->n > 1) { /* prefixes never cross models: one directory each */
        snprintf(en->kv_dir, sizeof en->kv_dir, "%s/%s", o->kv_disk_dir, en->name);
        /* kvdisk_open creates it (and DIR: a mkdir of DIR/NAME alone failed
         * when DIR did not exist yet) */
        eo.kv_disk_dir = en->kv_dir;
    }
    eo.kv_policy = o->kv_policy;
    eo.kv_ttl_max_s = o->kv_ttl_max_s;
    eo.kv_disk_max_bytes = o->kv_disk_max_bytes / (size_t)slots;
    eo.step_delay_us = o->step_delay_us;
    eo.mask_spin_us = o->mask_spin_us;
    eo.mask_sync = o->mask_sync;
    eo.no_decode_share = o->no_fair_decode;
    eo.stall_timeout_ms = o->stall_timeout_s * 1000;
    eo.spec = o->spec;
    eo.spec_max = o->spec_max;
    eo.spec_token_cost = o->spec_token_cost;
    if (o->draft_model && !en->m->cfg.encoder) {
        if ((rcode = server_load_draft(o->draft_model, en->tk, path, &en->draft, e)) < 0) goto fail;
        eo.draft_model = en->draft;
        log_info("serve: %s: draft model %s (%.1f MB of weights, %.1f%% of the model's bytes per token)", en->name,
                 o->draft_model, (double)en->draft->weight_bytes / 1e6,
                 100.0 * (double)model_token_bytes(en->draft) / (double)MAX(model_token_bytes(en->m), 1));
    }
    eo.gvocab = en->gv;
    eo.tokenize = tokenize_cb;
    eo.piece = piece_cb;
    eo.tok_ctx = en->tk;
    if (en->m->cfg.encoder) { /* bert: no KV cache, no generation (sched/encoder.h) */
        if ((rcode = encoder_new(en->m, eo.n_threads, eo.max_batch_tokens, eo.max_queue, &en->enc, e)) < 0) goto fail;
    } else if ((rcode = engine_new(en->m, &eo, &en->en, e)) < 0) {
        goto fail;
    }
    routes_ctx *rc = *out = xmalloc(sizeof *rc);
    memcpy(rc, ms->shared, sizeof *rc);
    rc->m = en->m;
    rc->model_path = en->path;
    rc->tok = en->tk;
    rc->chat = chat;
    rc->tool_format = tool_format;
    rc->reasoning = reasoning;
    rc->template_calls = !chat_tmpl_fallback_reason(chat) && tmpl_src && strstr(tmpl_src, "tool_calls");
    rc->one_call = chat_tmpl_one_call(chat);
    rc->cons = constrainer_new(32, ms->shared->o->grammar_cache_bytes);
    rc->max_piece_bytes = 0;
    for (int32_t id = 0; id < tok_n_vocab(en->tk); id++) {
        char piece[8];
        rc->max_piece_bytes = MAX(rc->max_piece_bytes, tok_piece(en->tk, id, piece, (int)sizeof piece));
    }
    rc->en = en->en;
    rc->enc = en->enc;
    rc->entry = ms->n > 1 ? en : NULL;
    /* request ids stay unique across models: each its own range */
    for (int i = 0; i < ms->n; i++)
        if (ms->v[i] == en) atomic_init(&rc->next_id, ((unsigned long long)i << 40) + 1);
    snprintf(rc->model_id, sizeof rc->model_id, "%s", en->name);
    en->load_ms = (clock_ns() - t0) / 1000000;
    if (en->en)
        log_info("serve: model %s (%s), KV pool %.0f MiB (%s, %.1f KiB per token) holds %d tokens (%.1f full contexts "
                 "of %d), %d threads, loaded in %lld ms",
                 en->name, path, (double)eo.kv_mem_bytes / (1 << 20), model_kv_type_name(o->kv_type),
                 (double)model_kv_block_bytes_type(en->m, o->block_tokens, o->kv_type) / o->block_tokens / 1024,
                 engine_capacity_tokens(en->en),
                 (double)engine_capacity_tokens(en->en) / engine_n_ctx(en->en), engine_n_ctx(en->en), eo.n_threads,
                 (long long)en->load_ms);
    else
        log_info("serve: model %s (%s), an encoder (embeddings only, %s pooling), ctx %d, %d threads, loaded in %lld ms",
                 en->name, path,
                 en->m->cfg.pooling == MODEL_POOL_CLS ? "cls" : en->m->cfg.pooling == MODEL_POOL_LAST ? "last" : "mean",
                 en->m->cfg.n_ctx_train, eo.n_threads, (long long)en->load_ms);
    return 0;
fail:
    free(*out);
    *out = NULL;
    entry_unload(en);
    return rcode < 0 ? rcode : ERR_INVALID;
}

/* The entry named `name` (exact, or with Ollama's ":latest"), or NULL. */
static models_entry *find(models *ms, const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < ms->n; i++) {
        size_t k = strlen(ms->v[i]->name);
        if (!strcmp(ms->v[i]->name, name) || (!strncmp(ms->v[i]->name, name, k) && !strcmp(name + k, ":latest")))
            return ms->v[i];
    }
    return NULL;
}

static void entry_drop(models *ms, models_entry *en, const char *why) {
    log_info("serve: unloading model %s (%s)", en->name, why);
    entry_unload(en);
    ms->n_loaded--;
}

/* mu held: makes en loaded (unloading the LRU idle one when full). The
 * load itself runs with mu released, so requests to the other models go on
 * meanwhile; a second request for a model being loaded waits for that load
 * instead of starting another. */
static int ensure_loaded(models *ms, models_entry *en, int *status, char *msg, size_t cap) {
    while (en->loading) pthread_cond_wait(&ms->loaded, &ms->mu);
    if (en->rc) return 0;
    if (ms->stopped) {
        *status = 503;
        snprintf(msg, cap, "the server is shutting down");
        return -1;
    }
    if (ms->n_loaded >= ms->max_loaded) {
        models_entry *lru = NULL;
        for (int i = 0; i < ms->n; i++) {
            models_entry *c = ms->v[i];
            if (c->rc && c->refs == 0 && (!lru || c->last_used_ns < lru->last_used_ns)) lru = c;
        }
        if (!lru) {
            *status = 503;
            snprintf(msg, cap, "cannot load '%s': all %d resident models (--models-max) are serving requests",
                     en->name, ms->max_loaded);
            return -1;
        }
        entry_drop(ms, lru, "least recently used, --models-max reached");
    }
    err_t e = {0};
    routes_ctx *rc = NULL;
    int free_slots = ms->max_loaded - ms->n_loaded;
    en->loading = true;
    ms->n_loaded++; /* the slot is taken from now on */
    pthread_mutex_unlock(&ms->mu);
    int r = entry_load(ms, en, free_slots, &rc, &e);
    pthread_mutex_lock(&ms->mu);
    en->loading = false;
    en->rc = rc;
    if (r < 0) ms->n_loaded--;
    pthread_cond_broadcast(&ms->loaded);
    if (r < 0) {
        log_error("serve: model %s (%s): %s", en->name, en->path, e.msg);
        *status = 503;
        snprintf(msg, cap, "cannot load the model '%s': %s", en->name, e.msg);
        return -1;
    }
    return 0;
}

/* mu held: the most recently used loaded model, or NULL. */
static models_entry *mru_loaded(models *ms) {
    models_entry *en = NULL;
    for (int i = 0; i < ms->n; i++)
        if (ms->v[i]->rc && (!en || ms->v[i]->last_used_ns > en->last_used_ns)) en = ms->v[i];
    return en;
}

routes_ctx *models_acquire(models *ms, const char *name, int *status, char *msg, size_t cap) {
    pthread_mutex_lock(&ms->mu);
    models_entry *en = ms->n == 1 ? ms->v[0] : name ? find(ms, name) : NULL;
    if (!en && !name) { /* no name: the most recently used loaded model, else the first */
        en = mru_loaded(ms);
        if (!en) en = ms->v[0];
    }
    routes_ctx *rc = NULL;
    if (!en) {
        *status = 404;
        snprintf(msg, cap, "the model '%.200s' does not exist (GET /v1/models lists the %d served here)", name, ms->n);
    } else if (ensure_loaded(ms, en, status, msg, cap) == 0) {
        en->refs++;
        en->last_used_ns = clock_ns();
        rc = en->rc;
    }
    pthread_mutex_unlock(&ms->mu);
    return rc;
}

void models_retain(routes_ctx *rc) {
    models_entry *en = rc ? rc->entry : NULL;
    if (!en) return;
    pthread_mutex_lock(&en->ms->mu);
    en->refs++;
    pthread_mutex_unlock(&en->ms->mu);
}

void models_release(routes_ctx *rc) {
    models_entry *en = rc ? rc->entry : NULL;
    if (!en) return;
    models *ms = en->ms;
    pthread_mutex_lock(&ms->mu);
    ASSERT(en->refs > 0);
    en->refs--;
    en->last_used_ns = clock_ns();
    pthread_mutex_unlock(&ms->mu);
}

int models_load(models *ms, const char *name, int *status, char *msg, size_t cap) {
    pthread_mutex_lock(&ms->mu);
    models_entry *en = find(ms, name);
    int r = -1;
    if (!en) {
        *status = 404;
        snprintf(msg, cap, "the model '%.200s' does not exist", name ? name : "");
    } else {
        r = ensure_loaded(ms, en, status, msg, cap);
        if (!r) en->last_used_ns = clock_ns();
    }
    pthread_mutex_unlock(&ms->mu);
    return r;
}

int models_unload(models *ms, const char *name, int *status, char *msg, size_t cap) {
    pthread_mutex_lock(&ms->mu);
    models_entry *en = find(ms, name);
    int r = -1;
    if (!en) {
        *status = 404;
        snprintf(msg, cap, "the model '%.200s' does not exist", name ? name : "");
    } else if (ms->n == 1) {
        *status = 400;
        snprintf(msg, cap, "the only model served cannot be unloaded");
    } else if (en->loading) {
        *status = 409;
        snprintf(msg, cap, "the model '%s' is being loaded", en->name);
    } else if (en->refs > 0) {
        *status = 409;
        snprintf(msg, cap, "the model '%s' is serving %d request%s", en->name, en->refs, en->refs == 1 ? "" : "s");
    } else {
        if (en->rc) entry_drop(ms, en, "POST /models/unload");
        r = 0;
    }
    pthread_mutex_unlock(&ms->mu);
    return r;
}

void models_tick(models *ms) {
    if (ms->o->models_idle_s <= 0 || ms->n == 1) return;
    int64_t now = clock_ns(), idle = (int64_t)ms->o->models_idle_s * 1000000000LL;
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; i < ms->n; i++) {
        models_entry *en = ms->v[i];
        if (en->rc && en->refs == 0 && now - en->last_used_ns > idle) entry_drop(ms, en, "idle for --models-idle");
    }
    pthread_mutex_unlock(&ms->mu);
}

int models_stats(models *ms, const char *name, engine_stats *st, const char **names, int cap) {
    pthread_mutex_lock(&ms->mu);
    models_entry *only = name ? find(ms, name) : NULL;
    int n = name && !only ? -1 : 0;
    for (int i = 0; i < ms->n && n >= 0 && n < cap; i++) {
        models_entry *en = ms->v[i];
        if (!en->rc || (only && en != only)) continue;
        memset(&st[n], 0, sizeof st[n]);
        if (en->en) engine_get_stats(en->en, &st[n]); /* an encoder has no KV pool */
        st[n].mem_grammar_idle = constrainer_idle_bytes(en->rc->cons);
        st[n].mem_tables = en->mem_tables;
        st[n].mem_model_meta = en->mem_model_meta;
        names[n++] = en->name;
    }
    pthread_mutex_unlock(&ms->mu);
    return n;
}

/* ---- listings ---- */

static void iso_time(time_t t, char *buf, size_t cap) {
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(buf, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

json_t *models_list_json(models *ms, int style) {
    json_t *data = json_array();
    pthread_mutex_lock(&ms->mu);
    for (int i = 0; i < ms->n; i++) {
        models_entry *en = ms->v[i];
        struct stat sb;
        bool have = stat(en->path, &sb) == 0;
        const model *m = en->rc ? en->m : NULL; /* a load in progress owns en->m */
        json_t *o;
        if (style == MODELS_OLLAMA_PS && !en->rc) continue;
        if (style == MODELS_OPENAI) {
            o = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", en->name, "object", "model", "created",
                          (json_int_t)ms->shared->created, "owned_by", "kvloom", "status",
                          en->rc ? "loaded" : en->loading ? "loading" : "unloaded");
            if (en->rc)
                json_object_set_new(o, "meta",
                                    json_pack("{s:i, s:i, s:I}", "n_vocab", en->m->cfg.n_vocab, "n_ctx",
                                              en->en ? engine_n_ctx(en->en) : en->m->cfg.n_ctx_train, "weight_bytes",
                                              (json_int_t)en->m->weight_bytes));
        } else {
            char mt[40];
            iso_time(have ? sb.st_mtime : time(NULL), mt, sizeof mt);
            char tag[300];
            snprintf(tag, sizeof tag, "%s:latest", en->name);
            o = json_pack("{s:s, s:s, s:I, s:s, s:{s:s, s:s}}", "name", tag, "model", tag, "size",
                          (json_int_t)(have ? sb.st_size : 0), "digest", "", "details", "format", "gguf", "family",
                          m ? m->cfg.arch_name : "");
            if (style == MODELS_OLLAMA_TAGS) {
                json_object_set_new(o, "modified_at", json_string(mt));
            } else {
                /* expires_at: when --models-idle unloads it (far future without) */
                time_t exp = ms->o->models_idle_s > 0 && ms->n > 1
                                 ? time(NULL) + ms->o->models_idle_s - (clock_ns() - en->last_used_ns) / 1000000000LL
                                 : time(NULL) + 10 * 365 * 86400L;
                iso_time(exp, mt, sizeof mt);
                json_object_set_new(o, "expires_at", json_string(mt));
                json_object_set_new(o, "size_vram", json_integer(0));
            }
        }
        json_array_append_new(data, o);
    }
    pthread_mutex_unlock(&ms->mu);
    if (style == MODELS_OPENAI) return json_pack("{s:s, s:o}", "object", "list", "data", data);
    return json_pack("{s:o}", "models", data);
}

void models_stop(models *ms) {
    pthread_mutex_lock(&ms->mu);
    ms->stopped = true; /* no load starts from now on */
    while (true) { /* nor is one under way */
        bool loading = false;
        for (int i = 0; i < ms->n; i++) loading |= ms->v[i]->loading;
        if (!loading) break;
        pthread_cond_wait(&ms->loaded, &ms->mu);
    }
    for (int i = 0; i < ms->n; i++) {
        if (ms->v[i]->en) engine_stop(ms->v[i]->en);
        if (ms->v[i]->enc) encoder_stop(ms->v[i]->enc);
    }
    pthread_mutex_unlock(&ms->mu);
}

void models_free(models *ms) {
    if (!ms) return;
    for (int i = 0; i < ms->n; i++) {
        entry_unload(ms->v[i]);
        free(ms->v[i]->path);
        free(ms->v[i]);
    }
    pthread_mutex_destroy(&ms->mu);
    pthread_cond_destroy(&ms->loaded);
    free(ms);
}

int server_load_draft(const char *path, const tokenizer *tk, const char *model_name, model **out, err_t *e) {
    *out = NULL;
    model *dm = NULL;
    tokenizer *dtk = NULL;
    int rc = model_load(path, &dm, e);
    if (rc < 0) {
        err_prefix(e, "--draft-model");
        return rc;
    }
    if (dm->cfg.encoder) {
        rc = err_set(e, ERR_INVALID, "--draft-model %s is an encoder (%s): it cannot draft", path, dm->cfg.arch_name);
    } else if ((rc = tok_load(dm->gguf, &dtk, e)) < 0) {
        err_prefix(e, "--draft-model %s: its tokenizer", path);
    } else if ((rc = tok_same_vocab(tk, model_name, dtk, path, e)) < 0) {
        err_prefix(e, "--draft-model: the vocabularies differ");
    }
    tok_free(dtk);
    if (rc < 0) {
        model_free(dm);
        return rc;
    }
    *out = dm;
    return 0;
}
