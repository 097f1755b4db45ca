/*
 * disk.c — the disk tier's block store (contract, file format and recovery
 * rules in disk.h).
 *
 * State, all under `mu`:
 *
 *   index    open-addressing table key -> entry (linear probing, backward
 *            shift deletion), entries in one array with a free list;
 *   LRU      a doubly linked list through the entries: head = least recently
 *            used (deleted first past max_bytes), tail = most recent;
 *   slots    the bounded job queue: each slot owns a buffer of one whole
 *            file image (header, payload, checksum). FREE -> FILLING (the
 *            engine copies a block in) -> QUEUED -> RUNNING (an I/O thread,
 *            lock released) -> FREE (writes) or DONE (reads, until taken).
 *
 * I/O threads take queued reads before queued writes (a read is a request
 * waiting; a write is insurance), each kind oldest first.
 *
 * Thread: any; the I/O threads are this file's own.
 */
#include "disk.h"

#include "../kern/kern.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define HDR_FIXED 56
#define MAGIC "KVLMBLK\0"
#define NIL (-1)
/* A scan names this many bad files in the log, then counts the rest. */
#define SCAN_WARN_MAX 5

enum { SLOT_FREE = 0, SLOT_FILLING, SLOT_QUEUED, SLOT_RUNNING, SLOT_DONE };
enum { JOB_READ = 1, JOB_WRITE = 2 };

typedef struct dentry {
    uint64_t key;
    uint64_t bytes;
    int32_t prev, next; /* LRU list; next also links the free list           */
} dentry;

typedef struct dslot {
    int state, kind;
    bool dropped;   /* a read whose owner went away while it ran             */
    int result;
    uint64_t seq;   /* queue order                                          */
    uint64_t key, parent;
    int32_t *tokens; /* (block_tokens)                                      */
    uint8_t *buf;    /* (file_bytes) the file image                         */
} dslot;

struct kvdisk {
    kvdisk_opts o;
    char *dir;
    size_t hdr_bytes, file_bytes;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_idle;
    bool stop;
    /* index */
    dentry *ents;
    int n_ents, cap_ents, free_ent;
    int32_t *table;
    uint32_t mask;
    int32_t lru_head, lru_tail;
    /* jobs */
    dslot *slots;
    int n_slots;
    uint64_t next_seq;
    pthread_t *threads;
    int n_threads;
    uint64_t tmp_counter;
    bool scanning;               /* an I/O thread rescans the directory           */
    uint64_t bytes_since_scan;   /* written by us since the last (re)scan         */
    int64_t last_scan_ns;
    bool write_failing;          /* the last write failed: the outage was logged */
    uint64_t errors_at_outage;   /* write_errors when it began                    */
    kvdisk_stats st;
};

/* ---- little-endian fields and hashing ------------------------------------- */

static void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t get_u32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

/* Four independent lanes over 8-byte words (so the multiplies overlap), the
 * tail byte by byte, the length, and a final avalanche. */
uint64_t kvdisk_checksum(const void *p, size_t n) {
    const uint8_t *b = p;
    const uint64_t P1 = 0x9e3779b97f4a7c15ULL, P2 = 0xc2b2ae3d27d4eb4fULL;
    uint64_t h[4] = {P1, P2, P1 ^ 0x5bd1e995u, P2 ^ 0x27d4eb2du};
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        for (int l = 0; l < 4; l++) {
            uint64_t w;
            memcpy(&w, b + i + 8 * l, 8);
            h[l] = rotl(h[l] ^ (w * P2), 31) * P1;
        }
    }
    uint64_t x = rotl(h[0], 1) ^ rotl(h[1], 7) ^ rotl(h[2], 12) ^ rotl(h[3], 18);
    for (; i < n; i++) x = (x ^ b[i]) * 0x100000001b3ULL;
    return mix64(x ^ (uint64_t)n * P1);
}

uint64_t kvdisk_key_next(uint64_t prev, const int32_t *tokens, int block_tokens) {
    return hash_bytes(tokens, (size_t)block_tokens * sizeof(int32_t), prev);
}

static uint64_t fp_u64(uint64_t h, uint64_t v) { return hash_bytes(&v, sizeof v, h); }
static uint64_t fp_f32(uint64_t h, float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return fp_u64(h, u);
}

uint64_t kvdisk_model_fingerprint(const model *m, int block_tokens) {
    const model_config *c = &m->cfg;
    uint64_t h = hash_bytes("kvloom-kv-f16", 13, KVDISK_KEY_SEED);
    h = hash_bytes(c->arch_name, strnlen(c->arch_name, sizeof c->arch_name), h);
    int64_t ints[] = {c->arch,    c->n_vocab, c->n_embd, c->n_layer,          c->n_head,       c->n_head_kv,
                      c->head_dim, c->n_ff,   c->n_rot,  c->rope,             c->has_rope_freqs, c->has_qkv_bias,
                      c->has_qk_norm, c->tied_output, block_tokens, (int64_t)model_kv_block_bytes(m, block_tokens)};
    for (size_t i = 0; i < ARRAY_LEN(ints); i++) h = fp_u64(h, (uint64_t)ints[i]);
    h = fp_f32(h, c->rms_eps);
    h = fp_f32(h, c->rope_theta);
    h = fp_f32(h, c->rope_scale);
    if (m->gguf) {
        h = fp_u64(h, gguf_file_size(m->gguf));
        int64_t nt = gguf_n_tensors(m->gguf);
        for (int64_t i = 0; i < nt; i++) {
            const gguf_tensor *t = gguf_tensor_at(m->gguf, i);
            h = hash_bytes(t->name.ptr, (size_t)t->name.len, h);
            h = fp_u64(h, t->type);
            h = fp_u64(h, t->n_dims);
            for (int d = 0; d < GGUF_MAX_DIMS; d++) h = fp_u64(h, (uint64_t)t->dims[d]);
            h = fp_u64(h, t->offset);
            h = fp_u64(h, t->n_bytes);
            /* weights decide the K/V bytes: sample the start, middle and end */
            const uint8_t *data = t->data;
            size_t nb = (size_t)t->n_bytes, w = MIN(nb, (size_t)256);
            if (data && nb) {
                h = hash_bytes(data, w, h);
                h = hash_bytes(data + (nb - w) / 2, w, h);
                h = hash_bytes(data + nb - w, w, h);
            }
        }
    }
    return h ? h : 1;
}

