/*
 * cli.h — subcommands of the kvloom program other than main's dispatch:
 * the random-weight model generator and the quantizer (gen.c).
 * Each returns a process exit status and prints its own errors.
 */
#ifndef KVLOOM_CLI_H
#define KVLOOM_CLI_H

int cli_gen(int argc, char **argv);      /* kvloom gen ...      */
int cli_quantize(int argc, char **argv); /* kvloom quantize ... */
int cli_bench(int argc, char **argv);    /* kvloom bench ... (bench.c) */
/* kvloom bench -m MODEL --grammar (bench_grammar.c) */
int bench_grammar(const char *path, const char *tools_path, long n_objects, long threads);

#endif
