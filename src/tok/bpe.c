/*
 * bpe.c — byte-level BPE ("gpt2" vocabularies): the merge table and the
 * merge loop.
 *
 * Place in the flow: tok/, called by tok_encode for each raw text fragment:
 *
 *   bytes ─UTF-8 decode (bad bytes → U+FFFD)─▶ code points ─tok__pretok_split─▶
 *   words ─each byte → its byte-level character─▶ symbols ─merges by rank─▶ ids
 *
 * Merge loop (as the reference): symbols start as one per byte; every
 * adjacent pair with a merge rule is a candidate; repeatedly apply the
 * candidate of lowest rank (ties: leftmost), skipping candidates whose sides
 * changed since they were queued. With ignore_merges (llama-bpe), a word that
 * is itself a vocabulary token is emitted whole.
 *
 * Symbols carry string ids. A merge side or result the vocabulary lacks gets
 * an "extra" id >= n_vocab at load time (tok__intern), so the loop never
 * builds strings; an extra left at the end is emitted as the tokens of its
 * single bytes, as the reference does. Long texts reuse the ids of words
 * already seen in the same call (a word's ids depend only on its bytes).
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

static inline uint32_t pair_hash(int32_t l, int32_t r) {
    uint64_t h = ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdULL;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ULL;
    h ^= h >> 33;
    return (uint32_t)h;
}

static const tok_merge *merge_find(const tokenizer *t, int32_t l, int32_t r) {
    if (!t->mslots) return NULL;
    uint32_t h = pair_hash(l, r) & t->mmask;
    for (;;) {
        const tok_merge *m = &t->mslots[h];
        if (m->left < 0) return NULL;
        if (m->left == l && m->right == r) return m;
        h = (h + 1) & t->mmask;
    }
}

int tok__bpe_load_merges(tokenizer *t, const gguf_ctx *g, err_t *e) {
    /* byte-level alphabet first, so every byte has a symbol id */
    for (int b = 0; b < 256; b++) {
        char u[4];
        int n = utf8_encode(unicode_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = tok__intern(t, u, (size_t)n);
    }
    int64_t km = gguf_find_key(g, "tokenizer.ggml.merges");
    if (km < 0) return 0; /* no merges: every word falls to single bytes */
    gguf_vtype et;
    uint64_t n;
    if (!gguf_kv_arr(g, km, &et, &n) || et != GGUF_STRING)
        return err_set(e, ERR_FORMAT, "tokenizer.ggml.merges: not a string array");
    if (n > (1u << 24)) return err_set(e, ERR_RANGE, "tokenizer.ggml.merges: %llu merges", (unsigned long long)n);
    uint32_t cap = 1024;
    while ((uint64_t)cap < n * 2 + 16) cap *= 2;
    t->mslots = xmalloc((size_t)cap * sizeof(tok_merge));
    for (uint32_t i = 0; i < cap; i++) t->mslots[i].left = -1;
    t->mmask = cap - 1;
    char *buf = NULL;
    size_t buf_cap = 0;
    for (uint64_t i = 0; i < n; i++) {
        gguf_str s = gguf_kv_arr_str(g, km, i);
        const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', (size_t)s.len - 1) : NULL;
        if (!sp || s.len > (1u << 20)) {
            free(buf);
            return err_set(e, ERR_FORMAT, "tokenizer.ggml.merges[%llu]: not of the form 'left right'",
                           (unsigned long long)i);
        }
        size_t ln = (size_t)(sp - s.ptr), rn = (size_t)s.len - ln - 1;
        int32_t l = tok__intern(t, s.ptr, ln);
        int32_t r = tok__intern(t, sp + 1, rn);
        if (ln + rn > buf_cap) {
            buf_cap = (ln + rn) * 2;
            buf = xrealloc(buf, buf_cap);
        }
        memcpy(buf, s.ptr, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t res = tok__intern(t, buf, ln + rn);
        uint32_t h = pair_hash(l, r) & t->mmask;
        for (;;) {
            tok_merge *m = &t->mslots[h];
            if (m->left < 0) {
                *m = (tok_merge){l, r, (int32_t)i, res};
                break;
            }
            if (m->left == l && m->right == r) break; /* the first rank wins */
            h = (h + 1) & t->mmask;
        }
    }
    free(buf);
    return 0;
}

typedef struct bsym {
    int prev, next;
    int32_t id; /* -1 once merged away */
} bsym;

typedef struct bcand {
    int32_t rank;
    int left, right;
    int32_t lid, rid, res;
} bcand;

typedef struct bheap {
    bcand *v;
    int n, cap;
} bheap;

static bool bcand_before(const bcand *a, const bcand *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void bheap_push(bheap *h, bcand c) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = xrealloc(h->v, (size_t)h->cap * sizeof(bcand));
    }
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!bcand_before(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static bcand bheap_pop(bheap *h) {
    bcand top = h->v[0];
    bcand last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const bcand *best = &last;
        if (l < h->n && bcand_before(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (r < h->n && bcand_before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

static void add_pair(const tokenizer *t, const bsym *s, int l, int r, bheap *h) {
    if (l < 0 || r < 0) return;
    const tok_merge *m = merge_find(t, s[l].id, s[r].id);
    if (!m) return;
    bheap_push(h, (bcand){m->rank, l, r, s[l].id, s[r].id, m->result});
}

static void emit(const tokenizer *t, int32_t id, tok_vec *out) {
    if (id < t->n_vocab) {
        tok__vec_push(out, id);
        return;
    }
    const char *s = tok__str(t, id);
    for (uint32_t k = 0; k < t->slen[id]; k++) {
        int32_t b = tok__find_n(t, s + k, 1);
        if (b >= 0 && b < t->n_vocab) tok__vec_push(out, b);
    }
}

/* Scratch buffers of one tok__bpe_encode call. */
typedef struct bscratch {
    bsym *sym;
    char *bl; /* byte-level string of a word (ignore_merges lookup) */
    bheap heap;
} bscratch;

static void encode_word(const tokenizer *t, const uint8_t *w, int n, bscratch *sc, tok_vec *out) {
    if (t->ignore_merges) {
        int o = 0;
        for (int i = 0; i < n; i++) o += utf8_encode(unicode_byte_to_cp(w[i]), sc->bl + o);
        int32_t id = tok__find_n(t, sc->bl, (size_t)o);
        if (id >= 0 && id < t->n_vocab) {
            tok__vec_push(out, id);
            return;
        }
    }
    bsym *s = sc->sym;
    for (int i = 0; i < n; i++) s[i] = (bsym){i - 1, i + 1 < n ? i + 1 : -1, t->byte_tok[w[i]]};
    bheap *h = &sc->heap;
    h->n = 0;
    for (int i = 1; i < n; i++) add_pair(t, s, i - 1, i, h);
    while (h->n > 0) {
        bcand c = bheap_pop(h);
        bsym *l = &s[c.left], *r = &s[c.right];
        if (l->id != c.lid || r->id != c.rid || l->next != c.right) continue; /* stale */
        l->id = c.res;
        r->id = -1;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.left;
        add_pair(t, s, l->prev, c.left, h);
        add_pair(t, s, c.left, l->next, h);
    }
    for (int i = 0; i != -1; i = s[i].next) emit(t, s[i].id, out);
}

void tok__bpe_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out) {
    if (len == 0) return;
    uint32_t *cp = xmalloc(len * sizeof(uint32_t));
    uint16_t *fl = xmalloc(len * sizeof(uint16_t));
    int *cpoff = xmalloc((len + 1) * sizeof(int)); /* byte offset of each code point in `utf` */
    char *utf = xmalloc(len * 3 + 4);               /* re-encoded text (bad bytes → EF BF BD) */
    int n = 0, o = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c;
        i += (size_t)unicode_decode(text + i, len - i, &c);
        cp[n] = c;
        fl[n] = (uint16_t)unicode_flags(c);
        cpoff[n] = o;
        o += utf8_encode(c, utf + o);
        n++;
    }
    cpoff[n] = o;
    int *ends = xmalloc((size_t)n * sizeof(int));
    int *tmp = xmalloc((size_t)n * sizeof(int));
    int nw = tok__pretok_split(t->pre, cp, fl, n, ends, tmp);
    bscratch sc = {xmalloc((size_t)o * sizeof(bsym)), xmalloc((size_t)o * 2 + 4), {0}};
    int start = 0;
    tok_wcache wc = {0};
    for (int k = 0; k < nw; k++) {
        int b0 = cpoff[start], b1 = cpoff[ends[k]];
        start = ends[k];
        if (nw > 64 && tok__wcache_get(&wc, utf + b0, (size_t)(b1 - b0), out)) continue;
        int first = out->n;
        encode_word(t, (const uint8_t *)utf + b0, b1 - b0, &sc, out);
        if (nw > 64) tok__wcache_put(&wc, utf + b0, (size_t)(b1 - b0), first, out->n - first);
    }
    tok__wcache_free(&wc);
    free(sc.sym);
    free(sc.bl);
    free(sc.heap.v);
    free(ends);
    free(tmp);
    free(utf);
    free(cpoff);
    free(fl);
    free(cp);
}
