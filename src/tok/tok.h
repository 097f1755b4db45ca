/*
 * tok.h — tokenizers built from GGUF metadata (tokenizer.ggml.*):
 *
 *   "llama"  SentencePiece BPE by scores, byte fallback <0xNN>, dummy prefix ▁
 *            (Llama 2, phi-3, baichuan, stories260K)
 *   "gpt2"   byte-level BPE with ranked merges and a pre-tokenizer chosen by
 *            tokenizer.ggml.pre (gpt-2, llama-bpe, qwen2, deepseek-llm,
 *            deepseek-coder, falcon, mpt, starcoder, refact, smollm, ...)
 *
 * Place in the flow: tok/, between server/ (text in, text out) and sched/
 * (token ids). Encoding follows the reference tokenizers exactly (the test
 * vectors in ../shared/vocab); decoding is the exact inverse for text the
 * encoder produced (no clean-up of spaces before punctuation).
 *
 *   text ──special-token split──▶ fragments ──pre-split (BPE)──▶ words
 *        ──merge loop (SPM scores / BPE ranks)──▶ ids
 *   ids ──tok_piece──▶ bytes ──tok_stream (UTF-8 assembly)──▶ text
 *
 * Thread safety: a tokenizer is immutable after tok_load and may be used from
 * any number of threads at once. A tok_stream belongs to one caller.
 * Untrusted input (the GGUF metadata, the text, the ids) never crashes: bad
 * metadata gives a negative ERR_* from tok_load, bad ids give <0 from the
 * functions that take them, and any byte string encodes (invalid UTF-8 goes
 * to byte tokens in SPM and to U+FFFD in byte-level BPE, as the references do).
 */
#ifndef KVLOOM_TOK_H
#define KVLOOM_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../base/base.h"
#include "../model/gguf.h"

typedef struct tokenizer tokenizer;

/* Token types of tokenizer.ggml.token_type. */
enum {
    TOK_TYPE_NORMAL = 1,
    TOK_TYPE_UNKNOWN = 2,
    TOK_TYPE_CONTROL = 3,
    TOK_TYPE_USER_DEFINED = 4,
    TOK_TYPE_UNUSED = 5,
    TOK_TYPE_BYTE = 6,
};

/* Builds a tokenizer from the tokenizer.ggml.* keys of `g`. Everything
 * needed is copied, so `g` may be freed afterwards. On error returns <0,
 * fills `e` (naming the key and index) and sets *out = NULL. */
int tok_load(const gguf_ctx *g, tokenizer **out, err_t *e);
void tok_free(tokenizer *t); /* NULL is a no-op */

int tok_n_vocab(const tokenizer *t);
int32_t tok_bos(const tokenizer *t); /* -1 if none */
int32_t tok_eos(const tokenizer *t); /* -1 if none */
/* tokenizer.ggml.add_bos_token, defaulting to true for "llama" and for the
 * llama-bpe pre-tokenizer, false for other byte-level BPE vocabularies. */
bool tok_add_bos(const tokenizer *t);
/* End of generation: eos, eot, eom and the usual end-of-turn tokens present
 * in the vocabulary (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>,
 * <|endoftext|>, <|eom_id|>, <|end_of_text|>, ...). */
bool tok_is_eog(const tokenizer *t, int32_t id);

/* Encodes `len` bytes of text. With add_bos, prepends BOS (when the vocab has
 * one) and appends EOS when tokenizer.ggml.add_eos_token is set. With
 * parse_special, control tokens written in the text (e.g. "<|im_end|>") are
 * matched as single tokens, longest first; user-defined tokens are always
 * matched (as the reference tokenizers do); otherwise control-token text is
 * ordinary text. Writes at most `cap` ids to `out` (out may be NULL when cap
 * is 0) and returns the total number of ids, so a caller can retry with a
 * bigger buffer; <0 (ERR_INVALID/ERR_RANGE) only for a NULL tokenizer or text
 * longer than 256 MiB. */
int tok_encode(const tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
               int32_t *out, int cap);

/* The bytes of one token: byte tokens <0xNN> give the byte, byte-level BPE
 * characters are mapped back to bytes, SPM ▁ becomes a space, control and
 * user-defined tokens give their text, unused tokens give nothing. Writes at
 * most `cap` bytes (no NUL) and returns the piece's full length, or
 * ERR_INVALID for an id out of range. */
int tok_piece(const tokenizer *t, int32_t id, char *buf, int cap);
/* The vocabulary string as stored (NUL-terminated), NULL for a bad id. */
const char *tok_piece_str(const tokenizer *t, int32_t id);
/* Exact vocabulary lookup of a NUL-terminated string; -1 if absent. */
int32_t tok_find(const tokenizer *t, const char *piece);
/* Control or user-defined token. */
bool tok_is_special(const tokenizer *t, int32_t id);
/* TOK_TYPE_* of a token, 0 for a bad id. */
int tok_type(const tokenizer *t, int32_t id);

/* ---- streaming detokenizer ------------------------------------------------
 * Push ids one at a time; each call returns only complete UTF-8 characters:
 * the bytes of a character split across tokens are held until it completes.
 * A sequence that can no longer become valid is emitted as one U+FFFD (per
 * maximal invalid part); tok_stream_flush emits U+FFFD for a held incomplete
 * character. Output is therefore always valid UTF-8.
 * skip_special: control tokens produce no text. SentencePiece rule: when the
 * model adds a dummy prefix space and a (skipped) BOS is pushed, the leading
 * space of the next piece is dropped, so decode(encode(s, add_bos)) == s.
 * Ids pushed without a BOS keep their leading spaces (continuations of a
 * prompt render correctly).                                                */
typedef struct tok_stream {
    const tokenizer *t;
    bool skip_special;
    bool strip_space; /* drop a leading ' ' from the next non-empty piece */
    uint8_t n_pend;   /* held bytes of an incomplete character          */
    char pend[4];
} tok_stream;

void tok_stream_init(tok_stream *s, const tokenizer *t, bool skip_special);
/* Writes the newly completed text to out and returns its length; returns
 * ERR_RANGE without changing the stream if it does not fit in `cap` (a cap of
 * tok_stream_max_out(t) always suffices), ERR_INVALID for a bad id. */
int tok_stream_push(tok_stream *s, int32_t id, char *out, int cap);
/* Emits what is held (U+FFFD for an incomplete character) and resets the
 * held bytes. Returns the length written (<= 3), ERR_RANGE if cap < 3 and
 * something is held. */
int tok_stream_flush(tok_stream *s, char *out, int cap);
/* An output capacity that is always enough for one push or flush. */
int tok_stream_max_out(const tokenizer *t);

/* Whole-sequence decode: the concatenation of tok_stream_push over ids and a
 * final flush. Writes at most `cap` bytes, NUL-terminates when the text fits
 * with room to spare, and returns the full length needed (without NUL);
 * ERR_INVALID for a bad id. */
int tok_decode(const tokenizer *t, const int32_t *ids, int n, bool skip_special, char *out, int cap);

/* tokenizer.chat_template or NULL. */
const char *tok_chat_template(const tokenizer *t);
/* tokenizer.ggml.model: "llama", "gpt2", ... */
const char *tok_model_name(const tokenizer *t);
/* tokenizer.ggml.pre as stored ("default" when absent). */
const char *tok_pre_name(const tokenizer *t);

/* Encoding throughput in MB/s of `text` over `reps` repetitions (for
 * `kvloom bench --tokenizer`). */
double tok_bench_mb_per_s(const tokenizer *t, const char *text, size_t len, int reps);

#endif
