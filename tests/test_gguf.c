/*
 * test_gguf.c — the GGUF reader and writer (src/model/gguf.c).
 *
 *   1. round trip: a file with every value type and tensors of several dtypes
 *      written by the writer, read back through gguf_open and gguf_from_buffer,
 *      with the bytes of the header also checked by hand; copy_kv reproduces
 *      a file byte for byte; alignment 64; writer misuse is reported.
 *   2. real files: ../shared/models/stories260K.gguf (known metadata, and
 *      weights compared with the same model in llama2.c .bin format, an
 *      independent source) and every .gguf in ../shared/vocab.
 *   3. an enumerated table of malformed files, each hand-assembled by a small
 *      byte builder from one description with one field corrupted, each with
 *      its expected error code and message substring; every prefix of a valid
 *      file; nonexistent path, directory, empty file.
 * Buffers given to gguf_from_buffer are malloc'd at their exact size so that
 * ASan catches any read past the end.
 */
#include "model/gguf.h"
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- a byte builder ---------------------------------------------------------- */

typedef struct bb {
    uint8_t *p;
    size_t n, cap;
} bb;

static void bb_put(bb *b, const void *p, size_t n) {
    if (b->n + n > b->cap) {
        while (b->n + n > b->cap) b->cap = b->cap ? b->cap * 2 : 256;
        b->p = realloc(b->p, b->cap);
    }
    memcpy(b->p + b->n, p, n);
    b->n += n;
}
static void bb_u8(bb *b, uint8_t v) { bb_put(b, &v, 1); }
static void bb_u32(bb *b, uint32_t v) { bb_put(b, &v, 4); }
static void bb_u64(bb *b, uint64_t v) { bb_put(b, &v, 8); }
static void bb_str(bb *b, const char *s) {
    bb_u64(b, strlen(s));
    bb_put(b, s, strlen(s));
}
static void bb_pad(bb *b, size_t align) {
    while (b->n % align) bb_u8(b, 0);
}

/* Parses bytes copied into an exact-size heap buffer; returns the rc. */
static int parse_exact(const uint8_t *p, size_t n, err_t *e) {
    uint8_t *copy = malloc(n ? n : 1);
    if (n) memcpy(copy, p, n);
    gguf_ctx *g = (gguf_ctx *)0x1;
    int rc = gguf_from_buffer(n ? copy : NULL, n, &g, e);
    if (rc == 0) {
        /* walk everything, as a consumer would */
        char buf[256];
        for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_kv_format(g, i, buf, sizeof buf);
        gguf_free(g);
    } else {
        CHECK(g == NULL);
    }
    free(copy);
    return rc;
}

/* A per-process temp path; each name has its own static buffer slot so two
 * paths can be live at once. */
static const char *tmp_path(const char *name) {
    static char paths[4][256];
    static int next;
    char *path = paths[next++ % 4];
    snprintf(path, 256, "/tmp/test_gguf_%d_%s", (int)getpid(), name);
    return path;
}

static int write_file(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    fclose(f);
    return w == n ? 0 : -1;
}

static bool gstr_is(gguf_str s, const char *want) {
    return s.ptr && s.len == strlen(want) && memcmp(s.ptr, want, s.len) == 0;
}

/* ---- 1. round trip ------------------------------------------------------------ */

static const uint8_t rt_u8 = 200;
static const int8_t rt_i8 = -100;
static const uint16_t rt_u16 = 60000;
static const int16_t rt_i16 = -30000;
static const uint64_t rt_u64 = 0xFEDCBA9876543210ull;
static const int64_t rt_i64 = -1234567890123456789ll;
static const double rt_f64 = 3.141592653589793;
static const uint32_t rt_arr_u32[] = {1, 2, 3, 4000000000u};
static const int16_t rt_arr_i16[] = {-1, 0, 1, 32767, -32768};
static const float rt_arr_f32[] = {0.5f, -1.25f, 1e30f};
static const double rt_arr_f64[] = {1e-300, -2.5};
static const uint8_t rt_arr_bool[] = {1, 0, 1};
static const int64_t rt_arr_i64[] = {INT64_MIN, INT64_MAX};
static const char *const rt_strs[] = {"<unk>", "", "hello world", "\xc4\xa0the"};

enum { RT_N_TENSORS = 5 };
typedef struct rt_tensor {
    const char *name;
    uint32_t type;
    int n_dims;
    int64_t dims[4];
} rt_tensor;
static const rt_tensor rt_tensors[RT_N_TENSORS] = {
    {"token_embd.weight", DT_F32, 2, {5, 3, 1, 1}},
    {"blk.0.attn_norm.weight", DT_F16, 1, {7, 1, 1, 1}},
    {"blk.0.attn_q.weight", DT_Q8_0, 2, {64, 2, 1, 1}},
    {"blk.0.ffn_up.weight", DT_Q4_K, 3, {256, 1, 2, 1}},
    {"output.weight", DT_BF16, 4, {3, 2, 2, 2}},
};

static void fill_pattern(uint8_t *p, size_t n, unsigned seed) {
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (uint8_t)(x >> 16);
    }
}

static gguf_writer *rt_writer(uint8_t *data[RT_N_TENSORS]) {
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_str(w, "general.architecture", "llama");
    gguf_writer_set_scalar(w, "t.u8", GGUF_UINT8, &rt_u8);
    gguf_writer_set_scalar(w, "t.i8", GGUF_INT8, &rt_i8);
    gguf_writer_set_scalar(w, "t.u16", GGUF_UINT16, &rt_u16);
    gguf_writer_set_scalar(w, "t.i16", GGUF_INT16, &rt_i16);
    gguf_writer_set_u32(w, "t.u32", 4000000000u);
    gguf_writer_set_i32(w, "t.i32", -2000000000);
    gguf_writer_set_f32(w, "t.f32", 0.1f);
    gguf_writer_set_bool(w, "t.bool", true);
    gguf_writer_set_bool(w, "t.bool0", false);
    gguf_writer_set_str_n(w, "t.str_nul", "a\0b", 3);
    gguf_writer_set_str(w, "t.str_empty", "");
    gguf_writer_set_scalar(w, "t.u64", GGUF_UINT64, &rt_u64);
    gguf_writer_set_scalar(w, "t.i64", GGUF_INT64, &rt_i64);
    gguf_writer_set_scalar(w, "t.f64", GGUF_FLOAT64, &rt_f64);
    gguf_writer_set_arr(w, "t.arr_u32", GGUF_UINT32, rt_arr_u32, 4);
    gguf_writer_set_arr(w, "t.arr_i16", GGUF_INT16, rt_arr_i16, 5);
    gguf_writer_set_arr(w, "t.arr_f32", GGUF_FLOAT32, rt_arr_f32, 3);
    gguf_writer_set_arr(w, "t.arr_f64", GGUF_FLOAT64, rt_arr_f64, 2);
    gguf_writer_set_arr(w, "t.arr_bool", GGUF_BOOL, rt_arr_bool, 3);
    gguf_writer_set_arr(w, "t.arr_i64", GGUF_INT64, rt_arr_i64, 2);
    gguf_writer_set_arr(w, "t.arr_empty", GGUF_UINT8, NULL, 0);
    gguf_writer_set_arr_str(w, "t.arr_str", rt_strs, NULL, 4);
    gguf_writer_set_u32(w, "t.replaced", 1);
    gguf_writer_set_u32(w, "t.replaced", 2); /* replaces, keeps position */
    for (int i = 0; i < RT_N_TENSORS; i++) {
        const rt_tensor *t = &rt_tensors[i];
        int64_t rows = 1;
        for (int d = 1; d < t->n_dims; d++) rows *= t->dims[d];
        size_t nb = dtype_row_bytes(t->type, t->dims[0]) * (size_t)rows;
        data[i] = malloc(nb);
        fill_pattern(data[i], nb, (unsigned)i + 1);
        gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->dims, data[i]);
    }
    return w;
}

