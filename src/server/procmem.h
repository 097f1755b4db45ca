/*
 * procmem.h — the server process's own memory, outside what the engines
 * and the HTTP side count (kvloom_memory_bytes): the program's code and
 * libraries, the threads' stacks and thread-local blocks, the allocator's
 * free bytes held; and the resident set itself (VmRSS, VmHWM). Read from
 * /proc/self (Linux) and the allocator (glibc's mallinfo2; 0 elsewhere).
 *
 * docs/server.md, "Memory budget", says how these enter
 * kvloom_memory_accounted_bytes and kvloom_memory_budget_bytes.
 */
#ifndef KVLOOM_PROCMEM_H
#define KVLOOM_PROCMEM_H

#include <stddef.h>
#include <stdint.h>

typedef struct procmem {
    uint64_t rss, peak_rss; /* VmRSS, VmHWM                                     */
    uint64_t program;       /* resident pages of the files with code mapped (the
                               executable and its libraries; not the models)     */
    uint64_t stacks;        /* resident pages of the threads' stacks (each with
                               its thread-local block)                          */
    uint64_t heap_free;     /* free bytes the allocator holds in its arenas      */
    uint64_t heap_used;     /* bytes the allocator has handed out (arenas and
                               mmapped chunks)                                  */
    int threads;
} procmem;

/* The memory budget's allowances (kvloom_memory_budget_bytes): per thread,
 * stack pages beyond its thread-local block (measured: 20-60 KiB in the
 * server's threads, 132 KiB in the main thread; JSON, templates and
 * grammars recurse to bounded depths); for the allocator, its bytes in use
 * that no part names and its free bytes' growth between two trims
 * (measured: heap_other 0.6 MiB on stories260K, at most 2.3 MiB on
 * SmolLM2 after tenant_bench's attacks). */
#define MEM_STACK_ALLOWANCE ((uint64_t)128 << 10)
#define MEM_HEAP_SLACK ((uint64_t)4 << 20)

/* Fills *pm (fields it cannot read stay 0); returns 0, or -1 when /proc/self
 * cannot be read. Any thread; reads /proc/self/smaps (~1 ms). */
int procmem_read(procmem *pm);

/* The size of one thread's thread-local block (the PT_TLS segments of the
 * program and its libraries): every thread's stack holds one, zeroed. */
size_t procmem_tls_bytes(void);

/* Keeps the allocator (glibc) from holding freed memory: a fixed mmap
 * threshold (glibc raises it, by default, to the largest block freed, up
 * to 32 MiB: blocks of requests, masks and answers then live in the
 * arenas and stay there after they are freed). Called once at start. */
void procmem_limit_allocator(void);
/* Gives the arenas' free pages back to the system (malloc_trim); the
 * server calls it once a second. */
void procmem_trim(void);

#endif
