/*
 * test_kvdisk.c — the disk tier (kv/disk.h):
 *   - the store: write/read round trip; index rebuilt after reopen (LRU order
 *     kept); truncated, corrupted, foreign-model and other-version files
 *     rejected and counted (never served); leftover temporaries deleted; the
 *     size cap deletes least recently used files; a failed write (the
 *     directory vanished) is counted and dropped; the async queue (reads,
 *     writes, a full queue, a dropped read);
 *   - a directory shared by two stores (two servers on one --kv-disk): each
 *     finds what the other wrote, both write and read the same blocks from
 *     threads at once and never get wrong bytes, a file truncated or
 *     corrupted under one is rejected, a temporary whose writer holds its
 *     lock survives another's open, and one cap bounds the directory;
 *   - the model: KV blocks written to disk and read back into other pool
 *     blocks give bitwise the same logits as the blocks computed in place
 *     (stories260K);
 *   - the engine (when built with the disk tier): see test_engine_disk below.
 */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "model/model.h"
#include "kv/disk.h"
#include "sched/engine.h"
#include "test.h"

enum { BT = 4, PAYLOAD = 64 }; /* tiny blocks for the store tests */

static char g_dir[256];

static void rm_rf(const char *dir) {
    DIR *dp = opendir(dir);
    if (!dp) return;
    struct dirent *de;
    char p[1024];
    while ((de = readdir(dp))) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
        snprintf(p, sizeof p, "%s/%s", dir, de->d_name);
        unlink(p);
    }
    closedir(dp);
    rmdir(dir);
}

static int count_files(const char *dir, const char *suffix) {
    DIR *dp = opendir(dir);
    if (!dp) return -1;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        size_t l = strlen(de->d_name), s = strlen(suffix);
        if (l >= s && !strcmp(de->d_name + l - s, suffix)) n++;
    }
    closedir(dp);
    return n;
}

static kvdisk *open_store(uint64_t fp, uint64_t max_bytes, int threads) {
    kvdisk_opts o = {.dir = g_dir, .max_bytes = max_bytes, .fingerprint = fp, .block_tokens = BT,
                     .payload_bytes = PAYLOAD, .n_threads = threads, .n_slots = 4};
    kvdisk *d = NULL;
    err_t e = {0};
    int rc = kvdisk_open(&o, &d, &e);
    CHECK_MSG(rc == 0 && d, "%s", e.msg);
    return d;
}

/* Block i of a test chain: tokens, K and V derived from i. */
static void block_data(int i, int32_t *tok, uint8_t *k, uint8_t *v) {
    for (int t = 0; t < BT; t++) tok[t] = 100 * i + t;
    for (int b = 0; b < PAYLOAD / 2; b++) {
        k[b] = (uint8_t)(i * 7 + b);
        v[b] = (uint8_t)(i * 13 + 3 * b);
    }
}

/* keys[0..n) of the chain 0, 1, ... n-1 */
static void chain_keys(int n, uint64_t *keys) {
    uint64_t prev = KVDISK_KEY_SEED;
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2];
    for (int i = 0; i < n; i++) {
        block_data(i, tok, k, v);
        keys[i] = prev = kvdisk_key_next(prev, tok, BT);
    }
}

static uint64_t parent_of(const uint64_t *keys, int i) { return i ? keys[i - 1] : 0; }

static int write_block(kvdisk *d, const uint64_t *keys, int i) {
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2];
    block_data(i, tok, k, v);
    return kvdisk_write(d, keys[i], parent_of(keys, i), tok, k, v);
}

/* 0 and the bytes match, or the read's error */
static int read_block(kvdisk *d, const uint64_t *keys, int i) {
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2], k2[PAYLOAD / 2], v2[PAYLOAD / 2];
    block_data(i, tok, k, v);
    int rc = kvdisk_read(d, keys[i], parent_of(keys, i), tok, k2, v2);
    if (rc == 0 && (memcmp(k, k2, sizeof k) || memcmp(v, v2, sizeof v))) return -100;
    return rc;
}

static void block_path(uint64_t fp, uint64_t key, char *buf, size_t n) {
    snprintf(buf, n, "%s/%016llx-%016llx.kvb", g_dir, (unsigned long long)fp, (unsigned long long)key);
}

static const uint64_t FP = 0x1234abcd5678ef01ull;
static const size_t FILE_BYTES = 56 + 4 * BT + PAYLOAD + 8;

static void test_roundtrip_and_reopen(void) {
    rm_rf(g_dir);
    uint64_t keys[8];
    chain_keys(8, keys);
    CHECK(keys[0] != keys[1] && keys[1] != keys[2]);
    kvdisk *d = open_store(FP, 0, 0);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(write_block(d, keys, i), 0);
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(read_block(d, keys, i), 0);
    kvdisk_stats st;
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 8);
    CHECK_EQ_INT(st.n_bytes, 8 * FILE_BYTES);
    CHECK_EQ_INT(st.bytes_written, 8 * FILE_BYTES);
    CHECK_EQ_INT(st.bytes_read, 8 * FILE_BYTES);
    /* asking with other tokens or another parent: rejected (and deleted) */
    {
        int32_t tok[BT];
        uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2];
        block_data(3, tok, k, v);
        tok[0]++;
        CHECK_EQ_INT(kvdisk_read(d, keys[3], keys[2], tok, k, v), ERR_FORMAT);
        CHECK(!kvdisk_contains(d, keys[3]));
        CHECK_EQ_INT(write_block(d, keys, 3), 0);
        block_data(4, tok, k, v);
        CHECK_EQ_INT(kvdisk_read(d, keys[4], keys[1], tok, k, v), ERR_FORMAT);
        CHECK_EQ_INT(write_block(d, keys, 4), 0);
    }
    CHECK_EQ_INT(kvdisk_read(d, 42, 0, (int32_t[BT]){0}, (uint8_t[PAYLOAD]){0}, (uint8_t[PAYLOAD]){0}),
                 ERR_NOTFOUND);
    kvdisk_close(d);
    /* reopen: the index is rebuilt from the directory */
    d = open_store(FP, 0, 0);
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 8);
    CHECK_EQ_INT(st.rejected_corrupt, 0);
    for (int i = 0; i < 8; i++) CHECK(kvdisk_contains(d, keys[i]));
    for (int i = 0; i < 8; i++) CHECK_EQ_INT(read_block(d, keys, i), 0);
    kvdisk_close(d);
}

