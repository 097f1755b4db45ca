/*
 * gguf.c — reads and writes GGUF v2/v3 files (format described in gguf.h).
 *
 * Place in the flow: model/, under the loader; tok/ reads its metadata here.
 *
 * Reading. The file is mapped read-only (or the caller's buffer is used as
 * is) and parsed once through a bounds-checked cursor: every read asks for
 * n bytes and fails with ERR_FORMAT when fewer remain, so no parser step can
 * run past the end. Counts that size an allocation (n_kv, n_tensors, string
 * array lengths) are first compared with the bytes left, using the smallest
 * encoding one element can have, so a lying header fails before any malloc.
 * Values are never cast from the mapping: integers are read with memcpy as
 * little-endian (the only hosts we build for are little-endian; see the
 * static assert below).
 *
 * Invariants of a gguf_ctx once gguf_from_buffer returned 0:
 *   - every key is non-empty, NUL-free and unique; every value well-formed
 *     (bools 0/1, no nested arrays, string lengths inside the file);
 *   - general.alignment, if present, is a u32 power of two;
 *   - every tensor has 1..4 dims each >= 1, a known type, dims[0] a multiple
 *     of the block size, n_elems and n_bytes without overflow, an offset
 *     that is a multiple of the alignment, data inside the file, and no two
 *     tensors overlap; names are non-empty, NUL-free and unique;
 *   - kv[i].str_offs indexes each string of a string array, so
 *     gguf_arr_str is O(1).
 * After open the context is immutable and may be read by any thread.
 *
 * Writing. gguf_writer collects metadata (stored already serialised) and
 * tensor descriptions, then writes a v3 file to path.tmp and renames it.
 * Misuse of the writer API (bad type, duplicate tensor) is recorded and
 * reported by gguf_writer_write, so the set/add calls need no return value.
 */
#include "gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../base/utf8.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "gguf.c assumes a little-endian host");

/* Smallest encodings, used to bound counts before allocating:
 * a kv is key len (8) + >=1 key byte + type (4) + >=1 value byte;
 * a tensor is name len (8) + >=1 name byte + n_dims (4) + >=1 dim (8) +
 * type (4) + offset (8). */
#define KV_MIN_BYTES 14u
#define TENSOR_MIN_BYTES 33u

typedef struct gguf_kv {
    gguf_str key;
    uint32_t type;          /* gguf_vtype                                   */
    uint32_t elem_type;     /* arrays: element type                         */
    uint64_t n;             /* arrays: element count                        */
    const uint8_t *val;     /* scalars: the value; strings: the length
                               field; arrays: the first element            */
    const uint8_t *raw;     /* the value as stored (after the type field)   */
    size_t raw_bytes;       /* its length, for gguf_writer_copy_kv          */
    uint64_t *str_offs;     /* string arrays: offset of each string's
                               length field from the buffer start           */
} gguf_kv;

struct gguf_ctx {
    const uint8_t *buf;
    size_t size;
    bool mapped; /* buf is our mmap; unmap on free */
    gguf_file_id file_id; /* when mapped */
    uint32_t version;
    uint32_t alignment;
    size_t data_off;
    int64_t n_kv, n_tensors;
    gguf_kv *kv;
    gguf_tensor *tensors;
    /* open-addressing indexes: slot holds index+1, 0 is empty */
    uint32_t *kv_index;
    size_t kv_index_cap;
    uint32_t *tensor_index;
    size_t tensor_index_cap;
};

/* ---- helpers -------------------------------------------------------------- */

static size_t vtype_size(uint32_t t) {
    switch (t) {
    case GGUF_UINT8: case GGUF_INT8: case GGUF_BOOL: return 1;
    case GGUF_UINT16: case GGUF_INT16: return 2;
    case GGUF_UINT32: case GGUF_INT32: case GGUF_FLOAT32: return 4;
    case GGUF_UINT64: case GGUF_INT64: case GGUF_FLOAT64: return 8;
    default: return 0; /* string, array, invalid */
    }
}

static const char *vtype_name(uint32_t t) {
    static const char *names[GGUF_VTYPE_COUNT] = {
        "u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string", "array", "u64", "i64", "f64",
    };
    return t < GGUF_VTYPE_COUNT ? names[t] : "invalid";
}

static uint16_t ld16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static uint32_t ld32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint64_t ld64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

/* Writes a printable, one-line rendering of untrusted bytes into out (cap
 * bytes, always NUL-terminated): valid UTF-8 kept, control characters,
 * quotes, backslashes and invalid bytes escaped; at most about max_chars
 * input bytes, then "...". The output is always valid UTF-8. */
static void show_bytes(const char *p, uint64_t len, char *out, size_t cap, size_t max_chars) {
    const unsigned char *u = (const unsigned char *)p;
    size_t o = 0;
    if (cap == 0) return;
    for (uint64_t i = 0; i < len;) {
        unsigned char c = u[i];
        char esc[8];
        size_t k, used = 1;
        if (c >= 0x80 && (k = (size_t)MAX(utf8_check(u + i, len - i), 0)) > 0) {
            memcpy(esc, u + i, k);
            used = k;
        } else if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') {
            esc[0] = (char)c;
            k = 1;
        } else if (c == '\n') {
            k = (size_t)snprintf(esc, sizeof esc, "\\n");
        } else if (c == '"' || c == '\\') {
            k = (size_t)snprintf(esc, sizeof esc, "\\%c", c);
        } else {
            k = (size_t)snprintf(esc, sizeof esc, "\\x%02x", c);
        }
        if (i >= max_chars || o + k + 4 > cap) {
            if (o + 4 <= cap) {
                memcpy(out + o, "...", 3);
                o += 3;
            }
            break;
        }
        memcpy(out + o, esc, k);
        o += k;
        i += used;
    }
    out[o] = 0;
}

static bool str_eq(gguf_str a, const char *b, size_t blen) {
    return a.len == blen && memcmp(a.ptr, b, blen) == 0;
}

static uint64_t name_hash(const char *p, size_t n) { return hash_bytes(p, n, 0x67677566u); }