static bool parse_hex16(const char *s, uint64_t *out) {
    uint64_t v = 0;
    for (int i = 0; i < 16; i++) {
        char ch = s[i];
        int dv = ch >= '0' && ch <= '9' ? ch - '0' : ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
        if (dv < 0) return false;
        v = v << 4 | (uint64_t)dv;
    }
    *out = v;
    return true;
}

/* Every byte of every tensor, in table order. */
static uint64_t weights_hash(const gguf_ctx *g) {
    uint64_t h = KVDISK_KEY_SEED;
    int64_t nt = gguf_n_tensors(g);
    for (int64_t i = 0; i < nt; i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (t->data && t->n_bytes) h = fp_u64(h, kvdisk_checksum(t->data, (size_t)t->n_bytes));
    }
    return h;
}

#define HASH_CACHE_NAME "model-hashes"
#define HASH_CACHE_LINES 32

/* The line of the hash cache for a file identity, without its hash. */
static int hash_cache_key(char *buf, size_t cap, const gguf_file_id *id) {
    return snprintf(buf, cap, "%llu %llu %llu %lld %lld ", (unsigned long long)id->dev, (unsigned long long)id->ino,
                    (unsigned long long)id->size, (long long)id->mtime_ns, (long long)id->ctime_ns);
}

static int mkdir_p(const char *dir);

/* weights_hash of m's file, through DIR/model-hashes: one line per file
 * identity, "dev ino size mtime_ns ctime_ns hash", the newest last, at most
 * HASH_CACHE_LINES (rewritten whole through a temporary and a rename, so a
 * reader never sees half a file; two servers starting at once may each
 * compute the hash, and the last rename wins). */
