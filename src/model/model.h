/*
 * model.h — a loaded GGUF model and its forward pass over a ragged batch.
 *
 * Place in the flow: model/ is called by kv/ and sched/ (and the CLI), and
 * calls kern/. It knows nothing of requests, trees or HTTP.
 *
 * Weights are views into the read-only mapping of the GGUF file (kern_mat);
 * only the small norm vectors are converted to f32 at load.
 *
 * KV cache layout (paged). The caller owns the storage and decides which
 * block holds which tokens; the model only reads and writes through block
 * tables:
 *
 *   v : (n_blocks, n_layer, block_tokens, n_head_kv * head_dim) f16
 *   k : (n_blocks, n_layer, n_head_kv * head_dim, block_tokens) f16
 *
 * (K transposed within each block-layer slab, so a block's keys are
 * contiguous per dimension: see kern/attn.h),
 * stored as IEEE half (uint16_t): forward rounds each K row (after bias,
 * k-norm and RoPE) and each V row to nearest-even with f32_to_fp16 when it
 * writes them, and attention widens them exactly to f32. Half the bytes of
 * f32 per position, which is what decode attention at depth streams.
 *
 *   sequence s, position p  ->  block  seqs[s].block_table[p / block_tokens]
 *                               row    p % block_tokens
 *
 * A ragged batch holds tokens of several sequences at once. Token i belongs to
 * sequence seq[i] at position pos[i]; forward writes its K/V into that slot
 * and attends over positions 0..pos[i] of the same sequence (causal). All K/V
 * rows of a layer are written before that layer's attention runs, so several
 * consecutive tokens of one sequence (a prefill chunk) may be in one batch.
 * Positions < pos[i] that are not in the batch must already be in the cache.
 * The caller guarantees that no two batch tokens write the same slot and that
 * no batch token writes a block shared with another sequence.
 *
 * Thread: one engine thread calls model_forward; it uses the pool inside.
 */
#ifndef KVLOOM_MODEL_H
#define KVLOOM_MODEL_H

#include "../base/base.h"
#include "../base/pool.h"
#include "../kern/kern.h"
#include "gguf.h"
#include "moe.h"

typedef enum model_arch { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3, ARCH_BERT, ARCH_QWEN3MOE, ARCH_GPTOSS, ARCH_COUNT } model_arch;
/* How an embedding is pooled from the last hidden states ({arch}.pooling_type,
 * the GGUF converter's numbering). */
typedef enum model_pooling {
    MODEL_POOL_NONE = 0, /* not an embedding model (no pooling_type)          */
    MODEL_POOL_MEAN = 1, /* mean over the sequence's tokens                   */
    MODEL_POOL_CLS = 2,  /* the first token ([CLS])                            */
    MODEL_POOL_LAST = 3, /* the last token (decoder embedders, Qwen3-Embedding) */
} model_pooling;
typedef enum rope_kind { ROPE_NORM = 0, ROPE_NEOX = 1 } rope_kind;

typedef struct model_config {
    model_arch arch;
    char arch_name[32];   /* general.architecture                              */
    int n_vocab;          /* rows of token_embd                                */
    int n_embd;           /* model width                                       */
    int n_layer;
    int n_head;           /* query heads                                       */
    int n_head_kv;        /* key/value heads (GQA: n_head % n_head_kv == 0)    */
    int head_dim;         /* per head (n_embd / n_head unless key_length set)  */
    int n_ff;             /* feed-forward width (dense layers)                 */
    int n_expert;         /* experts per MoE layer; 0: dense FFN               */
    int n_expert_used;    /* experts selected per token                        */
    int n_ff_exp;         /* feed-forward width of one expert                  */
    bool expert_norm;     /* renormalise the selected experts' weights         */
    int n_ctx_train;      /* context length the model was trained for          */
    float rms_eps;
    float rope_theta;     /* rope.freq_base                                    */
    int n_rot;            /* rotated dims per head (rope.dimension_count)      */
    rope_kind rope;       /* NORM: pairs (2i, 2i+1); NEOX: pairs (i, i+d/2)     */
    float rope_scale;     /* linear scaling: positions are divided by this     */
    bool has_rope_freqs;  /* rope_freqs.weight present (llama3 scaling)        */
    /* YaRN (rope.scaling.type "yarn", gpt-oss): pair i's angle is
     * pos * inv_i * ((1 - r_i) / factor + r_i), r_i = 1 - clamp((i - lo) /
     * (hi - lo)) with lo = d(beta_fast), hi = d(beta_slow) (rounded down and
     * up when yarn_truncate), d(b) = n_rot * ln(orig_ctx / (2 pi b)) /
     * (2 ln freq_base); cos and sin are scaled by attn_factor * (1 + 0.1 ln
     * factor). gpt-oss does not round (OpenAI's reference implementation;
     * Hugging Face's config says truncate: false; lo 8.09, hi 17.40), other
     * yarn models do (Hugging Face's default); no GGUF key says which. */
    bool rope_yarn;
    bool yarn_truncate;
    float yarn_factor;    /* rope.scaling.factor                               */
    int yarn_orig_ctx;    /* rope.scaling.original_context_length              */
    float yarn_beta_fast, yarn_beta_slow, yarn_attn_factor;
    /* gpt-oss attention */
    int n_swa;            /* attention.sliding_window: tokens a windowed layer
                             sees (its own and the n_swa - 1 before); 0: none */
    int swa_period;       /* layer l is windowed when l % period < period - 1
                             (attention.sliding_window_pattern, default 2:
                             even layers windowed, odd layers full)            */
    bool has_sinks;       /* blk.N.attn_sinks.weight: a logit per query head
                             that joins the softmax denominator               */
    bool has_qkv_bias;    /* qwen2                                             */
    bool has_qk_norm;     /* qwen3                                             */
    bool tied_output;     /* output.weight absent: reuse token_embd            */
    /* embeddings */
    bool encoder;         /* bert: bidirectional, no KV cache; runs through
                             model_encode only (model_forward refuses it)     */
    model_pooling pooling; /* {arch}.pooling_type; NONE when absent (bert:
                             MEAN when absent, the sentence-transformers default) */
    float norm_eps;       /* bert: attention.layer_norm_epsilon (LayerNorm)    */
    int n_token_types;    /* bert: rows of token_types (tokenizer.ggml.token_type_count) */
} model_config;

