/*
 * webui.h — the web chat page: GET / and its assets (HTML, CSS, JavaScript
 * from src/server/webui/, written by hand, no framework). tools/embed.c turns
 * those files into byte arrays at build time (build/gen/webui_assets.c), so
 * the binary serves the page with nothing on disk and no network.
 *
 * Place in the flow: server/, on http.c's handler threads (routes_handle),
 * exempt from the API key check (routes_precheck): the page is public, the
 * API calls it makes carry the key (the page asks for it on a 401 and keeps
 * it in the browser's localStorage).
 *
 *   GET /            index.html
 *   GET /NAME        the asset NAME (app.js, app.css, favicon.svg ...)
 *
 * Answers carry an ETag (a 304 for a matching If-None-Match), Cache-Control:
 * no-cache (revalidated, so a rebuilt server never serves a stale page) and
 * a Content-Security-Policy that allows only the server's own scripts,
 * styles and connections.
 */
#ifndef KVLOOM_WEBUI_H
#define KVLOOM_WEBUI_H

#include <stdbool.h>
#include <stddef.h>

#include "http.h"

/* One embedded file. */
typedef struct webui_asset {
    const char *name;          /* base name: "index.html"                       */
    const unsigned char *data; /* n_bytes bytes, followed by a 0                 */
    size_t n_bytes;
    const char *etag;          /* quoted hash of the bytes                      */
} webui_asset;

/* Defined by the generated build/gen/webui_assets.c. */
extern const webui_asset webui_assets[];
extern const int webui_n_assets;

/* The asset served at `path` ("/" is index.html), or NULL. */
const webui_asset *webui_find(const char *path);

/* If x is a GET or HEAD of the page or an asset, answers it (200 or 304) and
 * returns true; otherwise returns false and does not answer. Any thread. */
bool webui_serve(http_exchange *x);

#endif
