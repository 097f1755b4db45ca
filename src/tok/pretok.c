/*
 * pretok.c — the pre-tokenizers of byte-level BPE vocabularies: split text
 * (as code points) into words before merging.
 *
 * Place in the flow: tok/, called by tok__bpe_encode for each raw text fragment.
 *
 * The reference tokenizers describe each pre-tokenizer as a list of regular
 * expressions applied in turn: each one splits every current piece into its
 * matches and the gaps between them (both kept). Here each expression is a
 * small hand-written matcher, `match(pos)` = length of the leftmost-first
 * (backtracking) regex match starting at pos, or 0; a generic driver does the
 * leftmost search and the gap bookkeeping. Matchers see only their piece:
 * look-ahead and `$` stop at the piece's end, as in the reference.
 *
 * Classes: \p{L} \p{N} \p{P} come from the generated category table; \s is
 * the White_Space property. Literal character classes (deepseek-llm) follow
 * the reference in that non-ASCII whitespace never matches a literal range.
 *
 * Invariants: words are non-empty, cover the input exactly and are in order.
 */
#include <string.h>

#include "tok_internal.h"
#include "unicode.h"

typedef struct pctx {
    const uint32_t *cp;
    const uint16_t *fl;
} pctx;

/* Length of the match at pos within the piece [s, e), 0 if none. */
typedef int (*matcher)(const pctx *c, int pos, int s, int e);

static inline unsigned FL(const pctx *c, int i, int e) { return i < e ? c->fl[i] : 0; }
static inline uint32_t CP(const pctx *c, int i, int e) { return i < e ? c->cp[i] : 0xFFFFFFFFu; }
static inline bool is_crlf(uint32_t x) { return x == '\r' || x == '\n'; }
static inline uint32_t lower_ascii(uint32_t x) { return (x >= 'A' && x <= 'Z') ? x + 32 : x; }

/* 's 't 're 've 'm 'll 'd (case-insensitive when `ci`); 0 if none. */
static int contraction(const pctx *c, int pos, int e, bool ci) {
    if (c->cp[pos] != '\'' || pos + 1 >= e) return 0;
    uint32_t a = c->cp[pos + 1];
    if (ci) a = lower_ascii(a);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 < e) {
        uint32_t b = c->cp[pos + 2];
        if (ci) b = lower_ascii(b);
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    }
    return 0;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S) */
static int m_gpt2(const pctx *c, int pos, int s, int e) {
    (void)s;
    int k = contraction(c, pos, e, false);
    if (k) return k;
    int p = pos + (c->cp[pos] == ' ');
    unsigned f = FL(c, p, e);
    if (f & UCF_LETTER) {
        while (FL(c, p, e) & UCF_LETTER) p++;
        return p - pos;
    }
    if (f & UCF_NUMBER) {
        while (FL(c, p, e) & UCF_NUMBER) p++;
        return p - pos;
    }
    if (f && !(f & (UCF_SPACE | UCF_LETTER | UCF_NUMBER))) {
        for (f = FL(c, p, e); f && !(f & (UCF_SPACE | UCF_LETTER | UCF_NUMBER)); f = FL(c, ++p, e)) {}
        return p - pos;
    }
    int nws = 0;
    while (FL(c, pos + nws, e) & UCF_SPACE) nws++;
    if (nws > 1 && pos + nws < e) return nws - 1; /* \s+(?!\S): leave one for the next word */
    if (nws > 0) return nws;
    return 1;
}

/* The last alternatives of the Llama 3 and o200k patterns:
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * (o200k: [\r\n/]* after the punctuation run, when `slash`); >= 1. */
static int punct_or_space(const pctx *c, int pos, int e, bool slash) {
    int p = pos + (c->cp[pos] == ' ');
    unsigned f2 = FL(c, p, e);
    if (f2 && !(f2 & (UCF_SPACE | UCF_LETTER | UCF_NUMBER))) {
        while (f2 && !(f2 & (UCF_SPACE | UCF_LETTER | UCF_NUMBER))) f2 = FL(c, ++p, e);
        while (p < e && (is_crlf(c->cp[p]) || (slash && c->cp[p] == '/'))) p++;
        return p - pos;
    }
    int nws = 0, last_nl = -1;
    while (FL(c, pos + nws, e) & UCF_SPACE) {
        if (is_crlf(c->cp[pos + nws])) last_nl = pos + nws + 1;
        nws++;
    }
    if (last_nl >= 0) return last_nl - pos; /* \s*[\r\n]+ */
    if (nws > 1 && pos + nws < e) return nws - 1;
    if (nws > 0) return nws;
    return 1;
}