static void rt_check(const gguf_ctx *g, uint8_t *data[RT_N_TENSORS], const uint8_t *file, size_t file_n) {
    uint32_t u32;
    int64_t i64;
    float f32;
    bool b;
    gguf_str s;
    gguf_vtype et;
    uint64_t n;
    CHECK_EQ_INT(gguf_version(g), 3);
    CHECK_EQ_INT(gguf_alignment(g), 32);
    CHECK_EQ_INT(gguf_n_kv(g), 24);
    CHECK_EQ_INT(gguf_n_tensors(g), RT_N_TENSORS);
    CHECK_EQ_INT(gguf_file_size(g), file_n);
    CHECK(gguf_get_str(g, "general.architecture", &s) && gstr_is(s, "llama"));
    CHECK(gguf_get_i64(g, "t.u8", &i64) && i64 == 200);
    CHECK(gguf_get_u32(g, "t.u8", &u32) && u32 == 200);
    CHECK(gguf_get_i64(g, "t.i8", &i64) && i64 == -100);
    CHECK(!gguf_get_u32(g, "t.i8", &u32)); /* negative does not fit u32 */
    CHECK(gguf_get_i64(g, "t.u16", &i64) && i64 == 60000);
    CHECK(gguf_get_i64(g, "t.i16", &i64) && i64 == -30000);
    CHECK(gguf_get_u32(g, "t.u32", &u32) && u32 == 4000000000u);
    CHECK(gguf_get_i64(g, "t.i32", &i64) && i64 == -2000000000);
    CHECK(gguf_get_f32(g, "t.f32", &f32) && f32 == 0.1f);
    CHECK(!gguf_get_u32(g, "t.f32", &u32));
    CHECK(gguf_get_bool(g, "t.bool", &b) && b == true);
    CHECK(gguf_get_bool(g, "t.bool0", &b) && b == false);
    CHECK(!gguf_get_bool(g, "t.u8", &b));
    CHECK(gguf_get_str(g, "t.str_nul", &s) && s.len == 3 && memcmp(s.ptr, "a\0b", 3) == 0);
    CHECK(gguf_get_str(g, "t.str_empty", &s) && s.len == 0);
    CHECK(!gguf_get_i64(g, "t.u64", &i64)); /* > INT64_MAX */
    CHECK(!gguf_get_u32(g, "t.u64", &u32));
    int64_t k = gguf_find_key(g, "t.u64");
    CHECK(k >= 0 && gguf_kv_type(g, k) == GGUF_UINT64);
    CHECK(gguf_get_i64(g, "t.i64", &i64) && i64 == rt_i64);
    CHECK(gguf_get_f32(g, "t.f64", &f32) && f32 == (float)rt_f64);
    CHECK(gguf_get_u32(g, "t.replaced", &u32) && u32 == 2);
    CHECK_EQ_INT(gguf_find_key(g, "t.replaced"), 23);
    CHECK_EQ_INT(gguf_find_key(g, "general.architecture"), 0);
    CHECK_EQ_INT(gguf_find_key(g, "absent"), -1);
    CHECK_EQ_INT(gguf_find_key(g, "t.u"), -1);
    CHECK(!gguf_get_u32(g, "absent", &u32));

    CHECK(gguf_get_arr(g, "t.arr_u32", &et, &n) && et == GGUF_UINT32 && n == 4);
    CHECK(gguf_arr_data(g, "t.arr_u32") && memcmp(gguf_arr_data(g, "t.arr_u32"), rt_arr_u32, sizeof rt_arr_u32) == 0);
    CHECK(gguf_get_arr(g, "t.arr_i16", &et, &n) && et == GGUF_INT16 && n == 5);
    CHECK(memcmp(gguf_arr_data(g, "t.arr_i16"), rt_arr_i16, sizeof rt_arr_i16) == 0);
    CHECK(gguf_get_arr(g, "t.arr_f32", &et, &n) && et == GGUF_FLOAT32 && n == 3);
    CHECK(memcmp(gguf_arr_data(g, "t.arr_f32"), rt_arr_f32, sizeof rt_arr_f32) == 0);
    CHECK(gguf_get_arr(g, "t.arr_f64", &et, &n) && et == GGUF_FLOAT64 && n == 2);
    CHECK(memcmp(gguf_arr_data(g, "t.arr_f64"), rt_arr_f64, sizeof rt_arr_f64) == 0);
    CHECK(gguf_get_arr(g, "t.arr_bool", &et, &n) && et == GGUF_BOOL && n == 3);
    CHECK(memcmp(gguf_arr_data(g, "t.arr_bool"), rt_arr_bool, sizeof rt_arr_bool) == 0);
    CHECK(gguf_get_arr(g, "t.arr_i64", &et, &n) && et == GGUF_INT64 && n == 2);
    CHECK(memcmp(gguf_arr_data(g, "t.arr_i64"), rt_arr_i64, sizeof rt_arr_i64) == 0);
    CHECK(gguf_get_arr(g, "t.arr_empty", &et, &n) && et == GGUF_UINT8 && n == 0);
    CHECK(gguf_get_arr(g, "t.arr_str", &et, &n) && et == GGUF_STRING && n == 4);
    CHECK(gguf_arr_data(g, "t.arr_str") == NULL);
    for (int i = 0; i < 4; i++) CHECK_MSG(gstr_is(gguf_arr_str(g, "t.arr_str", (uint64_t)i), rt_strs[i]), "string %d", i);
    CHECK(gguf_arr_str(g, "t.arr_str", 4).ptr == NULL);
    CHECK(gguf_arr_str(g, "t.arr_u32", 0).ptr == NULL);
    CHECK(!gguf_get_arr(g, "t.u32", &et, &n));
    CHECK(gguf_key(g, -1).ptr == NULL && gguf_key(g, 24).ptr == NULL);
    CHECK(gguf_kv_type(g, 99) == GGUF_VTYPE_COUNT);

    /* formatting */
    char buf[256];
    gguf_kv_format(g, gguf_find_key(g, "t.u32"), buf, sizeof buf);
    CHECK_STR(buf, "4000000000");
    gguf_kv_format(g, gguf_find_key(g, "t.i8"), buf, sizeof buf);
    CHECK_STR(buf, "-100");
    gguf_kv_format(g, gguf_find_key(g, "t.bool0"), buf, sizeof buf);
    CHECK_STR(buf, "false");
    gguf_kv_format(g, gguf_find_key(g, "t.f32"), buf, sizeof buf);
    CHECK_STR(buf, "0.1");
    gguf_kv_format(g, gguf_find_key(g, "general.architecture"), buf, sizeof buf);
    CHECK_STR(buf, "\"llama\"");
    gguf_kv_format(g, gguf_find_key(g, "t.str_nul"), buf, sizeof buf);
    CHECK_STR(buf, "\"a\\x00b\"");
    gguf_kv_format(g, gguf_find_key(g, "t.arr_u32"), buf, sizeof buf);
    CHECK_STR(buf, "[u32 x 4] 1, 2, 3, 4000000000");
    gguf_kv_format(g, gguf_find_key(g, "t.arr_str"), buf, sizeof buf);
    CHECK_STR(buf, "[string x 4] \"<unk>\", \"\", \"hello world\", \"\xc4\xa0the\"");
    gguf_kv_format(g, gguf_find_key(g, "t.arr_empty"), buf, sizeof buf);
    CHECK_STR(buf, "[u8 x 0]");
    char small[8];
    gguf_kv_format(g, gguf_find_key(g, "t.arr_str"), small, sizeof small);
    CHECK(strlen(small) == 7 && memcmp(small, "[string", 7) == 0);

    /* tensors: layout and contents */
    size_t data_off = gguf_data_offset(g);
    CHECK(data_off % 32 == 0);
    const gguf_tensor *prev = NULL;
    for (int i = 0; i < RT_N_TENSORS; i++) {
        const rt_tensor *want = &rt_tensors[i];
        const gguf_tensor *t = gguf_find_tensor(g, want->name);
        CHECK_MSG(t != NULL, "%s", want->name);
        if (!t) continue;
        CHECK(t == gguf_tensor_at(g, i));
        CHECK(gstr_is(t->name, want->name));
        CHECK_EQ_INT(t->type, want->type);
        CHECK_EQ_INT(t->n_dims, want->n_dims);
        int64_t ne = 1;
        for (int d = 0; d < 4; d++) {
            CHECK_EQ_INT(t->dims[d], want->dims[d]);
            ne *= want->dims[d];
        }
        CHECK_EQ_INT(t->n_elems, ne);
        const dtype_info *di = dtype_get(want->type);
        CHECK_EQ_INT(t->n_bytes, (uint64_t)(ne / di->blck * di->type_size));
        CHECK(t->offset % 32 == 0);
        CHECK(t->data == file + data_off + t->offset);
        CHECK(memcmp(t->data, data[i], t->n_bytes) == 0);
        /* writer lays tensors out in order, each at the next aligned offset;
         * the gap must be zero padding */
        uint64_t expect_off = prev ? (prev->offset + prev->n_bytes + 31) / 32 * 32 : 0;
        CHECK_EQ_INT(t->offset, expect_off);
        if (prev)
            for (uint64_t o = prev->offset + prev->n_bytes; o < t->offset; o++)
                CHECK_MSG(file[data_off + o] == 0, "padding byte %llu", (unsigned long long)o);
        prev = t;
    }
    CHECK(gguf_find_tensor(g, "absent") == NULL);
    CHECK(gguf_find_tensor(g, "output") == NULL);
    CHECK(gguf_tensor_at(g, RT_N_TENSORS) == NULL && gguf_tensor_at(g, -1) == NULL);
}

