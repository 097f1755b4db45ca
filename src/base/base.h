/*
 * base.h — the things every module needs: assertions, checked arithmetic,
 * allocation that cannot silently fail, error values, logging, clocks.
 *
 * Place in the flow: the bottom. base/ includes nothing from kvloom.
 *
 * Errors come in three kinds:
 *   1. a broken invariant is a bug: ASSERT / PANIC print file:line and abort;
 *   2. untrusted bytes get a negative return value and an err_t whose message
 *      names the field and the offset;
 *   3. exhausted resources are states handled by their owner, never errors here.
 * Thread safety: everything here may be called from any thread.
 */
#ifndef KVLOOM_BASE_H
#define KVLOOM_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define PANIC(...) base_panic(__FILE__, __LINE__, __VA_ARGS__)
#define ASSERT(cond)                                                           \
    do {                                                                       \
        if (!(cond)) base_panic(__FILE__, __LINE__, "assertion failed: %s", #cond); \
    } while (0)

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

_Noreturn void base_panic(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- error values -------------------------------------------------------
 * A function that can fail on untrusted input returns a negative ERR_* code
 * and, when `err` is not NULL, writes a one-line human message into it.
 * The message names what is wrong ("tensor 'blk.0.attn_q.weight': data
 * offset 123456 past end of file (size 1000)").                            */
enum {
    ERR_OK = 0,
    ERR_IO = -1,        /* open/read/mmap failed                         */
    ERR_FORMAT = -2,    /* malformed bytes                               */
    ERR_UNSUPPORTED = -3, /* well-formed but not something we run        */
    ERR_RANGE = -4,     /* a value out of its allowed range              */
    ERR_NOMEM = -5,     /* allocation refused (sizes from input)         */
    ERR_NOTFOUND = -6,  /* a required key/tensor is missing              */
    ERR_INVALID = -7,   /* a bad argument from a caller/user             */
};

typedef struct err {
    int code;       /* one of ERR_* (0 when no error was recorded) */
    char msg[384];  /* NUL-terminated, one line                   */
} err_t;

/* A field path of a request inside an error message, tagged so that the
 * caller can name it in its own terms (the server's APIs each name the
 * fields of the body they were sent: server/api.h, api_error_text):
 * err_set(e, ERR_INVALID, ERR_F("tools[%zu].function.name") " is required", i).
 * ERR_TAG never occurs in a path. */
#define ERR_TAG '\x1f'
#define ERR_F(path) "\x1f" path "\x1f"
/* e's message with its tags removed (its paths as the caller tagged them):
 * for a reader that does not rename fields. */
void err_untag(err_t *e);

/* Records an error and returns `code`, so callers can `return err_set(...)`.
 * `e` may be NULL. */
int err_set(err_t *e, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prepends "prefix: " to an existing message (for adding context). */
void err_prefix(err_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *err_name(int code);

/* ---- allocation -----------------------------------------------------------
 * xmalloc & co abort on failure: use them for sizes the program chose.
 * For sizes derived from untrusted input, check with the *_ok helpers first
 * and use plain malloc, turning NULL into ERR_NOMEM.                        */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* 64-byte aligned, zeroed; free with free(). */
void *xaligned_alloc(size_t n);

static inline bool mul_ok(size_t a, size_t b, size_t *out) { return !__builtin_mul_overflow(a, b, out); }
static inline bool add_ok(size_t a, size_t b, size_t *out) { return !__builtin_add_overflow(a, b, out); }

/* The release: `kvloom --version`, /health and /props report it. */
#define KVLOOM_VERSION "0.24.0"

/* ---- logging (stderr) ---------------------------------------------------- */
enum { LOG_DEBUG = 0, LOG_INFO = 1, LOG_WARN = 2, LOG_ERROR = 3, LOG_QUIET = 4 };
extern int log_level; /* messages below this level are dropped; default LOG_INFO */
void log_msg(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* From now on every line starts with its UTC time, "2026-01-02T03:04:05.678Z "
 * (kvloom serve turns this on; one-shot commands keep plain lines). Call
 * before other threads log. */
void log_set_timestamps(bool on);
/* Also appends every line to the file at path (created if needed), besides
 * stderr. ERR_IO naming the path and the cause. Call before other threads
 * log; the file stays open until exit. */
int log_set_file(const char *path, err_t *e);
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)

/* ---- clocks --------------------------------------------------------------- */
int64_t clock_ns(void); /* monotonic */
double clock_ms(void);  /* monotonic, milliseconds as double */

/* ---- hashing -------------------------------------------------------------- */
/* splitmix64's finalizer: a bijection of 64-bit words in which every input
 * bit reaches every output bit, so the low bits of the result can index a
 * power-of-two table. Stable across runs and machines (hash_bytes and the
 * disk tier's checksums end with it, and those are on disk). */
static inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
/* The next word of a splitmix64 stream whose state is *s (advanced). */
static inline uint64_t splitmix64_next(uint64_t *s) { return mix64(*s += 0x9e3779b97f4a7c15ULL); }

/* 64-bit FNV-1a style hash with a better final mix; stable across runs and
 * machines (used in on-disk keys). */
uint64_t hash_bytes(const void *p, size_t n, uint64_t seed);

/* SHA-256 (FIPS 180-4) of data[0..n): the 32-byte digest into out, or as
 * 64 lowercase hex digits and a NUL into hex (65 bytes). */
void sha256(const void *data, size_t n, uint8_t out[32]);
void sha256_hex(const void *data, size_t n, char hex[65]);

/* ---- half precision ------------------------------------------------------ */
/* IEEE half bits -> float, exact for every input (NaN payloads kept). The
 * one decoder of the program: inline because the kernels call it per
 * element for F16 weights and KV, and branch-free so their loops vectorise. */
static inline float fp16_to_f32(uint16_t h) {
    const uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent and mantissa in place */
    float f;
    memcpy(&f, &em, 4);
    f *= 0x1p112f; /* rebias the exponent; also normalises subnormals exactly */
    uint32_t bits;
    memcpy(&bits, &f, 4);
    /* inf/NaN: all-ones exponent, mantissa kept (a select, so loops vectorise) */
    bits = (em >= (0x7c00u << 13)) ? (em | 0x7f800000u) : bits;
    bits |= (uint32_t)(h & 0x8000u) << 16;
    memcpy(&f, &bits, 4);
    return f;
}
uint16_t f32_to_fp16(float f);   /* round to nearest even */
/* bfloat16 bits -> float (exact). */
static inline float bf16_to_f32(uint16_t h) {
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, 4);
    return f;
}
uint16_t f32_to_bf16(float f);   /* round to nearest even, NaN kept quiet */

/* ---- files ----------------------------------------------------------------- */
/* Reads a whole file into a malloc'd NUL-terminated buffer. */
int file_read_all(const char *path, char **out, size_t *n_out, err_t *e);

/* ---- numbers from text (command-line flags) -------------------------------- */
/* The whole of s as a decimal integer in [lo, hi]; false on anything else
 * (empty, trailing characters, overflow, out of range). */
bool parse_long(const char *s, long lo, long hi, long *out);
/* The whole of s as a finite or infinite float (strtof); false on anything
 * else. */
bool parse_float(const char *s, float *out);
/* A byte size: a positive number with an optional K, M or G suffix (powers
 * of 1024; "Mi", "MB", "MiB" accepted), at most 1e15. Returns 0, or -1 with
 * a message naming flag in e. */
int parse_size(const char *flag, const char *s, size_t *out, err_t *e);

/* ---- random numbers -------------------------------------------------------- */
/* Small seeded RNG (splitmix64 seeding, xorshift128+): sampling, random
 * weights (kvloom gen), benchmark inputs, tests. */
typedef struct rng {
    uint64_t s[2];
} rng;
void rng_seed(rng *r, uint64_t seed);
uint64_t rng_next(rng *r);
double rng_uniform(rng *r); /* [0, 1) with 53 random bits */
float rng_normal(rng *r);   /* standard normal */

/* n bytes from the operating system's cryptographic generator (getrandom;
 * blocks only before the kernel's pool is first seeded). For what a client
 * must not guess: ids it can address, cache salts. Any thread. */
void os_random(void *buf, size_t n);
/* 2n lowercase hex digits of os_random bytes and a NUL into out (2n + 1
 * bytes): an unguessable id of 4n bits. */
void os_random_hex(char *out, size_t n);

#endif