static uint64_t weights_hash_cached(const gguf_ctx *g, const char *dir) {
    gguf_file_id id;
    if (!dir || !gguf_file_identity(g, &id)) return weights_hash(g);
    char path[4096], key[160];
    snprintf(path, sizeof path, "%s/" HASH_CACHE_NAME, dir);
    int klen = hash_cache_key(key, sizeof key, &id);
    char *text = NULL;
    size_t n = 0;
    err_t e = {0};
    if (file_read_all(path, &text, &n, &e) < 0) text = NULL;
    /* keep the other files' lines, at most HASH_CACHE_LINES - 1 of them */
    const char *lines[HASH_CACHE_LINES];
    size_t lens[HASH_CACHE_LINES];
    int n_lines = 0;
    for (char *p = text; p && *p;) {
        size_t k = strcspn(p, "\n");
        uint64_t h;
        if (k > (size_t)klen && !strncmp(p, key, (size_t)klen) && k - (size_t)klen == 16 && parse_hex16(p + klen, &h)) {
            free(text);
            return h;
        }
        if (k && k < 200) {
            if (n_lines == HASH_CACHE_LINES - 1) {
                memmove(lines, lines + 1, sizeof lines[0] * (size_t)(n_lines - 1));
                memmove(lens, lens + 1, sizeof lens[0] * (size_t)(n_lines - 1));
                n_lines--;
            }
            lines[n_lines] = p;
            lens[n_lines++] = k;
        }
        p += k + (p[k] ? 1 : 0);
    }
    int64_t t0 = clock_ns();
    uint64_t h = weights_hash(g);
    log_info("kvdisk: hashed the model's %.0f MB of weights in %.1f s (cached in %s)", (double)id.size / 1e6,
             (double)(clock_ns() - t0) / 1e9, path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s/.model-hashes-%d", dir, (int)getpid());
    (void)mkdir_p(dir); /* before kvdisk_open makes it */
    FILE *f = fopen(tmp, "w");
    bool ok = f != NULL;
    for (int i = 0; ok && i < n_lines; i++) ok = fwrite(lines[i], 1, lens[i], f) == lens[i] && fputc('\n', f) != EOF;
    if (ok) ok = fprintf(f, "%s%016llx\n", key, (unsigned long long)h) > 0;
    if (f && fclose(f) != 0) ok = false;
    if (!ok || rename(tmp, path) != 0) {
        if (f) unlink(tmp);
        log_warn("kvdisk: cannot write %s (the weights are hashed again at the next start)", path);
    }
    free(text);
    return h;
}

uint64_t kvdisk_fingerprint(const model *m, int block_tokens, const char *dir) {
    uint64_t h = kvdisk_model_fingerprint(m, block_tokens);
    if (m->gguf) h = fp_u64(h, weights_hash_cached(m->gguf, dir));
    h = hash_bytes(kern->name, strlen(kern->name), h);
    return h ? h : 1;
}

/* ---- the index (under mu) ------------------------------------------------- */

static uint32_t slot_of(uint64_t key) { return (uint32_t)mix64(key); }

static int32_t idx_find(const kvdisk *d, uint64_t key) {
    for (uint32_t i = slot_of(key) & d->mask;; i = (i + 1) & d->mask) {
        int32_t x = d->table[i];
        if (x == NIL) return NIL;
        if (d->ents[x].key == key) return x;
    }
}

static void idx_table_put(kvdisk *d, int32_t x) {
    uint32_t i = slot_of(d->ents[x].key) & d->mask;
    while (d->table[i] != NIL) i = (i + 1) & d->mask;
    d->table[i] = x;
}

static void idx_rehash(kvdisk *d, uint32_t cap) {
    free(d->table);
    d->table = xmalloc((size_t)cap * sizeof *d->table);
    d->mask = cap - 1;
    for (uint32_t i = 0; i < cap; i++) d->table[i] = NIL;
    for (int32_t x = d->lru_head; x != NIL; x = d->ents[x].next) idx_table_put(d, x);
}

static void lru_unlink(kvdisk *d, int32_t x) {
    dentry *e = &d->ents[x];
    if (e->prev != NIL) d->ents[e->prev].next = e->next;
    else d->lru_head = e->next;
    if (e->next != NIL) d->ents[e->next].prev = e->prev;
    else d->lru_tail = e->prev;
    e->prev = e->next = NIL;
}

static void lru_append(kvdisk *d, int32_t x) {
    dentry *e = &d->ents[x];
    e->prev = d->lru_tail;
    e->next = NIL;
    if (d->lru_tail != NIL) d->ents[d->lru_tail].next = x;
    else d->lru_head = x;
    d->lru_tail = x;
}

static void lru_touch(kvdisk *d, int32_t x) {
    if (d->lru_tail == x) return;
    lru_unlink(d, x);
    lru_append(d, x);
}

/* Adds key (or updates its size) as the most recently used. */
static void idx_put(kvdisk *d, uint64_t key, uint64_t bytes) {
    int32_t x = idx_find(d, key);
    if (x != NIL) {
        d->st.n_bytes += bytes - d->ents[x].bytes;
        d->ents[x].bytes = bytes;
        lru_touch(d, x);
        return;
    }
    if ((uint64_t)(d->n_ents + 1) * 2 > (uint64_t)d->mask + 1) idx_rehash(d, (d->mask + 1) * 2);
    if (d->free_ent == NIL) {
        int old = d->cap_ents;
        d->cap_ents = old ? old * 2 : 256;
        d->ents = xrealloc(d->ents, (size_t)d->cap_ents * sizeof *d->ents);
        for (int i = d->cap_ents - 1; i >= old; i--) {
            d->ents[i].next = d->free_ent;
            d->free_ent = i;
        }
    }
    x = d->free_ent;
    d->free_ent = d->ents[x].next;
    d->ents[x].key = key;
    d->ents[x].bytes = bytes;
    lru_append(d, x);
    idx_table_put(d, x);
    d->n_ents++;
    d->st.n_files++;
    d->st.n_bytes += bytes;
}

static void idx_remove(kvdisk *d, uint64_t key) {
    uint32_t i = slot_of(key) & d->mask;
    for (;; i = (i + 1) & d->mask) {
        int32_t x = d->table[i];
        if (x == NIL) return;
        if (d->ents[x].key == key) break;
    }
    int32_t x = d->table[i];
    uint32_t hole = i, j = i;
    for (;;) {
        j = (j + 1) & d->mask;
        int32_t m = d->table[j];
        if (m == NIL) break;
        uint32_t home = slot_of(d->ents[m].key) & d->mask;
        bool in_range = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (!in_range) {
            d->table[hole] = m;
            hole = j;
        }
    }
    d->table[hole] = NIL;
    lru_unlink(d, x);
    d->st.n_files--;
    d->st.n_bytes -= d->ents[x].bytes;
    d->ents[x].next = d->free_ent;
    d->free_ent = x;
    d->n_ents--;
}

/* Empties the index (a rescan rebuilds it). */
static void idx_clear(kvdisk *d) {
    for (uint32_t i = 0; i <= d->mask; i++) d->table[i] = NIL;
    for (int32_t x = d->lru_head; x != NIL;) {
        int32_t next = d->ents[x].next;
        d->ents[x].next = d->free_ent;
        d->free_ent = x;
        x = next;
    }
    d->lru_head = d->lru_tail = NIL;
    d->n_ents = 0;
    d->st.n_files = 0;
    d->st.n_bytes = 0;
}

static void file_path(const kvdisk *d, uint64_t key, char *buf, size_t n) {
    snprintf(buf, n, "%s/%016llx-%016llx.kvb", d->dir, (unsigned long long)d->o.fingerprint, (unsigned long long)key);
}

/* Deletes least recently used files until n_bytes <= max_bytes, keeping
 * `keep`. Called with mu held; the unlinks run under it too (they are short
 * and rare). */
/* Deletes least recently used files, keeping `keep`, until n_bytes <= until
 * or n_max files went. Returns how many went. mu held. */
static int evict_lru(kvdisk *d, uint64_t keep, uint64_t until, int n_max) {
    int n = 0;
    int32_t x = d->lru_head;
    while (d->st.n_bytes > until && x != NIL && n < n_max) {
        int32_t next = d->ents[x].next;
        uint64_t key = d->ents[x].key;
        if (key != keep) {
            char path[4096];
            file_path(d, key, path, sizeof path);
            idx_remove(d, key);
            unlink(path);
            d->st.evicted++;
            n++;
        }
        x = next;
    }
    return n;
}

static void enforce_cap(kvdisk *d, uint64_t keep) {
    if (d->o.max_bytes) evict_lru(d, keep, d->o.max_bytes, INT32_MAX);
}

/* ---- files ---------------------------------------------------------------- */

/* Fills the header, tokens and checksum around a payload already at
 * buf + hdr_bytes. */
static void image_seal(const kvdisk *d, uint8_t *buf, uint64_t key, uint64_t parent, const int32_t *tokens) {
    memcpy(buf, MAGIC, 8);
    put_u32(buf + 8, KVDISK_VERSION);
    put_u32(buf + 12, (uint32_t)d->hdr_bytes);
    put_u64(buf + 16, d->o.fingerprint);
    put_u64(buf + 24, key);
    put_u64(buf + 32, parent);
    put_u32(buf + 40, (uint32_t)d->o.block_tokens);
    put_u32(buf + 44, 0);
    put_u64(buf + 48, d->o.payload_bytes);
    for (int i = 0; i < d->o.block_tokens; i++) put_u32(buf + HDR_FIXED + 4 * (size_t)i, (uint32_t)tokens[i]);
    size_t body = d->hdr_bytes + d->o.payload_bytes;
    put_u64(buf + body, kvdisk_checksum(buf, body));
}

static bool write_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w == 0) errno = EIO;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

