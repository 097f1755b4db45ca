/*
 * procmem.c — the process's own memory (procmem.h).
 *
 * /proc/self/smaps has one block per mapping: a header line
 * "START-END PERMS OFFSET DEV INODE [PATH]" then "Key: N kB" lines, of which
 * Rss is the one used here. Classified:
 *  - program: every mapping of a file that has an executable mapping (the
 *    kvloom binary, libc, libmicrohttpd ...); a model file is mapped
 *    read-only, never executable, so it is not here (it is the weights part);
 *  - stacks: "[stack]", and each anonymous rw-p mapping that starts where a
 *    small ---p mapping (a guard page: glibc puts one below every thread
 *    stack) ends. The allocator's arena heaps also have ---p neighbours, but
 *    above them (the reserve they grow into), and larger than a guard.
 */
#include "procmem.h"

#include <link.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "../base/base.h"

typedef struct mapping {
    uint64_t start, end, rss;
    char perms[5];
    int path; /* offset into the path pool, -1: anonymous */
} mapping;

#define GUARD_MAX (64u << 10) /* a thread stack's guard: one page, or a few */
/* glibc's own starting values, kept fixed (setting them stops the raise) */
#define PROCMEM_MMAP_THRESHOLD (128 * 1024)
#define PROCMEM_TRIM_THRESHOLD (128 * 1024)

static uint64_t status_kb(const char *text, const char *key) {
    const char *p = strstr(text, key);
    return p ? strtoull(p + strlen(key), NULL, 10) * 1024 : 0;
}

int procmem_read(procmem *pm) {
    memset(pm, 0, sizeof *pm);
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char st[4096];
    size_t n = fread(st, 1, sizeof st - 1, f);
    st[n] = 0;
    fclose(f);
    pm->rss = status_kb(st, "\nVmRSS:");
    pm->peak_rss = status_kb(st, "\nVmHWM:");
    const char *th = strstr(st, "\nThreads:");
    pm->threads = th ? atoi(th + 9) : 0;
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
    struct mallinfo2 mi = mallinfo2();
    pm->heap_free = mi.fordblks;
    pm->heap_used = mi.uordblks + mi.hblkhd;
#endif
    f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    mapping *v = NULL;
    int nv = 0, cap = 0;
    char *paths = NULL;
    size_t np = 0, cap_p = 0;
    char line[4352];
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b, kb;
        char perms[8];
        int off = 0;
        if (sscanf(line, "%llx-%llx %7s %*s %*s %*s %n", &a, &b, perms, &off) == 3 && off > 0) {
            if (nv == cap) v = xrealloc(v, (size_t)(cap = cap ? cap * 2 : 256) * sizeof *v);
            mapping *m = &v[nv++];
            *m = (mapping){.start = a, .end = b, .path = -1};
            memcpy(m->perms, perms, 4);
            m->perms[4] = 0;
            char *p = line + off;
            p[strcspn(p, "\n")] = 0;
            if (*p) {
                size_t len = strlen(p) + 1;
                if (np + len > cap_p) paths = xrealloc(paths, cap_p = (np + len) * 2);
                memcpy(paths + np, p, len);
                m->path = (int)np;
                np += len;
            }
        } else if (nv > 0 && sscanf(line, "Rss: %llu kB", &kb) == 1) {
            v[nv - 1].rss = kb * 1024;
        }
    }
    fclose(f);
    for (int i = 0; i < nv; i++) {
        const mapping *m = &v[i];
        const char *path = m->path >= 0 ? paths + m->path : NULL;
        if (path && path[0] == '/') {
            bool code = false; /* does this file have an executable mapping? */
            for (int j = 0; j < nv && !code; j++)
                code = v[j].perms[2] == 'x' && v[j].path >= 0 && strcmp(paths + v[j].path, path) == 0;
            if (code) pm->program += m->rss;
        } else if (path && strcmp(path, "[stack]") == 0) {
            pm->stacks += m->rss;
        } else if (!path && strcmp(m->perms, "rw-p") == 0 && i > 0 && v[i - 1].end == m->start &&
                   strcmp(v[i - 1].perms, "---p") == 0 && v[i - 1].path < 0 &&
                   v[i - 1].end - v[i - 1].start <= GUARD_MAX) {
            pm->stacks += m->rss;
        }
    }
    free(v);
    free(paths);
    return 0;
}

static int tls_cb(struct dl_phdr_info *info, size_t size, void *data) {
    (void)size;
    size_t *total = data;
    for (int i = 0; i < info->dlpi_phnum; i++)
        if (info->dlpi_phdr[i].p_type == PT_TLS) {
            size_t al = info->dlpi_phdr[i].p_align ? info->dlpi_phdr[i].p_align : 1;
            *total += (info->dlpi_phdr[i].p_memsz + al - 1) / al * al;
        }
    return 0;
}

size_t procmem_tls_bytes(void) {
    size_t total = 0;
    dl_iterate_phdr(tls_cb, &total);
    return total;
}

void procmem_limit_allocator(void) {
#if defined(__GLIBC__)
    mallopt(M_MMAP_THRESHOLD, PROCMEM_MMAP_THRESHOLD);
    mallopt(M_TRIM_THRESHOLD, PROCMEM_TRIM_THRESHOLD);
#endif
}

void procmem_trim(void) {
#if defined(__GLIBC__)
    malloc_trim(0);
#endif
}
