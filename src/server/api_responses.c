/*
 * api_responses.c — POST /v1/responses, the OpenAI Responses API (apis.h).
 * Placeholder until the implementation lands: answers 501.
 */
#include <stdlib.h>
#include <string.h>

#include "apis.h"
#include "oai.h"

struct resp_store {
    int unused;
};

resp_store *resp_store_new(void) { return xcalloc(1, sizeof(resp_store)); }
void resp_store_free(resp_store *s) { free(s); }

static void not_yet(http_exchange *x) {
    char *b = oai_error_json("/v1/responses is not implemented yet", "server_error", NULL, NULL);
    http_reply(x, 501, "application/json", b, strlen(b), NULL, NULL);
    free(b);
}

bool api_responses_create(routes_ctx *rc, http_exchange *x) {
    (void)rc;
    not_yet(x);
    return false;
}

void api_responses_item(routes_ctx *rc, http_exchange *x, const char *id) {
    (void)rc;
    (void)id;
    not_yet(x);
}