enum { HDR_OK = 0, HDR_FOREIGN, HDR_BAD, HDR_ABSENT };

/* Judges the file at path by its size and fixed header (not the payload's
 * checksum: that is checked on every read): HDR_OK (ours: this fingerprint,
 * version, key and size), HDR_FOREIGN (another format version), HDR_BAD
 * (torn, truncated, not a regular file, a header that does not match),
 * HDR_ABSENT (no such file, or one we may not open). *mtime_ns gets its mtime when OK. */
static int judge_file(const kvdisk *d, const char *path, uint64_t key, int64_t *mtime_ns) {
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO never blocks us */
    if (fd < 0) return HDR_ABSENT; /* gone, or not ours to read */
    uint8_t hdr[HDR_FIXED];
    struct stat sb;
    ssize_t r = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? read(fd, hdr, sizeof hdr) : -1;
    close(fd);
    if (r == (ssize_t)sizeof hdr && memcmp(hdr, MAGIC, 8) == 0 && get_u32(hdr + 8) != KVDISK_VERSION)
        return HDR_FOREIGN;
    if (r != (ssize_t)sizeof hdr || memcmp(hdr, MAGIC, 8) != 0 || get_u32(hdr + 12) != d->hdr_bytes ||
        get_u64(hdr + 16) != d->o.fingerprint || get_u64(hdr + 24) != key ||
        get_u32(hdr + 40) != (uint32_t)d->o.block_tokens || get_u64(hdr + 48) != d->o.payload_bytes ||
        (uint64_t)sb.st_size != d->file_bytes)
        return HDR_BAD;
    if (mtime_ns) *mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
    return HDR_OK;
}

/* A shared directory (several servers on one --kv-disk): a block another
 * process wrote after our scan is not in our index. Looks at its file and
 * indexes it when it is ours to read. mu not held. */
static bool discover(kvdisk *d, uint64_t key) {
    char path[4096];
    file_path(d, key, path, sizeof path);
    if (judge_file(d, path, key, NULL) != HDR_OK) return false;
    pthread_mutex_lock(&d->mu);
    if (idx_find(d, key) == NIL) {
        idx_put(d, key, d->file_bytes);
        d->st.discovered++;
    }
    pthread_mutex_unlock(&d->mu);
    return true;
}

/* Writes a sealed image to a temporary and renames it into place, then
 * indexes it. Any thread, mu not held. */
static int image_store(kvdisk *d, const uint8_t *buf, uint64_t key) {
    char tmp[4096], path[4096];
    pthread_mutex_lock(&d->mu);
    unsigned long long c = ++d->tmp_counter;
    pthread_mutex_unlock(&d->mu);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%016llx-%d-%llu", d->dir, (unsigned long long)key, (int)getpid(), c);
    file_path(d, key, path, sizeof path);
    bool ok = false;
    int err = 0;
    for (int attempt = 0; attempt < 2 && !ok; attempt++) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        /* the lock tells another server scanning a shared directory that
         * this temporary is being written, not left by a crash (scan_dir) */
        if (fd >= 0) (void)flock(fd, LOCK_EX | LOCK_NB);
        ok = fd >= 0 && write_all(fd, buf, d->file_bytes);
        err = ok ? 0 : errno;
        if (ok && rename(tmp, path) != 0) ok = false, err = errno;
        if (fd >= 0 && close(fd) != 0 && ok) ok = false, err = errno;
        if (!ok && fd >= 0) unlink(tmp);
        if (ok || attempt || (err != ENOSPC && err != EDQUOT)) break;
        /* A full disk: the tier makes room from its own least recently
         * used files (also without max_bytes, whose absence means "as much
         * as the disk holds", not "fail every write once it is full"), 16
         * files at a time, and tries once more. */
        pthread_mutex_lock(&d->mu);
        int n_freed = evict_lru(d, key, 0, 16);
        pthread_mutex_unlock(&d->mu);
        if (!n_freed) break;
    }
    pthread_mutex_lock(&d->mu);
    if (!ok) {
        /* A full disk fails every write: one warning when the outage
         * begins, one line when it ends, the count in between. */
        d->st.write_errors++;
        bool first = !d->write_failing;
        if (first) d->errors_at_outage = d->st.write_errors - 1;
        d->write_failing = true;
        pthread_mutex_unlock(&d->mu);
        if (first)
            log_warn("kvdisk: %s: writing a block file failed: %s; blocks are recomputed when needed "
                     "(further failures are counted, not logged)", d->dir, strerror(err));
        return ERR_IO;
    }
    uint64_t n_failed = d->write_failing ? d->st.write_errors - d->errors_at_outage : 0;
    d->write_failing = false;
    idx_put(d, key, d->file_bytes);
    d->st.bytes_written += d->file_bytes;
    d->st.blocks_written++;
    d->bytes_since_scan += d->file_bytes;
    enforce_cap(d, key);
    pthread_mutex_unlock(&d->mu);
    if (n_failed)
        log_info("kvdisk: %s: block files are written again (%llu writes had failed)", d->dir,
                 (unsigned long long)n_failed);
    return 0;
}