/* Builds an open-addressing index of n names; returns false on a duplicate
 * (and sets *dup to the index of the second occurrence). */
static int index_build(size_t n, gguf_str (*name_of)(const void *, size_t), const void *arg,
                       uint32_t **out, size_t *out_cap, size_t *dup) {
    size_t cap = 16;
    while (cap < n * 2) cap *= 2;
    uint32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        gguf_str s = name_of(arg, i);
        size_t h = (size_t)name_hash(s.ptr, s.len) & (cap - 1);
        for (;;) {
            if (slots[h] == 0) { slots[h] = (uint32_t)(i + 1); break; }
            gguf_str t = name_of(arg, slots[h] - 1);
            if (t.len == s.len && memcmp(t.ptr, s.ptr, s.len) == 0) {
                free(slots);
                *dup = i;
                return ERR_FORMAT;
            }
            h = (h + 1) & (cap - 1);
        }
    }
    *out = slots;
    *out_cap = cap;
    return 0;
}

static int64_t index_find(const uint32_t *slots, size_t cap, gguf_str (*name_of)(const void *, size_t),
                          const void *arg, const char *name, size_t len) {
    if (!slots) return -1;
    size_t h = (size_t)name_hash(name, len) & (cap - 1);
    while (slots[h]) {
        gguf_str t = name_of(arg, slots[h] - 1);
        if (str_eq(t, name, len)) return (int64_t)slots[h] - 1;
        h = (h + 1) & (cap - 1);
    }
    return -1;
}

static gguf_str kv_name(const void *arg, size_t i) { return ((const gguf_kv *)arg)[i].key; }
static gguf_str tensor_name(const void *arg, size_t i) { return ((const gguf_tensor *)arg)[i].name; }

/* ---- the cursor ------------------------------------------------------------ */

typedef struct cursor {
    const uint8_t *buf;
    size_t n, pos;
    err_t *e;
    char where[200]; /* "kv 5 ('general.name')": context for messages */
} cursor;