/* Llama 3 / Qwen2: (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static int m_llama3_n(const pctx *c, int pos, int e, int max_digits) {
    int k = contraction(c, pos, e, true);
    if (k) return k;
    uint32_t x = c->cp[pos];
    unsigned f = c->fl[pos];
    if (!(is_crlf(x) || (f & UCF_NUMBER))) {
        if ((f & UCF_LETTER) || (FL(c, pos + 1, e) & UCF_LETTER)) {
            int p = pos + 1;
            while (FL(c, p, e) & UCF_LETTER) p++;
            return p - pos;
        }
    }
    if (f & UCF_NUMBER) {
        int p = pos;
        while (p - pos < max_digits && (FL(c, p, e) & UCF_NUMBER)) p++;
        return p - pos;
    }
    return punct_or_space(c, pos, e, false);
}
static int m_llama3(const pctx *c, int pos, int s, int e) { (void)s; return m_llama3_n(c, pos, e, 3); }
static int m_qwen2(const pctx *c, int pos, int s, int e) { (void)s; return m_llama3_n(c, pos, e, 1); }

/* o200k (gpt-oss, GPT-4o), with U = [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}],
 * L = [\p{Ll}\p{Lm}\p{Lo}\p{M}], C = (?i:'s|'t|'re|'ve|'m|'ll|'d),
 * P = [^\r\n\p{L}\p{N}]:
 *   P?U*L+C? | P?U+L*C? | \p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n/]* |
 *   \s*[\r\n]+ | \s+(?!\S) | \s+
 * U and L overlap (Lm, Lo, marks), so U*L+ backtracks: U* gives back code
 * points until L+ can start, i.e. L+ starts at the last L code point within
 * or just after U*'s run. An alternative is tried with its P, then without,
 * before the next alternative (leftmost-first). Returns the end of a word
 * starting at p (after an optional P), or -1. */
static int o200k_word(const pctx *c, int p, int e, bool lower_needed) {
    int u = p;
    while (FL(c, u, e) & UCF_UPPERISH) u++;
    int q;
    if (lower_needed) { /* U*L+ */
        int k = u;
        while (k >= p && !(FL(c, k, e) & UCF_LOWERISH)) k--;
        if (k < p) return -1;
        q = k;
    } else { /* U+L* */
        if (u == p) return -1;
        q = u;
    }
    while (FL(c, q, e) & UCF_LOWERISH) q++;
    if (q < e) q += contraction(c, q, e, true);
    return q;
}
static int m_o200k(const pctx *c, int pos, int s, int e) {
    (void)s;
    const uint32_t x = c->cp[pos];
    const unsigned f = c->fl[pos];
    const bool has_p = !is_crlf(x) && !(f & (UCF_LETTER | UCF_NUMBER));
    for (int alt = 0; alt < 2; alt++) {
        int q;
        if (has_p && (q = o200k_word(c, pos + 1, e, alt == 0)) > pos + 1) return q - pos;
        if ((q = o200k_word(c, pos, e, alt == 0)) > pos) return q - pos;
    }
    if (f & UCF_NUMBER) {
        int p = pos;
        while (p - pos < 3 && (FL(c, p, e) & UCF_NUMBER)) p++;
        return p - pos;
    }
    return punct_or_space(c, pos, e, true);
}

static bool in_str(uint32_t x, const char *set) { return x < 128 && x && strchr(set, (int)x) != NULL; }