typedef struct model_layer {
    const float *attn_norm;        /* (n_embd)                          */
    kern_mat wq, wk, wv, wo;       /* (n_head*hd, n_embd) ...           */
    const float *bq, *bk, *bv;     /* qwen2, gpt-oss biases or NULL     */
    const float *bo;               /* gpt-oss attn_output bias or NULL  */
    const float *sinks;            /* gpt-oss (n_head) or NULL          */
    int window;                    /* n_swa on windowed layers, else 0  */
    const float *q_norm, *k_norm;  /* qwen3 (head_dim) or NULL          */
    const float *ffn_norm;         /* (n_embd); gpt-oss: post_attention_norm */
    kern_mat w_gate, w_up, w_down; /* (n_ff, n_embd), (n_embd, n_ff)    */
    moe_ffn moe;                   /* used instead when cfg.n_expert > 0 */
} model_layer;

typedef struct model {
    model_config cfg;
    gguf_ctx *gguf;       /* owned; weights point into its mapping     */
    kern_mat tok_embd;    /* (n_vocab rows of n_embd)                  */
    const float *out_norm;
    kern_mat output;      /* == tok_embd when tied                     */
    const float *rope_freqs; /* (n_rot/2) divisors, or NULL           */
    model_layer *layers;  /* (n_layer)                                 */
    float *f32_owned;     /* norms/biases converted at load (owned)    */
    size_t weight_bytes;  /* total bytes of all tensors                */
    struct model_bert *bert; /* encoder weights (bert.c), NULL for decoders */
} model;

/* Loads a model: maps the file, validates every tensor's presence, type and
 * shape. Errors name the key or tensor (ERR_UNSUPPORTED for an unknown
 * architecture or weight type). */
int model_load(const char *path, model **out, err_t *e);
/* Same from an already-open gguf (takes ownership of g on success). */
int model_load_gguf(gguf_ctx *g, model **out, err_t *e);
void model_free(model *m);

/* Bytes of weights one decoded token reads (batch 1): every matrix once — of
 * a MoE layer the router and n_used experts only —, the output matrix and
 * one embedding row. The KV cache is not counted. */
size_t model_token_bytes(const model *m);

/* Memory the weights need against what the machine has, for the start-up
 * log: fills buf with one sentence ("weights 16.9 GB memory-mapped, 11.2 GB
 * of 23.5 GB RAM available: ...") and returns true when the weights do not
 * fit in the available memory (the model still runs: pages are read from
 * the file as the forward pass touches them, and decode slows to the disk's
 * speed for what is not cached). */
bool model_mem_note(const model *m, char *buf, size_t n);
/* Bytes the system can still give (MemAvailable; free pages elsewhere; 0
 * unknown); $KVLOOM_MEM_AVAILABLE overrides it (tests). */
size_t model_mem_available(void);

/* ---- paged KV storage ---- */
/* The KV cache's element type. f16: IEEE half values (attn.h's layout).
 * q8_0: int8 values with one f16 scale d per group of G elements along the
 * head dimension (G = 32 when head_dim is a multiple of 32, else head_dim),
 * x ~ d * q, d = max|x| / 127, q = round(x / d): the q8_0 rule of the
 * weights applied to each key and value row; about half the bytes. */
typedef enum { MODEL_KV_F16 = 0, MODEL_KV_Q8_0 = 1 } model_kv_type;

