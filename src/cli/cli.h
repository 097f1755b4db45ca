/*
 * cli.h — subcommands of the kvloom program other than main's dispatch:
 * the random-weight model generator and the quantizer (gen.c).
 * Each returns a process exit status and prints its own errors.
 *
 * Not a public header: it joins main.c to the subcommand files of src/cli/,
 * so its names carry the cli__ prefix (cross-file private, as tok__ and
 * jinja__); tests may call them as they call other modules' internals.
 */
#ifndef KVLOOM_CLI_H
#define KVLOOM_CLI_H

#include <stddef.h>

int cli__gen(int argc, char **argv);      /* kvloom gen ...      */
int cli__quantize(int argc, char **argv); /* kvloom quantize ... */
int cli__bench(int argc, char **argv);    /* kvloom bench ... (bench.c) */
/* kvloom bench -m MODEL --grammar (bench_grammar.c) */
/* bench_spec.c: speculative decoding's verify cost and drafter acceptance */
int cli__bench_verify(const char *path, long depth, long kmax, long reps, long threads);
int cli__bench_spec_replay(const char *path, const char **files, int n_files, long kmax);
int cli__bench_spec_e2e(const char *path, const char *file, const char *drafter, long kmax, long N, long depth,
                        long B, long rounds, long threads);
int cli__bench_grammar(const char *path, const char *tools_path, long n_objects, long threads);
/* The schema corpus mode: bench_grammar.c. */
int cli__bench_grammar_schemas(const char *path, const char *schemas_path, long walks);

/* Data files found from any working directory. The binary's own folder
 * (from /proc/self/exe) anchors the search, in this order:
 *   build tree    <exe dir>/../REL            (build/kvloom -> repo root)
 *   install       <exe dir>/../share/kvloom/REL  (PREFIX/bin/kvloom)
 *   working dir   REL
 * cli__data_path returns the first readable candidate in buf, or REL itself
 * when none is (the caller's open then names it). */
const char *cli__data_path(const char *rel, char *buf, size_t cap);
/* The shared test data folder (../shared: vocab/, tokenizers/): $KVLOOM_SHARED
 * when set, else <exe dir>/../../shared (beside the repository),
 * <exe dir>/../share/kvloom/shared (make install), then ../shared. */
const char *cli__shared_dir(char *buf, size_t cap);

#endif