static void flip_byte(const char *path, long off) {
    int fd = open(path, O_RDWR);
    CHECK(fd >= 0);
    uint8_t c = 0;
    CHECK(pread(fd, &c, 1, off) == 1);
    c ^= 0x40;
    CHECK(pwrite(fd, &c, 1, off) == 1);
    close(fd);
}

static void test_rejections(void) {
    rm_rf(g_dir);
    uint64_t keys[6];
    chain_keys(6, keys);
    kvdisk *d = open_store(FP, 0, 0);
    for (int i = 0; i < 6; i++) CHECK_EQ_INT(write_block(d, keys, i), 0);
    char p[1024];
    /* a corrupted payload byte: caught by the checksum when read */
    block_path(FP, keys[1], p, sizeof p);
    flip_byte(p, 56 + 4 * BT + 5);
    CHECK_EQ_INT(read_block(d, keys, 1), ERR_FORMAT);
    CHECK(!kvdisk_contains(d, keys[1]));
    CHECK(access(p, F_OK) != 0); /* deleted */
    /* a corrupted header byte (the token ids) */
    block_path(FP, keys[2], p, sizeof p);
    flip_byte(p, 56);
    CHECK_EQ_INT(read_block(d, keys, 2), ERR_FORMAT);
    /* the checksum itself */
    block_path(FP, keys[5], p, sizeof p);
    flip_byte(p, (long)FILE_BYTES - 1);
    CHECK_EQ_INT(read_block(d, keys, 5), ERR_FORMAT);
    /* truncated while the store is open */
    block_path(FP, keys[3], p, sizeof p);
    CHECK(truncate(p, (off_t)FILE_BYTES - 9) == 0);
    CHECK_EQ_INT(read_block(d, keys, 3), ERR_FORMAT);
    kvdisk_stats st;
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.rejected_corrupt, 4);
    CHECK_EQ_INT(st.n_files, 2);
    CHECK_EQ_INT(read_block(d, keys, 0), 0);
    CHECK_EQ_INT(read_block(d, keys, 4), 0);
    kvdisk_close(d);

    /* at open: a truncated file (deleted), a torn temporary (deleted), a file
     * of another model (kept, counted), one of another format version (kept,
     * counted), a stray file (ignored) */
    char q[1024];
    FILE *f;
    {
        /* another model: the same bytes under another fingerprint */
        kvdisk *o = open_store(FP ^ 1, 0, 0);
        CHECK_EQ_INT(write_block(o, keys, 0), 0);
        CHECK_EQ_INT(write_block(o, keys, 1), 0);
        kvdisk_stats so;
        kvdisk_get_stats(o, &so);
        CHECK_EQ_INT(so.n_files, 2);
        CHECK_EQ_INT(so.rejected_foreign, 2); /* ours (keys 0 and 4) */
        kvdisk_close(o);
    }
    {
        /* another version: block 2 rewritten, then its version field patched */
        kvdisk *o = open_store(FP, 0, 0);
        CHECK_EQ_INT(write_block(o, keys, 2), 0);
        kvdisk_close(o);
        block_path(FP, keys[2], p, sizeof p);
        int fd = open(p, O_RDWR);
        uint8_t ver[4] = {KVDISK_VERSION + 1, 0, 0, 0};
        CHECK(pwrite(fd, ver, 4, 8) == 4);
        close(fd);
    }
    block_path(FP, keys[4], p, sizeof p);
    CHECK(truncate(p, 100) == 0);
    snprintf(q, sizeof q, "%s/.tmp-%016llx-1-1", g_dir, (unsigned long long)keys[4]);
    f = fopen(q, "w");
    fputs("torn", f);
    fclose(f);
    snprintf(q, sizeof q, "%s/README", g_dir);
    f = fopen(q, "w");
    fputs("not a block", f);
    fclose(f);
    d = open_store(FP, 0, 0);
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 1); /* block 0 */
    CHECK_EQ_INT(st.rejected_corrupt, 1);
    CHECK_EQ_INT(st.rejected_foreign, 3); /* two of FP^1, one of version 2 */
    CHECK_EQ_INT(st.tmp_removed, 1);
    CHECK(kvdisk_contains(d, keys[0]) && !kvdisk_contains(d, keys[2]) && !kvdisk_contains(d, keys[4]));
    CHECK_EQ_INT(read_block(d, keys, 0), 0);
    CHECK_EQ_INT(count_files(g_dir, ".kvb"), 4); /* ours, 2 foreign, 1 old version */
    kvdisk_close(d);
    /* a FIFO under a valid name: never blocks the scan, rejected */
    block_path(FP, keys[3], p, sizeof p);
    CHECK(mkfifo(p, 0644) == 0);
    d = open_store(FP, 0, 0);
    CHECK(!kvdisk_contains(d, keys[3]));
    kvdisk_close(d);
    CHECK(access(p, F_OK) != 0);
    /* garbage under a valid name: never crashes, deleted at open */
    block_path(FP, keys[5], p, sizeof p);
    f = fopen(p, "w");
    for (size_t i = 0; i < FILE_BYTES; i++) fputc((int)(i * 31 % 251), f);
    fclose(f);
    d = open_store(FP, 0, 0);
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.rejected_corrupt, 1);
    CHECK(!kvdisk_contains(d, keys[5]));
    kvdisk_close(d);
}