static void test_round_trip(void) {
    uint8_t *data[RT_N_TENSORS];
    gguf_writer *w = rt_writer(data);
    err_t e = {0};
    const char *path = tmp_path("rt.gguf");
    int rc = gguf_writer_write(w, path, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    gguf_writer_free(w);
    char tmp[300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    CHECK(access(tmp, F_OK) != 0); /* renamed away */

    char *file = NULL;
    size_t file_n = 0;
    CHECK(file_read_all(path, &file, &file_n, &e) == 0);
    const uint8_t *fb = (const uint8_t *)file;
    /* the header, read by hand */
    uint32_t v32;
    uint64_t v64;
    CHECK(file_n > 24 && memcmp(fb, "GGUF", 4) == 0);
    memcpy(&v32, fb + 4, 4);
    CHECK_EQ_INT(v32, 3);
    memcpy(&v64, fb + 8, 8);
    CHECK_EQ_INT(v64, RT_N_TENSORS);
    memcpy(&v64, fb + 16, 8);
    CHECK_EQ_INT(v64, 24);
    memcpy(&v64, fb + 24, 8);
    CHECK_EQ_INT(v64, strlen("general.architecture"));
    CHECK(memcmp(fb + 32, "general.architecture", 20) == 0);
    memcpy(&v32, fb + 52, 4);
    CHECK_EQ_INT(v32, GGUF_STRING);
    memcpy(&v64, fb + 56, 8);
    CHECK_EQ_INT(v64, 5);
    CHECK(memcmp(fb + 64, "llama", 5) == 0);
    CHECK(file_n % 32 == 0); /* padded after the last tensor too */

    gguf_ctx *g = NULL;
    rc = gguf_open(path, &g, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (g) {
        /* data pointers are into the mapping: compare through a file copy */
        const gguf_tensor *t0 = gguf_tensor_at(g, 0);
        CHECK(memcmp(t0->data, fb + gguf_data_offset(g), t0->n_bytes) == 0);
        /* padding between metadata and data is zero */
        const gguf_tensor *last = gguf_tensor_at(g, RT_N_TENSORS - 1);
        for (size_t o = gguf_data_offset(g) + last->offset + last->n_bytes; o < file_n; o++)
            CHECK_MSG(fb[o] == 0, "tail padding byte %zu", o);
        gguf_free(g);
    }
    /* the same checks through gguf_from_buffer (exact-size heap buffer) */
    uint8_t *copy = malloc(file_n);
    memcpy(copy, file, file_n);
    rc = gguf_from_buffer(copy, file_n, &g, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (g) {
        rt_check(g, data, copy, file_n);
        /* copy_kv reproduces the file byte for byte */
        gguf_writer *w2 = gguf_writer_new();
        for (int64_t i = 0; i < gguf_n_kv(g); i++) gguf_writer_copy_kv(w2, g, i);
        for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
            const gguf_tensor *t = gguf_tensor_at(g, i);
            char name[128];
            snprintf(name, sizeof name, "%.*s", (int)t->name.len, t->name.ptr);
            gguf_writer_add_tensor(w2, name, t->type, (int)t->n_dims, t->dims, t->data);
        }
        const char *path2 = tmp_path("rt2.gguf");
        rc = gguf_writer_write(w2, path2, &e);
        CHECK_MSG(rc == 0, "%s", e.msg);
        gguf_writer_free(w2);
        char *file2 = NULL;
        size_t file2_n = 0;
        CHECK(file_read_all(path2, &file2, &file2_n, &e) == 0);
        CHECK(file2_n == file_n && file2 && memcmp(file2, file, file_n) == 0);
        free(file2);
        unlink(path2);
        gguf_free(g);
    }
    free(copy);

    /* every prefix shorter than the end of the last tensor's data fails;
     * cutting only the trailing padding is still a valid file */
    size_t data_end = 0;
    if (gguf_from_buffer(file, file_n, &g, &e) == 0) {
        const gguf_tensor *last = gguf_tensor_at(g, RT_N_TENSORS - 1);
        data_end = gguf_data_offset(g) + last->offset + last->n_bytes;
        gguf_free(g);
    }
    CHECK(data_end > 0 && data_end < file_n);
    int n_bad = 0;
    for (size_t len = 0; len <= file_n; len++) {
        rc = parse_exact(fb, len, &e);
        bool want_ok = len >= data_end;
        if ((rc == 0) != want_ok) {
            n_bad++;
            if (n_bad < 5) fprintf(stderr, "prefix %zu: rc %d (%s)\n", len, rc, rc ? e.msg : "");
        }
        if (rc && rc != ERR_FORMAT) n_bad++;
    }
    CHECK_EQ_INT(n_bad, 0);

    free(file);
    unlink(path);
    for (int i = 0; i < RT_N_TENSORS; i++) free(data[i]);
}

static void test_writer_alignment_and_misuse(void) {
    err_t e = {0};
    const char *path = tmp_path("al.gguf");
    gguf_writer *w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 64);
    float a[3] = {1, 2, 3}, b[5] = {4, 5, 6, 7, 8};
    int64_t d3[1] = {3}, d5[1] = {5};
    gguf_writer_add_tensor(w, "a", DT_F32, 1, d3, a);
    gguf_writer_add_tensor(w, "b", DT_F32, 1, d5, b);
    gguf_writer_add_tensor(w, "zeros", DT_F32, 1, d5, NULL);
    CHECK(gguf_writer_write(w, path, &e) == 0);
    gguf_writer_free(w);
    gguf_ctx *g = NULL;
    CHECK(gguf_open(path, &g, &e) == 0);
    if (g) {
        CHECK_EQ_INT(gguf_alignment(g), 64);
        CHECK(gguf_data_offset(g) % 64 == 0);
        const gguf_tensor *tb = gguf_find_tensor(g, "b");
        CHECK(tb && tb->offset == 64 && memcmp(tb->data, b, sizeof b) == 0);
        const gguf_tensor *tz = gguf_find_tensor(g, "zeros");
        CHECK(tz && tz->offset == 128);
        float z[5] = {0};
        CHECK(tz && memcmp(tz->data, z, sizeof z) == 0);
        CHECK(gguf_file_size(g) % 64 == 0);
        gguf_free(g);
    }
    unlink(path);

    /* misuse is reported by write, and no file is created */
    w = gguf_writer_new();
    int64_t d33[2] = {33, 2};
    gguf_writer_add_tensor(w, "q", DT_Q4_0, 2, d33, NULL);
    e.msg[0] = 0;
    CHECK(gguf_writer_write(w, path, &e) == ERR_INVALID);
    CHECK(strstr(e.msg, "'q'") != NULL);
    CHECK(access(path, F_OK) != 0);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "a", DT_F32, 1, d3, a);
    gguf_writer_add_tensor(w, "a", DT_F32, 1, d3, a);
    CHECK(gguf_writer_write(w, path, &e) == ERR_INVALID && strstr(e.msg, "duplicate") != NULL);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_add_tensor(w, "a", 99, 1, d3, a);
    CHECK(gguf_writer_write(w, path, &e) == ERR_INVALID && strstr(e.msg, "unknown type") != NULL);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_u32(w, "general.alignment", 48);
    CHECK(gguf_writer_write(w, path, &e) == ERR_INVALID && strstr(e.msg, "general.alignment") != NULL);
    gguf_writer_free(w);

    w = gguf_writer_new();
    gguf_writer_set_u32(w, "x", 1);
    CHECK(gguf_writer_write(w, "/nonexistent-dir/x.gguf", &e) == ERR_IO &&
          strstr(e.msg, "/nonexistent-dir/x.gguf") != NULL);
    gguf_writer_free(w);

    /* a 0-tensor file from the writer: every prefix that holds the complete
     * metadata is accepted (vocabulary files are not padded), shorter ones
     * are rejected */
    w = gguf_writer_new();
    gguf_writer_set_str(w, "tokenizer.ggml.model", "llama");
    const char *toks[] = {"<unk>", "a", "bc"};
    gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", toks, NULL, 3);
    gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", true);
    CHECK(gguf_writer_write(w, path, &e) == 0);
    gguf_writer_free(w);
    char *file = NULL;
    size_t n = 0;
    CHECK(file_read_all(path, &file, &n, &e) == 0);
    /* metadata size by hand: header 24; kv = 8+len(key)+4+value */
    size_t meta = 24 + (8 + 20 + 4 + 8 + 5) + (8 + 21 + 4 + 4 + 8 + (8 + 5) + (8 + 1) + (8 + 2)) + (8 + 28 + 4 + 1);
    CHECK_EQ_INT(n, (meta + 31) / 32 * 32);
    int n_bad = 0;
    for (size_t len = 0; len <= n; len++) {
        int rc = parse_exact((const uint8_t *)file, len, &e);
        if ((rc == 0) != (len >= meta)) n_bad++;
    }
    CHECK_EQ_INT(n_bad, 0);
    free(file);
    unlink(path);
}

/* ---- 2. real files ----------------------------------------------------------- */

static void check_tensor_vs_bin(const gguf_ctx *g, const char *name, const float *bin, size_t bin_floats,
                                size_t off_floats, size_t n_floats) {
    const gguf_tensor *t = gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "%s", name);
    if (!t) return;
    CHECK_MSG(t->type == DT_F32 && (size_t)t->n_elems == n_floats, "%s", name);
    CHECK_MSG(off_floats + n_floats <= bin_floats, "%s", name);
    if (t->type != DT_F32 || (size_t)t->n_elems != n_floats || off_floats + n_floats > bin_floats) return;
    CHECK_MSG(memcmp(t->data, bin + off_floats, n_floats * 4) == 0, "%s differs from stories260K.bin", name);
}

