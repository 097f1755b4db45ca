/* test_base.c — base/: half-precision conversions (exhaustive round trips),
 * checked arithmetic, hashing stability and the thread pool. */
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