static void test_size_cap(void) {
    rm_rf(g_dir);
    uint64_t keys[8];
    chain_keys(8, keys);
    kvdisk *d = open_store(FP, 3 * FILE_BYTES, 0);
    for (int i = 0; i < 5; i++) CHECK_EQ_INT(write_block(d, keys, i), 0);
    kvdisk_stats st;
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 3);
    CHECK_EQ_INT(st.evicted, 2);
    CHECK(!kvdisk_contains(d, keys[0]) && !kvdisk_contains(d, keys[1]));
    CHECK_EQ_INT(count_files(g_dir, ".kvb"), 3);
    /* a read refreshes: 2 is now the newest, so 3 goes next */
    CHECK_EQ_INT(read_block(d, keys, 2), 0);
    CHECK_EQ_INT(write_block(d, keys, 5), 0);
    CHECK(kvdisk_contains(d, keys[2]) && !kvdisk_contains(d, keys[3]) && kvdisk_contains(d, keys[4]));
    kvdisk_close(d);
    /* the order survives a reopen (mtimes); a smaller cap trims at open */
    usleep(20000);
    d = open_store(FP, 3 * FILE_BYTES, 0);
    CHECK_EQ_INT(read_block(d, keys, 4), 0); /* newest now: 2, 5, 4 */
    kvdisk_close(d);
    d = open_store(FP, 2 * FILE_BYTES, 0);
    CHECK(!kvdisk_contains(d, keys[2]) && kvdisk_contains(d, keys[5]) && kvdisk_contains(d, keys[4]));
    kvdisk_close(d);
    /* a cap below one file: nothing is written, nothing fails */
    rm_rf(g_dir);
    d = open_store(FP, FILE_BYTES - 1, 0);
    CHECK_EQ_INT(write_block(d, keys, 0), ERR_RANGE);
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 0);
    CHECK_EQ_INT(st.writes_dropped, 1);
    CHECK_EQ_INT(count_files(g_dir, ".kvb"), 0);
    kvdisk_close(d);
    /* a write that fails (the directory is gone): counted, dropped */
    rm_rf(g_dir);
    d = open_store(FP, 0, 0);
    rm_rf(g_dir);
    CHECK_EQ_INT(write_block(d, keys, 0), ERR_IO);
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.write_errors, 1);
    CHECK_EQ_INT(st.n_files, 0);
    kvdisk_close(d);
}

static void test_async(void) {
    rm_rf(g_dir);
    uint64_t keys[16];
    chain_keys(16, keys);
    kvdisk *d = open_store(FP, 0, 2);
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2], k2[PAYLOAD / 2], v2[PAYLOAD / 2];
    int queued = 0, refused = 0;
    for (int i = 0; i < 16; i++) {
        block_data(i, tok, k, v);
        int rc = kvdisk_write_async(d, keys[i], parent_of(keys, i), tok, k, v);
        if (rc == 0) queued++;
        else if (rc == ERR_RANGE) refused++, kvdisk_flush(d), i--; /* a full queue is a state: retry */
    }
    kvdisk_flush(d);
    CHECK_EQ_INT(queued, 16);
    block_data(3, tok, k, v);
    CHECK_EQ_INT(kvdisk_write_async(d, keys[3], keys[2], tok, k, v), 1); /* already on disk */
    kvdisk_stats st;
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.n_files, 16);
    CHECK_EQ_INT(st.writes_dropped, (uint64_t)refused);
    /* reads: 4 slots; a fifth is refused until one is taken */
    int slots[4];
    for (int i = 0; i < 4; i++) {
        block_data(i, tok, k, v);
        slots[i] = kvdisk_read_async(d, keys[i], parent_of(keys, i), tok);
        CHECK(slots[i] >= 0);
    }
    block_data(4, tok, k, v);
    CHECK_EQ_INT(kvdisk_read_async(d, keys[4], keys[3], tok), ERR_RANGE);
    CHECK_EQ_INT(kvdisk_read_async(d, 777, 0, tok), ERR_NOTFOUND);
    for (int i = 0; i < 4; i++) {
        int rc;
        for (int w = 0; (rc = kvdisk_read_poll(d, slots[i])) == 1 && w < 5000; w++) usleep(1000);
        CHECK_EQ_INT(rc, 0);
        if (i == 2) {
            kvdisk_read_drop(d, slots[i]);
            continue;
        }
        block_data(i, tok, k, v);
        kvdisk_read_take(d, slots[i], k2, v2);
        CHECK(!memcmp(k, k2, sizeof k) && !memcmp(v, v2, sizeof v));
    }
    /* a corrupt file through the async path */
    char p[1024];
    block_path(FP, keys[7], p, sizeof p);
    flip_byte(p, 70);
    block_data(7, tok, k, v);
    int s = kvdisk_read_async(d, keys[7], keys[6], tok);
    CHECK(s >= 0);
    int rc;
    for (int w = 0; (rc = kvdisk_read_poll(d, s)) == 1 && w < 5000; w++) usleep(1000);
    CHECK_EQ_INT(rc, ERR_FORMAT);
    kvdisk_read_drop(d, s);
    /* a read dropped right away (queued or running) frees its slot */
    for (int i = 0; i < 50; i++) {
        block_data(8, tok, k, v);
        s = kvdisk_read_async(d, keys[8], keys[7], tok);
        if (s >= 0) kvdisk_read_drop(d, s);
    }
    kvdisk_get_stats(d, &st);
    CHECK_EQ_INT(st.rejected_corrupt, 1);
    kvdisk_close(d);
}


/* ---- a directory shared by two servers ---------------------------------- */

enum { SH_BLOCKS = 32, SH_ROUNDS = 400 };
static uint64_t g_sh_keys[SH_BLOCKS];

typedef struct sh_worker {
    kvdisk *d;
    unsigned seed;
    int n_read, n_wrong, n_other;
} sh_worker;

/* writes (async) and reads (sync) random blocks of one chain: every read is
 * the right bytes or not found, never anything else */
static void *sh_run(void *arg) {
    sh_worker *w = arg;
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2];
    for (int r = 0; r < SH_ROUNDS; r++) {
        w->seed = w->seed * 1103515245u + 12345u;
        int i = (int)(w->seed >> 16) % SH_BLOCKS;
        if (r % 2 == 0) {
            block_data(i, tok, k, v);
            (void)kvdisk_write_async(w->d, g_sh_keys[i], parent_of(g_sh_keys, i), tok, k, v);
        } else {
            int rc = read_block(w->d, g_sh_keys, i);
            if (rc == 0) w->n_read++;
            else if (rc == -100) w->n_wrong++;
            else if (rc != ERR_NOTFOUND) w->n_other++;
        }
    }
    return NULL;
}

