/*
 * encoder.h — the encoder thread: batches embedding requests for an
 * encoder-only model (bert; model_encode), the counterpart of engine.h for
 * models that hold no KV cache and generate nothing.
 *
 * Place in the flow: sched/. HTTP threads submit reqs whose `embd` is set
 * (req.h); the thread takes every waiting request that fits in one batch
 * (max_batch_tokens, whole sequences), runs one model_encode over them and
 * finishes each with its pooled vector written (REQ_FINISH_STOP), or
 * REQ_FINISH_CANCEL / REQ_FINISH_ERROR.
 *
 * Thread safety: encoder_submit from any thread; the rest from the owner.
 */
#ifndef KVLOOM_ENCODER_H
#define KVLOOM_ENCODER_H

#include "../base/base.h"
#include "../model/model.h"
#include "req.h"

typedef struct encoder encoder;

/* Starts the thread. max_batch_tokens is raised to the model's context
 * (a sequence is never split). `m` must outlive the encoder. */
int encoder_new(const model *m, int n_threads, int max_batch_tokens, int max_queue, encoder **out, err_t *e);
/* Queues r (takes a reference): r->embd set, 1 <= n_prompt <= the model's
 * context. ERR_RANGE when max_queue requests wait (429) or after
 * encoder_stop; ERR_INVALID (named) for a request that can never run. */
int encoder_submit(encoder *en, req *r, err_t *e);
/* Stops the thread; requests still queued finish as cancelled. */
void encoder_stop(encoder *en);
void encoder_free(encoder *en); /* NULL is a no-op; stops first */
/* Requests waiting or running now. */
int encoder_n_pending(encoder *en);

#endif