static int fail(cursor *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(cursor *c, int code, const char *fmt, ...) {
    char msg[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (c->where[0]) return err_set(c->e, code, "gguf: %s: %s", c->where, msg);
    return err_set(c->e, code, "gguf: %s", msg);
}

static size_t remain(const cursor *c) { return c->n - c->pos; }

/* Ensures `k` bytes remain for `field`. */
static int need(cursor *c, size_t k, const char *field) {
    if (remain(c) < k)
        return fail(c, ERR_FORMAT, "%s at offset %zu: needs %zu bytes, only %zu remain (file truncated)",
                    field, c->pos, k, remain(c));
    return 0;
}

static int rd_u32(cursor *c, const char *field, uint32_t *v) {
    int rc = need(c, 4, field);
    if (rc) return rc;
    *v = ld32(c->buf + c->pos);
    c->pos += 4;
    return 0;
}

static int rd_u64(cursor *c, const char *field, uint64_t *v) {
    int rc = need(c, 8, field);
    if (rc) return rc;
    *v = ld64(c->buf + c->pos);
    c->pos += 8;
    return 0;
}

/* A string: u64 length then bytes. */
static int rd_str(cursor *c, const char *field, gguf_str *s) {
    size_t at = c->pos;
    uint64_t len;
    int rc = rd_u64(c, field, &len);
    if (rc) return rc;
    if (len > remain(c))
        return fail(c, ERR_FORMAT, "%s length %" PRIu64 " at offset %zu exceeds remaining %zu bytes", field,
                    len, at, remain(c));
    s->ptr = (const char *)c->buf + c->pos;
    s->len = len;
    c->pos += (size_t)len;
    return 0;
}

/* Keys and tensor names: non-empty, no NUL (so C-string lookups are exact). */
static int check_name(cursor *c, gguf_str s, const char *field, size_t at) {
    if (s.len == 0) return fail(c, ERR_FORMAT, "empty %s at offset %zu", field, at);
    if (memchr(s.ptr, 0, s.len)) return fail(c, ERR_FORMAT, "%s at offset %zu contains a NUL byte", field, at);
    return 0;
}

/* Parses one value of type `type` (the type field already read). */
static int parse_value(cursor *c, gguf_kv *kv, uint32_t type, size_t type_at) {
    size_t start = c->pos;
    int rc;
    if (type >= GGUF_VTYPE_COUNT)
        return fail(c, ERR_FORMAT, "invalid value type %" PRIu32 " at offset %zu", type, type_at);
    kv->type = type;
    kv->val = c->buf + c->pos;
    if (type == GGUF_STRING) {
        gguf_str s;
        if ((rc = rd_str(c, "string value", &s))) return rc;
    } else if (type == GGUF_ARRAY) {
        uint32_t et;
        uint64_t n;
        size_t et_at = c->pos;
        if ((rc = rd_u32(c, "array element type", &et))) return rc;
        if (et == GGUF_ARRAY)
            return fail(c, ERR_UNSUPPORTED, "nested array (array of arrays) at offset %zu is not supported", et_at);
        if (et >= GGUF_VTYPE_COUNT)
            return fail(c, ERR_FORMAT, "invalid array element type %" PRIu32 " at offset %zu", et, et_at);
        size_t n_at = c->pos;
        if ((rc = rd_u64(c, "array count", &n))) return rc;
        kv->elem_type = et;
        kv->n = n;
        kv->val = c->buf + c->pos;
        if (et == GGUF_STRING) {
            if (n > remain(c) / 8)
                return fail(c, ERR_FORMAT,
                            "array count %" PRIu64 " at offset %zu: %" PRIu64
                            " strings cannot fit in the remaining %zu bytes",
                            n, n_at, n, remain(c));
            kv->str_offs = malloc((size_t)(n ? n : 1) * sizeof *kv->str_offs);
            if (!kv->str_offs)
                return fail(c, ERR_NOMEM, "array count %" PRIu64 " at offset %zu: out of memory", n, n_at);
            for (uint64_t i = 0; i < n; i++) {
                gguf_str s;
                kv->str_offs[i] = c->pos;
                if ((rc = rd_str(c, "array string", &s))) {
                    char tail[64];
                    snprintf(tail, sizeof tail, " (element %" PRIu64 ")", i);
                    size_t l = strlen(c->e ? c->e->msg : "");
                    if (c->e && l + strlen(tail) < sizeof c->e->msg) strcat(c->e->msg, tail);
                    return rc;
                }
            }
        } else {
            size_t es = vtype_size(et);
            if (n > remain(c) / es)
                return fail(c, ERR_FORMAT,
                            "array count %" PRIu64 " at offset %zu: %" PRIu64 " x %zu bytes exceeds remaining %zu bytes",
                            n, n_at, n, es, remain(c));
            if (et == GGUF_BOOL) {
                for (uint64_t i = 0; i < n; i++) {
                    uint8_t b = c->buf[c->pos + i];
                    if (b > 1)
                        return fail(c, ERR_FORMAT, "bool array element %" PRIu64 " at offset %zu is %u, not 0 or 1",
                                    i, c->pos + (size_t)i, b);
                }
            }
            c->pos += (size_t)n * es;
        }
    } else {
        size_t es = vtype_size(type);
        if ((rc = need(c, es, "value"))) return rc;
        if (type == GGUF_BOOL && c->buf[c->pos] > 1)
            return fail(c, ERR_FORMAT, "bool value at offset %zu is %u, not 0 or 1", c->pos, c->buf[c->pos]);
        c->pos += es;
    }
    kv->raw = c->buf + start;
    kv->raw_bytes = c->pos - start;
    return 0;
}

static int parse_kvs(cursor *c, gguf_ctx *g) {
    int rc;
    for (int64_t i = 0; i < g->n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        snprintf(c->where, sizeof c->where, "kv %" PRId64, i);
        size_t key_at = c->pos;
        if ((rc = rd_str(c, "key", &kv->key))) return rc;
        if ((rc = check_name(c, kv->key, "key", key_at))) return rc;
        char shown[96];
        show_bytes(kv->key.ptr, kv->key.len, shown, sizeof shown, 64);
        snprintf(c->where, sizeof c->where, "kv %" PRId64 " ('%s')", i, shown);
        uint32_t type;
        size_t type_at = c->pos;
        if ((rc = rd_u32(c, "value type", &type))) return rc;
        if ((rc = parse_value(c, kv, type, type_at))) return rc;
    }
    c->where[0] = 0;
    size_t dup = 0;
    rc = index_build((size_t)g->n_kv, kv_name, g->kv, &g->kv_index, &g->kv_index_cap, &dup);
    if (rc == ERR_NOMEM) return fail(c, ERR_NOMEM, "out of memory indexing %" PRId64 " keys", g->n_kv);
    if (rc) {
        char shown[96];
        show_bytes(g->kv[dup].key.ptr, g->kv[dup].key.len, shown, sizeof shown, 64);
        return fail(c, ERR_FORMAT, "kv %zu: duplicate key '%s' at offset %zu", dup, shown,
                    (size_t)((const uint8_t *)g->kv[dup].key.ptr - c->buf) - 8);
    }
    return 0;
}

static int parse_tensor_info(cursor *c, gguf_ctx *g, int64_t i) {
    gguf_tensor *t = &g->tensors[i];
    int rc;
    snprintf(c->where, sizeof c->where, "tensor %" PRId64, i);
    size_t name_at = c->pos;
    if ((rc = rd_str(c, "name", &t->name))) return rc;
    if ((rc = check_name(c, t->name, "name", name_at))) return rc;
    char shown[96];
    show_bytes(t->name.ptr, t->name.len, shown, sizeof shown, 64);
    snprintf(c->where, sizeof c->where, "tensor %" PRId64 " ('%s')", i, shown);

    size_t nd_at = c->pos;
    if ((rc = rd_u32(c, "n_dims", &t->n_dims))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return fail(c, ERR_FORMAT, "n_dims %" PRIu32 " at offset %zu is not in 1..%d", t->n_dims, nd_at,
                    GGUF_MAX_DIMS);
    int64_t n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t->dims[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v;
        size_t at = c->pos;
        if ((rc = rd_u64(c, "dim", &v))) return rc;
        if (v == 0) return fail(c, ERR_FORMAT, "dims[%" PRIu32 "] at offset %zu is 0", d, at);
        if (v > (uint64_t)INT64_MAX)
            return fail(c, ERR_FORMAT, "dims[%" PRIu32 "] = %" PRIu64 " at offset %zu is too large", d, v, at);
        t->dims[d] = (int64_t)v;
        if (__builtin_mul_overflow(n_elems, (int64_t)v, &n_elems))
            return fail(c, ERR_FORMAT, "element count overflows at dims[%" PRIu32 "] (offset %zu)", d, at);
    }
    t->n_elems = n_elems;

    size_t type_at = c->pos;
    if ((rc = rd_u32(c, "type", &t->type))) return rc;
    const dtype_info *di = dtype_get(t->type);
    if (!di)
        return fail(c, ERR_UNSUPPORTED, "unknown tensor type %" PRIu32 " at offset %zu", t->type, type_at);
    if (t->dims[0] % di->blck)
        return fail(c, ERR_FORMAT, "dims[0] = %" PRId64 " is not a multiple of the %s block size %d", t->dims[0],
                    di->name, di->blck);
    if ((uint64_t)(t->dims[0] / di->blck) > UINT64_MAX / (uint64_t)di->type_size)
        return fail(c, ERR_FORMAT, "row size of %" PRId64 " %s elements overflows", t->dims[0], di->name);
    uint64_t row = (uint64_t)(t->dims[0] / di->blck) * (uint64_t)di->type_size;
    uint64_t rows = (uint64_t)(n_elems / t->dims[0]);
    if (__builtin_mul_overflow(row, rows, &t->n_bytes))
        return fail(c, ERR_FORMAT, "byte size of %" PRId64 " %s elements overflows", n_elems, di->name);

    size_t off_at = c->pos;
    if ((rc = rd_u64(c, "offset", &t->offset))) return rc;
    if (t->offset % g->alignment)
        return fail(c, ERR_FORMAT, "data offset %" PRIu64 " at offset %zu is not a multiple of the alignment %" PRIu32,
                    t->offset, off_at, g->alignment);
    return 0;
}

static int cmp_by_offset(const void *a, const void *b) {
    const gguf_tensor *x = *(const gguf_tensor *const *)a, *y = *(const gguf_tensor *const *)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

static int parse(gguf_ctx *g, err_t *e) {
    cursor cur = {.buf = g->buf, .n = g->size, .pos = 0, .e = e};
    cursor *c = &cur;
    int rc;
    c->where[0] = 0;

    if (g->size < 4 || memcmp(g->buf, "GGUF", 4) != 0) {
        char shown[32];
        show_bytes((const char *)g->buf, MIN(g->size, 4), shown, sizeof shown, 4);
        return fail(c, ERR_FORMAT, "bad magic '%s' at offset 0 (expected 'GGUF')", shown);
    }
    c->pos = 4;
    if ((rc = rd_u32(c, "version", &g->version))) return rc;
    if (g->version == 1) return fail(c, ERR_UNSUPPORTED, "GGUF version 1 is not supported");
    if (g->version != 2 && g->version != 3)
        return fail(c, ERR_UNSUPPORTED, "GGUF version %" PRIu32 " at offset 4 is not supported (expected 2 or 3)",
                    g->version);
    uint64_t n_tensors, n_kv;
    if ((rc = rd_u64(c, "n_tensors", &n_tensors))) return rc;
    if ((rc = rd_u64(c, "n_kv", &n_kv))) return rc;
    if (n_tensors > remain(c) / TENSOR_MIN_BYTES)
        return fail(c, ERR_FORMAT, "n_tensors %" PRIu64 " at offset 8 cannot fit in the remaining %zu bytes",
                    n_tensors, remain(c));
    if (n_kv > remain(c) / KV_MIN_BYTES)
        return fail(c, ERR_FORMAT, "n_kv %" PRIu64 " at offset 16 cannot fit in the remaining %zu bytes", n_kv,
                    remain(c));
    /* both bounded by size/14, so this sum cannot overflow */
    if (n_kv * KV_MIN_BYTES + n_tensors * TENSOR_MIN_BYTES > remain(c))
        return fail(c, ERR_FORMAT,
                    "n_kv %" PRIu64 " and n_tensors %" PRIu64 " cannot fit in the remaining %zu bytes", n_kv,
                    n_tensors, remain(c));
    if (n_kv >= UINT32_MAX || n_tensors >= UINT32_MAX) /* index slots are u32 */
        return fail(c, ERR_UNSUPPORTED, "too many keys or tensors");
    g->n_kv = (int64_t)n_kv;
    g->n_tensors = (int64_t)n_tensors;
    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    if (!g->kv || !g->tensors) return fail(c, ERR_NOMEM, "out of memory for %" PRIu64 " kvs", n_kv);

    if ((rc = parse_kvs(c, g))) return rc;

    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const gguf_kv *kv = &g->kv[ai];
        size_t at = (size_t)(kv->raw - g->buf);
        if (kv->type != GGUF_UINT32)
            return fail(c, ERR_FORMAT, "kv %" PRId64 ": general.alignment at offset %zu has type %s, expected u32",
                        ai, at, vtype_name(kv->type));
        uint32_t a = ld32(kv->val);
        if (a == 0 || (a & (a - 1)))
            return fail(c, ERR_FORMAT,
                        "kv %" PRId64 ": general.alignment %" PRIu32 " at offset %zu is not a nonzero power of two",
                        ai, a, at);
        g->alignment = a;
    }

    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = parse_tensor_info(c, g, i))) return rc;
    c->where[0] = 0;
    size_t dup = 0;
    rc = index_build((size_t)g->n_tensors, tensor_name, g->tensors, &g->tensor_index, &g->tensor_index_cap, &dup);
    if (rc == ERR_NOMEM) return fail(c, ERR_NOMEM, "out of memory indexing %" PRId64 " tensors", g->n_tensors);
    if (rc) {
        char shown[96];
        show_bytes(g->tensors[dup].name.ptr, g->tensors[dup].name.len, shown, sizeof shown, 64);
        return fail(c, ERR_FORMAT, "tensor %zu: duplicate tensor name '%s' at offset %zu", dup, shown,
                    (size_t)((const uint8_t *)g->tensors[dup].name.ptr - c->buf) - 8);
    }

    /* The data section starts at the next multiple of the alignment. */
    size_t pad = (g->alignment - c->pos % g->alignment) % g->alignment;
    if (!add_ok(c->pos, pad, &g->data_off))
        return fail(c, ERR_FORMAT, "data offset overflows");
    if (g->n_tensors == 0) return 0; /* vocabulary-only files end anywhere */
    if (g->data_off > g->size)
        return fail(c, ERR_FORMAT, "data section at offset %zu starts past end of file (%zu bytes)", g->data_off,
                    g->size);
    size_t data_bytes = g->size - g->data_off;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        gguf_tensor *t = &g->tensors[i];
        uint64_t end;
        char shown[96];
        show_bytes(t->name.ptr, t->name.len, shown, sizeof shown, 64);
        if (__builtin_add_overflow(t->offset, t->n_bytes, &end))
            return fail(c, ERR_FORMAT, "tensor %" PRId64 " ('%s'): data offset %" PRIu64 " + size %" PRIu64 " overflows",
                        i, shown, t->offset, t->n_bytes);
        if (end > data_bytes)
            return fail(c, ERR_FORMAT,
                        "tensor %" PRId64 " ('%s'): data [%" PRIu64 ", %" PRIu64
                        ") extends past end of file (%zu data bytes from offset %zu)",
                        i, shown, t->offset, end, data_bytes, g->data_off);
        t->data = g->buf + g->data_off + t->offset;
    }
    /* Overlap check: sort by offset, compare neighbours. */
    const gguf_tensor **by_off = malloc((size_t)g->n_tensors * sizeof *by_off);
    if (!by_off) return fail(c, ERR_NOMEM, "out of memory");
    for (int64_t i = 0; i < g->n_tensors; i++) by_off[i] = &g->tensors[i];
    qsort(by_off, (size_t)g->n_tensors, sizeof *by_off, cmp_by_offset);
    for (int64_t i = 1; i < g->n_tensors; i++) {
        const gguf_tensor *a = by_off[i - 1], *b = by_off[i];
        if (a->offset + a->n_bytes > b->offset) {
            char sa[96], sb[96];
            show_bytes(a->name.ptr, a->name.len, sa, sizeof sa, 64);
            show_bytes(b->name.ptr, b->name.len, sb, sizeof sb, 64);
            rc = fail(c, ERR_FORMAT,
                      "tensors '%s' [%" PRIu64 ", %" PRIu64 ") and '%s' [%" PRIu64 ", %" PRIu64 ") overlap", sa,
                      a->offset, a->offset + a->n_bytes, sb, b->offset, b->offset + b->n_bytes);
            free(by_off);
            return rc;
        }
    }
    free(by_off);
    return 0;
}

