/*
 * engine_disk.h — the engine's half of the disk tier (kv/disk.h is the
 * store): when the engine writes blocks to disk, reads them back, restores
 * them into the prefix cache and cancels reads. Engine files only
 * (engine_impl.h); everything runs on the engine thread (the store's I/O
 * threads only move bytes and wake the engine, engine_wake).
 *
 * A block's disk key is the hash chain of its prefix (kvdisk_key_next,
 * seeded with the sequence's cache salt), so a key names the block's
 * position and every token before it.
 *
 *   write    Write-through. A block is offered to the disk once it is a
 *            full block the radix tree holds READY for the sequence
 *            (kv.n_indexed): after every step the sequence ran in
 *            (step_advance) and when it finishes (not when cancelled). A
 *            full write queue leaves the rest for the next step; a block
 *            already on disk costs a lookup. Draft (speculative) K/V is
 *            never indexed, so never written.
 *   read     At admission (try_admit), after the RAM match: the blocks
 *            after it that are on disk are read into fresh pool blocks, as
 *            many as the read queue takes, but only when the whole
 *            sequence fits in the pool (restored blocks of a sequence that
 *            cannot run would be evicted again). The sequence then waits
 *            (it holds the matched and the fresh blocks).
 *   restore  When all of a sequence's reads are done (polled at its next
 *            admission attempt, and every step for every waiting sequence,
 *            so read blocks never sit in a sequence that is not tried): the
 *            good leading run is indexed READY (the tree takes its
 *            references) and the sequence's blocks are released, so
 *            admission matches the prefix from RAM like any cached one.
 *   cancel   A running sequence needs a block and none is free: waiting
 *            sequences holding blocks for reads let them go (their reads
 *            are dropped; they look at the disk again when next admitted).
 *            A preempted sequence also looks again (its blocks may have
 *            reached the disk meanwhile).
 *   hints    kv_hint next_use_s: a finished turn's context is read back
 *            ENGINE_HINT_LEAD_S before its agent said it returns and pinned
 *            until then (engine_disk.c, "kv_hint prefetch").
 */
#ifndef KVLOOM_ENGINE_DISK_H
#define KVLOOM_ENGINE_DISK_H

#include "engine_impl.h"

/* Write-through: offers the indexed (READY, full) blocks of s to the disk. */
void sched__disk_write_through(engine *en, seq *s);
/* At admission, after the RAM match of n_ready blocks (their references in
 * en->scratch): queues reads of the blocks after them that are on disk.
 * Returns the number of reads queued (s then holds the matched and fresh
 * blocks and waits), 0 when nothing is to load or the sequence does not fit
 * now, -1 when blocks are on disk but the read queue is full (s waits for a
 * slot rather than recompute; the caller drops the matched references). */
int sched__disk_prefetch(engine *en, seq *s, int n_ready, int n_match_cap, int n_need_blocks, kvpol_yield_for why);
/* Returns false while reads of s are running; when all are done, indexes
 * the good leading run READY and releases s's blocks. */
bool sched__disk_restore(engine *en, seq *s);
/* Waiting sequences give back the blocks of their disk reads; returns
 * whether any block was released. */
bool sched__disk_cancel_loads(engine *en);

/* kv_hint: remembers a finished turn's indexed prefix to read back before
 * its agent returns (no-op without the disk tier). */
void sched__hint_add(engine *en, const seq *src, uint64_t session, double next_use_s);
/* Forgets the session's hint (its agent is back, or said it is done). */
void sched__hint_drop_session(engine *en, uint64_t session);
/* Starts, advances and finishes the prefetch of hinted contexts that are due. */
void sched__hints_step(engine *en);
/* Drops every hint (engine_free). */
void sched__hints_free(engine *en);

#endif
