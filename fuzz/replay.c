/*
 * replay.c — runs a fuzz target's LLVMFuzzerTestOneInput over every file of a
 * corpus directory (or the files given), without libFuzzer. `make test`
 * replays the committed corpora this way under ASan+UBSan.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* optional, as in libFuzzer: a target's one-time setup */
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    size_t cap = 4096, n = 0;
    uint8_t *buf = malloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) buf = realloc(buf, cap *= 2);
    }
    fclose(f);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    int n_ok = 0, n_bad = 0;
    if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: cannot stat %s\n", argv[i]);
            n_bad++;
            continue;
        }
        if (S_ISDIR(st.st_mode)) {
            DIR *d = opendir(argv[i]);
            struct dirent *de;
            while (d && (de = readdir(d))) {
                if (de->d_name[0] == '.') continue;
                char path[4096];
                snprintf(path, sizeof path, "%s/%s", argv[i], de->d_name);
                if (run_file(path) == 0) n_ok++; else n_bad++;
            }
            if (d) closedir(d);
        } else if (run_file(argv[i]) == 0) {
            n_ok++;
        } else {
            n_bad++;
        }
    }
    /* reaching here means no input crashed the target */
    printf("replay: %d passed, %d failed\n", n_ok, n_bad + (n_ok + n_bad == 0));
    return n_bad || n_ok == 0;
}