static void test_shared_kv_dir(void) {
    rm_rf(g_dir);
    chain_keys(SH_BLOCKS, g_sh_keys);
    kvdisk *a = open_store(FP, 0, 2), *b = open_store(FP, 0, 2);
    /* what one writes after the other's scan, the other finds */
    CHECK_EQ_INT(write_block(a, g_sh_keys, 0), 0);
    CHECK(kvdisk_contains(b, g_sh_keys[0]));
    CHECK_EQ_INT(read_block(b, g_sh_keys, 0), 0);
    kvdisk_stats st;
    kvdisk_get_stats(b, &st);
    CHECK_EQ_INT(st.discovered, 1);
    /* both at once, the same blocks */
    sh_worker w[2] = {{.d = a, .seed = 1}, {.d = b, .seed = 2}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++) pthread_create(&th[i], NULL, sh_run, &w[i]);
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    kvdisk_flush(a);
    kvdisk_flush(b);
    CHECK(w[0].n_read > 0 && w[1].n_read > 0);
    CHECK_EQ_INT(w[0].n_wrong + w[1].n_wrong, 0);
    CHECK_EQ_INT(w[0].n_other + w[1].n_other, 0);
    CHECK_EQ_INT(count_files(g_dir, ".tmp-"), 0);
    /* a block written by a and found by b is not written again by b */
    int32_t tok[BT];
    uint8_t k[PAYLOAD / 2], v[PAYLOAD / 2];
    int fresh = -1;
    for (int i = 0; i < SH_BLOCKS && fresh < 0; i++)
        if (!kvdisk_contains(a, g_sh_keys[i])) fresh = i;
    if (fresh >= 0) {
        CHECK_EQ_INT(write_block(a, g_sh_keys, fresh), 0);
        kvdisk_get_stats(b, &st);
        uint64_t written = st.blocks_written;
        block_data(fresh, tok, k, v);
        CHECK(kvdisk_write_async(b, g_sh_keys[fresh], parent_of(g_sh_keys, fresh), tok, k, v) >= 0);
        kvdisk_flush(b);
        kvdisk_get_stats(b, &st);
        CHECK_EQ_INT(st.blocks_written, written);
        CHECK_EQ_INT(read_block(b, g_sh_keys, fresh), 0);
    }
    /* truncated and corrupted under b: rejected, never served */
    for (int i = 0; i < 2; i++) CHECK_EQ_INT(write_block(a, g_sh_keys, i), 0);
    char p[1024];
    block_path(FP, g_sh_keys[0], p, sizeof p);
    CHECK(truncate(p, (off_t)FILE_BYTES / 2) == 0);
    CHECK_EQ_INT(read_block(b, g_sh_keys, 0), ERR_FORMAT);
    block_path(FP, g_sh_keys[1], p, sizeof p);
    flip_byte(p, (long)FILE_BYTES - 20);
    CHECK_EQ_INT(read_block(b, g_sh_keys, 1), ERR_FORMAT);
    CHECK_EQ_INT(read_block(a, g_sh_keys, 1), ERR_NOTFOUND); /* b deleted it */
    CHECK_EQ_INT(write_block(a, g_sh_keys, 1), 0);           /* and it comes back whole */
    CHECK_EQ_INT(read_block(b, g_sh_keys, 1), 0);
    /* a temporary being written (its writer holds the lock) survives
     * another server's start; one left by a crash does not */
    snprintf(p, sizeof p, "%s/.tmp-live", g_dir);
    int fd = open(p, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && flock(fd, LOCK_EX) == 0);
    kvdisk *c = open_store(FP, 0, 0);
    CHECK(access(p, F_OK) == 0);
    kvdisk_close(c);
    close(fd);
    c = open_store(FP, 0, 0);
    CHECK(access(p, F_OK) != 0);
    kvdisk_close(c);
    kvdisk_close(a);
    kvdisk_close(b);
    /* one cap for the directory: two writers of 24 blocks each, cap 8 */
    rm_rf(g_dir);
    enum { CAP_FILES = 8, PER = 24 };
    uint64_t keys[2 * PER];
    chain_keys(2 * PER, keys);
    a = open_store(FP, CAP_FILES * FILE_BYTES, 1);
    b = open_store(FP, CAP_FILES * FILE_BYTES, 1);
    for (int i = 0; i < PER; i++)
        for (int s = 0; s < 2; s++) {
            kvdisk *d = s ? b : a;
            int j = s * PER + i;
            block_data(j, tok, k, v);
            while (kvdisk_write_async(d, keys[j], parent_of(keys, j), tok, k, v) == ERR_RANGE) kvdisk_flush(d);
            kvdisk_flush(d);
        }
    int n = count_files(g_dir, ".kvb");
    CHECK_MSG(n >= CAP_FILES - 1 && n <= CAP_FILES + 1, "%d files on disk, cap %d", n, CAP_FILES);
    /* the newest blocks are the ones kept */
    CHECK(kvdisk_contains(a, keys[2 * PER - 1]) && !kvdisk_contains(a, keys[0]) && !kvdisk_contains(b, keys[PER]));
    kvdisk_close(a);
    kvdisk_close(b);
}

/* ---- the model: restored KV gives the same logits ---------------------- */

static void forward_range(model *m, model_state *st, model_kv *kv, const int32_t *tok, int from, int to,
                          const int32_t *table, int n_table, float *logits) {
    int n = to - from;
    int32_t pos[64], seqi[64];
    for (int i = 0; i < n; i++) pos[i] = from + i, seqi[i] = 0;
    model_seq s = {.block_table = table, .n_blocks = n_table};
    model_batch b = {.n_tokens = n, .token = tok + from, .pos = pos, .seq = seqi, .n_seqs = 1, .seqs = &s};
    err_t e = {0};
    int rows = model_forward(m, st, kv, &b, logits, &e);
    CHECK_MSG(rows == 1, "%s", e.msg);
}

