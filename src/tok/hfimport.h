/*
 * hfimport.h — turns a Hugging Face tokenizer.json (+ optional
 * tokenizer_config.json or config.json) into the tokenizer.ggml.* metadata
 * that tok_load reads, written into a gguf_writer.
 *
 * Place in the flow: tools side of tok/ (used when kvloom builds GGUFs of its
 * own, e.g. random-weight benchmark models with real tokenizers, and by the
 * tests to check llama-bpe and qwen2 vectors).
 *
 * Supported: model.type "BPE", either byte-level (ByteLevel pre-tokenizer ->
 * tokenizer.ggml.model "gpt2", pre chosen from the Split regex: llama-bpe,
 * qwen2, smollm/starcoder digits, gpt-2) or SentencePiece-style with byte
 * fallback (-> "llama", scores from merge ranks). Keys written:
 * tokenizer.ggml.{model, pre, tokens, token_type, merges | scores,
 * bos/eos/unknown/padding_token_id, add_bos_token, add_eos_token,
 * add_space_prefix} and tokenizer.chat_template.
 * Untrusted input: malformed JSON or unexpected shapes give ERR_FORMAT /
 * ERR_UNSUPPORTED with a message naming the field; nothing is written to `w`
 * on error.
 */
#ifndef KVLOOM_TOK_HFIMPORT_H
#define KVLOOM_TOK_HFIMPORT_H

#include <stddef.h>

#include "../base/base.h"
#include "../model/gguf.h"

/* Paths: tokenizer.json and optionally tokenizer_config.json or config.json
 * (NULL to skip). */
int tok_import_hf(const char *tokenizer_json, const char *config_json_or_NULL, gguf_writer *w, err_t *e);

/* Same over in-memory JSON texts (cfg may be NULL). */
int tok_import_hf_mem(const char *tok_json, size_t tok_len, const char *cfg_json, size_t cfg_len, gguf_writer *w,
                      err_t *e);

#endif
