/* test_attn.c — grouped attention: kern->attn_part over groups of queries,
 * and the forward pass's grouping of tokens that share a chunk's rows.
 *
 *   - the grouped chunk kernel of every table against the scalar reference
 *     (random q, K, V; head_dim 64, 128, 80, 40 and 7; 1 to 8 heads per kv
 *     head; groups of 1 to 37 tokens, so several blocks of ATTN_QBLOCK
 *     queries; every token with its own end, whole and partial chunks; a
 *     scattered block table with blocks of 16 and of 7 positions, chunks
 *     starting at multiples of ATTN_CHUNK and elsewhere);
 *   - bitwise: each query's (m, l, o) from a group equals the same query
 *     computed alone (one token, one head) and inside groups of sizes 1 to
 *     all, runs starting off token 0;
 *   - the two x86 tables give the same bits (the kernel fixes every sum's
 *     order, whatever the vector width);
 *   - forward, every table: a 40-token turn on top of a 520-token context
 *     gives the same logits bits prefilled in one batch, in pieces of 13,
 *     token by token, with attention forced into waves of a few tokens,
 *     and inside a batch with a sibling sequence that
 *     shares the context's blocks (as the radix cache shares them) and runs
 *     its own tail and turn; then both decode one token together == alone.
 */
#include "base/base.h"
#include "kern/attn.h"
#include "kern/kern.h"
#include "model/model.h"
#include "test.h"

static const char *tables[8];
static int n_tables;

/* ---- the kernel ------------------------------------------------------------------ */

typedef struct kvfix {
    uint16_t *k, *v;
    int32_t *table;
    attn_view view;
} kvfix;

/* n_pos positions of n_kv heads in blocks of bt, block i of the sequence
 * stored at a scattered physical block. */
static void kvfix_init(kvfix *f, int n_kv, int hd, int bt, int n_pos) {
    const int kv_dim = n_kv * hd, nb = (n_pos + bt - 1) / bt + 1;
    const size_t stride = (size_t)bt * kv_dim + 3; /* odd: rows are unaligned */
    f->k = xmalloc(sizeof(uint16_t) * stride * nb);
    f->v = xmalloc(sizeof(uint16_t) * stride * nb);
    for (size_t i = 0; i < stride * (size_t)nb; i++)
        f->k[i] = f32_to_fp16(rng_gauss() * 1.5f), f->v[i] = f32_to_fp16(rng_gauss());
    f->table = xmalloc(sizeof(int32_t) * nb);
    for (int i = 0; i < nb; i++) f->table[i] = (int32_t)((i * 5 + 2) % nb); /* nb is not a multiple of 5 below */
    f->view = (attn_view){.k = f->k, .v = f->v, .block_stride = stride, .kv_dim = kv_dim, .head_dim = hd,
                          .block_tokens = bt, .block_table = f->table};
}

static void kvfix_free(kvfix *f) { free(f->k), free(f->v), free(f->table); }

/* Outputs of n_tok tokens x n_head heads. */
typedef struct outs {
    float *m, *l, *o;
} outs;

static outs outs_new(int n_tok, int n_head, int hd) {
    outs r = {xmalloc(sizeof(float) * n_tok * n_head), xmalloc(sizeof(float) * n_tok * n_head),
              xmalloc(sizeof(float) * n_tok * n_head * hd)};
    return r;
}
static void outs_free(outs *r) { free(r->m), free(r->l), free(r->o); }

/* Runs kern->attn_part (or the scalar part) for tokens [a, b) of the group. */
static void run_group(bool scalar, const attn_view *v, int kvh, int n_head, const float *q, const int *p1, int a, int b,
                      int p0, float scale, outs *r, float *scratch) {
    const int hd = v->head_dim;
    attn_query qs[64];
    for (int t = a; t < b; t++)
        qs[t - a] = (attn_query){q + (size_t)t * n_head * hd, r->m + t * n_head, r->l + t * n_head,
                                 r->o + (size_t)t * n_head * hd, p1[t]};
    if (scalar) attn_part_scalar(v, kvh, n_head, qs, b - a, p0, scale, scratch);
    else kern->attn_part(v, kvh, n_head, qs, b - a, p0, scale, scratch);
}

static bool same_query(const outs *x, const outs *y, int r, int hd) {
    return memcmp(&x->m[r], &y->m[r], sizeof(float)) == 0 && memcmp(&x->l[r], &y->l[r], sizeof(float)) == 0 &&
           memcmp(x->o + (size_t)r * hd, y->o + (size_t)r * hd, sizeof(float) * hd) == 0;
}