/* Deletes a file that must not be served; the log line says whether it is
 * gone (a file we may not delete stays, and is judged again next time). */
static void delete_bad(const char *path, const char *why) {
    if (unlink(path) == 0 || errno == ENOENT)
        log_warn("kvdisk: %s: %s (deleted)", path, why);
    else
        log_warn("kvdisk: %s: %s (not deleted: %s)", path, why, strerror(errno));
}

static int reject(kvdisk *d, uint64_t key, const char *path, const char *why) {
    delete_bad(path, why);
    pthread_mutex_lock(&d->mu);
    idx_remove(d, key);
    d->st.rejected_corrupt++;
    pthread_mutex_unlock(&d->mu);
    return ERR_FORMAT;
}

/* Reads and verifies block `key` into buf (file_bytes). Any thread. */
static int image_load(kvdisk *d, uint8_t *buf, uint64_t key, uint64_t parent, const int32_t *tokens) {
    char path[4096];
    file_path(d, key, path, sizeof path);
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK); /* a FIFO never blocks us */
    if (fd < 0) {
        pthread_mutex_lock(&d->mu);
        idx_remove(d, key);
        pthread_mutex_unlock(&d->mu);
        return ERR_NOTFOUND;
    }
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return ERR_NOTFOUND;
    }
    if (!S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != d->file_bytes) {
        close(fd);
        return reject(d, key, path, "not a regular file of the right size (torn or truncated)");
    }
    size_t got = 0;
    while (got < d->file_bytes) {
        ssize_t r = read(fd, buf + got, d->file_bytes - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += (size_t)r;
    }
    if (got != d->file_bytes) {
        close(fd);
        return reject(d, key, path, "short read");
    }
    futimens(fd, NULL); /* recency survives restarts */
    close(fd);
    size_t body = d->hdr_bytes + d->o.payload_bytes;
    if (get_u64(buf + body) != kvdisk_checksum(buf, body)) return reject(d, key, path, "checksum mismatch");
    if (memcmp(buf, MAGIC, 8) != 0 || get_u32(buf + 8) != KVDISK_VERSION || get_u32(buf + 12) != d->hdr_bytes ||
        get_u64(buf + 16) != d->o.fingerprint || get_u64(buf + 24) != key ||
        get_u32(buf + 40) != (uint32_t)d->o.block_tokens || get_u64(buf + 48) != d->o.payload_bytes)
        return reject(d, key, path, "header does not match");
    if (get_u64(buf + 32) != parent) return reject(d, key, path, "parent prefix differs (hash collision?)");
    for (int i = 0; i < d->o.block_tokens; i++)
        if (get_u32(buf + HDR_FIXED + 4 * (size_t)i) != (uint32_t)tokens[i])
            return reject(d, key, path, "tokens differ (hash collision?)");
    pthread_mutex_lock(&d->mu);
    int32_t x = idx_find(d, key);
    if (x != NIL) lru_touch(d, x);
    d->st.bytes_read += d->file_bytes;
    d->st.blocks_read++;
    pthread_mutex_unlock(&d->mu);
    return 0;
}

/* ---- the scan at open ----------------------------------------------------- */

typedef struct found {
    uint64_t key;
    int64_t mtime_ns;
} found;

static int cmp_found(const void *a, const void *b) {
    const found *x = a, *y = b;
    return x->mtime_ns < y->mtime_ns ? -1 : x->mtime_ns > y->mtime_ns ? 1 : (x->key > y->key) - (x->key < y->key);
}


/* Lists the directory: at open (full) every file of ours is judged by its
 * header (bad ones deleted and counted), temporaries left by a crash are
 * deleted, and the index is built; a rescan (!full, an I/O thread, for the
 * one size cap of a directory that several servers share) judges by name and
 * size only and rebuilds the index from what is there now, oldest first, so
 * the least recently used files of every server are deleted first (a read
 * refreshes a file's mtime). mu not held. */
