/*
 * spm.c — the SentencePiece BPE merge loop ("llama" vocabularies).
 *
 * Place in the flow: tok/, called by tok_encode for each raw text fragment
 * after the special-token split, the dummy prefix and ' ' -> ▁ escaping.
 *
 * Algorithm (as the reference): the fragment starts as one symbol per UTF-8
 * character (a stray continuation byte is its own symbol). Every adjacent
 * pair whose concatenation is a vocabulary token is a candidate; repeatedly
 * merge the candidate with the highest score (ties: leftmost), skipping
 * candidates made stale by an earlier merge (their summed length no longer
 * matches). Finally each symbol becomes its token, or, when the text is not a
 * token (only possible for unmerged single characters), one byte token
 * <0xNN> per byte.
 *
 * Invariant: symbols form a doubly linked list in text order (per word when
 * the text is cut into words, see tok__spm_encode); a merged-away symbol has
 * n == 0. The heap holds (score, left) candidates.
 */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

typedef struct sym {
    int prev, next;
    uint32_t off, n; /* text[off, off+n) */
} sym;

typedef struct cand {
    float score;
    int left, right;
    uint32_t size;
} cand;

typedef struct heap {
    cand *v;
    int n, cap;
} heap;

/* a before b: higher score, then smaller left index */
static bool cand_before(const cand *a, const cand *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void heap_push(heap *h, cand c) {
    if (h->n == h->cap) {
        h->cap = h->cap ? h->cap * 2 : 64;
        h->v = xrealloc(h->v, (size_t)h->cap * sizeof(cand));
    }
    int i = h->n++;
    while (i > 0) {
        int p = (i - 1) / 2;
        if (!cand_before(&c, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = c;
}

static cand heap_pop(heap *h) {
    cand top = h->v[0];
    cand last = h->v[--h->n];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < h->n && cand_before(&h->v[l], best)) {
            m = l;
            best = &h->v[l];
        }
        if (r < h->n && cand_before(&h->v[r], best)) m = r;
        if (m == i) break;
        h->v[i] = h->v[m];
        i = m;
    }
    if (h->n > 0) h->v[i] = last;
    return top;
}

static const uint8_t k_utf8_len[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};

static void try_pair(const tokenizer *t, const char *text, const sym *s, int left, int right, heap *h) {
    if (left < 0 || right < 0) return;
    uint32_t n = s[left].n + s[right].n;
    int32_t id = tok__find_n(t, text + s[left].off, n);
    if (id < 0 || id >= t->n_vocab) return;
    heap_push(h, (cand){t->scores[id], left, right, n});
}

static bool is_space_sym(const char *text, const sym *s) {
    return s->n == 3 && memcmp(text + s->off, "\xe2\x96\x81", 3) == 0;
}

/* Runs the merge loop over symbols [a, b) (linked among themselves) and
 * appends the resulting ids. */
static void merge_run(const tokenizer *t, const char *text, sym *s, int a, int b, heap *h, tok_vec *out) {
    h->n = 0;
    for (int i = a + 1; i < b; i++) try_pair(t, text, s, i - 1, i, h);
    while (h->n > 0) {
        cand c = heap_pop(h);
        sym *l = &s[c.left], *r = &s[c.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != c.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) s[r->next].prev = c.left;
        try_pair(t, text, s, l->prev, c.left, h);
        try_pair(t, text, s, c.left, l->next, h);
    }
    for (int i = a; i != -1; i = s[i].next) {
        int32_t id = tok__find_n(t, text + s[i].off, s[i].n);
        if (id >= 0 && id < t->n_vocab) {
            tok__vec_push(out, id);
            continue;
        }
        for (uint32_t k = 0; k < s[i].n; k++) {
            int32_t bt = t->byte_tok[(uint8_t)text[s[i].off + k]];
            if (bt >= 0) tok__vec_push(out, bt);
        }
    }
}

/* When no vocabulary string has ▁ right after another character
 * (t->spm_word_split, checked at load), no merge can join a symbol with a
 * following "▁" symbol that starts a word, so the text is cut there and each
 * word merged on its own: same result, much smaller heaps, and a repeated
 * word reuses the ids computed for its first occurrence. */
void tok__spm_encode(const tokenizer *t, const char *text, size_t len, tok_vec *out) {
    if (len == 0) return;
    sym *s = xmalloc(len * sizeof(sym));
    int ns = 0;
    for (size_t off = 0; off < len;) {
        size_t l = k_utf8_len[(uint8_t)text[off] >> 4];
        if (l > len - off) l = len - off;
        s[ns] = (sym){ns - 1, off + l == len ? -1 : ns + 1, (uint32_t)off, (uint32_t)l};
        ns++;
        off += l;
    }
    heap h = {0};
    tok_wcache wc = {0};
    int a = 0;
    for (int i = 1; i <= ns; i++) {
        bool cut = i == ns;
        if (!cut && t->spm_word_split && is_space_sym(text, &s[i]) && !is_space_sym(text, &s[i - 1])) cut = true;
        if (!cut) continue;
        const char *wp = text + s[a].off;
        size_t wn = (size_t)(s[i - 1].off + s[i - 1].n - s[a].off);
        if (!tok__wcache_get(&wc, wp, wn, out)) {
            int first = out->n;
            s[a].prev = -1;
            s[i - 1].next = -1;
            merge_run(t, text, s, a, i, &h, out);
            tok__wcache_put(&wc, wp, wn, first, out->n - first);
        }
        a = i;
    }
    tok__wcache_free(&wc);
    free(h.v);
    free(s);
}