/* ---- open / free ------------------------------------------------------------ */

int gguf_from_buffer(const void *buf, size_t n, gguf_ctx **out, err_t *e) {
    *out = NULL;
    gguf_ctx *g = xcalloc(1, sizeof *g);
    static const uint8_t empty[1];
    g->buf = buf ? buf : empty;
    g->size = buf ? n : 0;
    int rc = parse(g, e);
    if (rc) {
        gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int gguf_open(const char *path, gguf_ctx **out, err_t *e) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return err_set(e, ERR_IO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int rc = err_set(e, ERR_IO, "gguf: cannot stat '%s': %s", path, strerror(errno));
        close(fd);
        return rc;
    }
    if (S_ISDIR(st.st_mode)) {
        close(fd);
        return err_set(e, ERR_IO, "gguf: '%s' is a directory, not a GGUF file", path);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return err_set(e, ERR_IO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size == 0) {
        close(fd);
        return err_set(e, ERR_FORMAT, "gguf: '%s' is empty (0 bytes)", path);
    }
    if ((uint64_t)st.st_size > SIZE_MAX) {
        close(fd);
        return err_set(e, ERR_IO, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *p = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int mmap_errno = errno;
    close(fd);
    if (p == MAP_FAILED) return err_set(e, ERR_IO, "gguf: cannot map '%s': %s", path, strerror(mmap_errno));
    gguf_ctx *g = xcalloc(1, sizeof *g);
    g->buf = p;
    g->size = size;
    g->mapped = true;
    g->file_id = (gguf_file_id){.dev = (uint64_t)st.st_dev,
                                .ino = (uint64_t)st.st_ino,
                                .size = (uint64_t)st.st_size,
                                .mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec,
                                .ctime_ns = (int64_t)st.st_ctim.tv_sec * 1000000000 + st.st_ctim.tv_nsec};
    int rc = parse(g, e);
    if (rc) {
        err_prefix(e, "%s", path);
        gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void gguf_free(gguf_ctx *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_offs);
    free(g->kv);
    free(g->tensors);
    free(g->kv_index);
    free(g->tensor_index);
    if (g->mapped) munmap((void *)g->buf, g->size);
    free(g);
}

uint32_t gguf_version(const gguf_ctx *g) { return g->version; }
uint32_t gguf_alignment(const gguf_ctx *g) { return g->alignment; }
size_t gguf_file_size(const gguf_ctx *g) { return g->size; }
bool gguf_file_identity(const gguf_ctx *g, gguf_file_id *id) {
    if (!g->mapped) return false;
    *id = g->file_id;
    return true;
}
size_t gguf_data_offset(const gguf_ctx *g) { return g->data_off; }

/* ---- metadata ----------------------------------------------------------------- */

int64_t gguf_n_kv(const gguf_ctx *g) { return g->n_kv; }

int64_t gguf_find_key(const gguf_ctx *g, const char *key) {
    return index_find(g->kv_index, g->kv_index_cap, kv_name, g->kv, key, strlen(key));
}

gguf_str gguf_key(const gguf_ctx *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return (gguf_str){NULL, 0};
    return g->kv[i].key;
}

gguf_vtype gguf_kv_type(const gguf_ctx *g, int64_t i) {
    if (i < 0 || i >= g->n_kv) return GGUF_VTYPE_COUNT;
    return (gguf_vtype)g->kv[i].type;
}

static const gguf_kv *kv_get(const gguf_ctx *g, const char *key) {
    int64_t i = gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kv[i];
}

/* Reads an integer value of any integer type; false for other types. */
static bool kv_int(const gguf_kv *kv, bool *neg, uint64_t *mag) {
    const uint8_t *p = kv->val;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case GGUF_UINT8: *mag = p[0]; return true;
    case GGUF_UINT16: *mag = ld16(p); return true;
    case GGUF_UINT32: *mag = ld32(p); return true;
    case GGUF_UINT64: *mag = ld64(p); return true;
    case GGUF_INT8: s = (int8_t)p[0]; break;
    case GGUF_INT16: s = (int16_t)ld16(p); break;
    case GGUF_INT32: s = (int32_t)ld32(p); break;
    case GGUF_INT64: s = (int64_t)ld64(p); break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out) {
    const gguf_kv *kv = kv_get(g, key);
    bool neg;
    uint64_t m;
    if (!kv || !kv_int(kv, &neg, &m) || neg || m > UINT32_MAX) return false;
    *out = (uint32_t)m;
    return true;
}

bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out) {
    const gguf_kv *kv = kv_get(g, key);
    bool neg;
    uint64_t m;
    if (!kv || !kv_int(kv, &neg, &m)) return false;
    if (neg) {
        if (m > (uint64_t)INT64_MAX + 1) return false;
        *out = m == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)m;
    } else {
        if (m > (uint64_t)INT64_MAX) return false;
        *out = (int64_t)m;
    }
    return true;
}

bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out) {
    const gguf_kv *kv = kv_get(g, key);
    if (!kv) return false;
    if (kv->type == GGUF_FLOAT32) {
        memcpy(out, kv->val, 4);
        return true;
    }
    if (kv->type == GGUF_FLOAT64) {
        double d;
        memcpy(&d, kv->val, 8);
        *out = (float)d;
        return true;
    }
    return false;
}

bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out) {
    const gguf_kv *kv = kv_get(g, key);
    if (!kv || kv->type != GGUF_BOOL) return false;
    *out = kv->val[0] != 0;
    return true;
}

bool gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out) {
    const gguf_kv *kv = kv_get(g, key);
    if (!kv || kv->type != GGUF_STRING) return false;
    out->len = ld64(kv->val);
    out->ptr = (const char *)kv->val + 8;
    return true;
}

