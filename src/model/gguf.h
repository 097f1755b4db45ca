/*
 * gguf.h — reader and writer of GGUF v2/v3 files.
 *
 * Place in the flow: model/ (under the loader). tok/ also reads metadata here.
 *
 * The file format (all integers little-endian):
 *
 *   +--------------------------------------------------------------+
 *   | magic "GGUF" | version u32 (2 or 3) | n_tensors u64 | n_kv u64 |
 *   +--------------------------------------------------------------+
 *   | n_kv x  key: string | value type u32 | value                  |
 *   |         string = len u64 + bytes (no NUL)                     |
 *   |         array  = elem type u32 + count u64 + count x elem     |
 *   +--------------------------------------------------------------+
 *   | n_tensors x name: string | n_dims u32 (1..4) | dims u64 x n  |
 *   |             type u32 | offset u64 (relative to data start)   |
 *   +--------------------------------------------------------------+
 *   | padding to `general.alignment` (u32, default 32, power of 2)  |
 *   +--------------------------------------------------------------+
 *   | tensor data; each tensor's offset is a multiple of alignment  |
 *   +--------------------------------------------------------------+
 *
 * A file with zero tensors may end anywhere after its metadata (vocabulary-only
 * files are not padded). dims[0] is the innermost (contiguous) dimension: a
 * weight matrix with n_out rows of n_in elements has dims = {n_in, n_out}.
 *
 * Reading never trusts the bytes: every length, count and offset is checked
 * against the remaining bytes and for overflow, so a malformed file yields
 * ERR_FORMAT (or ERR_UNSUPPORTED for a valid but unknown tensor type or
 * version) with a message naming the field and its byte offset, never a
 * crash. Strings returned point into the mapping and are NOT NUL-terminated:
 * use the (ptr, len) pair. A gguf_ctx is immutable after open and may be
 * read from any number of threads.
 */
#ifndef KVLOOM_GGUF_H
#define KVLOOM_GGUF_H

#include "../base/base.h"
#include "../kern/types.h"

typedef enum gguf_vtype {
    GGUF_UINT8 = 0,
    GGUF_INT8 = 1,
    GGUF_UINT16 = 2,
    GGUF_INT16 = 3,
    GGUF_UINT32 = 4,
    GGUF_INT32 = 5,
    GGUF_FLOAT32 = 6,
    GGUF_BOOL = 7,
    GGUF_STRING = 8,
    GGUF_ARRAY = 9,
    GGUF_UINT64 = 10,
    GGUF_INT64 = 11,
    GGUF_FLOAT64 = 12,
    GGUF_VTYPE_COUNT
} gguf_vtype;

#define GGUF_MAX_DIMS 4
#define GGUF_DEFAULT_ALIGNMENT 32

typedef struct gguf_str {
    const char *ptr; /* not NUL-terminated; points into the file */
    uint64_t len;
} gguf_str;

typedef struct gguf_tensor {
    gguf_str name;
    uint32_t type;                 /* dtype value (validated: known type)   */
    uint32_t n_dims;               /* 1..4                                  */
    int64_t dims[GGUF_MAX_DIMS];   /* unused dims are 1                     */
    int64_t n_elems;               /* product of dims (checked)             */
    uint64_t offset;               /* from the start of the data section    */
    uint64_t n_bytes;              /* dtype_row_bytes(type, dims[0]) * rows */
    const void *data;              /* into the mapping (data start + offset) */
} gguf_tensor;

typedef struct gguf_ctx gguf_ctx;

/* Opens and validates a file, mapping it read-only. On error returns <0,
 * fills `e` and sets *out = NULL. */
int gguf_open(const char *path, gguf_ctx **out, err_t *e);
/* Same over caller-owned bytes, which must outlive the context (not copied). */
int gguf_from_buffer(const void *buf, size_t n, gguf_ctx **out, err_t *e);
void gguf_free(gguf_ctx *g); /* NULL is a no-op; unmaps the file */

uint32_t gguf_version(const gguf_ctx *g);
uint32_t gguf_alignment(const gguf_ctx *g);
size_t gguf_file_size(const gguf_ctx *g);
size_t gguf_data_offset(const gguf_ctx *g); /* start of the data section */
/* The identity of the file a context was opened from, as it was at open:
 * enough to tell that a file changed without reading it (a cache of its
 * hash, kv/disk.c). */
typedef struct gguf_file_id {
    uint64_t dev, ino, size;
    int64_t mtime_ns, ctime_ns;
} gguf_file_id;
/* Fills *id; false for a context made from a buffer. */
bool gguf_file_identity(const gguf_ctx *g, gguf_file_id *id);

/* ---- metadata ---- */
int64_t gguf_n_kv(const gguf_ctx *g);
int64_t gguf_find_key(const gguf_ctx *g, const char *key); /* index or -1 */
gguf_str gguf_key(const gguf_ctx *g, int64_t i);
gguf_vtype gguf_kv_type(const gguf_ctx *g, int64_t i);
/* Scalar accessors: return false when the key is absent or has another
 * type. Integer getters accept any integer type whose value fits. */
