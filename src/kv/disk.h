/*
 * disk.h — the disk tier of the KV cache: a content-addressed store of full
 * KV blocks in one directory (`kvloom serve --kv-disk DIR`), so a prefix that
 * left RAM, or a whole server that restarted, is read back instead of
 * recomputed.
 *
 * Place in the flow: kv/, beside the pool and the radix tree. The engine
 * (sched/) writes a block's bytes through it when the block becomes READY and
 * reads blocks back at admission; the tree knows only RAM blocks, and this
 * store's index is the DISK tier (prefix key -> file). It includes model/
 * only to fingerprint a model and to know a block's size.
 *
 * Keys. A block is named by the hash of its WHOLE token prefix (every token
 * from the sequence start through the block's end), chained block by block:
 *
 *   key[0] = H(tokens of block 0, seed KVDISK_KEY_SEED)
 *   key[i] = H(tokens of block i, seed key[i-1])       (kvdisk_key_next)
 *
 * and by the model's fingerprint (kvdisk_fingerprint: the tensor table, a
 * hash of every weight byte, hyper-parameters, KV layout and dtype, block
 * size, the kernel table).
 *
 * One file per block, DIR/<fingerprint>-<key>.kvb (16 hex digits each),
 * every integer little-endian:
 *
 *   off  size  field
 *     0     8  magic "KVLMBLK\0"
 *     8     4  format version (KVDISK_VERSION)
 *    12     4  header bytes = 56 + 4 * block_tokens
 *    16     8  model fingerprint
 *    24     8  key (the prefix hash)
 *    32     8  parent key (the prefix hash of the block before; 0 for the first)
 *    40     4  block_tokens
 *    44     4  0 (reserved)
 *    48     8  payload bytes P
 *    56  4*bt  the block's own token ids
 *   hdr     P  payload: the block's K slab, then its V slab, all layers,
 *              byte for byte as model_kv holds them (model.h)
 * hdr+P     8  checksum of every byte before it (kvdisk_checksum)
 *
 * Recovery rules. A file is written to a temporary name and renamed, so a
 * crash or kill -9 never leaves a torn file under a valid name (temporaries
 * are deleted at the next open). A file whose size, header or checksum is
 * wrong, or whose tokens/parent differ from what was asked, is never served:
 * it is deleted and counted as corrupt. Files of another model fingerprint or
 * format version are ignored (kept, not counted in the size) and counted as
 * foreign. Past max_bytes the least recently used files are deleted (a read
 * refreshes a file's mtime, so the order survives restarts). A failed write
 * (full disk, permissions) is counted and dropped (on ENOSPC the tier first
 * deletes 16 of its own least recently used files and tries once more, cap
 * or not): the block is recomputed
 * when next needed, never an error. A full disk fails every write, so only
 * the first failure of an outage is logged (a warning) and the first
 * success after it (info); the failures between are only counted.
 *
 * A shared directory. Several servers (of one model) may use one DIR at the
 * same time, e.g. on a network filesystem behind a load balancer: names are
 * content addresses, so two writers of one block write the same bytes and
 * the last rename wins; a writer holds an flock on its temporary, so a
 * starting server deletes only temporaries nobody writes (crash leftovers);
 * a lookup that misses our index looks for the file (another server may have
 * written it) and an I/O thread skips a write whose file is there; a server
 * with a cap rescans DIR after writing 1/16 of the cap (or 2 s after a write)
 * and deletes the least recently used files of all servers (by mtime, which
 * reads refresh), so the cap bounds the whole directory, exceeded at most by
 * what the others wrote since (1/16 of the cap each). A file another server
 * deletes under us is ERR_NOTFOUND: recomputed.
 *
 * Threads. kvdisk_open starts n_threads I/O threads. All functions may be
 * called from any thread (one mutex guards the index, the counters and the
 * job slots; file I/O runs outside it). The engine thread only enqueues
 * (kvdisk_write_async / kvdisk_read_async) and polls (kvdisk_read_poll);
 * jobs copy bytes into / out of the store's own slot buffers, so the I/O
 * threads never touch the pool, the tree or model_kv.
 */
#ifndef KVLOOM_KVDISK_H
#define KVLOOM_KVDISK_H

#include "../base/base.h"
#include "../model/model.h"

#define KVDISK_VERSION 1u
#define KVDISK_KEY_SEED 0x6b766c6f6f6d4b56ull /* "kvloomKV" */

typedef struct kvdisk kvdisk;

typedef struct kvdisk_opts {
    const char *dir;       /* created if missing (one level or more)             */
    uint64_t max_bytes;    /* size cap of our files; 0 = no cap                  */
    uint64_t fingerprint;  /* kvdisk_model_fingerprint                           */
    int block_tokens;      /* tokens per block (>= 1)                            */
    size_t payload_bytes;  /* K + V bytes of one block (model_kv_block_bytes), even */
    int n_threads;         /* I/O threads; 0 = none (only the synchronous calls) */
    int n_slots;           /* bounded queue: jobs in flight at most (default 64) */
    /* Called by an I/O thread after each finished read (may be NULL), so an
     * idle engine wakes up to take the block. Must not call back into kvdisk. */
    void (*on_read_done)(void *ctx);
    void *on_read_done_ctx;
} kvdisk_opts;