bool gguf_get_arr(const gguf_ctx *g, const char *key, gguf_vtype *elem_type, uint64_t *n) {
    return gguf_kv_arr(g, gguf_find_key(g, key), elem_type, n);
}

const void *gguf_arr_data(const gguf_ctx *g, const char *key) {
    return gguf_kv_arr_data(g, gguf_find_key(g, key));
}

gguf_str gguf_arr_str(const gguf_ctx *g, const char *key, uint64_t i) {
    return gguf_kv_arr_str(g, gguf_find_key(g, key), i);
}

bool gguf_kv_arr(const gguf_ctx *g, int64_t k, gguf_vtype *elem_type, uint64_t *n) {
    if (k < 0 || k >= g->n_kv || g->kv[k].type != GGUF_ARRAY) return false;
    if (elem_type) *elem_type = (gguf_vtype)g->kv[k].elem_type;
    if (n) *n = g->kv[k].n;
    return true;
}

const void *gguf_kv_arr_data(const gguf_ctx *g, int64_t k) {
    if (k < 0 || k >= g->n_kv || g->kv[k].type != GGUF_ARRAY || g->kv[k].elem_type == GGUF_STRING) return NULL;
    return g->kv[k].val;
}

gguf_str gguf_kv_arr_str(const gguf_ctx *g, int64_t k, uint64_t i) {
    if (k < 0 || k >= g->n_kv) return (gguf_str){NULL, 0};
    const gguf_kv *kv = &g->kv[k];
    if (kv->type != GGUF_ARRAY || kv->elem_type != GGUF_STRING || i >= kv->n) return (gguf_str){NULL, 0};
    const uint8_t *p = g->buf + kv->str_offs[i];
    return (gguf_str){(const char *)p + 8, ld64(p)};
}