static void test_group_kernel(void) {
    static const int hds[] = {64, 128, 80, 40, 7};
    static const int heads[] = {1, 3, 4, 8};
    static const int toks[] = {1, 2, 5, 17, 37};
    static const int bts[] = {16, 7};
    for (size_t hi = 0; hi < ARRAY_LEN(hds); hi++)
        for (size_t bi = 0; bi < ARRAY_LEN(bts); bi++) {
            const int hd = hds[hi], n_kv = 2, n_pos = 3 * ATTN_CHUNK + 40;
            kvfix f;
            kvfix_init(&f, n_kv, hd, bts[bi], n_pos);
            float *scratch = xaligned_alloc(sizeof(float) * attn_part_scratch_floats(hd));
            const float scale = 1.0f / sqrtf((float)hd);
            for (size_t ni = 0; ni < ARRAY_LEN(heads); ni++)
                for (size_t ti = 0; ti < ARRAY_LEN(toks); ti++) {
                    const int n_head = heads[ni], n_tok = toks[ti];
                    /* p0: a chunk start, or (any p0 works) an odd one */
                    const int p0 = (ti % 3 == 2) ? 101 : (int)(ti % 3) * ATTN_CHUNK;
                    float *q = xmalloc(sizeof(float) * n_tok * n_head * hd);
                    for (int i = 0; i < n_tok * n_head * hd; i++) q[i] = rng_gauss() * 2;
                    int p1[64];
                    for (int t = 0; t < n_tok; t++) /* whole chunks, partial ends, 1-position ends */
                        p1[t] = p0 + (t % 4 == 0 ? ATTN_CHUNK : t % 4 == 1 ? 1 : 1 + (int)(rng_u64() % ATTN_CHUNK));
                    outs ref = outs_new(n_tok, n_head, hd);
                    run_group(true, &f.view, 1, n_head, q, p1, 0, n_tok, p0, scale, &ref, scratch);
                    outs all[8];
                    for (int tb = 1; tb < n_tables; tb++) {
                        CHECK_EQ_INT(kern_select(tables[tb]), 0);
                        outs *g = &all[tb];
                        *g = outs_new(n_tok, n_head, hd);
                        run_group(false, &f.view, 1, n_head, q, p1, 0, n_tok, p0, scale, g, scratch);
                        int bad = 0, bits = 0;
                        for (int r = 0; r < n_tok * n_head; r++) {
                            const int n = p1[r / n_head] - p0;
                            bad += !(fabsf(g->m[r] - ref.m[r]) <= 1e-5f * (1 + fabsf(ref.m[r])));
                            bad += !(fabsf(g->l[r] - ref.l[r]) <= 1e-5f * ref.l[r]);
                            for (int d = 0; d < hd; d++) {
                                const float x = g->o[(size_t)r * hd + d], y = ref.o[(size_t)r * hd + d];
                                bad += !(fabsf(x - y) <= 2e-5f * (float)n + 1e-5f * fabsf(y));
                            }
                        }
                        CHECK_MSG(bad == 0, "%s attn_part hd=%d bt=%d heads=%d tokens=%d p0=%d: %d values off scalar",
                                  tables[tb], hd, bts[bi], n_head, n_tok, p0, bad);
                        /* each query alone (one token, one head) and the group's
                         * tokens in runs of every size: the same bits */
                        outs one = outs_new(n_tok, n_head, hd);
                        for (int r = 0; r < n_tok * n_head; r++) {
                            const int t = r / n_head;
                            attn_query aq = {q + (size_t)r * hd, one.m + r, one.l + r, one.o + (size_t)r * hd, p1[t]};
                            kern->attn_part(&f.view, 1, 1, &aq, 1, p0, scale, scratch);
                            bits += !same_query(&one, g, r, hd);
                        }
                        static const int sizes[] = {1, 2, 3, 4, 6, 7, 16, 64};
                        for (size_t zi = 0; zi < ARRAY_LEN(sizes) && bits == 0; zi++) {
                            const int size = MIN(sizes[zi], n_tok);
                            outs part = outs_new(n_tok, n_head, hd);
                            for (int a = size / 2; a < n_tok; a += size) /* runs start off zero */
                                run_group(false, &f.view, 1, n_head, q, p1, a, MIN(n_tok, a + size), p0, scale, &part,
                                          scratch);
                            if (size / 2 > 0)
                                run_group(false, &f.view, 1, n_head, q, p1, 0, size / 2, p0, scale, &part, scratch);
                            for (int r = 0; r < n_tok * n_head; r++) bits += !same_query(&part, g, r, hd);
                            outs_free(&part);
                        }
                        CHECK_MSG(bits == 0, "%s attn_part hd=%d heads=%d tokens=%d: %d queries differ alone vs grouped",
                                  tables[tb], hd, n_head, n_tok, bits);
                        outs_free(&one);
                    }
                    /* the x86 tables agree to the bit */
                    for (int tb = 2; tb < n_tables; tb++) {
                        int diff = 0;
                        for (int r = 0; r < n_tok * n_head; r++) diff += !same_query(&all[1], &all[tb], r, hd);
                        CHECK_MSG(diff == 0, "%s vs %s: %d queries differ", tables[1], tables[tb], diff);
                    }
                    for (int tb = 1; tb < n_tables; tb++) outs_free(&all[tb]);
                    kern_select("scalar");
                    outs_free(&ref);
                    free(q);
                }
            free(scratch);
            kvfix_free(&f);
        }
}

