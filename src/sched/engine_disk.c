/*
 * engine_disk.c — the engine's half of the disk tier: write-through,
 * prefetch at admission, restore into the prefix cache, cancelling reads
 * for running work, and kv_hint prefetch (the protocol: engine_disk.h).
 *
 * Thread: the engine thread.
 */
#include "engine_disk.h"

#include <stdlib.h>
#include <string.h>

/* A hinted context's spilled blocks are read back from disk this long
 * before its agent says it returns (a few hundred MB take well under a
 * second from the page cache or an SSD). Hints wait at most
 * ENGINE_HINT_MAX; a late agent's hint is dropped ENGINE_HINT_GIVE_UP_S
 * after its return. */
#define ENGINE_HINT_LEAD_S 2.0
#define ENGINE_HINT_MAX 256
#define ENGINE_HINT_GIVE_UP_S 60.0

/* Extends s->disk.keys to the first n full blocks of s->tok.ids. */
static void seq_keys(engine *en, seq *s, int n) {
    int B = en->o.block_tokens;
    if (n > s->disk.cap_keys) {
        s->disk.cap_keys = MAX(n, 2 * s->disk.cap_keys);
        s->disk.keys = xrealloc(s->disk.keys, (size_t)s->disk.cap_keys * sizeof *s->disk.keys);
    }
    for (int i = s->disk.n_keys; i < n; i++)
        s->disk.keys[i] = kvdisk_key_next(i ? s->disk.keys[i - 1] : KVDISK_KEY_SEED ^ s->salt, s->tok.ids + (size_t)i * B, B);
    if (n > s->disk.n_keys) s->disk.n_keys = n;
}

/* Write-through: offers the indexed (READY, full) blocks of s to the disk.
 * A full queue leaves the rest for the next step; blocks already on disk
 * cost a lookup. */
void sched__disk_write_through(engine *en, seq *s) {
    if (!en->disk || s->disk.n_done >= s->kv.n_indexed) return;
    int B = en->o.block_tokens;
    size_t E = en->kv->block_elems;
    seq_keys(en, s, s->kv.n_indexed);
    while (s->disk.n_done < s->kv.n_indexed) {
        int i = s->disk.n_done;
        int32_t b = s->kv.blocks[i];
        int rc = kvdisk_write_async(en->disk, s->disk.keys[i], i ? s->disk.keys[i - 1] : 0, s->tok.ids + (size_t)i * B,
                                    en->kv->k + (size_t)b * E, en->kv->v + (size_t)b * E);
        if (rc == ERR_RANGE) break; /* queue full: later */
        s->disk.n_done++;
    }
}

/* At admission, after the RAM match of n_ready blocks (their references are
 * in en->scratch): queues reads of the blocks after them that are on disk,
 * into fresh pool blocks, as many as the queue takes (the rest follow after
 * this batch is restored). Returns the number of reads queued (s then holds
 * the matched and the fresh blocks and waits), 0 when nothing is to load or
 * the sequence does not fit in the pool now, -1 when blocks are on disk but
 * the queue has no free slot (s waits for one rather than recompute). */
int sched__disk_prefetch(engine *en, seq *s, int n_ready, int n_match_cap, int n_need_blocks, kvpol_yield_for why) {
    s->disk.tried = true;
    seq_keys(en, s, n_match_cap);
    int m = 0;
    while (n_ready + m < n_match_cap && kvdisk_contains(en->disk, s->disk.keys[n_ready + m])) m++;
    if (m == 0) return 0;
    /* only when the whole sequence fits: restored blocks of a sequence that
     * cannot run yet would just be evicted again */
    if (!sched__ensure_free(en, n_need_blocks - n_ready, why)) return 0;
    int B = en->o.block_tokens;
    if (m > s->disk.cap_load_slot) { /* reserved at admission (seq_reserve): not reached */
        s->disk.load_slot = xrealloc(s->disk.load_slot, (size_t)m * sizeof *s->disk.load_slot);
        s->disk.cap_load_slot = m;
    }
    int q = 0;
    for (; q < m; q++) {
        int i = n_ready + q;
        int slot = kvdisk_read_async(en->disk, s->disk.keys[i], i ? s->disk.keys[i - 1] : 0, s->tok.ids + (size_t)i * B);
        if (slot < 0) break;
        s->disk.load_slot[q] = slot;
    }
    if (q == 0) {
        s->disk.tried = false; /* the queue is busy with others' reads: next step */
        return -1;
    }
    sched__seq_take_blocks(en, s, n_ready, q);
    s->disk.n_loading = q;
    s->disk.n_load_from = n_ready;
    return q;
}