static void test_stories(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", test_shared_dir());
    gguf_ctx *g = NULL;
    err_t e = {0};
    int rc = gguf_open(path, &g, &e);
    CHECK_MSG(rc == 0, "%s", e.msg);
    if (!g) return;
    gguf_str s;
    uint32_t u32;
    int64_t i64;
    float f;
    gguf_vtype et;
    uint64_t n;
    CHECK(gguf_get_str(g, "general.architecture", &s) && gstr_is(s, "llama"));
    CHECK(gguf_get_u32(g, "llama.embedding_length", &u32) && u32 == 64);
    CHECK(gguf_get_i64(g, "llama.block_count", &i64) && i64 == 5);
    CHECK(gguf_get_u32(g, "llama.attention.head_count", &u32) && u32 == 8);
    CHECK(gguf_get_u32(g, "llama.attention.head_count_kv", &u32) && u32 == 4);
    CHECK(gguf_get_u32(g, "llama.feed_forward_length", &u32) && u32 == 172);
    CHECK(gguf_get_f32(g, "llama.attention.layer_norm_rms_epsilon", &f) && fabsf(f - 1e-5f) < 1e-9f);
    CHECK(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) && et == GGUF_STRING && n == 512);
    CHECK(gstr_is(gguf_arr_str(g, "tokenizer.ggml.tokens", 0), "<unk>"));
    CHECK(gstr_is(gguf_arr_str(g, "tokenizer.ggml.tokens", 1), "<s>"));
    CHECK(gstr_is(gguf_arr_str(g, "tokenizer.ggml.tokens", 3), "<0x00>"));
    CHECK(gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n) && et == GGUF_FLOAT32 && n == 512);
    CHECK_EQ_INT(gguf_n_tensors(g), 48);
    const gguf_tensor *t = gguf_find_tensor(g, "token_embd.weight");
    CHECK(t && t->type == DT_F32 && t->n_dims == 2 && t->dims[0] == 64 && t->dims[1] == 512);
    char buf[256];
    gguf_kv_format(g, gguf_find_key(g, "tokenizer.ggml.tokens"), buf, sizeof buf);
    CHECK_STR(buf, "[string x 512] \"<unk>\", \"<s>\", \"</s>\", \"<0x00>\", \"<0x01>\", ...");

    /* weights against the llama2.c export of the same model: header of 7
     * int32 (dim, hidden, n_layers, n_heads, n_kv_heads, vocab, seq_len), then
     * token_embedding (vocab*dim), rms_att (L*dim), wq (L*dim*dim), wk, wv
     * (L*dim*kv_dim), wo (L*dim*dim), rms_ffn (L*dim), w1 (L*hidden*dim), w2
     * (L*dim*hidden), w3 (L*hidden*dim), rms_final (dim). */
    char bin_path[512];
    snprintf(bin_path, sizeof bin_path, "%s/models/stories260K.bin", test_shared_dir());
    char *bin = NULL;
    size_t bin_n = 0;
    CHECK(file_read_all(bin_path, &bin, &bin_n, &e) == 0);
    if (bin && bin_n > 28) {
        int32_t hdr[7];
        memcpy(hdr, bin, 28);
        CHECK(hdr[0] == 64 && hdr[1] == 172 && hdr[2] == 5 && hdr[5] == 512);
        size_t dim = 64, hid = 172, L = 5, kv_dim = 64 * 4 / 8, vocab = 512;
        size_t nf = (bin_n - 28) / 4;
        float *w = malloc(nf * 4);
        memcpy(w, bin + 28, nf * 4);
        size_t o_emb = 0, o_att = o_emb + vocab * dim, o_wq = o_att + L * dim, o_wk = o_wq + L * dim * dim;
        size_t o_wv = o_wk + L * dim * kv_dim, o_wo = o_wv + L * dim * kv_dim, o_ffn = o_wo + L * dim * dim;
        size_t o_w1 = o_ffn + L * dim, o_w2 = o_w1 + L * hid * dim, o_w3 = o_w2 + L * dim * hid;
        size_t o_fin = o_w3 + L * hid * dim;
        check_tensor_vs_bin(g, "token_embd.weight", w, nf, o_emb, vocab * dim);
        check_tensor_vs_bin(g, "output_norm.weight", w, nf, o_fin, dim);
        for (size_t l = 0; l < L; l++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%zu.attn_norm.weight", l);
            check_tensor_vs_bin(g, name, w, nf, o_att + l * dim, dim);
            snprintf(name, sizeof name, "blk.%zu.ffn_norm.weight", l);
            check_tensor_vs_bin(g, name, w, nf, o_ffn + l * dim, dim);
            snprintf(name, sizeof name, "blk.%zu.ffn_down.weight", l);
            check_tensor_vs_bin(g, name, w, nf, o_w2 + l * dim * hid, dim * hid);
            snprintf(name, sizeof name, "blk.%zu.ffn_up.weight", l);
            check_tensor_vs_bin(g, name, w, nf, o_w3 + l * hid * dim, hid * dim);
            snprintf(name, sizeof name, "blk.%zu.attn_v.weight", l);
            check_tensor_vs_bin(g, name, w, nf, o_wv + l * dim * kv_dim, dim * kv_dim);
        }
        free(w);
    }
    free(bin);
    gguf_free(g);
}