/* ---- forward ---------------------------------------------------------------------- */

enum { CTX = 520, TURN = 40, BT = 16 };

typedef struct fwd {
    const model *m;
    model_state *st;
    model_kv *kv;
    model_seq seqs[2];
    int32_t tables[2][64];
    float *logits;
} fwd;

static const int32_t *fwd_tokens(void) {
    static int32_t toks[CTX + TURN + 1];
    for (int i = 0; i < CTX + TURN + 1; i++) toks[i] = (int32_t)(1 + (i * 131 + 7) % 500);
    return toks;
}

static void fwd_init(fwd *f, const model *m) {
    memset(f, 0, sizeof *f);
    f->m = m;
    const int nb = (CTX + TURN + 1 + BT - 1) / BT;
    f->kv = model_kv_new(m, 2 * nb, BT);
    f->st = model_state_new(m, 2 * (CTX + TURN), CTX + TURN + 8, 2);
    /* sequence 1 shares sequence 0's blocks for the context's whole blocks */
    const int shared = CTX / BT;
    for (int i = 0; i < nb; i++) {
        f->tables[0][i] = (int32_t)(2 * nb - 1 - 2 * i);
        f->tables[1][i] = i < shared ? f->tables[0][i] : (int32_t)(2 * i);
    }
    f->seqs[0] = (model_seq){f->tables[0], nb};
    f->seqs[1] = (model_seq){f->tables[1], nb};
    f->logits = xmalloc(sizeof(float) * m->cfg.n_vocab * 2 * (CTX + TURN));
}

static void fwd_free(fwd *f) {
    model_state_free(f->st);
    model_kv_free(f->kv);
    free(f->logits);
}

/* Runs positions [a, b) of sequence s in batches of `step`, logits for every
 * token; copies the logits of positions >= CTX to out[pos - CTX]. */
static void fwd_run(fwd *f, int s, int a, int b, int step, float *out) {
    const int32_t *toks = fwd_tokens();
    const int V = f->m->cfg.n_vocab;
    int32_t pos[CTX + TURN], sid[CTX + TURN];
    uint8_t want[CTX + TURN];
    for (int p0 = a; p0 < b; p0 += step) {
        const int n = MIN(step, b - p0);
        for (int i = 0; i < n; i++) pos[i] = p0 + i, sid[i] = s, want[i] = 1;
        model_batch bt = {.n_tokens = n, .token = toks + p0, .pos = pos, .seq = sid, .logits = want, .n_seqs = 2,
                          .seqs = f->seqs};
        err_t e = {0};
        CHECK_EQ_INT(model_forward(f->m, f->st, f->kv, &bt, f->logits, &e), n);
        for (int i = 0; i < n; i++)
            if (p0 + i >= CTX && out) memcpy(out + (size_t)(p0 + i - CTX) * V, f->logits + (size_t)i * V, sizeof(float) * V);
    }
}

/* On a fresh cache: sequence 0's context in batches of ctx_step, then its
 * turn in batches of turn_step (attention in waves of at most `parts`
 * (token, chunk) pairs when parts is set), the turn's logits into out. */
static void fwd_turn(const model *m, int ctx_step, int turn_step, const char *parts, float *out) {
    fwd f;
    if (parts) setenv("KVLOOM_ATTN_PARTS", parts, 1);
    fwd_init(&f, m);
    if (parts) unsetenv("KVLOOM_ATTN_PARTS");
    fwd_run(&f, 0, 0, CTX, ctx_step, NULL);
    fwd_run(&f, 0, CTX, CTX + TURN, turn_step, out);
    fwd_free(&f);
}

