/*
 * fuzz_gguf.c — libFuzzer target for the GGUF reader (src/model/gguf.c).
 *
 * Parses the input with gguf_from_buffer and, when it is accepted, walks
 * everything a consumer could touch: every kv through the typed getters and
 * gguf_kv_format, every string of every string array, every tensor's data
 * (read one byte at each end, so ASan sees an out-of-bounds view), then
 * checks the invariants the reader promises. A broken promise aborts.
 * Replayed over fuzz/corpus/fuzz_gguf/ by `make test`.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/gguf.h"

static volatile uint8_t sink;

/* Plain UTF-8 check (RFC 3629), written apart from the reader's own. */
static bool is_utf8(const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned c = *p, len, cp;
        if (c < 0x80) { p++; continue; }
        if ((c & 0xE0) == 0xC0) { len = 2; cp = c & 0x1F; }
        else if ((c & 0xF0) == 0xE0) { len = 3; cp = c & 0x0F; }
        else if ((c & 0xF8) == 0xF0) { len = 4; cp = c & 0x07; }
        else return false;
        for (unsigned i = 1; i < len; i++) {
            if ((p[i] & 0xC0) != 0x80) return false;
            cp = cp << 6 | (p[i] & 0x3F);
        }
        if ((len == 2 && cp < 0x80) || (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000)) return false;
        if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        p += len;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_ctx *g = NULL;
    err_t e = {0};
    log_level = LOG_QUIET;
    if (gguf_from_buffer(data, size, &g, &e) != 0) {
        if (g != NULL || e.code >= 0 || strncmp(e.msg, "gguf: ", 6) != 0) abort();
        if (!is_utf8(e.msg) || strchr(e.msg, '\n')) abort(); /* one line, valid text */
        return 0;
    }
    char buf[512], key[256];
    for (int64_t i = 0; i < gguf_n_kv(g); i++) {
        gguf_str k = gguf_key(g, i);
        if (!k.ptr || k.len == 0) abort();
        gguf_kv_format(g, i, buf, sizeof buf);
        if (strlen(buf) >= sizeof buf || !is_utf8(buf)) abort();
        for (size_t small = 1; small < 12; small++) { /* tiny buffers: terminated, valid */
            memset(buf, 'Z', sizeof buf);
            gguf_kv_format(g, i, buf, small);
            if (strlen(buf) >= small || !is_utf8(buf)) abort();
        }
        if (k.len < sizeof key && !memchr(k.ptr, 0, k.len)) {
            memcpy(key, k.ptr, k.len);
            key[k.len] = 0;
            if (gguf_find_key(g, key) != i) abort(); /* keys are unique */
            uint32_t u32;
            int64_t i64;
            float f;
            bool b;
            gguf_str s;
            gguf_vtype et;
            uint64_t n;
            (void)gguf_get_u32(g, key, &u32);
            (void)gguf_get_i64(g, key, &i64);
            (void)gguf_get_f32(g, key, &f);
            (void)gguf_get_bool(g, key, &b);
            if (gguf_get_str(g, key, &s) && s.len) sink ^= (uint8_t)s.ptr[s.len - 1];
            if (gguf_get_arr(g, key, &et, &n)) {
                if (et == GGUF_STRING) {
                    for (uint64_t j = 0; j < n; j++) {
                        gguf_str a = gguf_arr_str(g, key, j);
                        if (!a.ptr) abort();
                        if (a.len) sink ^= (uint8_t)(a.ptr[0] ^ a.ptr[a.len - 1]);
                    }
                    if (gguf_arr_str(g, key, n).ptr) abort();
                } else {
                    const uint8_t *p = gguf_arr_data(g, key);
                    if (!p) abort();
                    if (n) sink ^= p[0];
                }
            }
        }
    }
    const uint8_t *end = data + size;
    for (int64_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor *t = gguf_tensor_at(g, i);
        if (!t || t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS || t->n_elems < 1 || t->n_bytes == 0) abort();
        if (!dtype_get(t->type) || t->offset % gguf_alignment(g)) abort();
        const uint8_t *p = t->data;
        if (p < data || p > end || t->n_bytes > (uint64_t)(end - p)) abort();
        sink ^= p[0] ^ p[t->n_bytes - 1];
        if (t->name.len < sizeof key) {
            memcpy(key, t->name.ptr, t->name.len);
            key[t->name.len] = 0;
            if (gguf_find_tensor(g, key) != t) abort();
        }
    }
    gguf_free(g);
    return 0;
}