/* A running sequence needs a block and none is left: the waiting sequences
 * that hold blocks for disk reads let them go (they look again when next
 * admitted). Returns whether any block was released. */
bool sched__disk_cancel_loads(engine *en) {
    bool any = false;
    for (int i = 0; i < en->waiting.n; i++) {
        seq *s = en->waiting.v[i];
        if (s->disk.n_loading == 0) continue;
        sched__seq_release_blocks(en, s);
        s->disk.tried = false;
        any = true;
    }
    return any;
}

/* Returns false while reads of s are running. When all are done: copies the
 * good leading run into its blocks, indexes the prefix READY (the tree takes
 * its references) and releases s's blocks, so admission matches it all from
 * RAM. */
bool sched__disk_restore(engine *en, seq *s) {
    for (int i = 0; i < s->disk.n_loading; i++)
        if (kvdisk_read_poll(en->disk, s->disk.load_slot[i]) == 1) return false;
    int n_ok = 0;
    size_t E = en->kv->block_elems;
    for (int i = 0; i < s->disk.n_loading; i++) {
        if (n_ok == i && kvdisk_read_poll(en->disk, s->disk.load_slot[i]) == 0) {
            int32_t b = s->kv.blocks[s->disk.n_load_from + i];
            kvdisk_read_take(en->disk, s->disk.load_slot[i], en->kv->k + (size_t)b * E, en->kv->v + (size_t)b * E);
            n_ok++;
        } else {
            kvdisk_read_drop(en->disk, s->disk.load_slot[i]);
        }
    }
    s->disk.tried = n_ok < s->disk.n_loading; /* all good: look for the next batch */
    s->disk.n_loading = 0;
    int n_full = s->disk.n_load_from + n_ok;
    if (n_ok > 0) {
        sched__scratch_reserve(en, n_full);
        memcpy(en->scratch, s->kv.blocks, (size_t)n_full * sizeof *s->kv.blocks);
        if (radix_insert_salted(en->tree, s->salt, s->tok.ids, n_full, en->scratch, RADIX_READY) >= 0)
            en->cnt.kv_disk_restored_tokens_total += (uint64_t)n_ok * (uint64_t)en->o.block_tokens;
    }
    sched__seq_release_blocks(en, s);
    return true;
}

/* ---- kv_hint prefetch ---- */

/* A context whose agent said when it comes back (kv_hint next_use_s): its
 * blocks are on disk (write-through), and may leave RAM meanwhile (the pin
 * expires or yields, or kv_ttl 0 asked for no pin). ENGINE_HINT_LEAD_S
 * before the return, hints_step reads the spilled ones back into free or
 * LRU-evictable blocks — never a protected pin's — and indexes them, and
 * pins the whole prefix until the return (a pin with that prediction), so
 * the agent's turn finds it in RAM. A hint of the same session replaces the
 * older one; kv_hint "done" drops the session's. */

static void hint_drop(engine *en, int i) {
    seq *s = en->hints[i].s;
    sched__seq_release_blocks(en, s);
    sched__seq_free(s);
    en->hints[i] = en->hints[--en->n_hints];
}

void sched__hint_drop_session(engine *en, uint64_t session) {
    if (!session) return;
    for (int i = 0; i < en->n_hints;)
        if (en->hints[i].session == session) hint_drop(en, i);
        else i++;
}

