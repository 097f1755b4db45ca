/*
 * base.c — assertions, errors, allocation, logging, clocks, hashing and
 * half-precision conversions. See base.h for the contracts.
 */
#define _POSIX_C_SOURCE 200809L
#include "base.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

int log_level = LOG_INFO;

_Noreturn void base_panic(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "kvloom: PANIC at %s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    fflush(stderr);
    abort();
}

int err_set(err_t *e, int code, const char *fmt, ...) {
    if (e) {
        va_list ap;
        e->code = code;
        va_start(ap, fmt);
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void err_untag(err_t *e) {
    char *w = e->msg;
    for (const char *r = e->msg; *r; r++)
        if (*r != ERR_TAG) *w++ = *r;
    *w = 0;
}

void err_prefix(err_t *e, const char *fmt, ...) {
    if (!e) return;
    char head[192], old[sizeof e->msg], joined[sizeof head + sizeof old + 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    snprintf(joined, sizeof joined, "%s: %s", head, old);
    memcpy(e->msg, joined, sizeof e->msg - 1);
    e->msg[sizeof e->msg - 1] = 0;
}

const char *err_name(int code) {
    switch (code) {
    case ERR_OK: return "ok";
    case ERR_IO: return "i/o error";
    case ERR_FORMAT: return "format error";
    case ERR_UNSUPPORTED: return "unsupported";
    case ERR_RANGE: return "out of range";
    case ERR_NOMEM: return "out of memory";
    case ERR_NOTFOUND: return "not found";
    case ERR_INVALID: return "invalid argument";
    default: return "error";
    }
}

static void *check_alloc(void *p, size_t n) {
    if (!p && n) PANIC("out of memory allocating %zu bytes", n);
    return p;
}
void *xmalloc(size_t n) { return check_alloc(malloc(n ? n : 1), n); }
void *xcalloc(size_t n, size_t size) { return check_alloc(calloc(n ? n : 1, size ? size : 1), n * size); }
void *xrealloc(void *p, size_t n) { return check_alloc(realloc(p, n ? n : 1), n); }
char *xstrdup(const char *s) { return xstrndup(s, strlen(s)); }
char *xstrndup(const char *s, size_t n) {
    char *d = xmalloc(n + 1);
    memcpy(d, s, n);
    d[n] = 0;
    return d;
}
void *xaligned_alloc(size_t n) {
    size_t rounded = (n + 63) & ~(size_t)63;
    void *p = NULL;
    if (posix_memalign(&p, 64, rounded ? rounded : 64) != 0) PANIC("out of memory allocating %zu bytes", n);
    memset(p, 0, rounded);
    return p;
}

static bool log_time;
static FILE *log_file;

void log_set_timestamps(bool on) { log_time = on; }

int log_set_file(const char *path, err_t *e) {
    FILE *f = fopen(path, "a");
    if (!f) return err_set(e, ERR_IO, "%s: %s", path, strerror(errno));
    setvbuf(f, NULL, _IOLBF, 0);
    log_file = f;
    return 0;
}

void log_msg(int level, const char *fmt, ...) {
    if (level < log_level) return;
    static const char *names[] = {"debug", "info", "warn", "error"};
    char line[1024], stamp[40] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (log_time) {
        struct timespec ts;
        struct tm tm;
        clock_gettime(CLOCK_REALTIME, &ts);
        gmtime_r(&ts.tv_sec, &tm);
        size_t k = strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
        snprintf(stamp + k, sizeof stamp - k, ".%03ldZ ", ts.tv_nsec / 1000000);
    }
    /* one fprintf per line so concurrent threads do not interleave mid-line */
    const char *name = names[level < 0 ? 0 : level > 3 ? 3 : level];
    fprintf(stderr, "%skvloom %s: %s\n", stamp, name, line);
    if (log_file) fprintf(log_file, "%skvloom %s: %s\n", stamp, name, line);
}

int64_t clock_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}
double clock_ms(void) { return (double)clock_ns() / 1e6; }

uint64_t hash_bytes(const void *p, size_t n, uint64_t seed) {
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ULL ^ (seed * 0x9e3779b97f4a7c15ULL);
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL;
    }
    /* final avalanche so nearby inputs spread over all bits */
    return mix64(h);
}

uint16_t f32_to_fp16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (absx > 0x7f800000u ? 0x200 : 0));
    if (absx >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (absx < 0x38800000u) { /* below smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to 0 */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        int shift = 126 - (int)e; /* 14 + (113 - e) - ... */
        /* value = m * 2^(e-150); half subnormal unit = 2^-24 => q = m >> (126-e) */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (q & 1))) q++;
        return (uint16_t)(sign | q);
    }
    uint32_t e = (absx >> 23) - 127 + 15;
    uint32_t m = absx & 0x7fffff;
    uint32_t h = (e << 10) | (m >> 13);
    uint32_t rem = m & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) h++; /* carry may bump exponent: correct */
    return (uint16_t)(sign | h);
}

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40); /* quiet NaN */
    x += 0x7fff + ((x >> 16) & 1);
    return (uint16_t)(x >> 16);
}

