/*
 * tok_internal.h — the tokenizer object shared by tok.c (loading, special
 * tokens, decoding), spm.c, bpe.c and wpm.c (the merge loops) and pretok.c
 * (the byte-level BPE pre-splitters). Not for use outside src/tok/.
 *
 * Its functions carry the tok__ prefix (cross-file private; the public API,
 * tok.h, has one underscore); its types keep their names (tok_vec,
 * tok_wcache: no linkage, nothing to collide with). unicode.h is not
 * internal: it is tok/'s Unicode library, used by tests and the fuzzers, and
 * its tables keep the unicode_ names that tools/gen_unicode.py writes into
 * unicode_data.c.
 *
 * Strings: every vocabulary string, plus strings that byte-level merges
 * produce but the vocabulary lacks ("extras", ids >= n_vocab), lives in one
 * pool; `find` maps a string to its id through an open-addressing table.
 * Extras never leave the tokenizer: the BPE output step turns them back into
 * vocabulary tokens.
 */
#ifndef KVLOOM_TOK_INTERNAL_H
#define KVLOOM_TOK_INTERNAL_H

#include "tok.h"

enum { TOK_KIND_SPM = 1, TOK_KIND_BPE = 2, TOK_KIND_WPM = 3 };

/* Pre-tokenizers (tokenizer.ggml.pre families). */
typedef enum pretok_kind {
    PRE_DEFAULT = 0,   /* "default": punctuation runs, gpt-2 split, digits */
    PRE_GPT2,          /* gpt-2, mpt, olmo, jais, phi-2 ...               */
    PRE_LLAMA3,        /* llama-bpe: \p{N}{1,3}, (?i) contractions        */
    PRE_QWEN2,         /* as llama3 with single digits                    */
    PRE_DEEPSEEK_LLM,  /* deepseek-llm                                    */
    PRE_DEEPSEEK_CODER,/* deepseek-coder                                  */
    PRE_FALCON,        /* falcon                                          */
    PRE_STARCODER,     /* starcoder, refact, command-r, smollm, ...        */
    PRE_O200K,         /* gpt-4o: o200k (gpt-oss), letters by case class  */
} pretok_kind;

/* Per-token flags beyond the type. */
enum { TOKF_LSTRIP = 1, TOKF_RSTRIP = 2, TOKF_EOG = 4 };

struct tokenizer {
    int kind;           /* TOK_KIND_*                                        */
    pretok_kind pre;
    int n_vocab;
    /* strings: ids [0, n_str); [0, n_vocab) is the vocabulary */
    char *spool;
    size_t spool_len, spool_cap;
    uint32_t *soff, *slen;
    int n_str, cap_str;
    int32_t *hslots; /* open addressing over strings, -1 = empty */
    uint32_t hmask;
    int n_hashed;
    /* vocabulary */
    float *scores;     /* n_vocab (SPM; zeros when absent)  */
    uint8_t *type;     /* n_vocab TOK_TYPE_*                */
    uint8_t *flags;    /* n_vocab TOKF_*                    */
    char *ppool;       /* decoded pieces                    */
    uint32_t *poff, *plen;
    int max_piece;
    int max_str;       /* longest vocabulary string (bytes) */
    /* byte-level BPE merges: (left id, right id) -> rank, result id */
    struct tok_merge *mslots;
    uint32_t mmask;
    /* SPM: byte fallback token of each byte; BPE: id of each byte's
     * byte-level character (an extra if the vocab lacks it) */
    int32_t byte_tok[256];
    /* special ids (-1 = none) */
    int32_t bos, eos, unk, eot, eom;
    int32_t fim[3];                 /* fill-in-the-middle: prefix, suffix, middle (-1) */
    bool add_bos, add_eos, add_space_prefix, ignore_merges;
    bool spm_word_split; /* no string has ▁ after another character (spm.c) */
    int32_t *special; /* control/user-defined/unknown ids, longest text first */
    int n_special;
    int32_t *sp_slots;       /* hash: special string -> index in special[] */
    uint32_t sp_mask;
    int *sp_lens;            /* distinct special lengths, longest first */
    int n_sp_lens;
    uint64_t sp_first[4];    /* bitset: first bytes of special strings */
    uint64_t sp_pair[1024];  /* bitset: first two bytes of special strings */
    char *chat_template;
    char model_name[32];
    char pre_name[64];
};

typedef struct tok_merge {
    int32_t left, right; /* left == -1: empty slot */
    int32_t rank, result;
} tok_merge;

/* A growable id vector that the encoders append to. */
typedef struct tok_vec {
    int32_t *v;
    int n, cap;
} tok_vec;

void tok__vec_push(tok_vec *v, int32_t id);

/* A per-call cache of word -> ids, for long texts where words repeat: the
 * ids live in the output vector (by index), the word bytes in the caller's
 * buffer, both of which outlive the cache. */
typedef struct tok_wslot {
    const char *p; /* NULL = empty */
    uint32_t n, hash;
    int start, count; /* ids out->v[start .. start+count) */
} tok_wslot;
typedef struct tok_wcache {
    tok_wslot *s;
    uint32_t mask;
    int used;
} tok_wcache;
/* Appends the cached ids of word p[0..n) to out and returns true on a hit. */
bool tok__wcache_get(tok_wcache *c, const char *p, size_t n, tok_vec *out);
/* Records that out->v[start..start+count) are the ids of p[0..n). */
void tok__wcache_put(tok_wcache *c, const char *p, size_t n, int start, int count);
void tok__wcache_free(tok_wcache *c);

/* String id of s[0..n), -1 if absent (vocabulary and extras). */
int32_t tok__find_n(const tokenizer *t, const char *s, size_t n);
/* Text of string id i. */
static inline const char *tok__str(const tokenizer *t, int32_t i) { return t->spool + t->soff[i]; }

/* SentencePiece merge loop over one text fragment (already escaped: spaces
 * are ▁, dummy prefix added). Appends ids. spm.c */
void tok__spm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out);

/* WordPiece over one raw text fragment (normalise, split, longest match).
 * wpm.c */
void tok__wpm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out);

/* Byte-level BPE over one raw text fragment: pre-split, byte-map, merge.
 * bpe.c */
void tok__bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out);
/* Builds the merge table from tokenizer.ggml.merges. bpe.c */
int tok__bpe_load_merges(tokenizer *t, const gguf_ctx *g, err_t *e);
/* Adds (or finds) a string, growing the pool and the hash. tok.c */
int32_t tok__intern(tokenizer *t, const char *s, size_t n);

/* Pre-splitting (pretok.c): splits code points cp[0..n) (flags fl[i] =
 * unicode_flags(cp[i])) into words; writes the end offset of each word to
 * ends (room for n entries) and returns the number of words. tmp must have
 * room for n entries too. */
int tok__pretok_split(pretok_kind kind, const uint32_t *cp, const uint16_t *fl, int n, int *ends, int *tmp);
/* Maps a tokenizer.ggml.pre name to its kind; false if unknown. */
bool tok__pretok_from_name(const char *name, pretok_kind *kind);

#endif
