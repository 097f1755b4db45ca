/* test_base.c — base/: half-precision conversions (exhaustive round trips),
 * checked arithmetic, hashing (mix64 against the published splitmix64
 * stream, SHA-256 against the NIST examples) and the thread pool. */
#include "base/base.h"
#include "base/pool.h"
#include "test.h"

#include <stdatomic.h>

static _Atomic long pool_sum;
static void add_range(void *arg, int ith, int nth) {
    long b, e;
    pool_split(*(long *)arg, ith, nth, &b, &e);
    long s = 0;
    for (long i = b; i < e; i++) s += i;
    atomic_fetch_add(&pool_sum, s);
}

int main(void) {
    /* every finite half converts to float and back to itself */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 10) & 0x1f) == 0x1f) continue; /* inf/nan */
        if (f32_to_fp16(fp16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
    CHECK(fp16_to_f32(0x3c00) == 1.0f);
    CHECK(fp16_to_f32(0xc000) == -2.0f);
    CHECK(fp16_to_f32(0x0001) == 5.9604644775390625e-8f); /* smallest subnormal */
    CHECK(f32_to_fp16(65520.0f) == 0x7c00);               /* rounds to inf */
    CHECK(f32_to_fp16(1.0f + 1.0f / 2048) == 0x3c00);     /* tie to even */
    CHECK(f32_to_fp16(1.0f + 3.0f / 2048) == 0x3c02);     /* tie to even, up */
    CHECK(f32_to_bf16(1.0f) == 0x3f80);
    CHECK(bf16_to_f32(0x4049) == 3.140625f);
    bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if (((h >> 7) & 0xff) == 0xff) continue;
        if (f32_to_bf16(bf16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);

    size_t out;
    CHECK(!mul_ok(SIZE_MAX / 2, 3, &out));
    CHECK(mul_ok(1000, 1000, &out) && out == 1000000);
    CHECK(hash_bytes("abc", 3, 0) == hash_bytes("abc", 3, 0));
    CHECK(hash_bytes("abc", 3, 0) != hash_bytes("abd", 3, 0));
    CHECK(hash_bytes("abc", 3, 0) != hash_bytes("abc", 3, 1));
    /* hash_bytes names blocks on disk (kv/disk.c): its values must never
     * change. Pinned from a Python transcription of FNV-1a 64 followed by
     * splitmix64's finalizer. */
    CHECK(hash_bytes("abc", 3, 0) == 0x0dd490490804b508ULL);
    CHECK(hash_bytes("abc", 3, 1) == 0xa802ab985002163dULL);
    /* splitmix64 from state 0: the first outputs of Vigna's reference
     * splitmix64.c (0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, ...) */
    uint64_t sm = 0;
    CHECK(splitmix64_next(&sm) == 0xe220a8397b1dcdafULL);
    CHECK(splitmix64_next(&sm) == 0x6e789e6aa1b965f4ULL);
    CHECK(splitmix64_next(&sm) == 0x06c45d188009454fULL);
    CHECK(mix64(0) == 0);

    /* SHA-256: the examples of FIPS 180-2 appendix B / NIST's CSRC
     * examples ("abc", the two-block 448-bit message, a million 'a'), the
     * empty message, and lengths at the padding's edges (55, 56 and 64 bytes
     * fit the length in one block or spill into a second; 119 spans two
     * blocks and a tail), their digests from coreutils' sha256sum. */
    static const struct {
        int rep; /* the message is rep copies of text */
        const char *text, *hex;
    } sha[] = {
        {1, "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {1, "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {1, "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {1, "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
         "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
        {1000000, "a", "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
        {55, "a", "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318"},
        {56, "a", "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a"},
        {64, "a", "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb"},
        {119, "a", "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7ea6584dcfb"},
    };
    for (size_t i = 0; i < ARRAY_LEN(sha); i++) {
        size_t tl = strlen(sha[i].text), n = tl * (size_t)sha[i].rep;
        char *msg = xmalloc(n + 1), hex[65];
        for (int r = 0; r < sha[i].rep; r++) memcpy(msg + (size_t)r * tl, sha[i].text, tl);
        sha256_hex(msg, n, hex);
        CHECK_MSG(strcmp(hex, sha[i].hex) == 0, "vector %zu: %s", i, hex);
        free(msg);
    }

    err_t e = {0};
    CHECK_EQ_INT(err_set(&e, ERR_FORMAT, "field %s at %d", "x", 7), ERR_FORMAT);
    err_prefix(&e, "file %s", "f.gguf");
    CHECK_STR(e.msg, "file f.gguf: field x at 7");

    for (int nt = 1; nt <= 3; nt++) {
        pool *p = pool_new(nt);
        for (int rep = 0; rep < 200; rep++) {
            long n = 1000 + rep;
            atomic_store(&pool_sum, 0);
            pool_run(p, add_range, &n);
            CHECK_EQ_INT(atomic_load(&pool_sum), n * (n - 1) / 2);
        }
        pool_free(p);
    }
    return test_summary("test_base");
}