static int scan_dir(kvdisk *d, bool full, err_t *e) {
    DIR *dp = opendir(d->dir);
    if (!dp) return e ? err_set(e, ERR_IO, "--kv-disk %s: %s", d->dir, strerror(errno)) : ERR_IO;
    found *fs = NULL;
    size_t n = 0, cap = 0;
    uint64_t n_foreign = 0, n_corrupt = 0, n_tmp = 0, n_undeletable = 0;
    struct dirent *de;
    char path[4096];
    while ((de = readdir(dp))) {
        const char *nm = de->d_name;
        size_t len = strlen(nm);
        snprintf(path, sizeof path, "%s/%s", d->dir, nm);
        if (strncmp(nm, ".tmp-", 5) == 0) {
            /* a write cut short by a crash, unless its writer (another
             * server on a shared directory) still holds its lock */
            if (!full) continue;
            int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
            if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) == 0 && unlink(path) == 0) n_tmp++;
            if (fd >= 0) close(fd);
            continue;
        }
        uint64_t fp, key;
        if (len != 37 || strcmp(nm + 33, ".kvb") != 0 || nm[16] != '-' || !parse_hex16(nm, &fp) ||
            !parse_hex16(nm + 17, &key))
            continue; /* not ours to judge */
        if (fp != d->o.fingerprint) {
            n_foreign++;
            continue;
        }
        int64_t mtime_ns = 0;
        if (full) {
            int j = judge_file(d, path, key, &mtime_ns);
            if (j == HDR_FOREIGN) n_foreign++; /* another format version: leave it alone */
            if (j == HDR_BAD) {
                /* a directory of junk gives a few lines and a count, not a
                 * line per file */
                if (n_corrupt < SCAN_WARN_MAX) delete_bad(path, "bad header or size");
                else if (unlink(path) != 0 && errno != ENOENT) n_undeletable++;
                n_corrupt++;
            }
            if (j != HDR_OK) continue;
        } else {
            struct stat sb;
            if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size != d->file_bytes) continue;
            mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000 + sb.st_mtim.tv_nsec;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 256;
            fs = xrealloc(fs, cap * sizeof *fs);
        }
        fs[n].key = key;
        fs[n].mtime_ns = mtime_ns;
        n++;
    }
    closedir(dp);
    if (n_corrupt > SCAN_WARN_MAX)
        log_warn("kvdisk: %s: %llu more files with a bad header or size deleted (%llu could not be)", d->dir,
                 (unsigned long long)(n_corrupt - SCAN_WARN_MAX), (unsigned long long)n_undeletable);
    if (n) qsort(fs, n, sizeof *fs, cmp_found); /* oldest first: the LRU order */
    pthread_mutex_lock(&d->mu);
    if (full) {
        d->st.rejected_foreign += n_foreign;
        d->st.rejected_corrupt += n_corrupt;
        d->st.tmp_removed += n_tmp;
    }
    idx_clear(d);
    for (size_t i = 0; i < n; i++) idx_put(d, fs[i].key, d->file_bytes);
    enforce_cap(d, 0);
    d->bytes_since_scan = 0;
    d->last_scan_ns = clock_ns();
    pthread_mutex_unlock(&d->mu);
    free(fs);
    return 0;
}

/* Whether an I/O thread should rescan now (mu held): only with a size cap,
 * after we wrote a sixteenth of it or two seconds went by since the last
 * scan with writes of ours in between. The directory may then exceed the
 * cap by what the other servers wrote since: at most 1/16 of it each. */
static bool rescan_due(const kvdisk *d) {
    if (!d->o.max_bytes || d->scanning || d->bytes_since_scan == 0) return false;
    return d->bytes_since_scan >= d->o.max_bytes / 16 || clock_ns() - d->last_scan_ns >= 2000000000ll;
}

static int mkdir_p(const char *dir) {
    char buf[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (buf[i] != '/' && buf[i] != 0) continue;
        char c = buf[i];
        buf[i] = 0;
        if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
        buf[i] = c;
    }
    struct stat sb;
    return stat(dir, &sb) == 0 && S_ISDIR(sb.st_mode) ? 0 : -1;
}

/* ---- I/O threads ---------------------------------------------------------- */

static int next_job(kvdisk *d) {
    int best = -1;
    for (int i = 0; i < d->n_slots; i++) {
        dslot *s = &d->slots[i];
        if (s->state != SLOT_QUEUED) continue;
        if (best < 0) {
            best = i;
            continue;
        }
        dslot *b = &d->slots[best];
        bool better = (s->kind == JOB_READ && b->kind != JOB_READ) || (s->kind == b->kind && s->seq < b->seq);
        if (better) best = i;
    }
    return best;
}