typedef struct kvdisk_stats {
    uint64_t n_files;            /* blocks on disk (indexed, ours)                */
    uint64_t n_bytes;            /* their total size                              */
    uint64_t bytes_written;      /* file bytes written (renamed into place)       */
    uint64_t bytes_read;         /* file bytes read and served                    */
    uint64_t blocks_written, blocks_read;
    uint64_t rejected_corrupt;   /* torn, truncated or failing the checksum       */
    uint64_t rejected_foreign;   /* another model or format version (at open)     */
    uint64_t write_errors;       /* a write that failed (full disk ...): dropped  */
    uint64_t writes_dropped;     /* not queued: queue full, or larger than the cap */
    uint64_t evicted;            /* deleted to stay under max_bytes               */
    uint64_t tmp_removed;        /* leftover temporaries deleted at open          */
    uint64_t discovered;         /* files another server wrote, found on lookup   */
    uint64_t mem_bytes;          /* its memory: the job slots' buffers (one file
                                    each) and the index                         */
} kvdisk_stats;

/* A fingerprint of everything that decides a block's bytes: architecture and
 * hyper-parameters, the tensor table (names, types, shapes, offsets), a
 * sample of every tensor's bytes (its first, middle and last 256 bytes), the
 * file size, the KV layout and dtype (f16) and block_tokens. Never 0. */
uint64_t kvdisk_model_fingerprint(const model *m, int block_tokens);

/* The fingerprint a server uses: kvdisk_model_fingerprint mixed with a hash
 * of every byte of every tensor and with the kernel table in use (its name:
 * tables may round differently, so the K/V bytes of one prompt may differ
 * between them). Hashing gigabytes takes seconds, so the weights' hash is
 * cached in DIR/model-hashes by the model file's identity (device, inode,
 * size, mtime, ctime; gguf_file_identity): a restart of an unchanged file
 * reads one line. A model edited in place changes its mtime and ctime, so
 * its hash is computed again. A cache that cannot be written only costs
 * the hash at the next start. Never 0. */
uint64_t kvdisk_fingerprint(const model *m, int block_tokens, const char *dir);

/* key[i] from key[i-1] (prev = KVDISK_KEY_SEED for block 0) and the block's
 * block_tokens tokens. */
uint64_t kvdisk_key_next(uint64_t prev, const int32_t *tokens, int block_tokens);

/* The file checksum over n bytes (64-bit, word-at-a-time, stable across runs
 * and machines of one byte order). Exposed for tests. */
uint64_t kvdisk_checksum(const void *p, size_t n);

/* Opens (creating DIR if needed) and rebuilds the index from DIR: every
 * *.kvb file of this fingerprint and version whose size matches is indexed
 * (the checksum is verified when the file is read); wrong-size or bad-header
 * ones are deleted and counted corrupt, others' counted foreign, temporaries
 * deleted. Then deletes the oldest past max_bytes. Errors: ERR_IO when DIR
 * cannot be created or read, ERR_INVALID for bad options. */
int kvdisk_open(const kvdisk_opts *o, kvdisk **out, err_t *e);
/* Finishes queued writes, stops the threads, frees. NULL is a no-op. */
void kvdisk_close(kvdisk *d);

/* Whether the block `key` is on disk: indexed, or (a directory shared with
 * other servers) a file of ours another process wrote since our scan, whose
 * header is checked and which is then indexed. */
bool kvdisk_contains(kvdisk *d, uint64_t key);

/* ---- synchronous (tests, tools; the calling thread does the I/O) ---- */
/* Writes one block: tokens (block_tokens), k and v (payload_bytes / 2 each).
 * Returns 0, or ERR_IO (the write failed; counted, nothing left behind), or
 * ERR_RANGE (one file is larger than max_bytes). Replaces an existing file. */
int kvdisk_write(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, const void *k, const void *v);
/* Reads block `key` into k and v after checking everything (see Recovery).
 * Returns 0, ERR_NOTFOUND (not indexed, or the file vanished), or
 * ERR_FORMAT (corrupt or not what was asked: deleted and counted). */
int kvdisk_read(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, void *k, void *v);

/* ---- asynchronous (the engine thread) ---- */
/* Copies the block into a free slot and queues its write (writes may hold at
 * most three quarters of the slots; the rest are for reads). Returns 0 queued,
 * 1 already on disk or queued (refreshed, nothing to do), ERR_RANGE no free
 * slot or no threads (counted as dropped; try again later), ERR_UNSUPPORTED
 * when one file is larger than max_bytes (never worth retrying). */
int kvdisk_write_async(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, const void *k,
                       const void *v);
/* Queues the read of an indexed block. Returns the slot id (>= 0) to poll,
 * ERR_NOTFOUND when not on disk, ERR_RANGE when no slot is free. */
int kvdisk_read_async(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens);
/* 1 while the read runs, 0 when its bytes are ready (kvdisk_read_take),
 * < 0 when it failed (ERR_NOTFOUND / ERR_FORMAT / ERR_IO: recompute; the
 * slot still needs kvdisk_read_drop). */
int kvdisk_read_poll(kvdisk *d, int slot);
/* After a poll returned 0: copies the block's K and V out and frees the slot. */
void kvdisk_read_take(kvdisk *d, int slot, void *k, void *v);
/* Frees a read slot in any state (a running read is discarded when done). */
void kvdisk_read_drop(kvdisk *d, int slot);
/* Blocks until every queued write is on disk (tests, shutdown). */
void kvdisk_flush(kvdisk *d);

void kvdisk_get_stats(kvdisk *d, kvdisk_stats *out);

#endif