static void test_vocab_files(void) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/vocab", test_shared_dir());
    DIR *d = opendir(dir);
    CHECK_MSG(d != NULL, "cannot open %s", dir);
    if (!d) return;
    int n_files = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 5 || strcmp(de->d_name + l - 5, ".gguf") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        gguf_ctx *g = NULL;
        err_t e = {0};
        int rc = gguf_open(path, &g, &e);
        CHECK_MSG(rc == 0, "%s: %s", de->d_name, e.msg);
        if (!g) continue;
        n_files++;
        gguf_str s;
        gguf_vtype et;
        uint64_t n = 0;
        CHECK_MSG(gguf_get_str(g, "tokenizer.ggml.model", &s) && s.len > 0, "%s", de->d_name);
        CHECK_MSG(gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n) && et == GGUF_STRING && n > 1000, "%s",
                  de->d_name);
        CHECK_EQ_INT(gguf_n_tensors(g), 0);
        /* the string index is consistent: strings are packed back to back
         * (each is preceded by its 8-byte length) */
        int64_t k = gguf_find_key(g, "tokenizer.ggml.tokens");
        int n_gap = 0;
        for (uint64_t i = 0; i + 1 < n; i++) {
            gguf_str a = gguf_kv_arr_str(g, k, i), b = gguf_kv_arr_str(g, k, i + 1);
            if (b.ptr != a.ptr + a.len + 8) n_gap++;
        }
        CHECK_EQ_INT(n_gap, 0);
        CHECK(gguf_kv_arr_str(g, k, n).ptr == NULL);
        /* the unpadded vocab files end before the aligned data offset */
        CHECK(gguf_data_offset(g) % 32 == 0 && gguf_data_offset(g) >= gguf_file_size(g));
        gguf_free(g);
    }
    closedir(d);
    CHECK_MSG(n_files >= 10, "only %d vocab files", n_files);
    /* one of them through gguf_from_buffer */
    char path[1024];
    snprintf(path, sizeof path, "%s/ggml-vocab-llama-spm.gguf", dir);
    char *buf = NULL;
    size_t n = 0;
    err_t e = {0};
    CHECK(file_read_all(path, &buf, &n, &e) == 0);
    gguf_ctx *g = NULL;
    CHECK(buf && gguf_from_buffer(buf, n, &g, &e) == 0);
    uint64_t nt = 0;
    CHECK(g && gguf_get_arr(g, "tokenizer.ggml.tokens", NULL, &nt) && nt == 32000);
    CHECK(g && gstr_is(gguf_arr_str(g, "tokenizer.ggml.tokens", 31999), "\xe7\xbb\x99"));
    gguf_free(g);
    free(buf);
}

/* ---- 3. malformed files ----------------------------------------------------- */

/* One description of a small file; the builder writes it faithfully, so a
 * row changes one field and everything else stays valid. */
