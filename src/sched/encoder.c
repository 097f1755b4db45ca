/*
 * encoder.c — the encoder thread (encoder.h).
 *
 * One loop: wait for requests, take the oldest ones that fit in the token
 * budget together, drop the cancelled, run model_encode once, post.
 * Sequences are independent in model_encode (batch invariant), so batching
 * changes the speed only, never a vector.
 */
#include "encoder.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "sched_internal.h"

struct encoder {
    const model *m;
    int max_tokens, max_queue;
    model_enc_state *st;
    pthread_t thread;
    pthread_mutex_t mu; /* guards q, n_q, stop, n_busy */
    pthread_cond_t cv;
    req **q;            /* (max_queue) FIFO */
    int n_q, n_busy;
    bool stop, started;
    /* batch scratch (engine thread) */
    req **batch;
    int32_t *tokens;
    int *lens;
    float *out;
};

static void *encoder_thread(void *arg) {
    encoder *en = arg;
    const int D = en->m->cfg.n_embd;
    for (;;) {
        pthread_mutex_lock(&en->mu);
        while (!en->stop && en->n_q == 0) pthread_cond_wait(&en->cv, &en->mu);
        if (en->stop) {
            pthread_mutex_unlock(&en->mu);
            break;
        }
        int n = 0, n_tok = 0;
        while (n < en->n_q && n_tok + en->q[n]->n_prompt <= en->max_tokens) n_tok += en->q[n++]->n_prompt;
        memcpy(en->batch, en->q, (size_t)n * sizeof *en->q);
        memmove(en->q, en->q + n, (size_t)(en->n_q - n) * sizeof *en->q);
        en->n_q -= n;
        en->n_busy = n;
        pthread_mutex_unlock(&en->mu);

        int k = 0, t = 0;
        for (int i = 0; i < n; i++) {
            req *r = en->batch[i];
            if (atomic_load(&r->cancel)) {
                sched__req_post_finish(r, REQ_FINISH_CANCEL, NULL);
                req_unref(r);
                continue;
            }
            memcpy(en->tokens + t, r->prompt, (size_t)r->n_prompt * sizeof(int32_t));
            t += r->n_prompt;
            en->lens[k] = r->n_prompt;
            en->batch[k++] = r;
        }
        err_t e = {0};
        int rc = k ? model_encode(en->m, en->st, en->tokens, en->lens, k, en->out, &e) : 0;
        for (int i = 0; i < k; i++) {
            req *r = en->batch[i];
            if (rc == 0) {
                memcpy(r->embd, en->out + (size_t)i * D, (size_t)D * sizeof(float));
                r->n_forward_steps = 1;
                sched__req_post_finish(r, REQ_FINISH_STOP, NULL);
            } else {
                sched__req_post_finish(r, REQ_FINISH_ERROR, e.msg);
            }
            req_unref(r);
        }
        pthread_mutex_lock(&en->mu);
        en->n_busy = 0;
        pthread_mutex_unlock(&en->mu);
    }
    return NULL;
}

int encoder_new(const model *m, int n_threads, int max_batch_tokens, int max_queue, encoder **out, err_t *e) {
    *out = NULL;
    if (!m->cfg.encoder) return err_set(e, ERR_INVALID, "encoder: '%s' is not an encoder model", m->cfg.arch_name);
    if (n_threads < 1 || max_queue < 1) return err_set(e, ERR_INVALID, "encoder: threads and queue must be >= 1");
    encoder *en = xcalloc(1, sizeof *en);
    en->m = m;
    en->max_tokens = MAX(max_batch_tokens, m->cfg.n_ctx_train);
    en->max_queue = max_queue;
    en->st = model_enc_state_new(m, en->max_tokens, n_threads);
    en->q = xmalloc((size_t)max_queue * sizeof *en->q);
    en->batch = xmalloc((size_t)max_queue * sizeof *en->batch);
    en->tokens = xmalloc((size_t)en->max_tokens * sizeof(int32_t));
    en->lens = xmalloc((size_t)max_queue * sizeof(int));
    en->out = xmalloc((size_t)max_queue * (size_t)m->cfg.n_embd * sizeof(float));
    pthread_mutex_init(&en->mu, NULL);
    pthread_cond_init(&en->cv, NULL);
    if (pthread_create(&en->thread, NULL, encoder_thread, en) != 0) {
        encoder_free(en);
        return err_set(e, ERR_IO, "encoder: cannot start its thread");
    }
    en->started = true;
    *out = en;
    return 0;
}

int encoder_submit(encoder *en, req *r, err_t *e) {
    ASSERT(r->embd);
    if (r->n_prompt < 1 || r->n_prompt > en->m->cfg.n_ctx_train)
        return err_set(e, ERR_INVALID, "the input has %d tokens; the model takes 1 to %d", r->n_prompt,
                       en->m->cfg.n_ctx_train);
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= en->m->cfg.n_vocab)
            return err_set(e, ERR_INVALID, "token id %d at %d is out of range [0, %d)", r->prompt[i], i,
                           en->m->cfg.n_vocab);
    pthread_mutex_lock(&en->mu);
    int rc = 0;
    if (en->stop) rc = err_set(e, ERR_RANGE, "the server is shutting down");
    else if (en->n_q >= en->max_queue) rc = err_set(e, ERR_RANGE, "too many requests are waiting (%d)", en->n_q);
    else {
        req_ref(r);
        r->t_submit_ns = clock_ns();
        en->q[en->n_q++] = r;
        pthread_cond_signal(&en->cv);
    }
    pthread_mutex_unlock(&en->mu);
    return rc;
}

int encoder_n_pending(encoder *en) {
    pthread_mutex_lock(&en->mu);
    int n = en->n_q + en->n_busy;
    pthread_mutex_unlock(&en->mu);
    return n;
}

void encoder_stop(encoder *en) {
    pthread_mutex_lock(&en->mu);
    bool was = en->stop;
    en->stop = true;
    pthread_cond_broadcast(&en->cv);
    pthread_mutex_unlock(&en->mu);
    if (!was && en->started) pthread_join(en->thread, NULL);
    pthread_mutex_lock(&en->mu);
    for (int i = 0; i < en->n_q; i++) {
        sched__req_post_finish(en->q[i], REQ_FINISH_CANCEL, NULL);
        req_unref(en->q[i]);
    }
    en->n_q = 0;
    pthread_mutex_unlock(&en->mu);
}

void encoder_free(encoder *en) {
    if (!en) return;
    encoder_stop(en);
    model_enc_state_free(en->st);
    pthread_mutex_destroy(&en->mu);
    pthread_cond_destroy(&en->cv);
    free(en->q);
    free(en->batch);
    free(en->tokens);
    free(en->lens);
    free(en->out);
    free(en);
}
