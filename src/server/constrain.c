/*
 * constrain.c — request fields to an enforced grammar (see constrain.h).
 *
 * The GBNF text is the cache key: two requests with the same tools and the
 * same format get the same compiled grammar, whose per-state mask cache then
 * serves both (it is only touched on the engine thread).
 */
#include "constrain.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "../base/sbuf.h"
#include "../grammar/schema.h"

static int vocab_piece(void *ctx, int32_t id, char *buf, int cap) { return tok_piece((const tokenizer *)ctx, id, buf, cap); }

gvocab *constrain_vocab_new(const tokenizer *tk) {
    int n = tok_n_vocab(tk);
    uint8_t *kind = xmalloc((size_t)n);
    for (int i = 0; i < n; i++) {
        int ty = tok_type(tk, i);
        kind[i] = tok_is_eog(tk, i) ? GV_EOG : (ty == TOK_TYPE_CONTROL || ty == TOK_TYPE_UNUSED) ? GV_NEVER : GV_NORMAL;
    }
    gvocab *v = gvocab_new(n, vocab_piece, (void *)tk, kind);
    free(kind);
    return v;
}

typedef struct cache_entry {
    char *gbnf;
    grammar *g;
    unsigned long long used; /* tick of the last use                        */
} cache_entry;

struct constrainer {
    pthread_mutex_t mu;
    cache_entry *v;
    int n, cap;
    size_t grammar_bytes; /* each grammar's cache budget */
    unsigned long long tick;
};

constrainer *constrainer_new(int n_cache, size_t cache_bytes) {
    constrainer *c = xcalloc(1, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
    c->cap = n_cache > 0 ? n_cache : 1;
    c->grammar_bytes = (cache_bytes ? cache_bytes : CONSTRAIN_DEFAULT_CACHE_BYTES) / (size_t)c->cap;
    c->v = xcalloc((size_t)c->cap, sizeof *c->v);
    return c;
}

void constrainer_free(constrainer *c) {
    if (!c) return;
    for (int i = 0; i < c->n; i++) {
        free(c->v[i].gbnf);
        grammar_unref(c->v[i].g);
    }
    free(c->v);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

size_t constrainer_idle_bytes(constrainer *c) {
    size_t b = 0;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++)
        if (grammar_refs(c->v[i].g) == 1) b += grammar_cache_bytes(c->v[i].g); /* only the cache holds it */
    pthread_mutex_unlock(&c->mu);
    return b;
}

/* The compiled grammar of `gbnf` (a new reference), from the cache or
 * compiled now (outside the lock: compiling may take a while). */
static int compile_cached(constrainer *c, const char *gbnf, grammar **out, bool *miss, err_t *e) {
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->n; i++) {
        if (strcmp(c->v[i].gbnf, gbnf) == 0) {
            c->v[i].used = ++c->tick;
            grammar_ref(c->v[i].g);
            *out = c->v[i].g;
            pthread_mutex_unlock(&c->mu);
            return 0;
        }
    }
    *miss = true;
    pthread_mutex_unlock(&c->mu);
    grammar *g = NULL;
    int rc = grammar_from_gbnf(gbnf, strlen(gbnf), &g, e);
    if (rc < 0) return rc;
    /* before anyone else holds it: the engine thread is the only other
     * user of its caches */
    grammar_set_cache_bytes(g, c->grammar_bytes);
    pthread_mutex_lock(&c->mu);
    int slot = c->n;
    if (c->n == c->cap) {
        slot = 0;
        for (int i = 1; i < c->n; i++)
            if (c->v[i].used < c->v[slot].used) slot = i;
        free(c->v[slot].gbnf);
        grammar_unref(c->v[slot].g);
    } else {
        c->n++;
    }
    c->v[slot].gbnf = xstrdup(gbnf);
    c->v[slot].g = g;
    c->v[slot].used = ++c->tick;
    grammar_ref(g);
    pthread_mutex_unlock(&c->mu);
    *out = g;
    return 0;
}

static bool name_char(char ch) {
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '_' || ch == '-';
}

/* Renames the rule `root` of a GBNF text (definition and references) to
 * `name`, so that two grammars can be joined under a new root. Rule names are
 * [A-Za-z0-9_-]+ outside literals, classes and comments. */
static char *rename_root(const char *src, const char *name) {
    sbuf b = {0};
    size_t n = strlen(src);
    for (size_t i = 0; i < n;) {
        size_t j = i + 1;
        if (src[i] == '"' || src[i] == '[') {
            char close = src[i] == '"' ? '"' : ']';
            while (j < n && src[j] != close) j += (src[j] == '\\' && j + 1 < n) ? 2 : 1;
            if (j < n) j++;
        } else if (src[i] == '#') {
            while (j < n && src[j] != '\n') j++;
        } else if (name_char(src[i])) {
            while (j < n && name_char(src[j])) j++;
            if (j - i == 4 && memcmp(src + i, "root", 4) == 0) {
                sbuf_put(&b, name, strlen(name));
                i = j;
                continue;
            }
        }
        sbuf_put(&b, src + i, j - i);
        i = j;
    }
    if (!b.p) sbuf_put(&b, "", 0);
    return b.p;
}