typedef struct spec {
    char magic[5];
    uint32_t version;
    int64_t n_tensors_claim; /* -1: the real count; else written as is */
    uint64_t n_kv_claim;     /* 0: the real count                       */
    bool n_tensors_huge, n_kv_huge;
    uint64_t key0_len;       /* 0: real length                          */
    uint32_t kv1_type;       /* type of the bool kv (7)                 */
    uint8_t kv1_bool;
    uint64_t str_len;        /* 0: real length of kv0's value           */
    uint32_t arr_elem_type;  /* 4 (u32)                                 */
    uint64_t arr_count;      /* 0: real count 3                         */
    bool dup_key;            /* kv2 gets kv0's key                      */
    bool nested_arr;         /* kv2 becomes an array of arrays          */
    bool bool_arr_bad;       /* add a bool array with a 2               */
    int align_kind;          /* 0 none, 1 u32, 2 i32                    */
    uint32_t align_val;
    const char *empty_key;   /* non-NULL: kv0's key replaced            */
    uint32_t t0_n_dims;      /* 2                                       */
    uint64_t t0_dims[5];     /* {8, 4}                                  */
    uint32_t t0_type;        /* F32                                     */
    uint64_t t1_offset;      /* 128 (t0 is 8*4*4 = 128 bytes)           */
    uint32_t t1_type;        /* Q8_0                                    */
    uint64_t t1_dim0;        /* 64                                      */
    bool t1_dup_name;
    size_t data_bytes;       /* 0: exactly to the end of t1             */
} spec;

static spec spec_default(void) {
    spec s = {.magic = "GGUF", .version = 3, .n_tensors_claim = -1, .kv1_type = GGUF_BOOL, .kv1_bool = 1,
              .arr_elem_type = GGUF_UINT32, .t0_n_dims = 2, .t0_dims = {8, 4, 1, 1, 1}, .t0_type = DT_F32,
              .t1_offset = 128, .t1_type = DT_Q8_0, .t1_dim0 = 64};
    return s;
}

static void build(const spec *s, bb *b) {
    b->n = 0;
    int n_kv = 3 + (s->bool_arr_bad ? 1 : 0) + (s->align_kind ? 1 : 0);
    bb_put(b, s->magic, 4);
    bb_u32(b, s->version);
    bb_u64(b, s->n_tensors_huge ? (1ull << 60) : s->n_tensors_claim >= 0 ? (uint64_t)s->n_tensors_claim : 2);
    bb_u64(b, s->n_kv_huge ? (1ull << 60) : s->n_kv_claim ? s->n_kv_claim : (uint64_t)n_kv);
    /* kv0 at offset 24: general.architecture = "llama" */
    const char *k0 = s->empty_key ? s->empty_key : "general.architecture";
    bb_u64(b, s->key0_len ? s->key0_len : strlen(k0));
    bb_put(b, k0, strlen(k0));
    bb_u32(b, GGUF_STRING);
    bb_u64(b, s->str_len ? s->str_len : 5);
    bb_put(b, "llama", 5);
    /* kv1: a bool */
    bb_str(b, "tokenizer.ggml.add_bos_token");
    bb_u32(b, s->kv1_type);
    bb_u8(b, s->kv1_bool);
    /* kv2: an array of u32 */
    bb_str(b, s->dup_key ? "general.architecture" : "llama.arr");
    bb_u32(b, GGUF_ARRAY);
    if (s->nested_arr) {
        bb_u32(b, GGUF_ARRAY);
        bb_u64(b, 1);
        bb_u32(b, GGUF_UINT32);
        bb_u64(b, 1);
        bb_u32(b, 7);
    } else {
        bb_u32(b, s->arr_elem_type);
        bb_u64(b, s->arr_count ? s->arr_count : 3);
        bb_u32(b, 10);
        bb_u32(b, 20);
        bb_u32(b, 30);
    }
    if (s->bool_arr_bad) {
        bb_str(b, "x.bools");
        bb_u32(b, GGUF_ARRAY);
        bb_u32(b, GGUF_BOOL);
        bb_u64(b, 3);
        bb_u8(b, 0);
        bb_u8(b, 1);
        bb_u8(b, 2);
    }
    if (s->align_kind) {
        bb_str(b, "general.alignment");
        bb_u32(b, s->align_kind == 1 ? GGUF_UINT32 : GGUF_INT32);
        bb_u32(b, s->align_val);
    }
    /* tensor 0 */
    bb_str(b, "blk.0.attn_q.weight");
    bb_u32(b, s->t0_n_dims);
    for (uint32_t d = 0; d < s->t0_n_dims && d < 5; d++) bb_u64(b, s->t0_dims[d]);
    bb_u32(b, s->t0_type);
    bb_u64(b, 0);
    /* tensor 1 */
    bb_str(b, s->t1_dup_name ? "blk.0.attn_q.weight" : "output_norm.weight");
    bb_u32(b, 1);
    bb_u64(b, s->t1_dim0);
    bb_u32(b, s->t1_type);
    bb_u64(b, s->t1_offset);
    size_t align = s->align_kind == 1 && s->align_val && !(s->align_val & (s->align_val - 1)) ? s->align_val : 32;
    bb_pad(b, align);
    size_t data = s->data_bytes ? s->data_bytes : 128 + 34 * 2;
    for (size_t i = 0; i < data; i++) bb_u8(b, (uint8_t)(i * 7));
}

typedef struct bad_row {
    const char *name;
    void (*edit)(spec *);
    int code;
    const char *msg; /* expected substring */
} bad_row;

static void e_none(spec *s) { (void)s; }
static void e_magic(spec *s) { memcpy(s->magic, "GGUG", 4); }
static void e_magic_lower(spec *s) { memcpy(s->magic, "gguf", 4); }
static void e_v0(spec *s) { s->version = 0; }
static void e_v1(spec *s) { s->version = 1; }
static void e_v2(spec *s) { s->version = 2; }
static void e_v4(spec *s) { s->version = 4; }
static void e_nt_huge(spec *s) { s->n_tensors_huge = true; }
static void e_nkv_huge(spec *s) { s->n_kv_huge = true; }
static void e_nt_more(spec *s) { s->n_tensors_claim = 3; }
static void e_nkv_more(spec *s) { s->n_kv_claim = 6; }
static void e_key_len_huge(spec *s) { s->key0_len = UINT64_MAX; }
static void e_key_len_over(spec *s) { s->key0_len = 1000; }
static void e_str_len_huge(spec *s) { s->str_len = 1ull << 62; }
static void e_arr_count_huge(spec *s) { s->arr_count = 1ull << 61; }
static void e_arr_count_over(spec *s) { s->arr_count = 1000; }
static void e_dup_key(spec *s) { s->dup_key = true; }
static void e_dup_tensor(spec *s) { s->t1_dup_name = true; }
static void e_vtype_bad(spec *s) { s->kv1_type = 13; }
static void e_vtype_huge(spec *s) { s->kv1_type = 0xFFFFFFFFu; }
static void e_elem_bad(spec *s) { s->arr_elem_type = 77; }
static void e_nested(spec *s) { s->nested_arr = true; }
static void e_bool_bad(spec *s) { s->kv1_bool = 2; }
static void e_bool_arr_bad(spec *s) { s->bool_arr_bad = true; }
static void e_empty_key(spec *s) { s->empty_key = ""; }
static void e_align0(spec *s) { s->align_kind = 1; s->align_val = 0; }
static void e_align3(spec *s) { s->align_kind = 1; s->align_val = 3; }
static void e_align_i32(spec *s) { s->align_kind = 2; s->align_val = 32; }
static void e_align64(spec *s) { s->align_kind = 1; s->align_val = 64; }
static void e_align64_unaligned(spec *s) { s->align_kind = 1; s->align_val = 64; s->t1_offset = 160; }
static void e_ndims0(spec *s) { s->t0_n_dims = 0; }
static void e_ndims5(spec *s) { s->t0_n_dims = 5; }
static void e_dim0(spec *s) { s->t0_dims[1] = 0; }
static void e_dims_overflow(spec *s) { s->t0_n_dims = 4; s->t0_dims[1] = 1ull << 31; s->t0_dims[2] = 1ull << 31; s->t0_dims[3] = 1ull << 31; }
static void e_dim_huge(spec *s) { s->t0_dims[0] = UINT64_MAX; }
static void e_bytes_overflow(spec *s) { s->t0_n_dims = 2; s->t0_dims[0] = 1ull << 40; s->t0_dims[1] = 1ull << 22; }
static void e_type_unknown(spec *s) { s->t0_type = 99; }
static void e_type_gap(spec *s) { s->t0_type = 4; /* removed Q4_2 */ }
static void e_block(spec *s) { s->t1_dim0 = 48; }
static void e_unaligned(spec *s) { s->t1_offset = 130; }
static void e_past_end(spec *s) { s->t1_offset = 4096; }
static void e_sum_overflow(spec *s) { s->t1_offset = UINT64_MAX - 31; }
static void e_overlap(spec *s) { s->t1_offset = 96; }
static void e_short_data(spec *s) { s->data_bytes = 128 + 33; }
static void e_no_data(spec *s) { s->data_bytes = 1; }

