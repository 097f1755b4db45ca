/*
 * flags.h — a command's flags as one table: each row names a flag (its
 * spellings), its value, its help text and how it sets the command's
 * options; one parser reads argv by the table and one writer prints the
 * usage text from it, so the --help a command prints is the flags it
 * takes (kvloom serve, run, bench, gen).
 *
 * Place in the flow: base/, used by src/cli and server.c's
 * server_parse_args before anything starts. Errors name the flag as typed:
 * "--port: expected an integer in [0, 65535], got 'x'".
 */
#ifndef KVLOOM_FLAGS_H
#define KVLOOM_FLAGS_H

#include <stddef.h>
#include <stdio.h>

#include "base.h"

typedef enum flag_kind {
    FLAG_ON,    /* no value: sets a bool to true                             */
    FLAG_INT,   /* an int in [lo, hi]                                        */
    FLAG_LONG,  /* a long in [lo, hi]                                        */
    FLAG_REAL,  /* a double in [lo, hi], of `what` ("seconds")               */
    FLAG_FLOAT, /* a float, any number                                       */
    FLAG_SIZE,  /* a size_t, K/M/G suffixes allowed (parse_size)             */
    FLAG_STR,   /* the value itself (a const char *)                         */
    FLAG_FN,    /* set() does it                                             */
} flag_kind;

typedef struct flag_row flag_row;
/* A FLAG_FN row's setter: name the flag as typed, v its value (NULL when
 * the row takes none, or an optional one is missing), opts the command's.
 * Returns 0, 1 when the row's optional value was not taken (v stays an
 * argument of its own), or < 0 with e set. */
typedef int flag_fn(const flag_row *f, const char *name, const char *v, void *opts, err_t *e);

struct flag_row {
    const char *names; /* the spellings the usage shows, ", " between     */
    const char *also;  /* more spellings, space-separated, not shown; NULL  */
    const char *arg;   /* the value's name ("N"); NULL: none; "[...]":
                          optional (FLAG_FN only)                        */
    const char *help;  /* the usage text ('\n' starts a continuation line);
                          NULL: a row the usage does not show            */
    flag_kind kind;
    size_t off;        /* the field in opts (offsetof)                    */
    double lo, hi;     /* FLAG_INT, FLAG_LONG, FLAG_REAL bounds           */
    const char *what;  /* what a bad value should have been: "a count"
                          (default "an integer in [lo, hi]"); REAL: its
                          unit, "seconds"                                 */
    flag_fn *set;      /* FLAG_FN                                         */
};

/* A row: names, also, arg, help, then kind and what follows it (.off, .lo,
 * .hi, .what in order, or designated: .set = fn); the rest zero. */
#define FLAG_ROW(names_, also_, arg_, help_, ...) \
    { .names = (names_), .also = (also_), .arg = (arg_), .help = (help_), __VA_ARGS__ }

typedef struct flag_cmd {
    const char *name;  /* "serve": "serve: unknown option ..."             */
    const char *head;  /* the usage before the rows ("usage: kvloom ...\n") */
    const char *tail;  /* the usage after them, or NULL                    */
    const flag_row *rows;
    size_t n_rows;
} flag_cmd;

/* Sets opts from argv[0 .. argc-1] (every argument a flag of c, or the
 * value of the flag before it). -h and --help print the usage on stdout
 * and return 1. Returns 0, or < 0 with e set: an unknown flag, a missing
 * or bad value, naming the flag. */
int flags_parse(const flag_cmd *c, int argc, char **argv, void *opts, err_t *e);

/* The usage text: head, a line per row ("  -m, --model PATH" and the help
 * from column 27, continuation lines aligned under it), tail. */
void flags_usage(const flag_cmd *c, FILE *out);

/* The row of a spelling (shown or not), or NULL. */
const flag_row *flags_find(const flag_cmd *c, const char *name);

#endif