/* Appends printf output to buf at *o, never past n-1. When the output is
 * cut, a UTF-8 sequence left incomplete at the end is removed too. */
static void app(char *buf, size_t n, size_t *o, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static void app(char *buf, size_t n, size_t *o, const char *fmt, ...) {
    if (*o + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *o, n - *o, fmt, ap);
    va_end(ap);
    if (k < 0) {
        buf[*o] = 0;
        return;
    }
    if ((size_t)k < n - *o) {
        *o += (size_t)k;
        return;
    }
    *o = utf8_floor(buf, 0, n - 1); /* cut: drop a trailing partial sequence */
    buf[*o] = 0;
}

/* Formats one scalar element of type t stored at p. */
static void fmt_scalar(uint32_t t, const uint8_t *p, char *buf, size_t n, size_t *o) {
    float f;
    double d;
    switch (t) {
    case GGUF_UINT8: app(buf, n, o, "%u", p[0]); break;
    case GGUF_INT8: app(buf, n, o, "%d", (int8_t)p[0]); break;
    case GGUF_UINT16: app(buf, n, o, "%u", ld16(p)); break;
    case GGUF_INT16: app(buf, n, o, "%d", (int16_t)ld16(p)); break;
    case GGUF_UINT32: app(buf, n, o, "%" PRIu32, ld32(p)); break;
    case GGUF_INT32: app(buf, n, o, "%" PRId32, (int32_t)ld32(p)); break;
    case GGUF_UINT64: app(buf, n, o, "%" PRIu64, ld64(p)); break;
    case GGUF_INT64: app(buf, n, o, "%" PRId64, (int64_t)ld64(p)); break;
    case GGUF_FLOAT32: memcpy(&f, p, 4); app(buf, n, o, "%g", (double)f); break;
    case GGUF_FLOAT64: memcpy(&d, p, 8); app(buf, n, o, "%g", d); break;
    case GGUF_BOOL: app(buf, n, o, "%s", p[0] ? "true" : "false"); break;
    default: app(buf, n, o, "?"); break;
    }
}

static void fmt_str(const uint8_t *lenp, size_t max_chars, char *buf, size_t n, size_t *o) {
    char shown[300];
    uint64_t len = ld64(lenp);
    show_bytes((const char *)lenp + 8, len, shown, sizeof shown, MIN(max_chars, 200));
    app(buf, n, o, "\"%s\"", shown);
}

void gguf_kv_format(const gguf_ctx *g, int64_t i, char *buf, size_t n) {
    size_t o = 0;
    if (n == 0) return;
    buf[0] = 0;
    if (i < 0 || i >= g->n_kv) return;
    const gguf_kv *kv = &g->kv[i];
    if (kv->type == GGUF_STRING) {
        fmt_str(kv->val, 60, buf, n, &o);
    } else if (kv->type == GGUF_ARRAY) {
        app(buf, n, &o, "[%s x %" PRIu64 "]", vtype_name(kv->elem_type), kv->n);
        uint64_t show = MIN(kv->n, (uint64_t)(kv->elem_type == GGUF_STRING ? 5 : 8));
        for (uint64_t j = 0; j < show; j++) {
            app(buf, n, &o, j ? ", " : " ");
            if (kv->elem_type == GGUF_STRING)
                fmt_str(g->buf + kv->str_offs[j], 24, buf, n, &o);
            else
                fmt_scalar(kv->elem_type, kv->val + j * vtype_size(kv->elem_type), buf, n, &o);
        }
        if (kv->n > show) app(buf, n, &o, ", ...");
    } else {
        fmt_scalar(kv->type, kv->val, buf, n, &o);
    }
}

const char *gguf_vtype_name(gguf_vtype t) { return vtype_name(t); }

/* ---- tensors -------------------------------------------------------------------- */

int64_t gguf_n_tensors(const gguf_ctx *g) { return g->n_tensors; }

const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i) {
    if (i < 0 || i >= g->n_tensors) return NULL;
    return &g->tensors[i];
}

