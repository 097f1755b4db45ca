// tools_common.mjs — shared by tests/node/tools_*.mjs: a check counter with the
// closing "NAME: N passed, N failed" line, an overall deadline, a fetch that
// records every request and response, and a small JSON Schema validator that
// is independent of the server (the outputs of constrained decoding are
// checked against their schemas here, never by trusting the server).

// ---- checks ----

export function harness(name, deadlineMs) {
  const h = { passed: 0, failed: 0 };
  h.check = (cond, what, detail) => {
    if (cond) h.passed++;
    else {
      h.failed++;
      let d = "";
      if (detail !== undefined) {
        d = JSON.stringify(detail) ?? String(detail);
        if (d.length > 2000) d = d.slice(0, 2000) + "...";
        d = "\n    " + d;
      }
      console.log("FAIL " + what + d);
    }
    return !!cond;
  };
  h.finish = () => {
    console.log(`${name}: ${h.passed} passed, ${h.failed} failed`);
    process.exit(h.failed ? 1 : 0);
  };
  // A test that hangs is a failure: the deadline prints the closing line and
  // exits non-zero (the shell runner has its own timeout on top).
  const t = setTimeout(() => {
    h.failed++;
    console.log(`FAIL ${name}: overall deadline of ${deadlineMs} ms passed`);
    h.finish();
  }, deadlineMs);
  t.unref();
  // Runs one named section; an exception in it is one failure, and the
  // next sections still run.
  h.section = async (what, fn) => {
    try {
      await fn();
    } catch (e) {
      h.failed++;
      let body = "";
      if (e && e.status) body = ` (HTTP ${e.status}: ${JSON.stringify(e.error ?? e.message)})`;
      const msg = e && e.message !== undefined ? e.message : String(e);
      console.log(`FAIL ${what}: exception ${e && e.name}${body}: ${JSON.stringify(msg).slice(0, 2000)}`);
      if (e && e.stack) console.log("    " + e.stack.split("\n").slice(1, 4).map((l) => l.trim()).join(" | "));
      if (e && e.cause) console.log("    cause: " + JSON.stringify(e.cause.message ?? String(e.cause)).slice(0, 2000));
    }
  };
  return h;
}

// ---- recorded HTTP ----

// A fetch that keeps every request body (parsed JSON) and the text of every
// response (for streams: the raw SSE text), so that a test can look at what a
// framework really sent and got. Each call has its own timeout.
export function recordingFetch(log, timeoutMs = 60000) {
  return async (url, init = {}) => {
    const entry = { url: String(url), body: null, status: null, response: null };
    try {
      entry.body = init.body ? JSON.parse(init.body) : null;
    } catch {
      entry.body = init.body;
    }
    log.push(entry);
    const signal = init.signal ? AbortSignal.any([init.signal, AbortSignal.timeout(timeoutMs)])
                               : AbortSignal.timeout(timeoutMs);
    const res = await fetch(url, { ...init, signal });
    entry.status = res.status;
    const copy = res.clone();
    entry.done = copy.text().then((t) => { entry.response = t; }, () => {});
    return res;
  };
}

// Raw POST with a timeout: status and parsed body (for the 400 cases, so the
// error object is checked as sent, not as a client library rewrites it).
export async function postJSON(url, body, timeoutMs = 60000) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
    signal: AbortSignal.timeout(timeoutMs),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, text, json };
}

// ---- JSON Schema validation (the subset the server supports) ----