static const bad_row bad_rows[] = {
    /* valid variants first: the builder itself must produce good files */
    {"valid", e_none, 0, ""},
    {"valid v2", e_v2, 0, ""},
    {"valid alignment 64", e_align64, 0, ""},
    {"bad magic", e_magic, ERR_FORMAT, "bad magic 'GGUG' at offset 0"},
    {"lowercase magic", e_magic_lower, ERR_FORMAT, "bad magic"},
    {"version 0", e_v0, ERR_UNSUPPORTED, "GGUF version 0 at offset 4 is not supported"},
    {"version 1", e_v1, ERR_UNSUPPORTED, "GGUF version 1 is not supported"},
    {"version 4", e_v4, ERR_UNSUPPORTED, "GGUF version 4"},
    {"huge n_tensors", e_nt_huge, ERR_FORMAT, "n_tensors 1152921504606846976 at offset 8 cannot fit"},
    {"huge n_kv", e_nkv_huge, ERR_FORMAT, "n_kv 1152921504606846976 at offset 16 cannot fit"},
    {"n_tensors one too many", e_nt_more, ERR_FORMAT, "tensor 2"},
    {"n_kv too many", e_nkv_more, ERR_FORMAT, "kv "},
    {"huge key length", e_key_len_huge, ERR_FORMAT,
     "kv 0: key length 18446744073709551615 at offset 24 exceeds remaining"},
    {"key length past end", e_key_len_over, ERR_FORMAT, "kv 0: key length 1000 at offset 24 exceeds remaining"},
    {"empty key", e_empty_key, ERR_FORMAT, "kv 0: empty key at offset 24"},
    {"huge string length", e_str_len_huge, ERR_FORMAT,
     "kv 0 ('general.architecture'): string value length 4611686018427387904 at offset 56 exceeds remaining"},
    {"huge array count", e_arr_count_huge, ERR_FORMAT, "('llama.arr'): array count 2305843009213693952"},
    {"array count past end", e_arr_count_over, ERR_FORMAT, "array count 1000"},
    {"duplicate keys", e_dup_key, ERR_FORMAT, "kv 2: duplicate key 'general.architecture'"},
    {"duplicate tensor names", e_dup_tensor, ERR_FORMAT, "tensor 1: duplicate tensor name 'blk.0.attn_q.weight'"},
    {"invalid value type", e_vtype_bad, ERR_FORMAT, "kv 1 ('tokenizer.ggml.add_bos_token'): invalid value type 13"},
    {"invalid value type 2^32-1", e_vtype_huge, ERR_FORMAT, "invalid value type 4294967295"},
    {"invalid array elem type", e_elem_bad, ERR_FORMAT, "invalid array element type 77"},
    {"nested array", e_nested, ERR_UNSUPPORTED, "nested array"},
    {"bool 2", e_bool_bad, ERR_FORMAT, "bool value at offset 109 is 2, not 0 or 1"},
    {"bool array element 2", e_bool_arr_bad, ERR_FORMAT, "bool array element 2"},
    {"alignment 0", e_align0, ERR_FORMAT, "general.alignment 0"},
    {"alignment 3", e_align3, ERR_FORMAT, "general.alignment 3 at offset"},
    {"alignment not u32", e_align_i32, ERR_FORMAT, "general.alignment at offset"},
    {"offset not a multiple of alignment 64", e_align64_unaligned, ERR_FORMAT,
     "tensor 1 ('output_norm.weight'): data offset 160"},
    {"n_dims 0", e_ndims0, ERR_FORMAT, "tensor 0 ('blk.0.attn_q.weight'): n_dims 0 at offset"},
    {"n_dims 5", e_ndims5, ERR_FORMAT, "n_dims 5 at offset"},
    {"dim 0", e_dim0, ERR_FORMAT, "dims[1] at offset"},
    {"dims product overflow", e_dims_overflow, ERR_FORMAT, "element count overflows at dims[2]"},
    {"dim > INT64_MAX", e_dim_huge, ERR_FORMAT, "dims[0] = 18446744073709551615"},
    {"byte size overflow", e_bytes_overflow, ERR_FORMAT, "byte size of"},
    {"unknown tensor type", e_type_unknown, ERR_UNSUPPORTED,
     "tensor 0 ('blk.0.attn_q.weight'): unknown tensor type 99"},
    {"removed tensor type 4", e_type_gap, ERR_UNSUPPORTED, "unknown tensor type 4"},
    {"dims[0] not multiple of block", e_block, ERR_FORMAT, "dims[0] = 48 is not a multiple of the Q8_0 block size 32"},
    {"offset not aligned", e_unaligned, ERR_FORMAT, "data offset 130"},
    {"offset past end", e_past_end, ERR_FORMAT,
     "tensor 1 ('output_norm.weight'): data [4096, 4164) extends past end of file (196 data bytes from offset 288)"},
    {"offset + size overflow", e_sum_overflow, ERR_FORMAT, "overflows"},
    {"overlapping tensors", e_overlap, ERR_FORMAT, "overlap"},
    {"data one byte short", e_short_data, ERR_FORMAT, "data [128, 196) extends past end of file (161 data bytes from offset 288)"},
    {"no data", e_no_data, ERR_FORMAT, "extends past end of file"},
};