const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name) {
    int64_t i = index_find(g->tensor_index, g->tensor_index_cap, tensor_name, g->tensors, name, strlen(name));
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- writer ------------------------------------------------------------------------ */

typedef struct wkv {
    char *key;
    uint32_t type;
    uint8_t *val; /* serialised value (as after the type field in the file) */
    size_t val_bytes;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t dims[GGUF_MAX_DIMS];
    uint64_t n_bytes;
    uint64_t offset;
    const void *data;
    gguf_fill_fn fill; /* or this makes the bytes at write time */
    void *fill_ctx;
} wtensor;

struct gguf_writer {
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
    err_t err; /* first misuse, reported by gguf_writer_write */
};

gguf_writer *gguf_writer_new(void) { return xcalloc(1, sizeof(gguf_writer)); }

void gguf_writer_free(gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].val);
    }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static void w_misuse(gguf_writer *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void w_misuse(gguf_writer *w, const char *fmt, ...) {
    if (w->err.code) return;
    va_list ap;
    va_start(ap, fmt);
    char msg[300];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    err_set(&w->err, ERR_INVALID, "gguf writer: %s", msg);
}

/* Sets key to (type, val); takes ownership of val. Replaces an existing key. */
static void w_set(gguf_writer *w, const char *key, size_t key_len, uint32_t type, uint8_t *val, size_t n) {
    if (key_len == 0 || memchr(key, 0, key_len)) {
        w_misuse(w, "empty key or key with a NUL byte");
        free(val);
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strlen(w->kv[i].key) == key_len && memcmp(w->kv[i].key, key, key_len) == 0) {
            free(w->kv[i].val);
            w->kv[i].type = type;
            w->kv[i].val = val;
            w->kv[i].val_bytes = n;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        w->cap_kv = w->cap_kv ? w->cap_kv * 2 : 16;
        w->kv = xrealloc(w->kv, w->cap_kv * sizeof *w->kv);
    }
    w->kv[w->n_kv++] = (wkv){xstrndup(key, key_len), type, val, n};
}

static void w_set_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v, size_t n) {
    uint8_t *val = xmalloc(n);
    memcpy(val, v, n);
    w_set(w, key, strlen(key), type, val, n);
}

void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v) { w_set_scalar(w, key, GGUF_UINT32, &v, 4); }
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v) { w_set_scalar(w, key, GGUF_INT32, &v, 4); }
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v) { w_set_scalar(w, key, GGUF_FLOAT32, &v, 4); }
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    w_set_scalar(w, key, GGUF_BOOL, &b, 1);
}

void gguf_writer_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v) {
    size_t es = vtype_size(type);
    if (es == 0) {
        w_misuse(w, "key '%s': type %d is not a scalar type", key, (int)type);
        return;
    }
    if (type == GGUF_BOOL && *(const uint8_t *)v > 1) {
        w_misuse(w, "key '%s': bool value %u is not 0 or 1", key, *(const uint8_t *)v);
        return;
    }
    w_set_scalar(w, key, type, v, es);
}

void gguf_writer_set_str_n(gguf_writer *w, const char *key, const char *v, size_t len) {
    uint8_t *val = xmalloc(8 + len);
    uint64_t l = len;
    memcpy(val, &l, 8);
    if (len) memcpy(val + 8, v, len);
    w_set(w, key, strlen(key), GGUF_STRING, val, 8 + len);
}

void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v) {
    gguf_writer_set_str_n(w, key, v, strlen(v));
}

void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data, uint64_t n) {
    size_t es = vtype_size(elem_type), bytes, total;
    if (es == 0) {
        w_misuse(w, "key '%s': array element type %d is not a scalar type", key, (int)elem_type);
        return;
    }
    if (!mul_ok((size_t)n, es, &bytes) || !add_ok(bytes, 12, &total)) {
        w_misuse(w, "key '%s': array of %" PRIu64 " elements is too large", key, n);
        return;
    }
    if (elem_type == GGUF_BOOL)
        for (uint64_t i = 0; i < n; i++)
            if (((const uint8_t *)data)[i] > 1) {
                w_misuse(w, "key '%s': bool array element %" PRIu64 " is not 0 or 1", key, i);
                return;
            }
    uint8_t *val = xmalloc(total);
    uint32_t et = elem_type;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    if (bytes) memcpy(val + 12, data, bytes);
    w_set(w, key, strlen(key), GGUF_ARRAY, val, total);
}

void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens,
                             uint64_t n) {
    size_t total = 12;
    for (uint64_t i = 0; i < n; i++) total += 8 + (lens ? lens[i] : strlen(strs[i]));
    uint8_t *val = xmalloc(total);
    uint32_t et = GGUF_STRING;
    memcpy(val, &et, 4);
    memcpy(val + 4, &n, 8);
    size_t o = 12;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t l = lens ? lens[i] : strlen(strs[i]);
        memcpy(val + o, &l, 8);
        if (l) memcpy(val + o + 8, strs[i], (size_t)l);
        o += 8 + (size_t)l;
    }
    w_set(w, key, strlen(key), GGUF_ARRAY, val, total);
}

void gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, int64_t i) {
    if (i < 0 || i >= src->n_kv) {
        w_misuse(w, "copy_kv: index %" PRId64 " out of range", i);
        return;
    }
    const gguf_kv *kv = &src->kv[i];
    uint8_t *val = xmalloc(kv->raw_bytes ? kv->raw_bytes : 1);
    memcpy(val, kv->raw, kv->raw_bytes);
    w_set(w, kv->key.ptr, (size_t)kv->key.len, kv->type, val, kv->raw_bytes);
}

