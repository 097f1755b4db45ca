/*
 * fuzz_schema.c — libFuzzer target for the JSON Schema compiler: arbitrary
 * bytes are parsed as JSON, compiled by schema_to_gbnf (twice into one
 * buffer, under two names, to exercise appending), and whatever compiled is
 * handed to grammar_from_gbnf, which must accept it: schema.c's output is
 * always valid GBNF within the grammar limits. The relaxed compile
 * (schema_compile, strict false) must compile whatever the strict one does,
 * to the same text when nothing was relaxed, and its output is valid GBNF
 * too. Nothing may crash, leak or assert, whatever the input.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"
#include "grammar/schema.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *s = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!s) return 0;
    char *buf = NULL;
    size_t len = 0;
    err_t e = {0};
    int rc = schema_to_gbnf(s, "root", &buf, &len, &e);
    if (rc == 0) {
        grammar *g = NULL;
        int grc = grammar_from_gbnf(buf, len, &g, &e);
        /* refusals only for the size limits, never for syntax */
        if (grc != 0 && grc != ERR_RANGE) abort();
        grammar_unref(g);
        rc = schema_to_gbnf(s, "second", &buf, &len, &e);
        if (rc == 0 && strlen(buf) != len) abort();
    } else if (buf != NULL && strlen(buf) != len) abort();
    free(buf);
    /* relaxed */
    char *rbuf = NULL, *relaxed = NULL, *sbuf = NULL;
    size_t rlen = 0, slen = 0;
    int rrc = schema_compile(s, "root", false, &relaxed, &rbuf, &rlen, &e);
    int src = schema_compile(s, "root", true, NULL, &sbuf, &slen, &e);
    if (src == 0 && rrc != 0) abort();
    if (rrc == 0) {
        if (src == 0 && !relaxed && strcmp(rbuf, sbuf)) abort();
        if (relaxed && !strstr(relaxed, " at ")) abort();
        grammar *g = NULL;
        int grc = grammar_from_gbnf(rbuf, rlen, &g, &e);
        if (grc != 0 && grc != ERR_RANGE) abort();
        grammar_unref(g);
    }
    free(rbuf);
    free(sbuf);
    free(relaxed);
    json_decref(s);
    return 0;
}
