/*
 * paths.c — where the command line finds its data files: the shipped model
 * and ../shared (cli.h: cli__data_path, cli__shared_dir). In the library,
 * not in main.c, because gen.c (also in libkvloom.a, called by the tests)
 * uses them.
 */
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"

/* The folder of the running binary, or false. */
static bool exe_dir(char *out, size_t cap) {
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) return false;
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (!slash) return false;
    *slash = 0;
    return true;
}

const char *cli__data_path(const char *rel, char *buf, size_t cap) {
    char exe[PATH_MAX];
    if (exe_dir(exe, sizeof exe)) {
        snprintf(buf, cap, "%s/../%s", exe, rel);
        if (access(buf, R_OK) == 0) return buf;
        snprintf(buf, cap, "%s/../share/kvloom/%s", exe, rel);
        if (access(buf, R_OK) == 0) return buf;
    }
    return rel;
}

const char *cli__shared_dir(char *buf, size_t cap) {
    const char *env = getenv("KVLOOM_SHARED");
    if (env && *env) return env;
    char exe[PATH_MAX];
    if (exe_dir(exe, sizeof exe)) {
        snprintf(buf, cap, "%s/../../shared", exe);
        if (access(buf, R_OK | X_OK) == 0) return buf;
        snprintf(buf, cap, "%s/../share/kvloom/shared", exe);
        if (access(buf, R_OK | X_OK) == 0) return buf;
    }
    return "../shared";
}

