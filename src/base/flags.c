/*
 * flags.c — the flag tables' parser and usage writer (flags.h).
 */
#include "flags.h"

#include <stdbool.h>
#include <string.h>

/* Whether `name` is one of the spellings in list (separated by sep). */
static bool listed(const char *list, const char *sep, const char *name) {
    size_t n = strlen(name), k = strlen(sep);
    for (const char *p = list; p && *p;) {
        const char *end = strstr(p, sep);
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len == n && !strncmp(p, name, n)) return true;
        p = end ? end + k : NULL;
    }
    return false;
}

const flag_row *flags_find(const flag_cmd *c, const char *name) {
    for (size_t i = 0; i < c->n_rows; i++)
        if (listed(c->rows[i].names, ", ", name) || listed(c->rows[i].also, " ", name)) return &c->rows[i];
    return NULL;
}

/* Sets one row's field from v (present unless the row takes no value). */
static int set(const flag_row *f, const char *a, const char *v, void *opts, err_t *e) {
    char *field = (char *)opts + f->off;
    long l;
    float x;
    switch (f->kind) {
    case FLAG_ON: *(bool *)field = true; return 0;
    case FLAG_STR: *(const char **)field = v; return 0;
    case FLAG_SIZE: return parse_size(a, v, (size_t *)field, e);
    case FLAG_FN: return f->set(f, a, v, opts, e);
    case FLAG_FLOAT:
        if (!parse_float(v, &x)) return err_set(e, ERR_INVALID, "%s: expected %s, got '%s'", a, f->what ? f->what : "a number", v);
        *(float *)field = x;
        return 0;
    case FLAG_REAL:
        if (!parse_float(v, &x) || !(x >= f->lo) || x > f->hi)
            return err_set(e, ERR_INVALID, "%s: expected %s in [%.10g, %.10g], got '%s'", a, f->what, f->lo, f->hi, v);
        *(double *)field = x;
        return 0;
    case FLAG_INT:
    case FLAG_LONG:
        if (!parse_long(v, (long)f->lo, (long)f->hi, &l)) {
            if (f->what) return err_set(e, ERR_INVALID, "%s: expected %s, got '%s'", a, f->what, v);
            return err_set(e, ERR_INVALID, "%s: expected an integer in [%ld, %ld], got '%s'", a, (long)f->lo, (long)f->hi, v);
        }
        if (f->kind == FLAG_INT) *(int *)field = (int)l;
        else *(long *)field = l;
        return 0;
    }
    return 0;
}

int flags_parse(const flag_cmd *c, int argc, char **argv, void *opts, err_t *e) {
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            flags_usage(c, stdout);
            return 1;
        }
        const flag_row *f = flags_find(c, a);
        if (!f) return err_set(e, ERR_INVALID, "%s: unknown option '%s' (see kvloom %s --help)", c->name, a, c->name);
        bool optional = f->arg && f->arg[0] == '[';
        if (f->arg && !optional && !v) return err_set(e, ERR_INVALID, "%s needs a value", a);
        int rc = set(f, a, f->arg ? v : NULL, opts, e);
        if (rc < 0) return rc;
        if (f->arg && rc == 0) i++; /* the value was taken */
    }
    return 0;
}

void flags_usage(const flag_cmd *c, FILE *out) {
    fputs(c->head, out);
    for (size_t i = 0; i < c->n_rows; i++) {
        const flag_row *f = &c->rows[i];
        if (!f->help) continue;
        int n = fprintf(out, "  %s%s%s", f->names, f->arg ? " " : "", f->arg ? f->arg : "");
        for (const char *h = f->help; h;) { /* the help from column 27 (a long flag: two spaces after it) */
            const char *nl = strchr(h, '\n');
            fprintf(out, "%*s%.*s\n", n < 27 ? 27 - n : 2, "", (int)(nl ? nl - h : (long)strlen(h)), h);
            h = nl ? nl + 1 : NULL;
            n = 0;
        }
    }
    if (c->tail) fputs(c->tail, out);
}