/* Appends "what: list" to a report ("; "-separated). */
static void report_add(char **report, const char *what, char *list) {
    if (!list) return;
    size_t old = *report ? strlen(*report) : 0, add = strlen(what) + strlen(list) + 8;
    *report = xrealloc(*report, old + add);
    snprintf(*report + old, add, "%s%s: %s", old ? "; " : "", what, list);
    free(list);
}

/* The GBNF of the JSON answer format, top rule `name`; relaxed unless
 * strict was asked for (what was relaxed goes to *report). */
static int format_gbnf(const oai_params *p, const char *name, char **buf, size_t *len, const char **param,
                       char **report, err_t *e) {
    int rc;
    if (p->format == OAI_FORMAT_JSON_OBJECT) {
        rc = schema_any_object_gbnf(name, buf, len, e);
        *param = "response_format";
    } else {
        char *r = NULL;
        rc = schema_compile(p->schema, name, p->schema_strict, &r, buf, len, e);
        *param = p->schema_param;
        if (rc < 0) err_prefix(e, "'" ERR_F("%s") "' schema", p->schema_param);
        else report_add(report, p->schema_param, r);
    }
    return rc;
}

int constrain_request(constrainer *c, const oai_params *p, tc_format f, grammar **g, char **trigger,
                      const char **param, char **relaxed, err_t *e) {
    *g = NULL;
    *trigger = NULL;
    *param = NULL;
    *relaxed = NULL;
    bool tools = p->kind == OAI_CHAT && p->tools && p->tool_choice != OAI_TOOLS_NONE;
    bool json_fmt = p->format == OAI_FORMAT_JSON_OBJECT || p->format == OAI_FORMAT_SCHEMA;
    char *gbnf = NULL;
    size_t len = 0;
    int rc = 0;
    if (p->format == OAI_FORMAT_GRAMMAR) {
        if (tools) {
            *param = "grammar";
            return err_set(e, ERR_INVALID, "'" ERR_F("grammar") "' cannot be combined with '" ERR_F("tools") "' (set " ERR_F("tool_choice") " to \"none\")");
        }
        gbnf = xstrdup(p->grammar);
        *param = "grammar";
    } else if (tools && p->tool_choice == OAI_TOOLS_AUTO && json_fmt) {
        /* the calls or the JSON answer, from the first token */
        char *calls = NULL;
        *param = "tools";
        char *tr = NULL;
        rc = tc_grammar_relax(f, p->tools, NULL, p->parallel_tool_calls, false, &calls, trigger, &tr, e);
        if (rc < 0) return rc;
        report_add(relaxed, "tools", tr);
        free(*trigger);
        *trigger = NULL;
        char *renamed = rename_root(calls, "kvloom-calls");
        free(calls);
        rc = format_gbnf(p, "kvloom-answer", &gbnf, &len, param, relaxed, e);
        if (rc < 0) {
            free(renamed);
            free(gbnf);
            free(*relaxed);
            *relaxed = NULL;
            return rc;
        }
        size_t n = strlen(renamed) + len + 64;
        char *all = xmalloc(n);
        snprintf(all, n, "root ::= kvloom-calls | kvloom-answer\n%s\n%s", renamed, gbnf);
        free(renamed);
        free(gbnf);
        gbnf = all;
    } else if (tools) {
        bool lazy = p->tool_choice == OAI_TOOLS_AUTO;
        *param = "tools";
        char *tr = NULL;
        rc = tc_grammar_relax(f, p->tools, p->tool_choice == OAI_TOOLS_NAMED ? p->tool_name : NULL,
                              p->tool_choice != OAI_TOOLS_NAMED && p->parallel_tool_calls, lazy, &gbnf, trigger, &tr, e);
        if (rc < 0) return rc;
        report_add(relaxed, "tools", tr);
    } else if (json_fmt) {
        rc = format_gbnf(p, "root", &gbnf, &len, param, relaxed, e);
        if (rc < 0) {
            free(gbnf);
            return rc;
        }
    } else {
        return 0;
    }
    bool miss = false;
    rc = compile_cached(c, gbnf, g, &miss, e);
    free(gbnf);
    /* a relaxed schema is logged once, when its grammar is compiled; every
     * answer reports it (gen_add_headers) */
    if (rc == 0 && miss && *relaxed) log_warn("constrain: enforcing schemas without what cannot be enforced: %.900s", *relaxed);
    if (rc < 0) {
        free(*relaxed);
        *relaxed = NULL;
        free(*trigger);
        *trigger = NULL;
        if (p->format == OAI_FORMAT_GRAMMAR) err_prefix(e, "'" ERR_F("grammar") "'");
        return rc;
    }
    return 0;
}
