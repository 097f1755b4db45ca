/*
 * api_anthropic.c — POST /v1/messages, the Anthropic Messages API (apis.h).
 * Placeholder until the implementation lands: answers 501 in Anthropic's
 * error shape.
 */
#include <string.h>

#include "apis.h"

bool api_anthropic_messages(routes_ctx *rc, http_exchange *x) {
    (void)rc;
    static const char body[] = "{\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"/v1/messages is not implemented yet\"}}";
    http_reply(x, 501, "application/json", body, strlen(body), NULL, NULL);
    return false;
}