int file_read_all(const char *path, char **out, size_t *n_out, err_t *e) {
    FILE *f = fopen(path, "rb");
    if (!f) return err_set(e, ERR_IO, "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = xmalloc(cap);
    for (;;) {
        if (n + 1 >= cap) buf = xrealloc(buf, cap *= 2);
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return err_set(e, ERR_IO, "error reading '%s'", path);
    }
    buf[n] = 0;
    *out = buf;
    if (n_out) *n_out = n;
    return 0;
}

/* ---- numbers from text ---- */

bool parse_long(const char *s, long lo, long hi, long *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

bool parse_float(const char *s, float *out) {
    if (!s || !*s) return false;
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || *end) return false;
    *out = v;
    return true;
}

int parse_size(const char *flag, const char *v, size_t *out, err_t *e) {
    char *end = NULL;
    errno = 0;
    double x = v ? strtod(v, &end) : 0;
    if (!v || end == v || errno || !(x > 0))
        return err_set(e, ERR_INVALID, "%s: expected a size such as 512M, got '%s'", flag, v ? v : "");
    double mul = 1;
    if (*end) {
        switch (toupper((unsigned char)*end)) {
        case 'K': mul = 1024.0; break;
        case 'M': mul = 1024.0 * 1024; break;
        case 'G': mul = 1024.0 * 1024 * 1024; break;
        default: return err_set(e, ERR_INVALID, "%s: unknown size suffix in '%s' (use K, M or G)", flag, v);
        }
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
        if (*end) return err_set(e, ERR_INVALID, "%s: trailing characters in '%s'", flag, v);
    }
    x *= mul;
    if (x > 1e15) return err_set(e, ERR_INVALID, "%s: '%s' is too large", flag, v);
    *out = (size_t)x;
    return 0;
}

/* ---- random numbers ---- */

void os_random(void *buf, size_t n) {
    unsigned char *p = buf;
    while (n) {
        ssize_t k = getrandom(p, n, 0);
        if (k < 0 && errno == EINTR) continue;
        /* without the OS generator no id is safe to hand out */
        if (k <= 0) PANIC("getrandom failed: %s", strerror(errno));
        p += k;
        n -= (size_t)k;
    }
}

void os_random_hex(char *out, size_t n) {
    static const char hex[] = "0123456789abcdef";
    unsigned char b[64];
    ASSERT(n <= sizeof b);
    os_random(b, n);
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
    out[2 * n] = 0;
}

void rng_seed(rng *r, uint64_t seed) {
    /* splitmix64 to expand the seed into the xorshift128+ state */
    for (int i = 0; i < 2; i++) r->s[i] = splitmix64_next(&seed);
    if (!r->s[0] && !r->s[1]) r->s[0] = 1;
}

uint64_t rng_next(rng *r) {
    uint64_t s1 = r->s[0];
    const uint64_t s0 = r->s[1];
    const uint64_t out = s0 + s1;
    r->s[0] = s0;
    s1 ^= s1 << 23;
    r->s[1] = s1 ^ s0 ^ (s1 >> 18) ^ (s0 >> 5);
    return out;
}

double rng_uniform(rng *r) { return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0); }

float rng_normal(rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