static void test_malformed(void) {
    bb b = {0};
    const char *path = tmp_path("bad.gguf");
    for (size_t r = 0; r < ARRAY_LEN(bad_rows); r++) {
        const bad_row *row = &bad_rows[r];
        spec s = spec_default();
        row->edit(&s);
        build(&s, &b);
        err_t e = {0};
        double t0 = clock_ms();
        int rc = parse_exact(b.p, b.n, &e);
        double dt = clock_ms() - t0;
        if (getenv("GGUF_TEST_VERBOSE")) printf("%-40s rc %d  %s\n", row->name, rc, rc ? e.msg : "");
        CHECK_MSG(rc == row->code, "row '%s': rc %d (%s), want %d", row->name, rc, e.msg, row->code);
        if (row->code) {
            CHECK_MSG(strstr(e.msg, row->msg) != NULL, "row '%s': message \"%s\" lacks \"%s\"", row->name, e.msg,
                      row->msg);
            CHECK_MSG(strncmp(e.msg, "gguf: ", 6) == 0, "row '%s': %s", row->name, e.msg);
        }
        CHECK_MSG(dt < 100, "row '%s' took %.1f ms", row->name, dt);
        /* the same bytes through gguf_open */
        CHECK(write_file(path, b.p, b.n) == 0);
        gguf_ctx *g = (gguf_ctx *)0x1;
        err_t e2 = {0};
        rc = gguf_open(path, &g, &e2);
        CHECK_MSG(rc == row->code, "row '%s' (open): rc %d (%s)", row->name, rc, e2.msg);
        if (row->code) {
            CHECK_MSG(g == NULL && strstr(e2.msg, row->msg) && strstr(e2.msg, path), "row '%s' (open): %s",
                      row->name, e2.msg);
        } else {
            gguf_free(g);
        }
    }

    /* a valid row read back: the builder layout is what the reader sees */
    spec s = spec_default();
    build(&s, &b);
    gguf_ctx *g = NULL;
    err_t e = {0};
    CHECK(gguf_from_buffer(b.p, b.n, &g, &e) == 0);
    if (g) {
        const gguf_tensor *t1 = gguf_find_tensor(g, "output_norm.weight");
        CHECK(t1 && t1->type == DT_Q8_0 && t1->n_bytes == 68 && t1->offset == 128);
        CHECK_EQ_INT(gguf_data_offset(g) + 128 + 68, b.n);
        const uint32_t *arr = gguf_arr_data(g, "llama.arr");
        uint32_t a3[3];
        if (arr) memcpy(a3, arr, 12);
        CHECK(arr && a3[0] == 10 && a3[1] == 20 && a3[2] == 30);
        gguf_free(g);
    }

    /* truncation at every byte of the hand-built file: every prefix fails,
     * with ERR_FORMAT, never a crash (buffers are exact-size for ASan) */
    int n_bad = 0;
    for (size_t len = 0; len < b.n; len++) {
        int rc = parse_exact(b.p, len, &e);
        if (rc != ERR_FORMAT) {
            n_bad++;
            fprintf(stderr, "prefix %zu of %zu: rc %d\n", len, b.n, rc);
        }
    }
    CHECK_EQ_INT(n_bad, 0);
    /* every single-byte corruption of the file: never a crash, and a 0 result
     * only with a consistent context (checked by parse_exact's walk) */
    for (size_t i = 0; i < b.n; i++) {
        uint8_t save = b.p[i];
        b.p[i] ^= 0xFF;
        (void)parse_exact(b.p, b.n, &e);
        b.p[i] = save;
    }
    free(b.p);

    /* the file system cases */
    gguf_ctx *gx = (gguf_ctx *)0x1;
    int rc = gguf_open("/nonexistent/model.gguf", &gx, &e);
    CHECK_EQ_INT(rc, ERR_IO);
    CHECK(gx == NULL && strstr(e.msg, "/nonexistent/model.gguf") != NULL);
    rc = gguf_open("/tmp", &gx, &e);
    CHECK_EQ_INT(rc, ERR_IO);
    CHECK(strstr(e.msg, "directory") != NULL);
    CHECK(write_file(path, "", 0) == 0);
    rc = gguf_open(path, &gx, &e);
    CHECK(rc < 0 && strstr(e.msg, "empty") != NULL);
    CHECK(write_file(path, "GGU", 3) == 0);
    rc = gguf_open(path, &gx, &e);
    CHECK(rc == ERR_FORMAT && strstr(e.msg, "bad magic") != NULL);
    rc = gguf_from_buffer(NULL, 0, &gx, &e);
    CHECK(rc == ERR_FORMAT && gx == NULL);
    unlink(path);
}

/* gguf_kv_format truncation: long strings cut at ~60 bytes, never inside a
 * UTF-8 sequence; long arrays summarised; control bytes escaped. */
static void test_format(void) {
    bb b = {0};
    char longs[1 + 80 + 1];
    longs[0] = 'a';
    for (int i = 0; i < 40; i++) memcpy(longs + 1 + 2 * i, "\xc3\xa9", 2);
    longs[81] = 0;
    bb_put(&b, "GGUF", 4);
    bb_u32(&b, 3);
    bb_u64(&b, 0);
    bb_u64(&b, 5);
    bb_str(&b, "s.long");
    bb_u32(&b, GGUF_STRING);
    bb_str(&b, longs);
    bb_str(&b, "s.ctl");
    bb_u32(&b, GGUF_STRING);
    bb_str(&b, "a\tb\n\"q\"\\");
    bb_str(&b, "a.i8");
    bb_u32(&b, GGUF_ARRAY);
    bb_u32(&b, GGUF_INT8);
    bb_u64(&b, 12);
    for (int i = 0; i < 12; i++) bb_u8(&b, (uint8_t)(-i));
    bb_str(&b, "f.f64");
    bb_u32(&b, GGUF_FLOAT64);
    double d = -2.5e-7;
    bb_put(&b, &d, 8);
    bb_str(&b, "s.bad_utf8"); /* invalid UTF-8 is escaped, valid kept */
    bb_u32(&b, GGUF_STRING);
    bb_str(&b, "\xff\xc3x\xed\xa0\x80\xe2\x82\xac");
    gguf_ctx *g = NULL;
    err_t e = {0};
    CHECK(gguf_from_buffer(b.p, b.n, &g, &e) == 0);
    if (g) {
        char buf[256], want[128];
        gguf_kv_format(g, 4, buf, sizeof buf);
        CHECK_STR(buf, "\"\\xff\\xc3x\\xed\\xa0\\x80\xe2\x82\xac\"");
        gguf_kv_format(g, 0, buf, sizeof buf);
        size_t o = 0;
        want[o++] = '"';
        want[o++] = 'a';
        for (int i = 0; i < 30; i++) { memcpy(want + o, "\xc3\xa9", 2); o += 2; }
        memcpy(want + o, "...\"", 5);
        CHECK_STR(buf, want);
        gguf_kv_format(g, 1, buf, sizeof buf);
        CHECK_STR(buf, "\"a\\x09b\\n\\\"q\\\"\\\\\"");
        gguf_kv_format(g, 2, buf, sizeof buf);
        CHECK_STR(buf, "[i8 x 12] 0, -1, -2, -3, -4, -5, -6, -7, ...");
        gguf_kv_format(g, 3, buf, sizeof buf);
        CHECK_STR(buf, "-2.5e-07");
        gguf_kv_format(g, 5, buf, sizeof buf);
        CHECK_STR(buf, "");
        gguf_free(g);
    }
    free(b.p);
}

int main(void) {
    test_format();
    test_round_trip();
    test_writer_alignment_and_misuse();
    test_stories();
    test_vocab_files();
    test_malformed();
    return test_summary("test_gguf");
}