static void test_forward_groups(void) {
    model *m = test_load_stories();
    if (!m) return;
    const int V = m->cfg.n_vocab;
    const int32_t *toks = fwd_tokens();
    float *one = xmalloc(sizeof(float) * V * (TURN + 1)), *x = xmalloc(sizeof(float) * V * (TURN + 1));
    for (int tb = 0; tb < n_tables; tb++) {
        CHECK_EQ_INT(kern_select(tables[tb]), 0);
        fwd f;
        /* the reference: context in one batch, then the turn in one batch */
        fwd_turn(m, CTX, TURN, NULL, one);
        /* context in pieces of 13, turn token by token */
        fwd_turn(m, 13, 1, NULL, x);
        CHECK_MSG(memcmp(one, x, sizeof(float) * V * TURN) == 0, "%s: turn logits differ (pieces / one by one)",
                  tables[tb]);
        /* the same batches with attention forced into waves of a few
         * tokens (parts for at most 7 (token, chunk) pairs at once) */
        fwd_turn(m, CTX, TURN, "7", x);
        CHECK_MSG(memcmp(one, x, sizeof(float) * V * TURN) == 0, "%s: turn logits differ (attention in waves)",
                  tables[tb]);
        /* context token by token, turn in one batch */
        fwd_turn(m, 1, TURN, NULL, x);
        CHECK_MSG(memcmp(one, x, sizeof(float) * V * TURN) == 0, "%s: turn logits differ (context one by one)",
                  tables[tb]);
        /* a sibling sharing the context's whole blocks: sequence 1 computes
         * its tail of the context and its turn in the batch of sequence 0's
         * turn (its chunks 0 and 1 are grouped with sequence 0's) */
        fwd_init(&f, m);
        fwd_run(&f, 0, 0, CTX, 100, NULL);
        {
            const int tail0 = CTX / BT * BT, n1 = CTX + TURN - tail0, n = TURN + n1;
            int32_t tok[2 * (CTX + TURN)], pos[2 * (CTX + TURN)], sid[2 * (CTX + TURN)];
            uint8_t want[2 * (CTX + TURN)];
            for (int i = 0; i < n1; i++) /* sequence 1 first, then sequence 0 */
                tok[i] = toks[tail0 + i], pos[i] = tail0 + i, sid[i] = 1, want[i] = tail0 + i >= CTX;
            for (int i = 0; i < TURN; i++)
                tok[n1 + i] = toks[CTX + i], pos[n1 + i] = CTX + i, sid[n1 + i] = 0, want[n1 + i] = 1;
            model_batch b = {.n_tokens = n, .token = tok, .pos = pos, .seq = sid, .logits = want, .n_seqs = 2,
                             .seqs = f.seqs};
            err_t e = {0};
            CHECK_EQ_INT(model_forward(m, f.st, f.kv, &b, f.logits, &e), 2 * TURN);
            CHECK_MSG(memcmp(one, f.logits, sizeof(float) * V * TURN) == 0, "%s: sibling's turn differs", tables[tb]);
            CHECK_MSG(memcmp(one, f.logits + (size_t)TURN * V, sizeof(float) * V * TURN) == 0,
                      "%s: turn next to a sibling differs", tables[tb]);
            /* both decode the next token together (shared chunks grouped
             * across the sequences) == sequence 0 alone */
            int32_t dt[2] = {toks[CTX + TURN], toks[CTX + TURN]}, dp[2] = {CTX + TURN, CTX + TURN}, ds[2] = {1, 0};
            model_batch d2 = {.n_tokens = 2, .token = dt, .pos = dp, .seq = ds, .logits = (const uint8_t *)"\1\1",
                              .n_seqs = 2, .seqs = f.seqs};
            CHECK_EQ_INT(model_forward(m, f.st, f.kv, &d2, x, &e), 2);
            model_batch d1 = {.n_tokens = 1, .token = dt, .pos = dp, .seq = ds + 1, .n_seqs = 2, .seqs = f.seqs};
            CHECK_EQ_INT(model_forward(m, f.st, f.kv, &d1, f.logits, &e), 1);
            CHECK_MSG(memcmp(x, f.logits, sizeof(float) * V) == 0 && memcmp(x + V, f.logits, sizeof(float) * V) == 0,
                      "%s: decode with a shared prefix differs from alone", tables[tb]);
        }
        fwd_free(&f);
    }
    kern_select("scalar");
    free(one), free(x);
    model_free(m);
}

int main(void) {
    n_tables = kern_available(tables, 8);
    CHECK(n_tables >= 1);
    test_group_kernel();
    test_forward_groups();
    return test_summary("test_attn");
}