static void *io_thread(void *arg) {
    kvdisk *d = arg;
    pthread_mutex_lock(&d->mu);
    for (;;) {
        int j = next_job(d);
        if (j < 0) {
            if (d->stop) break;
            pthread_cond_wait(&d->cv_work, &d->mu);
            continue;
        }
        dslot *s = &d->slots[j];
        s->state = SLOT_RUNNING;
        pthread_mutex_unlock(&d->mu);
        int rc;
        if (s->kind == JOB_WRITE) {
            /* on a shared directory another server may have stored it */
            if (discover(d, s->key)) {
                rc = 0;
            } else {
                image_seal(d, s->buf, s->key, s->parent, s->tokens);
                rc = image_store(d, s->buf, s->key);
            }
        } else {
            rc = image_load(d, s->buf, s->key, s->parent, s->tokens);
        }
        pthread_mutex_lock(&d->mu);
        bool notify = false;
        if (s->kind == JOB_WRITE || s->dropped) {
            s->state = SLOT_FREE;
            s->dropped = false;
        } else {
            s->state = SLOT_DONE;
            s->result = rc;
            notify = true;
        }
        pthread_cond_broadcast(&d->cv_idle);
        if (notify && d->o.on_read_done) {
            pthread_mutex_unlock(&d->mu);
            d->o.on_read_done(d->o.on_read_done_ctx);
            pthread_mutex_lock(&d->mu);
        }
        if (rescan_due(d)) {
            d->scanning = true;
            pthread_mutex_unlock(&d->mu);
            scan_dir(d, false, NULL);
            pthread_mutex_lock(&d->mu);
            d->scanning = false;
        }
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

/* ---- public --------------------------------------------------------------- */

int kvdisk_open(const kvdisk_opts *o, kvdisk **out, err_t *e) {
    *out = NULL;
    if (!o->dir || !*o->dir) return err_set(e, ERR_INVALID, "--kv-disk: no directory given");
    if (o->block_tokens < 1 || o->payload_bytes == 0 || o->payload_bytes % 2 || o->n_threads < 0)
        return err_set(e, ERR_INVALID, "kvdisk: bad options (block_tokens %d, payload %zu, threads %d)",
                       o->block_tokens, o->payload_bytes, o->n_threads);
    if (strlen(o->dir) > 3000) return err_set(e, ERR_INVALID, "--kv-disk: the path is too long");
    if (mkdir_p(o->dir) != 0) return err_set(e, ERR_IO, "--kv-disk %s: cannot create the directory: %s", o->dir, strerror(errno));
    kvdisk *d = xcalloc(1, sizeof *d);
    d->o = *o;
    d->dir = xstrdup(o->dir);
    d->o.dir = d->dir;
    d->hdr_bytes = HDR_FIXED + 4 * (size_t)o->block_tokens;
    d->file_bytes = d->hdr_bytes + o->payload_bytes + 8;
    pthread_mutex_init(&d->mu, NULL);
    pthread_cond_init(&d->cv_work, NULL);
    pthread_cond_init(&d->cv_idle, NULL);
    d->free_ent = NIL;
    d->lru_head = d->lru_tail = NIL;
    d->mask = 255;
    d->table = xmalloc(256 * sizeof *d->table);
    for (int i = 0; i < 256; i++) d->table[i] = NIL;
    int rc = scan_dir(d, true, e);
    if (rc < 0) {
        kvdisk_close(d);
        return rc;
    }
    if (o->n_threads > 0) {
        d->n_slots = o->n_slots > 0 ? o->n_slots : 64;
        d->slots = xcalloc((size_t)d->n_slots, sizeof *d->slots);
        for (int i = 0; i < d->n_slots; i++) {
            d->slots[i].tokens = xmalloc((size_t)o->block_tokens * sizeof(int32_t));
            d->slots[i].buf = xmalloc(d->file_bytes);
        }
        d->threads = xcalloc((size_t)o->n_threads, sizeof *d->threads);
        for (int i = 0; i < o->n_threads; i++) {
            if (pthread_create(&d->threads[i], NULL, io_thread, d) != 0) break;
            d->n_threads++;
        }
    }
    log_info("kvdisk: %s: %llu blocks (%.1f MiB) indexed; %llu corrupt, %llu foreign, %llu temporaries removed",
             d->dir, (unsigned long long)d->st.n_files, (double)d->st.n_bytes / (1 << 20),
             (unsigned long long)d->st.rejected_corrupt, (unsigned long long)d->st.rejected_foreign,
             (unsigned long long)d->st.tmp_removed);
    *out = d;
    return 0;
}

void kvdisk_flush(kvdisk *d) {
    pthread_mutex_lock(&d->mu);
    for (;;) {
        bool busy = false;
        for (int i = 0; i < d->n_slots && !busy; i++) {
            dslot *s = &d->slots[i];
            busy = s->kind == JOB_WRITE && (s->state == SLOT_QUEUED || s->state == SLOT_RUNNING);
        }
        if (!busy || d->n_threads == 0) break;
        pthread_cond_wait(&d->cv_idle, &d->mu);
    }
    pthread_mutex_unlock(&d->mu);
}

void kvdisk_close(kvdisk *d) {
    if (!d) return;
    if (d->n_threads) kvdisk_flush(d);
    pthread_mutex_lock(&d->mu);
    d->stop = true;
    pthread_cond_broadcast(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
    for (int i = 0; i < d->n_threads; i++) pthread_join(d->threads[i], NULL);
    for (int i = 0; i < d->n_slots; i++) {
        free(d->slots[i].tokens);
        free(d->slots[i].buf);
    }
    free(d->slots);
    free(d->threads);
    free(d->ents);
    free(d->table);
    pthread_mutex_destroy(&d->mu);
    pthread_cond_destroy(&d->cv_work);
    pthread_cond_destroy(&d->cv_idle);
    free(d->dir);
    free(d);
}

bool kvdisk_contains(kvdisk *d, uint64_t key) {
    pthread_mutex_lock(&d->mu);
    bool in = idx_find(d, key) != NIL;
    pthread_mutex_unlock(&d->mu);
    return in || discover(d, key);
}

int kvdisk_write(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, const void *k, const void *v) {
    if (d->o.max_bytes && d->file_bytes > d->o.max_bytes) {
        pthread_mutex_lock(&d->mu);
        d->st.writes_dropped++;
        pthread_mutex_unlock(&d->mu);
        return ERR_RANGE;
    }
    uint8_t *buf = xmalloc(d->file_bytes);
    size_t half = d->o.payload_bytes / 2;
    memcpy(buf + d->hdr_bytes, k, half);
    memcpy(buf + d->hdr_bytes + half, v, half);
    image_seal(d, buf, key, parent, tokens);
    int rc = image_store(d, buf, key);
    free(buf);
    return rc;
}

int kvdisk_read(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, void *k, void *v) {
    if (!kvdisk_contains(d, key)) return ERR_NOTFOUND;
    uint8_t *buf = xmalloc(d->file_bytes);
    int rc = image_load(d, buf, key, parent, tokens);
    if (rc == 0) {
        size_t half = d->o.payload_bytes / 2;
        memcpy(k, buf + d->hdr_bytes, half);
        memcpy(v, buf + d->hdr_bytes + half, half);
    }
    free(buf);
    return rc;
}

static int free_slot(const kvdisk *d) {
    for (int i = 0; i < d->n_slots; i++)
        if (d->slots[i].state == SLOT_FREE) return i;
    return -1;
}

int kvdisk_write_async(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens, const void *k,
                       const void *v) {
    pthread_mutex_lock(&d->mu);
    int32_t x = idx_find(d, key);
    if (x != NIL) {
        lru_touch(d, x);
        pthread_mutex_unlock(&d->mu);
        return 1;
    }
    for (int i = 0; i < d->n_slots; i++) {
        dslot *s = &d->slots[i];
        if (s->kind == JOB_WRITE && s->state != SLOT_FREE && s->key == key) {
            pthread_mutex_unlock(&d->mu);
            return 1;
        }
    }
    bool too_big = d->o.max_bytes && d->file_bytes > d->o.max_bytes;
    /* writes leave a quarter of the slots to reads (a request is waiting on
     * those) */
    int n_writes = 0;
    for (int i = 0; i < d->n_slots; i++) n_writes += d->slots[i].kind == JOB_WRITE && d->slots[i].state != SLOT_FREE;
    int j = d->n_threads && !too_big && n_writes < d->n_slots - d->n_slots / 4 ? free_slot(d) : -1;
    if (j < 0) {
        d->st.writes_dropped++;
        pthread_mutex_unlock(&d->mu);
        return too_big ? ERR_UNSUPPORTED : ERR_RANGE;
    }
    dslot *s = &d->slots[j];
    s->state = SLOT_FILLING;
    s->kind = JOB_WRITE;
    s->key = key;
    s->parent = parent;
    pthread_mutex_unlock(&d->mu);
    /* the copy runs on the caller's thread, outside the lock */
    size_t half = d->o.payload_bytes / 2;
    memcpy(s->tokens, tokens, (size_t)d->o.block_tokens * sizeof(int32_t));
    memcpy(s->buf + d->hdr_bytes, k, half);
    memcpy(s->buf + d->hdr_bytes + half, v, half);
    pthread_mutex_lock(&d->mu);
    s->state = SLOT_QUEUED;
    s->seq = ++d->next_seq;
    pthread_cond_signal(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
    return 0;
}

int kvdisk_read_async(kvdisk *d, uint64_t key, uint64_t parent, const int32_t *tokens) {
    pthread_mutex_lock(&d->mu);
    if (idx_find(d, key) == NIL) {
        pthread_mutex_unlock(&d->mu);
        return ERR_NOTFOUND;
    }
    int j = d->n_threads ? free_slot(d) : -1;
    if (j < 0) {
        pthread_mutex_unlock(&d->mu);
        return ERR_RANGE;
    }
    dslot *s = &d->slots[j];
    s->kind = JOB_READ;
    s->key = key;
    s->parent = parent;
    s->dropped = false;
    s->result = 0;
    memcpy(s->tokens, tokens, (size_t)d->o.block_tokens * sizeof(int32_t));
    s->state = SLOT_QUEUED;
    s->seq = ++d->next_seq;
    pthread_cond_signal(&d->cv_work);
    pthread_mutex_unlock(&d->mu);
    return j;
}

int kvdisk_read_poll(kvdisk *d, int slot) {
    ASSERT(slot >= 0 && slot < d->n_slots);
    pthread_mutex_lock(&d->mu);
    dslot *s = &d->slots[slot];
    ASSERT(s->kind == JOB_READ && s->state != SLOT_FREE);
    int rc = s->state == SLOT_DONE ? s->result : 1;
    pthread_mutex_unlock(&d->mu);
    return rc;
}

void kvdisk_read_take(kvdisk *d, int slot, void *k, void *v) {
    ASSERT(slot >= 0 && slot < d->n_slots);
    dslot *s = &d->slots[slot];
    ASSERT(s->kind == JOB_READ && s->state == SLOT_DONE && s->result == 0);
    size_t half = d->o.payload_bytes / 2;
    memcpy(k, s->buf + d->hdr_bytes, half);
    memcpy(v, s->buf + d->hdr_bytes + half, half);
    pthread_mutex_lock(&d->mu);
    s->state = SLOT_FREE;
    pthread_mutex_unlock(&d->mu);
}

void kvdisk_read_drop(kvdisk *d, int slot) {
    ASSERT(slot >= 0 && slot < d->n_slots);
    pthread_mutex_lock(&d->mu);
    dslot *s = &d->slots[slot];
    ASSERT(s->kind == JOB_READ);
    if (s->state == SLOT_RUNNING) s->dropped = true;
    else s->state = SLOT_FREE;
    pthread_mutex_unlock(&d->mu);
}

void kvdisk_get_stats(kvdisk *d, kvdisk_stats *out) {
    pthread_mutex_lock(&d->mu);
    *out = d->st;
    out->mem_bytes = (uint64_t)d->n_slots * (sizeof *d->slots + d->file_bytes + (size_t)d->o.block_tokens * 4) +
                     (uint64_t)d->cap_ents * sizeof *d->ents + ((uint64_t)d->mask + 1) * sizeof *d->table;
    pthread_mutex_unlock(&d->mu);
}
