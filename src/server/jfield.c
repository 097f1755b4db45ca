/*
 * jfield.c — request field readers with refusals that name the field's path
 * (jfield.h).
 */
#include "jfield.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

jf jf_body(const jf_style *s, oai_error *err) {
    jf r;
    r.style = s;
    r.err = err;
    r.param = NULL;
    r.path[0] = 0;
    return r;
}

jf jf_key(const jf *r, const char *name) {
    jf k = *r;
    if (!r->path[0]) {
        if (r->style->params) k.param = name;
        snprintf(k.path, sizeof k.path, "%s", name);
    } else {
        size_t n = strlen(k.path);
        snprintf(k.path + n, sizeof k.path - n, ".%s", name);
    }
    return k;
}

jf jf_index(const jf *r, size_t i) {
    jf k = *r;
    size_t n = strlen(k.path);
    snprintf(k.path + n, sizeof k.path - n, r->style->dot_index ? ".%zu" : "[%zu]", i);
    return k;
}

int jf_fail(const jf *r, const char *name, const char *fmt, ...) {
    char path[sizeof r->path + 64];
    const char *param = r->param;
    if (!name) snprintf(path, sizeof path, "%s", r->path);
    else if (r->path[0]) snprintf(path, sizeof path, "%s.%s", r->path, name);
    else {
        snprintf(path, sizeof path, "%s", name);
        if (r->style->params) param = name;
    }
    char what[sizeof r->err->e.msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    oai_error *e = r->err;
    e->status = 400;
    e->code = NULL;
    e->field = param;
    switch (r->style->quote) {
    case JF_TAGGED: return err_set(&e->e, ERR_INVALID, "'" ERR_F("%s") "' %s", path, what);
    case JF_QUOTED: return err_set(&e->e, ERR_INVALID, "'%s' %s", path, what);
    case JF_COLON: return err_set(&e->e, ERR_INVALID, "%s: %s", path, what);
    default: return err_set(&e->e, ERR_INVALID, "%s %s", path, what);
    }
}

static bool type_ok(json_t *v, unsigned type) {
    if ((type & JF_NONEMPTY) && ((json_is_string(v) && !json_string_length(v)) || (json_is_array(v) && !json_array_size(v))))
        return false;
    return !(type & 0xff) || ((type & JF_STRING) && json_is_string(v)) || ((type & JF_BOOL) && json_is_boolean(v)) ||
           ((type & JF_INT) && json_is_integer(v)) || ((type & JF_NUMBER) && json_is_number(v)) ||
           ((type & JF_OBJECT) && json_is_object(v)) || ((type & JF_ARRAY) && json_is_array(v));
}

/* "a string", "a non-empty array", "a string or an object" ... */
static void type_what(unsigned type, char *out, size_t cap) {
    static const char *const names[] = {"a string", "a boolean", "an integer", "a number", "an object", "an array"};
    size_t k = 0;
    out[0] = 0;
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        if (!(type & (1u << i))) continue;
        const char *n = names[i];
        bool ne = (type & JF_NONEMPTY) && (i == 0 || i == 5); /* strings and arrays */
        k += (size_t)snprintf(out + k, cap - k, "%s%s%s", k ? " or " : "", ne ? "a non-empty " : "", ne ? strchr(n, ' ') + 1 : n);
        if (k >= cap) return;
    }
}

int jf_get(const jf *r, json_t *o, const char *name, unsigned type, const char *what, json_t **v) {
    json_t *x = oai_field(o, name);
    *v = NULL;
    if (!x) {
        if (type & JF_NEEDED) return jf_fail(r, name, "%s", r->style->missing ? r->style->missing : "is required");
        if (!(type & JF_REQUIRED)) return 0;
    } else if (type_ok(x, type)) {
        *v = x;
        return 0;
    }
    char w[64];
    if (!what) type_what(type, w, sizeof w), what = w;
    return jf_fail(r, name, "must be %s", what);
}

int jf_bool(const jf *r, json_t *o, const char *name, bool *out) {
    json_t *v;
    if (jf_get(r, o, name, JF_BOOL, NULL, &v) < 0) return ERR_INVALID;
    if (v) *out = json_is_true(v);
    return 0;
}

int jf_int(const jf *r, json_t *o, const char *name, long long lo, long long hi, long long *out, bool *present) {
    json_t *v = oai_field(o, name);
    if (present) *present = v != NULL;
    if (!v) return 0;
    long long x;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
    } else if (json_is_real(v) && floor(json_real_value(v)) == json_real_value(v) && fabs(json_real_value(v)) < 9e15) {
        x = (long long)json_real_value(v);
    } else {
        return jf_fail(r, name, "must be an integer");
    }
    if (x < lo || x > hi) return jf_fail(r, name, "must be an integer in [%lld, %lld]; got %lld", lo, hi, x);
    *out = x;
    return 0;
}

int jf_num(const jf *r, json_t *o, const char *name, double lo, bool lo_open, double hi, double *out) {
    json_t *v = oai_field(o, name);
    if (!v) return 0;
    if (!json_is_number(v)) return jf_fail(r, name, "must be a number");
    double x = json_number_value(v);
    if (!isfinite(x) || x < lo || (lo_open && x == lo) || x > hi)
        return jf_fail(r, name, "must be in %s%g, %g]; got %g", lo_open ? "(" : "[", lo, hi, x);
    *out = x;
    return 0;
}

int jf_int_in(const jf *r, json_t *o, const char *name, long long lo, long long hi, const char *what, json_t **v) {
    json_t *x = oai_field(o, name);
    *v = NULL;
    if (!x) return 0;
    if (!json_is_integer(x) || json_integer_value(x) < lo || json_integer_value(x) > hi)
        return jf_fail(r, name, "must be %s", what);
    *v = x;
    return 0;
}

int jf_num_in(const jf *r, json_t *o, const char *name, double lo, double hi, const char *what, json_t **v) {
    json_t *x = oai_field(o, name);
    *v = NULL;
    if (!x) return 0;
    double d = json_is_number(x) ? json_number_value(x) : NAN;
    if (!isfinite(d) || d < lo || d > hi) return jf_fail(r, name, "must be %s", what);
    *v = x;
    return 0;
}

int jf_enum(const jf *r, json_t *o, const char *name, const char *const *opts, size_t n, int *idx) {
    json_t *v = oai_field(o, name);
    if (!v) return 0;
    for (size_t i = 0; json_is_string(v) && i < n; i++)
        if (!strcmp(json_string_value(v), opts[i])) {
            *idx = (int)i;
            return 0;
        }
    char list[256];
    size_t k = 0;
    for (size_t i = 0; i < n && k < sizeof list; i++)
        k += (size_t)snprintf(list + k, sizeof list - k, "%s\"%s\"", !i ? "" : i + 1 < n ? ", " : " or ", opts[i]);
    return jf_fail(r, name, "must be %s", list);
}

int jf_typed(const jf *r, json_t *item, const char **type) {
    json_t *t = json_is_object(item) ? oai_field(item, "type") : NULL;
    if (!json_is_string(t)) return jf_fail(r, NULL, "must be an object with a string 'type'");
    *type = json_string_value(t);
    return 0;
}

int jf_token_ids(const jf *r, json_t *a, int n_vocab, int32_t *ids) {
    for (size_t i = 0; i < json_array_size(a); i++) {
        json_t *v = json_array_get(a, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= n_vocab) {
            jf e = jf_index(r, i);
            return jf_fail(&e, NULL, "must be a token id in [0, %d)", n_vocab);
        }
        ids[i] = (int32_t)json_integer_value(v);
    }
    return 0;
}