const FORMATS = {
  date: /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$/,
  time: /^([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?(Z|[+-]([01]\d|2[0-3]):[0-5]\d)?$/,
  "date-time": /^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])[Tt ]([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d+)?([Zz]|[+-]([01]\d|2[0-3]):[0-5]\d)$/,
  uuid: /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$/,
};
const ANNOTATIONS = new Set(["title", "description", "default", "examples", "$schema", "$id", "$comment",
  "deprecated", "readOnly", "writeOnly", "$defs", "definitions", "strict"]);
const KNOWN = new Set(["type", "properties", "required", "additionalProperties", "enum", "const", "items",
  "prefixItems", "minItems", "maxItems", "minLength", "maxLength", "pattern", "minimum", "maximum",
  "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref", "format"]);

function typeOf(v) {
  if (v === null) return "null";
  if (Array.isArray(v)) return "array";
  if (typeof v === "number") return Number.isInteger(v) ? "integer" : "number";
  return typeof v; // string, boolean, object
}
function typeMatches(t, v) {
  const a = typeOf(v);
  return t === a || (t === "number" && a === "integer");
}
function deepEqual(a, b) {
  if (a === b) return true;
  if (typeOf(a) !== typeOf(b)) return false;
  if (Array.isArray(a)) return a.length === b.length && a.every((x, i) => deepEqual(x, b[i]));
  if (a && typeof a === "object") {
    const ka = Object.keys(a), kb = Object.keys(b);
    return ka.length === kb.length && ka.every((k) => Object.hasOwn(b, k) && deepEqual(a[k], b[k]));
  }
  return false;
}
function resolveRef(root, ref) {
  if (ref === "#") return root;
  const m = /^#\/(\$defs|definitions)\/(.+)$/.exec(ref);
  if (!m) throw new Error("validator: unsupported $ref " + ref);
  const s = root[m[1]] && root[m[1]][m[2]];
  if (s === undefined) throw new Error("validator: unresolved $ref " + ref);
  return s;
}

// Returns a list of error strings (empty: valid). Throws on a schema keyword
// it does not know, so a test never passes by ignoring part of a schema.
export function validate(schema, value, root = schema, path = "") {
  const errs = [];
  const err = (m) => errs.push(`${path || "/"}: ${m}`);
  if (schema === true || (schema && typeof schema === "object" && Object.keys(schema).length === 0)) return errs;
  if (schema === false) { err("false schema"); return errs; }
  for (const k of Object.keys(schema)) {
    if (!KNOWN.has(k) && !ANNOTATIONS.has(k)) throw new Error(`validator: unknown keyword ${k} at ${path || "/"}`);
  }
  if (schema.$ref !== undefined) errs.push(...validate(resolveRef(root, schema.$ref), value, root, path));
  if (schema.type !== undefined) {
    const ts = Array.isArray(schema.type) ? schema.type : [schema.type];
    if (!ts.some((t) => typeMatches(t, value))) { err(`type ${typeOf(value)}, want ${ts.join("|")}`); return errs; }
  }
  if (schema.enum !== undefined && !schema.enum.some((e) => deepEqual(e, value))) err(`${JSON.stringify(value)} not in enum`);
  if (schema.const !== undefined && !deepEqual(schema.const, value)) err(`${JSON.stringify(value)} != const`);
  if (typeof value === "string") {
    const n = [...value].length; // code points, as JSON Schema counts
    if (schema.minLength !== undefined && n < schema.minLength) err(`length ${n} < minLength ${schema.minLength}`);
    if (schema.maxLength !== undefined && n > schema.maxLength) err(`length ${n} > maxLength ${schema.maxLength}`);
    if (schema.pattern !== undefined && !new RegExp(schema.pattern, "u").test(value)) err(`does not match ${schema.pattern}`);
    if (schema.format !== undefined) {
      const re = FORMATS[schema.format];
      if (!re) throw new Error("validator: unknown format " + schema.format);
      if (!re.test(value)) err(`not a ${schema.format}`);
    }
  }
  if (typeof value === "number") {
    if (schema.minimum !== undefined && value < schema.minimum) err(`${value} < minimum ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) err(`${value} > maximum ${schema.maximum}`);
    if (schema.exclusiveMinimum !== undefined && value <= schema.exclusiveMinimum) err(`${value} <= exclusiveMinimum`);
    if (schema.exclusiveMaximum !== undefined && value >= schema.exclusiveMaximum) err(`${value} >= exclusiveMaximum`);
  }
  if (Array.isArray(value)) {
    if (schema.minItems !== undefined && value.length < schema.minItems) err(`${value.length} items < minItems ${schema.minItems}`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) err(`${value.length} items > maxItems ${schema.maxItems}`);
    const pre = schema.prefixItems || [];
    value.forEach((v, i) => {
      if (i < pre.length) errs.push(...validate(pre[i], v, root, `${path}/${i}`));
      else if (schema.items !== undefined) errs.push(...validate(schema.items, v, root, `${path}/${i}`));
    });
  }
  if (value && typeof value === "object" && !Array.isArray(value)) {
    const props = schema.properties || {};
    for (const r of schema.required || []) if (!Object.hasOwn(value, r)) err(`missing required ${r}`);
    for (const [k, v] of Object.entries(value)) {
      if (Object.hasOwn(props, k)) errs.push(...validate(props[k], v, root, `${path}/${k}`));
      else if (schema.additionalProperties === false) err(`additional property ${k}`);
      else if (schema.additionalProperties && typeof schema.additionalProperties === "object")
        errs.push(...validate(schema.additionalProperties, v, root, `${path}/${k}`));
    }
  }
  if (schema.allOf) for (const s of schema.allOf) errs.push(...validate(s, value, root, path));
  if (schema.anyOf && !schema.anyOf.some((s) => validate(s, value, root, path).length === 0)) err("matches no anyOf branch");
  if (schema.oneOf && schema.oneOf.filter((s) => validate(s, value, root, path).length === 0).length !== 1)
    err("does not match exactly one oneOf branch");
  return errs;
}

// Parses JSON text and validates it: {ok, value, errors}.
export function parseAndValidate(schema, text) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (e) {
    return { ok: false, value: undefined, errors: ["does not parse: " + e.message + ": " + JSON.stringify(text)] };
  }
  const errors = validate(schema, value);
  return { ok: errors.length === 0, value, errors };
}

// The validator itself must reject what it should: a few fixed cases, run by
// every script before it trusts the validator (each is a check).
export function selfTestValidator(h) {
  const s = {
    type: "object", additionalProperties: false, required: ["a", "b", "c"],
    properties: {
      a: { type: "string", enum: ["x", "y"] }, b: { type: "integer", minimum: 1, maximum: 3 },
      c: { type: "array", minItems: 1, maxItems: 2, items: { type: "string", maxLength: 3 } },
      d: { type: "object", properties: { e: { type: "boolean" } }, required: ["e"] },
    },
  };
  const good = { a: "x", b: 2, c: ["abc"], d: { e: true } };
  h.check(validate(s, good).length === 0, "validator accepts a valid value", validate(s, good));
  const bad = [
    { a: "z", b: 2, c: ["a"] }, { a: "x", b: 4, c: ["a"] }, { a: "x", b: 1.5, c: ["a"] },
    { a: "x", b: 2, c: [] }, { a: "x", b: 2, c: ["a", "b", "c"] }, { a: "x", b: 2, c: ["abcd"] },
    { a: "x", b: 2 }, { a: "x", b: 2, c: ["a"], z: 1 }, { a: "x", b: 2, c: ["a"], d: {} }, [1], "x",
  ];
  bad.forEach((v, i) => h.check(validate(s, v).length > 0, `validator rejects invalid value ${i}: ${JSON.stringify(v)}`));
  let threw = false;
  try { validate({ type: "object", patternProperties: {} }, {}); } catch { threw = true; }
  h.check(threw, "validator refuses a keyword it does not know");
  const prefixCases = [["{\"a\": [1, {\"b\": null}], \"c\": \"x\\n\"}", "complete"], ["{\"a\": [1, 2", "prefix"],
    ["{\"a\": tr", "prefix"], ["{\"a\" 1}", "invalid"], ["[1]", "invalid"], ["{} x", "invalid"], ["{\"a\": \"\n\"}", "invalid"]];
  for (const [t, want] of prefixCases) h.check(jsonObjectPrefixState(t) === want, `JSON prefix checker on ${JSON.stringify(t)}: ${want}`, jsonObjectPrefixState(t));
}

// Whether text is a JSON object ("complete"), a proper prefix of one that
// ran out of input ("prefix": a constrained output cut by max_tokens), or
// neither ("invalid").
export function jsonObjectPrefixState(text) {
  let i = 0;
  const EOF = {};
  const n = text.length;
  const peek = () => { if (i >= n) throw EOF; return text[i]; };
  const fail = (m) => { throw new Error(m); };
  const ws = () => { while (i < n && " \t\n\r".includes(text[i])) i++; };
  const lit = (w) => { for (const ch of w) { if (peek() !== ch) fail("literal"); i++; } };
  const digits = () => { if (!/[0-9]/.test(peek())) fail("digit"); while (i < n && /[0-9]/.test(text[i])) i++; };
  function str() {
    lit('"');
    for (;;) {
      const c = peek(); i++;
      if (c === '"') return;
      if (c === "\\") {
        const e = peek(); i++;
        if (e === "u") { for (let k = 0; k < 4; k++) { if (!/[0-9a-fA-F]/.test(peek())) fail("\\u"); i++; } }
        else if (!'"\\/bfnrt'.includes(e)) fail("escape");
      } else if (c < " ") fail("control character in a string");
    }
  }
  function num() {
    if (peek() === "-") i++;
    if (peek() === "0") i++; else digits();
    if (i < n && text[i] === ".") { i++; digits(); }
    if (i < n && (text[i] === "e" || text[i] === "E")) { i++; if (peek() === "+" || peek() === "-") i++; digits(); }
  }
  function value() {
    ws();
    const c = peek();
    if (c === "{") obj(); else if (c === "[") arr(); else if (c === '"') str();
    else if (c === "t") lit("true"); else if (c === "f") lit("false"); else if (c === "n") lit("null");
    else if (c === "-" || /[0-9]/.test(c)) num(); else fail("value");
  }
  function obj() {
    lit("{"); ws();
    if (peek() === "}") { i++; return; }
    for (;;) {
      ws(); str(); ws(); lit(":"); value(); ws();
      const c = peek(); i++;
      if (c === "}") return;
      if (c !== ",") fail("expected , or }");
    }
  }
  function arr() {
    lit("["); ws();
    if (peek() === "]") { i++; return; }
    for (;;) {
      value(); ws();
      const c = peek(); i++;
      if (c === "]") return;
      if (c !== ",") fail("expected , or ]");
    }
  }
  try {
    ws();
    if (peek() !== "{") return "invalid";
    obj(); ws();
    return i === n ? "complete" : "invalid";
  } catch (e) {
    return e === EOF ? "prefix" : "invalid";
  }
}