typedef struct model_kv {
    int n_blocks;
    int block_tokens;
    size_t block_elems; /* uint16_t units of one block of K (and of V)     */
    size_t layer_elems; /* of them, one layer's                            */
    model_kv_type type;
    int group;          /* q8_0: G (above); 0 for f16                      */
    uint16_t *k;        /* f16: (n_blocks, n_layer, kv_dim, block_tokens);
                           q8_0: per block and layer the int8 K^T
                           (kv_dim, block_tokens) then its f16 scales
                           (kv_dim / G, block_tokens) (attn.h)         */
    uint16_t *v;        /* f16: (n_blocks, n_layer, block_tokens, kv_dim);
                           q8_0: int8 (block_tokens, kv_dim) then scales
                           (block_tokens, kv_dim / G)                  */
} model_kv;

/* Bytes of KV storage for one block of `block_tokens` tokens (K and V). */
size_t model_kv_block_bytes(const model *m, int block_tokens); /* f16 */
size_t model_kv_block_bytes_type(const model *m, int block_tokens, model_kv_type t);
/* "f16" / "q8_0"; parses them (false: neither). */
const char *model_kv_type_name(model_kv_type t);
bool model_kv_type_parse(const char *s, model_kv_type *t);
/* Allocates storage for n_blocks (zeroed). */
model_kv *model_kv_new(const model *m, int n_blocks, int block_tokens); /* f16 */
model_kv *model_kv_new_type(const model *m, int n_blocks, int block_tokens, model_kv_type t);
void model_kv_free(model_kv *kv);

/* ---- ragged batch ---- */
typedef struct model_seq {
    const int32_t *block_table; /* blocks holding positions 0.. of this sequence */
    int n_blocks;               /* entries in block_table                       */
} model_seq;

typedef struct model_batch {
    int n_tokens;
    const int32_t *token;   /* (n_tokens) token ids                        */
    const int32_t *pos;     /* (n_tokens) position in its sequence         */
    const int32_t *seq;     /* (n_tokens) index into seqs                  */
    const uint8_t *logits;  /* (n_tokens) 1 = produce logits for this token; NULL = last token only */
    int n_seqs;
    const model_seq *seqs;  /* (n_seqs)                                    */
} model_batch;

/* Per-forward scratch, sized once for at most max_tokens tokens per batch
 * and max_ctx positions per sequence. */
typedef struct model_state model_state;
model_state *model_state_new(const model *m, int max_tokens, int max_ctx, int n_threads);
/* The same on another state's worker pool (model_state_pool; it must
 * outlive this state, which does not free it): a draft model's forwards
 * run on the engine's workers between the target's, rather than on a
 * second set of threads spinning beside them. */
model_state *model_state_new_on(const model *m, int max_tokens, int max_ctx, pool *workers);
void model_state_free(model_state *s);
/* Bytes of its buffers, all allocated by model_state_new (no allocation
 * later): the server counts them in kvloom_memory_bytes{part="scratch"}. */
size_t model_state_bytes(const model_state *s);
pool *model_state_pool(model_state *s);
/* The MoE layers' scratch (routing of the last forward: moe.h), or NULL for
 * a dense model. */
moe_scratch *model_state_moe(model_state *s);

/* Runs the batch. Returns the number of logit rows written to `logits`
 * ((rows, n_vocab), in batch order of the tokens that asked for them), or
 * <0 with `e` set when the batch is invalid (bad token id, position beyond
 * a block table or max_ctx, too many tokens). Invalid batches write nothing. */
int model_forward(const model *m, model_state *s, model_kv *kv, const model_batch *b, float *logits, err_t *e);

/* The final hidden state of batch token t of the last model_forward call on
 * s, after the output norm: out (n_embd). Valid until the next forward on s;
 * the pooled embedding of decoder embedders (last-token pooling). */
void model_hidden(const model *m, const model_state *s, int t, float *out);

/* ---- encoders (bert.c) ----
 * Bidirectional models hold no KV cache: each call runs whole sequences.
 *
 *   tokens: the sequences' ids one after another, seq_len[i] of sequence i
 *           (1 .. n_ctx_train each, in total at most the state's max_tokens)
 *   out:    (n_seqs, n_embd) the pooled last hidden states (cfg.pooling),
 *           not normalised
 *
 * Batch invariant: a sequence's output does not depend on the others in the
 * call. Errors (<0, e set, nothing written): bad ids, lengths, sizes. */
typedef struct model_enc_state model_enc_state;
model_enc_state *model_enc_state_new(const model *m, int max_tokens, int n_threads);
void model_enc_state_free(model_enc_state *s); /* NULL is a no-op */
int model_encode(const model *m, model_enc_state *s, const int32_t *tokens, const int *seq_len, int n_seqs,
                 float *out, err_t *e);

/* Loads the encoder part of a bert GGUF (bert.c; model_load calls it). */
int model__bert_load(const gguf_ctx *g, model *m, err_t *e);
void model__bert_free(struct model_bert *b);

#endif
