/*
 * fuzz_oai.c — libFuzzer target for the server's request parsing: arbitrary
 * bytes go through jansson and oai_parse (completions and chat), and the
 * first bytes also drive the stop-string matcher over the rest. Neither may
 * crash, leak or assert, whatever the input.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "server/oai.h"
#include "server/stop.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (o) {
        for (int kind = 0; kind < 2; kind++) {
            oai_params p;
            oai_error e;
            if (oai_parse(o, (oai_kind)kind, 512, &p, &e) == 0) oai_params_free(&p);
        }
        json_decref(o);
    }
    char *msg = malloc(size + 1);
    memcpy(msg, data, size);
    msg[size] = 0;
    char *err = oai_error_json(msg, "x", msg, NULL);
    free(err);
    free(msg);
    /* Stop strings: the first byte picks how many of the next bytes form the
     * stop strings (split at '|'), the rest is fed in chunks of 1..8 bytes. */
    if (size >= 2) {
        size_t ns = data[0] % 16;
        if (ns > size - 1) ns = size - 1;
        char *stops_buf = malloc(ns + 1);
        memcpy(stops_buf, data + 1, ns);
        stops_buf[ns] = 0;
        char *stops[8];
        int n = 0;
        for (char *s = strtok(stops_buf, "|"); s && n < 8; s = strtok(NULL, "|")) stops[n++] = s;
        stop_matcher *m = stop_new(stops, n);
        const char *out;
        size_t out_n;
        size_t pos = 1 + ns;
        while (pos < size) {
            size_t k = 1 + data[pos] % 8;
            if (pos + k > size) k = size - pos;
            if (stop_feed(m, (const char *)data + pos, k, &out, &out_n)) break;
            pos += k;
        }
        stop_flush(m, &out, &out_n);
        stop_free(m);
        free(stops_buf);
    }
    return 0;
}