/* [\p{P}\$\+<=>\^~\|]+ */
static int m_punct_default(const pctx *c, int pos, int s, int e) {
    (void)s;
    int p = pos;
    while (p < e && ((c->fl[p] & UCF_PUNCT) || in_str(c->cp[p], "$+<=>^~|"))) p++;
    return p - pos;
}
/* [\p{P}\$\+<=>\^~\|`]+ */
static int m_punct_falcon(const pctx *c, int pos, int s, int e) {
    (void)s;
    int p = pos;
    while (p < e && ((c->fl[p] & UCF_PUNCT) || in_str(c->cp[p], "$+<=>^~|`"))) p++;
    return p - pos;
}
static bool is_digit(uint32_t x) { return x >= '0' && x <= '9'; }
/* [0-9][0-9][0-9] */
static int m_digits3(const pctx *c, int pos, int s, int e) {
    (void)s;
    return (pos + 3 <= e && is_digit(c->cp[pos]) && is_digit(c->cp[pos + 1]) && is_digit(c->cp[pos + 2])) ? 3 : 0;
}
/* \p{N}+ */
static int m_num_run(const pctx *c, int pos, int s, int e) {
    (void)s;
    int p = pos;
    while (p < e && (c->fl[p] & UCF_NUMBER)) p++;
    return p - pos;
}
/* \p{N} */
static int m_num1(const pctx *c, int pos, int s, int e) {
    (void)s;
    (void)e;
    return (c->fl[pos] & UCF_NUMBER) ? 1 : 0;
}
/* [\r\n] */
static int m_crlf(const pctx *c, int pos, int s, int e) {
    (void)s;
    (void)e;
    return is_crlf(c->cp[pos]) ? 1 : 0;
}
/* \s+$ (a run that fails once fails at every later start inside it) */
static int m_ws_end(const pctx *c, int pos, int s, int e) {
    if (!(c->fl[pos] & UCF_SPACE)) return 0;
    if (pos > s && (c->fl[pos - 1] & UCF_SPACE)) return 0;
    int p = pos;
    while (p < e && (c->fl[p] & UCF_SPACE)) p++;
    return p == e ? p - pos : 0;
}

typedef struct cprange {
    uint32_t lo, hi;
} cprange;

/* deepseek-llm's literal letter class (from its tokenizer.json). */
static const cprange k_ds_letters[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA}, {0x1BC, 0x1BF},
    {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D}, {0x37F, 0x37F},
    {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5}, {0x3F7, 0x481},
    {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5}, {0x13F8, 0x13FD}, {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77}, {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D},
    {0x1F20, 0x1F45}, {0x1F48, 0x1F4D}, {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D},
    {0x1F5F, 0x1F7D}, {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC}, {0x2102, 0x2102},
    {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134}, {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149},
    {0x214E, 0x214E}, {0x2183, 0x2184}, {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3},
    {0xA640, 0xA66D}, {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF},
    {0x1E900, 0x1E943},
};
/* [!-/:-~！-／：-～‘-‟　-。] */
static const cprange k_ds_punct[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
/* [一-龥ࠀ-一가-퟿] */
static const cprange k_cjk[] = {{0x800, 0x4E00}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7FF}};

/* Membership in a literal class (ranges sorted by lo); non-ASCII whitespace
 * never matches (the reference replaces it by U+000B before matching literal
 * classes). */
static bool in_ranges(const pctx *c, int i, const cprange *r, size_t n) {
    uint32_t x = c->cp[i];
    if (x > 0x7F && (c->fl[i] & UCF_SPACE)) return false;
    for (size_t k = 0; k < n && x >= r[k].lo; k++)
        if (x <= r[k].hi) return true;
    return false;
}

/* \s?[class]+ for a literal class */
static int ws_opt_ranges(const pctx *c, int pos, int e, const cprange *r, size_t n) {
    int p = pos;
    if (c->fl[p] & UCF_SPACE) {
        if (p + 1 < e && in_ranges(c, p + 1, r, n)) p++;
        else return 0;
    }
    int q = p;
    while (q < e && in_ranges(c, q, r, n)) q++;
    return q > p ? q - pos : 0;
}
static int m_ds_letters(const pctx *c, int pos, int s, int e) {
    (void)s;
    return ws_opt_ranges(c, pos, e, k_ds_letters, ARRAY_LEN(k_ds_letters));
}
static int m_ds_punct(const pctx *c, int pos, int s, int e) {
    (void)s;
    return ws_opt_ranges(c, pos, e, k_ds_punct, ARRAY_LEN(k_ds_punct));
}
static int m_cjk(const pctx *c, int pos, int s, int e) {
    (void)s;
    int p = pos;
    while (p < e && in_ranges(c, p, k_cjk, ARRAY_LEN(k_cjk))) p++;
    return p - pos;
}

/* \s?[flag]+ for a category class */
static int ws_opt_flag(const pctx *c, int pos, int e, unsigned flag) {
    int p = pos;
    if (c->fl[p] & UCF_SPACE) {
        if (FL(c, p + 1, e) & flag) p++;
        else return 0;
    }
    int q = p;
    while (FL(c, q, e) & flag) q++;
    return q > p ? q - pos : 0;
}
static int m_dsc_letters(const pctx *c, int pos, int s, int e) { (void)s; return ws_opt_flag(c, pos, e, UCF_LETTER); }
static int m_dsc_punct(const pctx *c, int pos, int s, int e) { (void)s; return ws_opt_flag(c, pos, e, UCF_PUNCT); }