bool gguf_get_u32(const gguf_ctx *g, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_ctx *g, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_ctx *g, const char *key, float *out); /* f32 or f64 */
bool gguf_get_bool(const gguf_ctx *g, const char *key, bool *out);
bool gguf_get_str(const gguf_ctx *g, const char *key, gguf_str *out);
/* Arrays: element type and count; false when absent or not an array. */
bool gguf_get_arr(const gguf_ctx *g, const char *key, gguf_vtype *elem_type, uint64_t *n);
/* Raw little-endian element data of a non-string array (NULL for strings). */
const void *gguf_arr_data(const gguf_ctx *g, const char *key);
/* i-th string of a string array (i < n, checked: returns {NULL,0} if not). */
gguf_str gguf_arr_str(const gguf_ctx *g, const char *key, uint64_t i);
/* Formats value i as text for `kvloom info`: numbers as numbers, strings
 * quoted (escaped, truncated to ~60 chars), arrays as
 * "[elemtype x N] first, few, ...". Always NUL-terminates when n > 0. */
void gguf_kv_format(const gguf_ctx *g, int64_t i, char *buf, size_t n);
/* Index-based array access (kv index k as from gguf_find_key; -1 or out of
 * range gives false / NULL / {NULL,0}): same meaning as the key-based ones.
 * gguf_kv_arr_str is O(1) (string offsets are indexed at open). */
bool gguf_kv_arr(const gguf_ctx *g, int64_t k, gguf_vtype *elem_type, uint64_t *n);
const void *gguf_kv_arr_data(const gguf_ctx *g, int64_t k);
gguf_str gguf_kv_arr_str(const gguf_ctx *g, int64_t k, uint64_t i);
/* "u8", "i32", "f32", "bool", "string", "array"...; "invalid" otherwise. */
const char *gguf_vtype_name(gguf_vtype t);

/* ---- tensors ---- */
int64_t gguf_n_tensors(const gguf_ctx *g);
const gguf_tensor *gguf_tensor_at(const gguf_ctx *g, int64_t i);
const gguf_tensor *gguf_find_tensor(const gguf_ctx *g, const char *name); /* NULL if absent */

/* ---- writer ----
 * Builds a GGUF v3 file: add metadata and tensor descriptions, then write.
 * Tensor data is provided by pointer and written in order (the writer does
 * not copy it; pointers must stay valid until gguf_writer_write returns).  */
typedef struct gguf_writer gguf_writer;
gguf_writer *gguf_writer_new(void);
void gguf_writer_free(gguf_writer *w);
void gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v);
void gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v);
void gguf_writer_set_f32(gguf_writer *w, const char *key, float v);
void gguf_writer_set_bool(gguf_writer *w, const char *key, bool v);
void gguf_writer_set_str(gguf_writer *w, const char *key, const char *v);
void gguf_writer_set_str_n(gguf_writer *w, const char *key, const char *v, size_t len);
/* Any scalar type (not string/array); *v holds the value in host order. */
void gguf_writer_set_scalar(gguf_writer *w, const char *key, gguf_vtype type, const void *v);
/* Numeric array: elem_type one of the scalar types; data copied. */
void gguf_writer_set_arr(gguf_writer *w, const char *key, gguf_vtype elem_type, const void *data, uint64_t n);
/* String array; strings copied (lens may be NULL for NUL-terminated). */
void gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *strs, const size_t *lens, uint64_t n);
/* Copies key i of `src` verbatim (any type, arrays included). */
void gguf_writer_copy_kv(gguf_writer *w, const gguf_ctx *src, int64_t i);
/* Adds a tensor; dims[0] innermost; data must hold dtype_row_bytes*rows
 * (NULL writes zeros). Misuse of any set/add call (unknown type, bad dims,
 * duplicate tensor name, empty key) is recorded and returned as ERR_INVALID
 * by gguf_writer_write. */
void gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *dims, const void *data);
/* Same, but the data is made at write time: fill(ctx, dst, n_bytes) writes
 * the tensor's n_bytes into dst (a buffer the writer owns for that call), in
 * the order tensors were added. For files larger than memory. */
typedef void (*gguf_fill_fn)(void *ctx, void *dst, uint64_t n_bytes);
void gguf_writer_add_tensor_fn(gguf_writer *w, const char *name, uint32_t type, int n_dims, const int64_t *dims,
                               gguf_fill_fn fill, void *ctx);
/* Writes the file (to path.tmp then rename). Setting an existing key replaces
 * it (keeping its position). Alignment is 32, or general.alignment if set (it
 * must be a u32 power of two). Padding bytes are zero. Returns 0, ERR_INVALID
 * (recorded misuse) or ERR_IO naming the path. */
int gguf_writer_write(gguf_writer *w, const char *path, err_t *e);

#endif
