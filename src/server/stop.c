/*
 * stop.c — holds back generated text that could start a stop string (see
 * stop.h). A simple scan: after each feed, look for the earliest complete
 * stop string in the held text, otherwise for the earliest position whose
 * suffix is a proper prefix of a stop string. Held text is at most as long as
 * the longest stop string, so each feed costs O(held * total stop length).
 */
#include "stop.h"

#include <stdlib.h>
#include <string.h>

#include "../base/base.h"

struct stop_matcher {
    char **stops;
    size_t *lens;
    int n;
    char *held;     /* text not released yet                          */
    size_t n_held, cap_held;
    char *out;      /* released text of the last call                 */
    size_t cap_out;
    bool matched;
    int which;      /* the stop string that matched                    */
};

stop_matcher *stop_new(char *const *stops, int n) {
    stop_matcher *m = xcalloc(1, sizeof *m);
    m->stops = xcalloc((size_t)(n > 0 ? n : 1), sizeof *m->stops);
    m->lens = xcalloc((size_t)(n > 0 ? n : 1), sizeof *m->lens);
    for (int i = 0; i < n; i++) {
        if (!stops[i] || !stops[i][0]) continue;
        m->stops[m->n] = xstrdup(stops[i]);
        m->lens[m->n] = strlen(stops[i]);
        m->n++;
    }
    return m;
}

void stop_free(stop_matcher *m) {
    if (!m) return;
    for (int i = 0; i < m->n; i++) free(m->stops[i]);
    free(m->stops);
    free(m->lens);
    free(m->held);
    free(m->out);
    free(m);
}

static void emit(stop_matcher *m, size_t n, const char **out, size_t *out_n) {
    if (n + 1 > m->cap_out) {
        m->cap_out = n + 64;
        m->out = xrealloc(m->out, m->cap_out);
    }
    if (n) {
        memcpy(m->out, m->held, n);
        memmove(m->held, m->held + n, m->n_held - n);
    }
    m->out[n] = 0;
    m->n_held -= n;
    *out = m->out;
    *out_n = n;
}

bool stop_feed(stop_matcher *m, const char *text, size_t n, const char **out, size_t *out_n) {
    *out = "";
    *out_n = 0;
    if (m->matched) return true;
    if (m->n_held + n + 1 > m->cap_held) {
        m->cap_held = (m->n_held + n + 1) * 2;
        m->held = xrealloc(m->held, m->cap_held);
    }
    if (n) memcpy(m->held + m->n_held, text, n);
    m->n_held += n;
    if (m->n == 0) {
        emit(m, m->n_held, out, out_n);
        return false;
    }
    /* The earliest complete stop string wins. */
    size_t best = (size_t)-1;
    for (int i = 0; i < m->n; i++) {
        if (m->lens[i] > m->n_held) continue;
        const char *p = memmem(m->held, m->n_held, m->stops[i], m->lens[i]);
        if (p && (size_t)(p - m->held) < best) {
            best = (size_t)(p - m->held);
            m->which = i;
        }
    }
    if (best != (size_t)-1) {
        emit(m, best, out, out_n);
        m->matched = true;
        m->n_held = 0;
        return true;
    }
    /* Otherwise hold the longest suffix that is a proper prefix of a stop. */
    size_t keep_from = m->n_held;
    for (size_t i = 0; i < m->n_held && keep_from == m->n_held; i++) {
        size_t tail = m->n_held - i;
        for (int s = 0; s < m->n; s++) {
            if (tail < m->lens[s] && memcmp(m->held + i, m->stops[s], tail) == 0) {
                keep_from = i;
                break;
            }
        }
    }
    emit(m, keep_from, out, out_n);
    return false;
}

void stop_flush(stop_matcher *m, const char **out, size_t *out_n) {
    if (m->matched) {
        *out = "";
        *out_n = 0;
        return;
    }
    emit(m, m->n_held, out, out_n);
}

bool stop_matched(const stop_matcher *m) { return m->matched; }

const char *stop_which(const stop_matcher *m) { return m->matched ? m->stops[m->which] : NULL; }
