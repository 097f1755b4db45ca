/*
 * api_ollama.c — the Ollama API (/api/chat, /api/generate, /api/tags,
 * /api/show, /api/version; apis.h). Placeholder until the implementation
 * lands: answers 501 in Ollama's error shape.
 */
#include <string.h>

#include "apis.h"

bool api_ollama(routes_ctx *rc, http_exchange *x, const char *path) {
    (void)rc;
    (void)path;
    static const char body[] = "{\"error\":\"the Ollama API is not implemented yet\"}";
    http_reply(x, 501, "application/json", body, strlen(body), NULL, NULL);
    return false;
}