void gguf_writer_add_tensor_fn(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *dims,
                               gguf_fill_fn fill, void *ctx) {
    const size_t n = w->n_t;
    gguf_writer_add_tensor(w, name, type, n_dims, dims, NULL);
    if (w->n_t == n + 1) w->t[n].fill = fill, w->t[n].fill_ctx = ctx;
}

void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *dims,
                            const void *data) {
    const dtype_info *di = dtype_get(type);
    if (!name[0]) { w_misuse(w, "tensor with an empty name"); return; }
    if (!di) { w_misuse(w, "tensor '%s': unknown type %" PRIu32, name, type); return; }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) { w_misuse(w, "tensor '%s': n_dims %d", name, n_dims); return; }
    for (size_t i = 0; i < w->n_t; i++)
        if (strcmp(w->t[i].name, name) == 0) { w_misuse(w, "duplicate tensor '%s'", name); return; }
    wtensor t = {.type = type, .n_dims = (uint32_t)n_dims, .data = data};
    int64_t n_elems = 1;
    for (int d = 0; d < GGUF_MAX_DIMS; d++) t.dims[d] = 1;
    for (int d = 0; d < n_dims; d++) {
        if (dims[d] < 1 || __builtin_mul_overflow(n_elems, dims[d], &n_elems))
            { w_misuse(w, "tensor '%s': bad dims[%d] = %" PRId64, name, d, dims[d]); return; }
        t.dims[d] = dims[d];
    }
    size_t row = dtype_row_bytes(type, t.dims[0]);
    if (row == 0) { w_misuse(w, "tensor '%s': dims[0] %" PRId64 " not a multiple of %d", name, t.dims[0], di->blck); return; }
    if (__builtin_mul_overflow((uint64_t)row, (uint64_t)(n_elems / t.dims[0]), &t.n_bytes))
        { w_misuse(w, "tensor '%s': too large", name); return; }
    t.name = xstrdup(name);
    if (w->n_t == w->cap_t) {
        w->cap_t = w->cap_t ? w->cap_t * 2 : 16;
        w->t = xrealloc(w->t, w->cap_t * sizeof *w->t);
    }
    w->t[w->n_t++] = t;
}

static bool w_put(FILE *f, const void *p, size_t n) { return n == 0 || fwrite(p, 1, n, f) == n; }

static bool w_zeros(FILE *f, uint64_t n) {
    static const uint8_t z[4096];
    while (n) {
        size_t k = (size_t)MIN(n, (uint64_t)sizeof z);
        if (fwrite(z, 1, k, f) != k) return false;
        n -= k;
    }
    return true;
}

int gguf_writer_write(gguf_writer *w, const char *path, err_t *e) {
    if (w->err.code) return err_set(e, w->err.code, "%s", w->err.msg);
    uint32_t align = GGUF_DEFAULT_ALIGNMENT;
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kv[i].key, "general.alignment") != 0) continue;
        uint32_t a = 0;
        if (w->kv[i].type == GGUF_UINT32) memcpy(&a, w->kv[i].val, 4);
        if (w->kv[i].type != GGUF_UINT32 || a == 0 || (a & (a - 1)))
            return err_set(e, ERR_INVALID, "gguf writer: general.alignment must be a u32 power of two");
        align = a;
    }
    /* Lay out the data: each tensor at the next multiple of the alignment. */
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        w->t[i].offset = off;
        off += w->t[i].n_bytes;
        off += (align - off % align) % align;
    }

    size_t plen = strlen(path);
    char *tmp = xmalloc(plen + 5);
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp", 5);
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        int rc = err_set(e, ERR_IO, "gguf writer: cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    bool ok = true;
    uint64_t pos = 0;
#define PUT(p, n) (ok = ok && w_put(f, (p), (n)), pos += (n))
    uint32_t version = 3;
    uint64_t n_t = w->n_t, n_kv = w->n_kv;
    PUT("GGUF", 4);
    PUT(&version, 4);
    PUT(&n_t, 8);
    PUT(&n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        uint64_t kl = strlen(w->kv[i].key);
        PUT(&kl, 8);
        PUT(w->kv[i].key, (size_t)kl);
        PUT(&w->kv[i].type, 4);
        PUT(w->kv[i].val, w->kv[i].val_bytes);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        uint64_t nl = strlen(t->name);
        PUT(&nl, 8);
        PUT(t->name, (size_t)nl);
        PUT(&t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t v = (uint64_t)t->dims[d];
            PUT(&v, 8);
        }
        PUT(&t->type, 4);
        PUT(&t->offset, 8);
    }
#undef PUT
    ok = ok && w_zeros(f, (align - pos % align) % align);
    for (size_t i = 0; i < w->n_t && ok; i++) {
        const wtensor *t = &w->t[i];
        if (t->fill) { /* made now, one tensor in memory at a time */
            void *buf = xmalloc((size_t)MAX(t->n_bytes, 1));
            t->fill(t->fill_ctx, buf, t->n_bytes);
            ok = w_put(f, buf, (size_t)t->n_bytes);
            free(buf);
        } else {
            ok = t->data ? w_put(f, t->data, (size_t)t->n_bytes) : w_zeros(f, t->n_bytes);
        }
        ok = ok && w_zeros(f, (align - t->n_bytes % align) % align);
    }
    ok = ok && fflush(f) == 0;
    int write_errno = errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        write_errno = errno;
    }
    if (!ok) {
        unlink(tmp);
        int rc = err_set(e, ERR_IO, "gguf writer: cannot write '%s': %s", tmp, strerror(write_errno));
        free(tmp);
        return rc;
    }
    if (rename(tmp, path) != 0) {
        int rc = err_set(e, ERR_IO, "gguf writer: cannot rename '%s' to '%s': %s", tmp, path, strerror(errno));
        unlink(tmp);
        free(tmp);
        return rc;
    }
    free(tmp);
    return 0;
}