static void test_model_restore(model *m) {
    rm_rf(g_dir);
    const int B = 16, N = 40;
    model_kv *kv = model_kv_new(m, 8, B);
    model_state *st = model_state_new(m, 64, 64, 1);
    int nv = m->cfg.n_vocab;
    float *l1 = xmalloc((size_t)nv * sizeof(float)), *l2 = xmalloc((size_t)nv * sizeof(float));
    int32_t tok[40];
    for (int i = 0; i < N; i++) tok[i] = 1 + (int32_t)(rng_u64() % (uint64_t)(nv - 1));
    size_t bb = model_kv_block_bytes(m, B);
    kvdisk_opts o = {.dir = g_dir, .fingerprint = kvdisk_model_fingerprint(m, B), .block_tokens = B,
                     .payload_bytes = bb, .n_threads = 1};
    CHECK(o.fingerprint == kvdisk_model_fingerprint(m, B));
    CHECK(o.fingerprint != kvdisk_model_fingerprint(m, 32));
    kvdisk *d = NULL;
    err_t e = {0};
    CHECK_MSG(kvdisk_open(&o, &d, &e) == 0, "%s", e.msg);
    /* computed in place: blocks 0, 1 (prefix), then the tail in block 2 */
    int32_t t1[3] = {0, 1, 2};
    forward_range(m, st, kv, tok, 0, 32, t1, 3, l1);
    forward_range(m, st, kv, tok, 32, N, t1, 3, l1);
    /* the prefix blocks through the disk, into blocks 5 and 6 */
    uint64_t key = KVDISK_KEY_SEED, keys[2];
    for (int i = 0; i < 2; i++) {
        keys[i] = key = kvdisk_key_next(key, tok + B * i, B);
        CHECK_EQ_INT(kvdisk_write_async(d, keys[i], i ? keys[0] : 0, tok + B * i, kv->k + (size_t)i * kv->block_elems,
                                        kv->v + (size_t)i * kv->block_elems),
                     0);
    }
    kvdisk_flush(d);
    kvdisk_close(d);
    CHECK_MSG(kvdisk_open(&o, &d, &e) == 0, "%s", e.msg); /* as after a restart */
    for (int i = 0; i < 2; i++) {
        int s = kvdisk_read_async(d, keys[i], i ? keys[0] : 0, tok + B * i);
        CHECK(s >= 0);
        int rc;
        for (int w = 0; (rc = kvdisk_read_poll(d, s)) == 1 && w < 5000; w++) usleep(1000);
        CHECK_EQ_INT(rc, 0);
        kvdisk_read_take(d, s, kv->k + (size_t)(5 + i) * kv->block_elems, kv->v + (size_t)(5 + i) * kv->block_elems);
    }
    CHECK(!memcmp(kv->k, kv->k + 5 * kv->block_elems, 2 * kv->block_elems * 2));
    int32_t t2[3] = {5, 6, 7};
    forward_range(m, st, kv, tok, 32, N, t2, 3, l2);
    CHECK_MSG(!memcmp(l1, l2, (size_t)nv * sizeof(float)), "logits after a restore differ from the computed ones");
    kvdisk_close(d);
    free(l1);
    free(l2);
    model_state_free(st);
    model_kv_free(kv);
}


/* ---- the engine: spill, restore, restart, a full disk ------------------ */

typedef struct answer {
    int n;
    req_token tok[16];
    int cached;
    req_finish fin;
} answer;

/* A greedy request for max_tokens tokens (no EOS), with n_logprobs top
 * log-probabilities per token, submitted. */
static req *submit_greedy(engine *en, const int32_t *prompt, int n, int max_tokens, int n_logprobs) {
    int32_t *ids = xmalloc((size_t)n * sizeof *ids);
    memcpy(ids, prompt, (size_t)n * sizeof *ids);
    req *r = req_new(ids, n);
    r->sp.temperature = 0;
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->n_logprobs = n_logprobs;
    err_t e = {0};
    CHECK_MSG(engine_submit(en, r, &e) == 0, "%s", e.msg);
    return r;
}

static void ask(engine *en, const int32_t *prompt, int n_prompt, answer *a) {
    memset(a, 0, sizeof *a);
    req *r = submit_greedy(en, prompt, n_prompt, 8, 5);
    req_finish fin = REQ_RUNNING;
    int seen = 0;
    while (fin == REQ_RUNNING) seen = req_wait(r, seen, 5000, &fin);
    a->fin = fin;
    a->n = MIN(seen, 16);
    req_copy_tokens(r, 0, a->n, a->tok);
    req_get_finish(r, &a->cached, NULL, 0);
    req_unref(r);
}

/* Same tokens and bitwise the same log-probabilities (chosen and top 5). */
static bool same_answer(const answer *a, const answer *b) {
    if (a->n != b->n || a->n != 8 || a->fin != REQ_FINISH_LENGTH || b->fin != REQ_FINISH_LENGTH) return false;
    for (int i = 0; i < a->n; i++) {
        const req_token *x = &a->tok[i], *y = &b->tok[i];
        if (x->id != y->id || memcmp(&x->logprob, &y->logprob, sizeof(float)) || x->n_top != y->n_top ||
            memcmp(x->top_ids, y->top_ids, sizeof x->top_ids) || memcmp(x->top_lps, y->top_lps, sizeof x->top_lps))
            return false;
    }
    return true;
}

enum { N_PROMPTS = 6, PROMPT_LEN = 100 };
static int32_t g_prompts[N_PROMPTS][PROMPT_LEN];

static engine *new_engine(model *m, size_t kv_blocks, const char *dir, uint64_t disk_max) {
    engine_opts o = engine_defaults();
    o.kv_mem_bytes = kv_blocks * model_kv_block_bytes(m, 16);
    o.check = true;
    o.kv_disk_dir = dir;
    o.kv_disk_max_bytes = disk_max;
    engine *en = NULL;
    err_t e = {0};
    CHECK_MSG(engine_new(m, &o, &en, &e) == 0, "%s", e.msg);
    return en;
}