void sched__hint_add(engine *en, const seq *src, uint64_t session, double next_use_s) {
    int n = src->kv.n_indexed;
    if (!en->disk || n <= 0 || !(next_use_s > 0)) return;
    sched__hint_drop_session(en, session);
    if (en->n_hints == ENGINE_HINT_MAX) {
        int oldest = 0;
        for (int i = 1; i < en->n_hints; i++)
            if (en->hints[i].return_ns < en->hints[oldest].return_ns) oldest = i;
        hint_drop(en, oldest);
    }
    if (!en->hints) en->hints = xcalloc(ENGINE_HINT_MAX, sizeof *en->hints);
    struct hint *h = &en->hints[en->n_hints++];
    int64_t now = sched__now(en);
    h->session = session;
    h->return_ns = now + (int64_t)(next_use_s * 1e9);
    h->start_ns = h->return_ns - (int64_t)(ENGINE_HINT_LEAD_S * 1e9);
    size_t nt = (size_t)n * (size_t)en->o.block_tokens;
    h->s = calloc(1, sizeof *h->s);
    if (!h->s || !sched__seq_reserve(en, h->s, (int)nt)) { /* a prefetch is optional */
        log_warn("engine: out of memory for a kv_hint prefetch of %zu tokens (dropped)", nt);
        if (h->s) sched__seq_free(h->s);
        en->n_hints--;
        return;
    }
    memcpy(h->s->tok.ids, src->tok.ids, nt * sizeof *h->s->tok.ids);
    h->s->salt = src->salt;
    h->s->tok.n = (int)nt;
    h->loaded = false;
}

/* Starts, advances and finishes the prefetch of hinted contexts that are
 * due. */
void sched__hints_step(engine *en) {
    if (!en->n_hints) return;
    int64_t now = sched__now(en);
    int B = en->o.block_tokens;
    for (int i = 0; i < en->n_hints;) {
        struct hint *h = &en->hints[i];
        seq *s = h->s;
        int n_full = s->tok.n / B;
        if (s->disk.n_loading > 0) {
            uint64_t before = en->cnt.kv_disk_restored_tokens_total;
            if (!sched__disk_restore(en, s)) {
                i++;
                continue;
            }
            uint64_t got = en->cnt.kv_disk_restored_tokens_total - before;
            en->cnt.kv_hint_prefetched_tokens_total += got;
            h->loaded |= got > 0;
            /* then, below: the next batch if the queue did not take all, or
             * the pin */
        }
        if (now > h->return_ns + (int64_t)(ENGINE_HINT_GIVE_UP_S * 1e9)) {
            hint_drop(en, i);
            continue;
        }
        if (now < h->start_ns) {
            i++;
            continue;
        }
        sched__scratch_reserve(en, n_full + 1);
        int n_pending = 0;
        int n_ready = radix_match_salted(en->tree, s->salt, s->tok.ids, n_full * B, en->scratch, n_full, &n_pending);
        if (n_ready < 0) n_ready = 0, n_pending = 0;
        int q = 0;
        if (n_ready < n_full && n_pending == 0) {
            s->disk.tried = false;
            q = sched__disk_prefetch(en, s, n_ready, n_full, n_full, KVPOL_FOR_NEW);
        }
        if (q > 0) { /* s holds the matched blocks and the reads */
            i++;
            continue;
        }
        if (q < 0) { /* the I/O queue is busy: next step */
            for (int j = 0; j < n_ready + n_pending; j++) kvpool_unref(en->pool, en->scratch[j]);
            i++;
            continue;
        }
        /* all in RAM now (or what is missing is not on disk, or does not
         * fit without taking a protected pin): pin what is there until the
         * agent is back, and forget the hint */
        if (en->pol && n_ready > 0 && n_pending == 0 && (h->loaded || h->session)) {
            double left = (double)(h->return_ns - now) / 1e9;
            kvpolicy_pin(en->pol, en->scratch, n_ready, h->session, NULL, -1, left > 0 ? left : 0, 0, now);
        } else {
            for (int j = 0; j < n_ready; j++) kvpool_unref(en->pool, en->scratch[j]);
        }
        for (int j = n_ready; j < n_ready + n_pending; j++) kvpool_unref(en->pool, en->scratch[j]);
        hint_drop(en, i);
    }

}

void sched__hints_free(engine *en) {
    while (en->n_hints) hint_drop(en, en->n_hints - 1);
}
