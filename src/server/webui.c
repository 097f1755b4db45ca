/*
 * webui.c — serves the embedded chat page (contract in webui.h). The bytes
 * live in the generated build/gen/webui_assets.c; this file only maps paths
 * to them and sets the headers.
 */
#include "webui.h"

#include <string.h>

const webui_asset *webui_find(const char *path) {
    if (!path || path[0] != '/') return NULL;
    const char *name = path[1] ? path + 1 : "index.html";
    /* A base name only: no directories, no query (MHD strips it anyway). */
    if (strchr(name, '/')) return NULL;
    for (int i = 0; i < webui_n_assets; i++)
        if (webui_assets[i].name && strcmp(webui_assets[i].name, name) == 0) return &webui_assets[i];
    return NULL;
}

static const char *content_type(const char *name) {
    static const struct {
        const char *ext, *type;
    } types[] = {
        {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
        {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
        {".png", "image/png"},                 {".json", "application/json"},
    };
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < sizeof types / sizeof types[0]; i++)
        if (strcmp(dot, types[i].ext) == 0) return types[i].type;
    return "application/octet-stream";
}

bool webui_serve(http_exchange *x) {
    const char *method = http_method(x);
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) return false;
    const webui_asset *a = webui_find(http_path(x));
    if (!a) return false;
    http_add_header(x, "ETag", a->etag);
    http_add_header(x, "Cache-Control", "no-cache");
    http_add_header(x, "X-Content-Type-Options", "nosniff");
    http_add_header(x, "Referrer-Policy", "no-referrer");
    http_add_header(x, "Content-Security-Policy",
                    "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                    "frame-ancestors 'none'");
    const char *inm = http_header(x, "If-None-Match");
    if (inm && strstr(inm, a->etag)) {
        http_reply(x, 304, NULL, "", 0, NULL, NULL);
        return true;
    }
    http_reply(x, 200, content_type(a->name), (const char *)a->data, a->n_bytes, NULL, NULL);
    return true;
}