static void test_engine_disk(model *m) {
    rm_rf(g_dir);
    for (int p = 0; p < N_PROMPTS; p++)
        for (int i = 0; i < PROMPT_LEN; i++) g_prompts[p][i] = i == 0 ? 1 : 3 + (int32_t)(rng_u64() % 500);
    /* the recompute: a big pool, no disk; then the same prompts as RAM cache
     * hits (the prefix computed in the same chunks as a restored one) */
    answer ref[N_PROMPTS], a;
    engine *en = new_engine(m, 256, NULL, 0);
    for (int p = 0; p < N_PROMPTS; p++) ask(en, g_prompts[p], PROMPT_LEN, &ref[p]);
    for (int p = 0; p < N_PROMPTS; p++) {
        ask(en, g_prompts[p], PROMPT_LEN, &a);
        CHECK_EQ_INT(a.cached, 96);
        CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d: a RAM cache hit differs from the recompute", p);
    }
    engine_free(en);

    /* 20 blocks of RAM: every prompt (7 blocks + decode) evicts older ones */
    en = new_engine(m, 20, g_dir, 0);
    for (int p = 0; p < N_PROMPTS; p++) {
        ask(en, g_prompts[p], PROMPT_LEN, &a);
        CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d with the disk tier", p);
    }
    engine_stats st;
    engine_get_stats(en, &st);
    for (int w = 0; w < 500 && st.kv_disk_blocks < 6 * N_PROMPTS; w++) { /* the last writes may be queued */
        usleep(10000);
        engine_get_stats(en, &st);
    }
    CHECK(st.kv_disk_blocks >= 6 * N_PROMPTS);
    CHECK(st.kv_disk_written_bytes_total > 0);
    /* prompt 0 left RAM long ago: it comes back from disk */
    ask(en, g_prompts[0], PROMPT_LEN, &a);
    CHECK_EQ_INT(a.cached, 96);
    CHECK_MSG(same_answer(&a, &ref[0]), "prompt 0 restored from disk differs from the recompute");
    engine_get_stats(en, &st);
    /* its first block may still be in RAM: every later prompt copied its
     * first row (the shared token 1) from it, a use ("A partial last block") */
    CHECK_MSG(st.kv_disk_restored_tokens_total == 96 || st.kv_disk_restored_tokens_total == 80, "restored %llu",
              (unsigned long long)st.kv_disk_restored_tokens_total);
    CHECK(st.kv_disk_read_bytes_total > 0);
    engine_free(en);

    /* a restart on the same directory: the first request is served from disk;
     * a corrupted file is rejected and that block recomputed */
    DIR *dp = opendir(g_dir);
    struct dirent *de;
    char victim[1024] = "";
    while ((de = readdir(dp)))
        if (!victim[0] && strstr(de->d_name, ".kvb")) snprintf(victim, sizeof victim, "%s/%s", g_dir, de->d_name);
    closedir(dp);
    flip_byte(victim, 200);
    en = new_engine(m, 20, g_dir, 0);
    int n_full_hits = 0;
    for (int p = N_PROMPTS - 1; p >= 0; p--) {
        ask(en, g_prompts[p], PROMPT_LEN, &a);
        CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d after a restart", p);
        n_full_hits += a.cached == 96;
    }
    CHECK_MSG(n_full_hits >= N_PROMPTS - 1, "%d of %d prompts fully from disk", n_full_hits, N_PROMPTS);
    engine_get_stats(en, &st);
    CHECK_EQ_INT(st.kv_disk_rejected_corrupt_total, 1);
    CHECK(st.kv_disk_restored_tokens_total >= 96 * (N_PROMPTS - 1));
    engine_free(en);

    /* requests cancelled while their blocks come back from disk: nothing
     * leaks (--check after every step), the others answer as the recompute */
    en = new_engine(m, 20, g_dir, 0);
    {
        req *rs[N_PROMPTS];
        for (int p = 0; p < N_PROMPTS; p++) {
            rs[p] = submit_greedy(en, g_prompts[p], PROMPT_LEN, 8, 0);
            if (p % 2) req_cancel(rs[p]);
        }
        for (int p = 0; p < N_PROMPTS; p++) {
            req_finish fin = REQ_RUNNING;
            int seen = 0;
            while (fin == REQ_RUNNING) seen = req_wait(rs[p], seen, 5000, &fin);
            if (p % 2 == 0) {
                CHECK_EQ_INT(fin, REQ_FINISH_LENGTH);
                CHECK_EQ_INT(seen, 8);
                for (int i = 0; i < MIN(seen, 8); i++) CHECK_EQ_INT(rs[p]->tokens[i].id, ref[p].tok[i].id);
            }
            req_unref(rs[p]);
        }
        for (int p = 0; p < N_PROMPTS; p++) {
            ask(en, g_prompts[p], PROMPT_LEN, &a);
            CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d after cancellations", p);
        }
        engine_get_stats(en, &st);
        for (int w = 0; w < 200 && st.kv_blocks_used != st.kv_blocks_cached; w++) { /* the last step's publish */
            usleep(5000);
            engine_get_stats(en, &st);
        }
        CHECK_EQ_INT(st.kv_blocks_used, st.kv_blocks_cached); /* only the tree holds blocks */
    }
    engine_free(en);

    /* a long prompt (93 full blocks, more than the I/O queue's slots) after
     * a restart: restored in several batches, all of it */
    {
        enum { LONG = 1500 };
        int32_t *lp = xmalloc(LONG * sizeof *lp);
        for (int i = 0; i < LONG; i++) lp[i] = i == 0 ? 1 : 3 + (int32_t)(rng_u64() % 500);
        answer lref;
        en = new_engine(m, 128, NULL, 0);
        ask(en, lp, LONG, &lref);
        engine_free(en);
        rm_rf(g_dir);
        en = new_engine(m, 128, g_dir, 0);
        ask(en, lp, LONG, &a);
        CHECK_MSG(same_answer(&a, &lref), "a long prompt with the disk tier");
        engine_free(en);
        en = new_engine(m, 128, g_dir, 0);
        ask(en, lp, LONG, &a);
        CHECK_EQ_INT(a.cached, 93 * 16);
        CHECK_MSG(same_answer(&a, &lref), "a long prompt restored from disk after a restart");
        engine_get_stats(en, &st);
        CHECK_EQ_INT(st.kv_disk_restored_tokens_total, 93 * 16);
        engine_free(en);
        free(lp);
    }

    /* a disk that holds less than one block: everything is recomputed, the
     * same answers, no error */
    rm_rf(g_dir);
    en = new_engine(m, 20, g_dir, 1000);
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < N_PROMPTS; p++) {
            ask(en, g_prompts[p], PROMPT_LEN, &a);
            CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d with a full disk", p);
        }
    engine_get_stats(en, &st);
    CHECK_EQ_INT(st.kv_disk_blocks, 0);
    CHECK_EQ_INT(st.kv_disk_restored_tokens_total, 0);
    CHECK(st.kv_disk_writes_dropped_total > 0);
    engine_free(en);
    /* a disk that holds 10 blocks: some prefixes restored, the rest recomputed */
    rm_rf(g_dir);
    size_t file = 56 + 4 * 16 + model_kv_block_bytes(m, 16) + 8;
    en = new_engine(m, 20, g_dir, 10 * file);
    for (int r = 0; r < 2; r++)
        for (int p = 0; p < N_PROMPTS; p++) {
            ask(en, g_prompts[p], PROMPT_LEN, &a);
            CHECK_MSG(same_answer(&a, &ref[p]), "prompt %d with a small disk", p);
        }
    engine_get_stats(en, &st);
    CHECK(st.kv_disk_blocks <= 10);
    engine_free(en);
}

