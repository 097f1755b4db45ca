/*
 * req.c — the request object shared by an HTTP thread and the engine thread:
 * input fields written once before submission, a growing token log and a
 * finish record guarded by a mutex, and two control flags (cancel, stop).
 *
 * Invariants: tokens only grow; finish changes from REQ_RUNNING once; the
 * reference count reaches 0 exactly once and then everything is freed.
 */
#include "req.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched_internal.h"

typedef struct req_sync {
    pthread_mutex_t mu;
    pthread_cond_t cv;
} req_sync;

req *req_new(int32_t *prompt, int n_prompt) {
    req *r = xcalloc(1, sizeof *r);
    r->prompt = prompt;
    r->n_prompt = n_prompt;
    r->sp = sampler_defaults();
    r->max_tokens = INT32_MAX;
    r->n_logprobs = -1;
    r->kv_ttl_s = -1;
    r->kv_next_use_s = -1;
    atomic_init(&r->cancel, false);
    atomic_init(&r->stop, false);
    atomic_init(&r->refs, 1);
    atomic_init(&r->n_read, 0);
    req_sync *s = xcalloc(1, sizeof *s);
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->sync = s;
    return r;
}

void req_ref(req *r) { atomic_fetch_add(&r->refs, 1); }

void req_unref(req *r) {
    if (!r) return;
    if (atomic_fetch_sub(&r->refs, 1) != 1) return;
    req_sync *s = r->sync;
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
    free(r->prompt);
    free(r->tokens);
    grammar_unref(r->grammar);
    free(r->grammar_trigger);
    free(r->bias_ids);
    free(r->bias_vals);
    free(r->embd);
    free(r);
}

void req_cancel(req *r) { atomic_store(&r->cancel, true); }
void req_stop(req *r) { atomic_store(&r->stop, true); }

void sched__req_post_token(req *r, const req_token *t) {
    req_sync *s = r->sync;
    pthread_mutex_lock(&s->mu);
    if (r->finish == REQ_RUNNING) {
        if (r->n_tokens == r->cap_tokens) {
            /* the output grows with the request: out of memory fails it
             * (the engine drops it at its next step), not the process */
            int cap = r->cap_tokens ? r->cap_tokens * 2 : 16;
            req_token *v = realloc(r->tokens, (size_t)cap * sizeof *v);
            if (!v) {
                r->finish = REQ_FINISH_ERROR;
                snprintf(r->error, sizeof r->error, "out of memory for the request's output (%d tokens)", r->n_tokens);
                atomic_store(&r->cancel, true);
                goto out;
            }
            r->tokens = v;
            r->cap_tokens = cap;
        }
        r->tokens[r->n_tokens++] = *t;
        if (!r->t_first_ns) r->t_first_ns = clock_ns();
    }
out:
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched__req_post_finish(req *r, req_finish why, const char *error) {
    req_sync *s = r->sync;
    pthread_mutex_lock(&s->mu);
    if (r->finish == REQ_RUNNING) {
        r->finish = why;
        if (error) snprintf(r->error, sizeof r->error, "%s", error);
    }
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched__req_set_cached(req *r, int n_cached) {
    req_sync *s = r->sync;
    pthread_mutex_lock(&s->mu);
    r->n_cached = n_cached;
    pthread_mutex_unlock(&s->mu);
}

int req_wait(req *r, int n_seen, int timeout_ms, req_finish *finish) {
    req_sync *s = r->sync;
    atomic_store(&r->n_read, n_seen);
    struct timespec dl;
    if (timeout_ms >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &dl);
        dl.tv_sec += timeout_ms / 1000;
        dl.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (dl.tv_nsec >= 1000000000L) {
            dl.tv_sec++;
            dl.tv_nsec -= 1000000000L;
        }
    }
    pthread_mutex_lock(&s->mu);
    while (r->n_tokens <= n_seen && r->finish == REQ_RUNNING) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&s->cv, &s->mu);
        } else if (pthread_cond_timedwait(&s->cv, &s->mu, &dl) != 0) {
            break; /* timed out */
        }
    }
    int n = r->n_tokens;
    if (finish) *finish = r->finish;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void req_copy_tokens(req *r, int from, int n, req_token *out) {
    req_sync *s = r->sync;
    pthread_mutex_lock(&s->mu);
    ASSERT(from >= 0 && n >= 0 && from + n <= r->n_tokens);
    if (n) memcpy(out, r->tokens + from, (size_t)n * sizeof *out);
    pthread_mutex_unlock(&s->mu);
}

req_finish req_get_finish(req *r, int *n_cached, char *error, size_t error_size) {
    req_sync *s = r->sync;
    pthread_mutex_lock(&s->mu);
    req_finish f = r->finish;
    if (n_cached) *n_cached = r->n_cached;
    if (error && error_size) snprintf(error, error_size, "%s", r->error);
    pthread_mutex_unlock(&s->mu);
    return f;
}