/* Applies one expression to every piece of `in` (ends[]), writing the new
 * piece ends to `out`; returns their number. */
static int run_stage(matcher m, const pctx *c, const int *in, int n_in, int *out) {
    int n_out = 0, s = 0;
    for (int f = 0; f < n_in; f++) {
        int e = in[f], pos = s, gap = s;
        while (pos < e) {
            int len = m(c, pos, s, e);
            if (len > 0) {
                if (gap < pos) out[n_out++] = pos;
                pos += len;
                out[n_out++] = pos;
                gap = pos;
            } else {
                pos++;
            }
        }
        if (gap < e) out[n_out++] = e;
        s = e;
    }
    return n_out;
}

typedef struct pretok_def {
    const char *names[12];
    pretok_kind kind;
} pretok_def;

static const pretok_def k_defs[] = {
    {{"default"}, PRE_DEFAULT},
    {{"gpt-2", "mpt", "olmo", "jais", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es",
      "jina-v2-de", "jina-v2-code"},
     PRE_GPT2},
    {{"trillion", "granite-docling", "roberta-bpe", "gpt-neox"}, PRE_GPT2},
    {{"llama3", "llama-v3", "llama-bpe", "falcon3", "pixtral", "dbrx", "smaug-bpe", "chatglm-bpe"}, PRE_LLAMA3},
    {{"qwen2", "deepseek-r1-qwen", "stablelm2", "hunyuan", "grok-2"}, PRE_QWEN2},
    {{"deepseek-llm"}, PRE_DEEPSEEK_LLM},
    {{"deepseek-coder"}, PRE_DEEPSEEK_CODER},
    {{"falcon"}, PRE_FALCON},
    {{"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}, PRE_STARCODER},
    {{"gpt-4o"}, PRE_O200K},
};

bool tok__pretok_from_name(const char *name, pretok_kind *kind) {
    for (size_t d = 0; d < ARRAY_LEN(k_defs); d++)
        for (size_t k = 0; k < ARRAY_LEN(k_defs[d].names) && k_defs[d].names[k]; k++)
            if (strcmp(name, k_defs[d].names[k]) == 0) {
                *kind = k_defs[d].kind;
                return true;
            }
    return false;
}

int tok__pretok_split(pretok_kind kind, const uint32_t *cp, const uint16_t *fl, int n, int *ends, int *tmp) {
    if (n <= 0) return 0;
    static const matcher k_default[] = {m_punct_default, m_gpt2, m_num_run, m_digits3, NULL};
    static const matcher k_gpt2[] = {m_gpt2, NULL};
    static const matcher k_llama3[] = {m_llama3, NULL};
    static const matcher k_qwen2[] = {m_qwen2, NULL};
    static const matcher k_dsl[] = {m_crlf, m_ds_letters, m_ds_punct, m_ws_end, m_cjk, m_num_run, NULL};
    static const matcher k_dsc[] = {m_crlf, m_dsc_letters, m_dsc_punct, m_cjk, m_num1, NULL};
    static const matcher k_falcon[] = {m_punct_falcon, m_gpt2, m_digits3, NULL};
    static const matcher k_starcoder[] = {m_num1, m_gpt2, NULL};
    static const matcher k_o200k[] = {m_o200k, NULL};
    const matcher *list;
    switch (kind) {
    case PRE_GPT2: list = k_gpt2; break;
    case PRE_LLAMA3: list = k_llama3; break;
    case PRE_QWEN2: list = k_qwen2; break;
    case PRE_DEEPSEEK_LLM: list = k_dsl; break;
    case PRE_DEEPSEEK_CODER: list = k_dsc; break;
    case PRE_FALCON: list = k_falcon; break;
    case PRE_STARCODER: list = k_starcoder; break;
    case PRE_O200K: list = k_o200k; break;
    default: list = k_default; break;
    }
    pctx c = {cp, fl};
    int *a = ends, *b = tmp;
    a[0] = n;
    int na = 1;
    for (const matcher *m = list; *m; m++) {
        na = run_stage(*m, &c, a, na, b);
        int *x = a;
        a = b;
        b = x;
    }
    if (a != ends) memcpy(ends, a, (size_t)na * sizeof(int));
    return na;
}