/* ---- the engine: reads of a later request must not block the oldest ----- */

/* Waits at most timeout_ms for r to finish (cancels it after that); returns
 * its finish and copies up to 8 token ids. */
static req_finish wait_bounded(req *r, int timeout_ms, int32_t *ids, int *n) {
    req_finish fin = REQ_RUNNING;
    int seen = 0;
    int64_t end = clock_ns() + (int64_t)timeout_ms * 1000000;
    while (fin == REQ_RUNNING && clock_ns() < end) seen = req_wait(r, seen, 100, &fin);
    if (fin == REQ_RUNNING) {
        req_cancel(r);
        while (fin == REQ_RUNNING) seen = req_wait(r, seen, 1000, &fin);
        return REQ_RUNNING;
    }
    *n = MIN(seen, 8);
    for (int i = 0; i < *n; i++) ids[i] = r->tokens[i].id;
    return fin;
}

/* The stall of soak runs 3-5 (fixed in 4d1c135). Two requests wait while
 * another runs (max_running 1), both with a prefix on disk: A (the oldest,
 * 3 blocks on disk, 18 needed) and B (6 on disk, 7 needed). When the pool
 * frees, A and B both start their reads; A's come in, and A needs 15 more
 * blocks where 11 are free, because B holds 6 for its reads. Admission
 * stops at A (it has no blocks) and never tried B, so B's finished reads
 * used to stay B's — and A waited forever with nothing running. Now the
 * finished reads of every waiting request go to the tree (evictable) each
 * step: A takes B's blocks, runs, and B runs after it. Both answer as a
 * recompute does. */
static void test_engine_disk_reads_behind_oldest(model *m) {
    rm_rf(g_dir);
    enum { LA = 288, LB = 112, LR = 20 };
    int32_t pa[LA], pb[LB], pr[LR];
    for (int i = 0; i < LA; i++) pa[i] = i == 0 ? 1 : 3 + (int32_t)(rng_u64() % 500);
    for (int i = 0; i < LB; i++) pb[i] = i == 0 ? 1 : 3 + (int32_t)(rng_u64() % 500);
    for (int i = 0; i < LR; i++) pr[i] = i == 0 ? 1 : 3 + (int32_t)(rng_u64() % 500);
    /* the references, recomputed; and the prefixes (A's first 3 blocks, B's
     * first 6) written to disk by requests that end in them */
    int32_t ref_a[8], ref_b[8], got[8];
    int n_a = 0, n_b = 0, n = 0;
    engine *en = new_engine(m, 256, NULL, 0);
    req *r = submit_greedy(en, pa, LA, 8, 0);
    CHECK_EQ_INT(wait_bounded(r, 20000, ref_a, &n_a), REQ_FINISH_LENGTH);
    req_unref(r);
    r = submit_greedy(en, pb, LB, 8, 0);
    CHECK_EQ_INT(wait_bounded(r, 20000, ref_b, &n_b), REQ_FINISH_LENGTH);
    req_unref(r);
    engine_free(en);
    en = new_engine(m, 256, g_dir, 0);
    r = submit_greedy(en, pa, 3 * 16 + 1, 1, 0);
    CHECK_EQ_INT(wait_bounded(r, 20000, got, &n), REQ_FINISH_LENGTH);
    req_unref(r);
    r = submit_greedy(en, pb, 6 * 16 + 1, 1, 0);
    CHECK_EQ_INT(wait_bounded(r, 20000, got, &n), REQ_FINISH_LENGTH);
    req_unref(r);
    engine_free(en); /* flushes the writes */

    /* a restart with 20 blocks of RAM: nothing of A or B in RAM */
    engine_opts o = engine_defaults();
    o.kv_mem_bytes = 20 * model_kv_block_bytes(m, 16);
    o.check = true;
    o.kv_disk_dir = g_dir;
    o.max_running = 1;
    o.step_delay_us = 20000; /* R runs for ~0.2 s: A and B queue behind it */
    err_t e = {0};
    CHECK_MSG(engine_new(m, &o, &en, &e) == 0, "%s", e.msg);
    req *rr = submit_greedy(en, pr, LR, 10, 0);
    req_finish fin = REQ_RUNNING;
    CHECK_MSG(req_wait(rr, 0, 5000, &fin) >= 1, "R is not running: A and B would not queue behind it");
    req *ra = submit_greedy(en, pa, LA, 8, 0);
    req *rb = submit_greedy(en, pb, LB, 8, 0);
    CHECK_EQ_INT(wait_bounded(rr, 20000, got, &n), REQ_FINISH_LENGTH);
    fin = wait_bounded(ra, 20000, got, &n);
    CHECK_MSG(fin == REQ_FINISH_LENGTH, "the oldest request did not finish in 20 s (finish %d): stalled", (int)fin);
    if (fin == REQ_FINISH_LENGTH)
        CHECK_MSG(n == n_a && !memcmp(got, ref_a, sizeof(int32_t) * (size_t)n), "A differs from the recompute");
    fin = wait_bounded(rb, 20000, got, &n);
    CHECK_EQ_INT(fin, REQ_FINISH_LENGTH);
    CHECK_MSG(n == n_b && !memcmp(got, ref_b, sizeof(int32_t) * (size_t)n), "B differs from the recompute");
    engine_stats st;
    engine_get_stats(en, &st);
    CHECK(st.kv_disk_restored_tokens_total >= 9 * 16); /* both prefixes came back from disk */
    req_unref(rr);
    req_unref(ra);
    req_unref(rb);
    engine_free(en);
}

/* Copies src to dst (the whole file). */
static void copy_file(const char *src, const char *dst) {
    char *buf = NULL;
    size_t n = 0;
    err_t e = {0};
    CHECK_MSG(file_read_all(src, &buf, &n, &e) == 0, "%s", e.msg);
    FILE *f = fopen(dst, "wb");
    CHECK(f && fwrite(buf, 1, n, f) == n);
    if (f) fclose(f);
    free(buf);
}

static model *load_path(const char *path) {
    model *m = NULL;
    err_t e = {0};
    CHECK_MSG(model_load(path, &m, &e) == 0, "%s: %s", path, e.msg);
    return m;
}

