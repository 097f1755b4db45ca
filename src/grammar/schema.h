/*
 * schema.h — JSON Schema to GBNF (grammar.h), for response_format,
 * llama-server's json_schema field and tool-call arguments.
 *
 * Place in the flow: grammar/, called on an HTTP thread while a request is
 * validated; the GBNF text it writes is then compiled by grammar_from_gbnf.
 *
 * The JSON it admits is written in one canonical layout, so that runs of
 * fixed text (keys, punctuation) are forced and can be jumped over: no
 * whitespace except one space after ':' and after ',' in objects and arrays
 * ({"a": 1, "b": [1, 2]}). Object properties come in the order the schema
 * lists them (required ones always, optional ones may be skipped).
 *
 * Supported keywords (docs/grammar.md has the full table): type (the seven
 * types and arrays of them), properties, required, additionalProperties
 * (false, true, or a schema), enum, const, items, prefixItems, minItems,
 * maxItems, minLength, maxLength, pattern (a regular-expression subset:
 * literals, escapes, ., classes, groups, alternation, * + ? {m,n}, anchored
 * ^...$), minimum / maximum / exclusiveMinimum / exclusiveMaximum on
 * integers, anyOf, oneOf, allOf with one element, $ref to "#", "#/$defs/x"
 * and "#/definitions/x" (recursion allowed), format date, time, date-time,
 * uuid. Annotations (title, description, default, examples, $schema, $id,
 * $comment, deprecated, readOnly, writeOnly) are ignored. Any other keyword
 * is an error naming it (ERR_UNSUPPORTED: "unsupported JSON Schema keyword
 * 'patternProperties' at /properties/x"), never silently unconstrained
 * output. `true` / `{}` mean any JSON value.
 */
#ifndef KVLOOM_SCHEMA_H
#define KVLOOM_SCHEMA_H

#include <jansson.h>

#include "../base/base.h"

/* Appends to *buf (a malloc'd NUL-terminated string, or NULL to start; *len
 * its length) the GBNF rules for `schema`, whose top rule is named `name`;
 * every helper rule's name starts with `name` followed by '-', so several
 * schemas can share one grammar under different names. Returns 0, or
 * ERR_UNSUPPORTED / ERR_INVALID with a message naming the keyword and its
 * JSON pointer ("/properties/city/maxLength must be a non-negative
 * integer"); *buf is then unchanged in content (it may have been
 * reallocated). */
int schema_to_gbnf(json_t *schema, const char *name, char **buf, size_t *len, err_t *e);

/* schema_to_gbnf with a choice: strict (as above), or relaxed, where a
 * keyword that cannot be enforced (ERR_UNSUPPORTED naming one keyword of
 * one subschema) is dropped and compiling goes on without it. *relaxed (when
 * not NULL) receives NULL, or a malloc'd list of what was dropped,
 * "keyword at /pointer" entries separated by ", ". Invalid schemas
 * (ERR_INVALID, ERR_RANGE) fail either way. */
int schema_compile(json_t *schema, const char *name, bool strict, char **relaxed, char **buf, size_t *len,
                   err_t *e);

/* GBNF for any JSON object in the canonical layout, top rule `name`
 * (response_format {"type":"json_object"}). */
int schema_any_object_gbnf(const char *name, char **buf, size_t *len, err_t *e);

#endif