/* Issue 26 finding 9: the fingerprint covers every byte of the tensors. A
 * copy of the model with one byte changed in the middle of its largest
 * tensor, away from the three 256-byte samples of kvdisk_model_fingerprint,
 * had the same fingerprint (its old block files were served: 12 of 12
 * outputs wrong); kvdisk_fingerprint differs. The weights' hash is cached
 * by the file's identity in DIR/model-hashes: the cache's line is what a
 * restart reads (a forged line changes the answer, proving it is read),
 * and an edit of the file is noticed (mtime, ctime). */
static void test_full_fingerprint(void) {
    rm_rf(g_dir);
    char src[1024], path[300], cache[300];
    snprintf(src, sizeof src, "%s/models/stories260K.gguf", test_shared_dir());
    snprintf(path, sizeof path, "%s.model.gguf", g_dir);
    snprintf(cache, sizeof cache, "%s/model-hashes", g_dir);
    copy_file(src, path);
    model *a = load_path(path);
    if (!a) return;
    const gguf_tensor *big = NULL;
    for (int64_t i = 0; i < gguf_n_tensors(a->gguf); i++) {
        const gguf_tensor *t = gguf_tensor_at(a->gguf, i);
        if (!big || t->n_bytes > big->n_bytes) big = t;
    }
    long off = (long)(gguf_data_offset(a->gguf) + big->offset + big->n_bytes / 4);
    CHECK_MSG(big->n_bytes > 4 * 256 * 4, "the largest tensor (%llu bytes) spans more than the samples",
              (unsigned long long)big->n_bytes);
    uint64_t fa_old = kvdisk_model_fingerprint(a, 16), fa = kvdisk_fingerprint(a, 16, g_dir);
    CHECK(fa != 0 && fa != fa_old);
    CHECK_MSG(count_files(g_dir, "model-hashes") == 1, "the weights' hash was not cached");
    CHECK(kvdisk_fingerprint(a, 16, g_dir) == fa); /* from the cache now */
    CHECK(kvdisk_fingerprint(a, 16, NULL) == fa);  /* the same as computed */
    CHECK(kvdisk_fingerprint(a, 32, g_dir) != fa);
    model_free(a);
    /* one byte of the copy changed, away from the samples (the file is
     * rewritten: a new mtime and ctime) */
    usleep(20000);
    flip_byte(path, off);
    model *b = load_path(path);
    if (b) {
        CHECK_MSG(kvdisk_model_fingerprint(b, 16) == fa_old, "the sampled fingerprint saw the edit (test premise)");
        CHECK_MSG(kvdisk_fingerprint(b, 16, g_dir) != fa, "an edit inside a tensor kept the fingerprint");
        /* the cache is read: a forged hash for this file's identity is what
         * a restart uses */
        char *text = NULL;
        size_t n = 0;
        err_t e = {0};
        CHECK(file_read_all(cache, &text, &n, &e) == 0);
        char *last = text && n > 17 ? text + n - 17 : NULL; /* the newest line's hash and '\n' */
        if (last) {
            last[0] = last[0] == '0' ? '1' : '0';
            FILE *f = fopen(cache, "w");
            CHECK(f && fwrite(text, 1, n, f) == n);
            if (f) fclose(f);
        }
        free(text);
        uint64_t forged = kvdisk_fingerprint(b, 16, g_dir);
        CHECK_MSG(forged != kvdisk_fingerprint(b, 16, NULL), "the cached line was not used");
        model_free(b);
    }
    unlink(path);
    rm_rf(g_dir);
}

/* Issue 26 finding 14: a directory of junk under block names gives a few
 * warning lines and a count, not a line per file; a file that cannot be
 * deleted (here a directory under a block's name) is never logged as
 * "(deleted)". The log is read from stderr, redirected to a file. */
static void test_scan_warnings(void) {
    rm_rf(g_dir);
    mkdir(g_dir, 0755);
    char path[600];
    for (int i = 0; i < 300; i++) {
        block_path(FP, 0x100 + (uint64_t)i, path, sizeof path);
        FILE *f = fopen(path, "w");
        if (f) fputs("junk", f), fclose(f);
    }
    char dir_name[600];
    block_path(FP, 0xd1d1, dir_name, sizeof dir_name);
    CHECK(mkdir(dir_name, 0755) == 0);
    char log_path[300];
    snprintf(log_path, sizeof log_path, "%s.log", g_dir);
    fflush(stderr);
    int saved = dup(2), fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(saved >= 0 && fd >= 0 && dup2(fd, 2) == 2);
    kvdisk *d = open_store(FP, 0, 1);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    close(fd);
    char *log = NULL;
    size_t n = 0;
    err_t e = {0};
    CHECK(file_read_all(log_path, &log, &n, &e) == 0);
    int n_lines = 0;
    for (const char *p = log; p && (p = strstr(p, "bad header or size")); p++) n_lines++;
    CHECK_MSG(n_lines <= 6, "%d warning lines for 301 bad files", n_lines);
    CHECK_MSG(log && strstr(log, "296 more files with a bad header or size deleted"), "%.600s", log ? log : "");
    char deleted[700];
    snprintf(deleted, sizeof deleted, "%s: bad header or size (deleted)", dir_name);
    CHECK_MSG(log && !strstr(log, deleted), "an undeletable file logged as deleted");
    CHECK_MSG(log && (strstr(log, "(not deleted: ") || strstr(log, "(1 could not be)")), "%.600s", log ? log : "");
    CHECK_EQ_INT(count_files(g_dir, ".kvb"), 1); /* the directory stays */
    kvdisk_close(d);
    free(log);
    unlink(log_path);
    rmdir(dir_name);
    rm_rf(g_dir);
}

int main(void) {
    snprintf(g_dir, sizeof g_dir, "/tmp/kvloom_test_kvdisk_%d", (int)getpid());
    test_roundtrip_and_reopen();
    test_rejections();
    test_size_cap();
    test_async();
    test_shared_kv_dir();
    test_full_fingerprint();
    test_scan_warnings();
    model *m = test_load_stories();
    if (m) {
        test_model_restore(m);
        test_engine_disk(m);
        test_engine_disk_reads_behind_oldest(m);
        model_free(m);
    }
    rm_rf(g_dir);
    return test_summary("test_kvdisk");
}
