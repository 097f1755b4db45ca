// tools_openai.mjs — tool calls and structured output of a running kvloom
// server through the official `openai` npm client (and raw HTTP for the 400
// cases). Meant for a model with RANDOM weights: only constrained decoding
// can make its outputs parse and validate, so every output here is parsed and
// validated against its schema by tools_common.mjs, independently of the
// server.
//   node tests/node/tools_openai.mjs BASE_URL LABEL [DEADLINE_MS]
// Prints one line per failed check and ends with
// "tools_openai[LABEL]: N passed, N failed".
import OpenAI from "openai";
import { harness, postJSON, parseAndValidate, selfTestValidator, jsonObjectPrefixState } from "./tools_common.mjs";

const [baseURL, label = "model", deadline = "150000"] = process.argv.slice(2);
const h = harness(`tools_openai[${label}]`, Number(deadline));
const { check } = h;
const client = new OpenAI({ baseURL, apiKey: "none", timeout: 60000, maxRetries: 0 });
const MODEL = "kvloom";

// ---- tools and schemas ----

const WEATHER = {
  type: "function",
  function: {
    name: "get_weather", description: "Current weather of a city", strict: true,
    parameters: {
      type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: {
        city: { type: "string", minLength: 1, maxLength: 20, description: "City name" },
        unit: { type: "string", enum: ["celsius", "fahrenheit"] },
      },
    },
  },
};
const SEARCH = {
  type: "function",
  function: {
    name: "search_docs", description: "Search the documentation",
    parameters: {
      type: "object", additionalProperties: false, required: ["query", "limit"],
      properties: {
        query: { type: "string", minLength: 1, maxLength: 16 },
        limit: { type: "integer", minimum: 1, maximum: 10 },
        tags: { type: "array", items: { type: "string", enum: ["api", "cli", "kv"] }, maxItems: 3 },
      },
    },
  },
};
const CLOCK = {
  type: "function",
  function: {
    name: "get_time", description: "The current time",
    parameters: { type: "object", properties: {}, additionalProperties: false },
  },
};
const TOOLS = [WEATHER, SEARCH, CLOCK];
const SCHEMA_OF = Object.fromEntries(TOOLS.map((t) => [t.function.name, t.function.parameters]));

const NESTED = {
  type: "object", additionalProperties: false, required: ["kind", "count", "tags", "owner", "note"],
  properties: {
    kind: { type: "string", enum: ["alpha", "beta", "gamma"] },
    count: { type: "integer", minimum: -5, maximum: 42 },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 },
    owner: {
      type: "object", additionalProperties: false, required: ["name", "active", "level"],
      properties: {
        name: { type: "string", maxLength: 20 },
        active: { type: "boolean" },
        level: { type: "integer", minimum: 0, maximum: 3 },
      },
    },
    note: { type: "string", maxLength: 20 },
  },
};
// Other keywords schema.h supports: $defs/$ref, anyOf, pattern, format,
// prefixItems, const, nullable types.
const EXTRA = {
  type: "object", additionalProperties: false, required: ["code", "day", "pick", "pair", "point", "maybe", "v"],
  $defs: {
    point: {
      type: "object", additionalProperties: false, required: ["x", "y"],
      properties: { x: { type: "integer", minimum: 0, maximum: 99 }, y: { type: "integer", minimum: 0, maximum: 99 } },
    },
  },
  properties: {
    code: { type: "string", pattern: "^[A-Z]{2}-[0-9]{3}$" },
    day: { type: "string", format: "date" },
    pick: { anyOf: [{ type: "integer", minimum: 0, maximum: 9 }, { type: "boolean" }] },
    pair: {
      type: "array", minItems: 2, maxItems: 2,
      prefixItems: [{ type: "string", enum: ["a", "b"] }, { type: "integer", minimum: 0, maximum: 5 }],
    },
    point: { $ref: "#/$defs/point" },
    maybe: { type: ["string", "null"], maxLength: 5 },
    v: { const: 2 },
  },
};

const ASK = [
  { role: "system", content: "You are a helpful assistant with tools." },
  { role: "user", content: "What is the weather in Paris? Also find docs about the KV cache." },
];

// ---- helpers ----

// Checks a non-streamed tool-call answer; returns [{name, arguments}] (or null).
function checkCalls(what, r, { only = null, exactlyOne = false } = {}) {
  const c = r.choices && r.choices[0];
  if (!check(c && c.message, `${what}: a choice with a message`, r)) return null;
  const m = c.message;
  const calls = m.tool_calls;
  if (!check(Array.isArray(calls) && calls.length >= 1, `${what}: message.tool_calls is a non-empty array`, r)) return null;
  check(c.finish_reason === "tool_calls", `${what}: finish_reason "tool_calls"`, c.finish_reason);
  check(m.content === null || m.content === "" || m.content === undefined, `${what}: no content beside forced calls`, m.content);
  if (exactlyOne) check(calls.length === 1, `${what}: exactly one call`, calls);
  const ids = new Set();
  for (const [i, tc] of calls.entries()) {
    const w = `${what}: call ${i}`;
    check(tc.type === "function", `${w}: type "function"`, tc);
    check(typeof tc.id === "string" && tc.id.length > 0 && !ids.has(tc.id), `${w}: a unique id`, tc.id);
    ids.add(tc.id);
    const name = tc.function && tc.function.name;
    check(Object.hasOwn(SCHEMA_OF, name), `${w}: name among the tools`, name);
    if (only) check(name === only, `${w}: the named function ${only}`, name);
    const args = tc.function && tc.function.arguments;
    if (check(typeof args === "string", `${w}: arguments is a JSON string`, tc) && Object.hasOwn(SCHEMA_OF, name)) {
      const v = parseAndValidate(SCHEMA_OF[name], args);
      check(v.ok, `${w}: arguments validate against ${name}'s parameters`, { arguments: args, errors: v.errors });
    }
  }
  return calls.map((tc) => ({ name: tc.function && tc.function.name, arguments: tc.function && tc.function.arguments }));
}

// Streams a request and assembles the tool calls from delta.tool_calls,
// checking the order of the pieces.
async function streamCalls(what, req, want = { finish: "tool_calls", content: "" }) {
  const stream = await client.chat.completions.create({ ...req, stream: true });
  const calls = [];
  let finish = null, content = "", role = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    const c = chunk.choices && chunk.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if (d.role) role = d.role;
    if (d.content) content += d.content;
    for (const tc of d.tool_calls || []) {
      let e = calls[tc.index];
      if (!e) {
        check(Number.isInteger(tc.index) && tc.index === calls.length,
              `${what}: call indexes start at 0 and go up by one`, { index: tc.index, seen: calls.length });
        e = calls[tc.index] = {
          first: tc, id: tc.id, name: (tc.function && tc.function.name) || "", arguments: "", fragments: 0,
        };
        check(typeof tc.id === "string" && tc.id.length > 0, `${what}: call ${tc.index}: its first delta has the id`, tc);
        check(tc.type === "function", `${what}: call ${tc.index}: its first delta has type "function"`, tc);
        check(tc.function && typeof tc.function.name === "string" && tc.function.name.length > 0,
              `${what}: call ${tc.index}: its first delta has function.name`, tc);
      } else {
        if (tc.id) check(tc.id === e.id, `${what}: call ${tc.index}: a later delta changes the id`, tc);
        if (tc.function && tc.function.name) check(tc.function.name === e.name, `${what}: call ${tc.index}: a later delta changes the name`, tc);
      }
      if (tc.function && typeof tc.function.arguments === "string" && tc.function.arguments.length) {
        e.arguments += tc.function.arguments;
        e.fragments++;
      }
      // a delta for an earlier call after a later one started
      check(tc.index === calls.length - 1, `${what}: deltas of call ${tc.index} after call ${calls.length - 1} began`, tc);
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  check(role === "assistant", `${what}: a first delta with role assistant`, role);
  check(finish === want.finish, `${what}: finish_reason "${want.finish}"`, finish);
  if (want.content !== null) check(content === want.content, `${what}: no content beside forced calls`, content);
  return { calls, chunks };
}

// One call at a time by default: with random weights nothing bounds how many
// parallel calls the model writes (each one valid), so such a request may
// well end at max_tokens; the "parallel allowed" section covers that case.
function req(extra) {
  return { model: MODEL, messages: ASK, tools: TOOLS, max_tokens: 400, temperature: 0, seed: 11, parallel_tool_calls: false, ...extra };
}

function checkStructured(what, r, schema) {
  const c = r.choices && r.choices[0];
  if (!check(c && c.message, `${what}: a choice with a message`, r)) return null;
  check(c.finish_reason === "stop", `${what}: finish_reason "stop" (the schema closed)`, { finish: c.finish_reason, content: c.message.content });
  check(!c.message.tool_calls || c.message.tool_calls.length === 0, `${what}: no tool_calls`, c.message);
  const v = parseAndValidate(schema, c.message.content);
  check(v.ok, `${what}: content validates against the schema`, { content: c.message.content, errors: v.errors });
  return c.message.content;
}

async function expect400(what, body, { param = null, mention = [] } = {}) {
  const r = await postJSON(baseURL + "/chat/completions", body);
  const e = r.json && r.json.error;
  if (!check(r.status === 400, `${what}: HTTP 400`, { status: r.status, body: r.text.slice(0, 600) })) return;
  if (!check(e && typeof e.message === "string", `${what}: an OpenAI error object`, r.text)) return;
  check(e.type === "invalid_request_error", `${what}: type invalid_request_error`, e);
  if (param) check(e.param === param, `${what}: param "${param}"`, e);
  for (const m of mention) check(e.message.includes(m), `${what}: the message names "${m}"`, e.message);
}

// ---- the tests ----

async function main() {
  selfTestValidator(h);

  // tool_choice "required" (parallel_tool_calls false): one call to one of
  // the tools, arguments valid.
  let required = null;
  await h.section("required", async () => {
    const r = await client.chat.completions.create(req({ tool_choice: "required" }));
    required = checkCalls("required", r, { exactlyOne: true });
  });
  // Sampling (temperature 1) explores other paths of the grammar.
  for (const seed of [1, 2, 3, 4]) {
    await h.section(`required, sampled seed ${seed}`, async () => {
      const r = await client.chat.completions.create(req({ tool_choice: "required", temperature: 1, seed }));
      checkCalls(`required, sampled seed ${seed}`, r, { exactlyOne: true });
    });
  }
  // Parallel calls allowed: the model may chain calls until max_tokens. Every
  // call reported is complete and valid; a cut one is not reported, and never
  // shown as text (no content: the calls are forced); streamed, the same calls
  // come (plus at most the start of the cut one).
  await h.section("required, parallel allowed", async () => {
    const q = req({ tool_choice: "required", parallel_tool_calls: true, max_tokens: 150 });
    const r = await client.chat.completions.create(q);
    const c = r.choices[0];
    const calls = c.message.tool_calls || [];
    check(calls.length >= 1, "parallel allowed: at least one call", r);
    check(c.finish_reason === "tool_calls" || c.finish_reason === "length", "parallel allowed: finish_reason", c.finish_reason);
    if (c.finish_reason === "tool_calls") checkCalls("parallel allowed (finished)", r);
    check(!c.message.content, "parallel allowed: no content (a cut call is not text)", c.message.content);
    for (const [i, tc] of calls.entries()) {
      const v = Object.hasOwn(SCHEMA_OF, tc.function.name) ? parseAndValidate(SCHEMA_OF[tc.function.name], tc.function.arguments) : { ok: false };
      check(v.ok, `parallel allowed: call ${i} complete and valid`, { tc, errors: v.errors });
    }
    const ns = calls.map((tc) => ({ name: tc.function.name, arguments: tc.function.arguments }));
    const { calls: st } = await streamCalls("parallel allowed, streamed", q, { finish: c.finish_reason, content: "" });
    const sg = st.map((e) => ({ name: e.name, arguments: e.arguments }));
    check(JSON.stringify(sg.slice(0, ns.length)) === JSON.stringify(ns) && sg.length <= ns.length + 1,
          "parallel allowed: the streamed calls start with the non-streamed ones", { stream: sg, nonstream: ns });
  });
  // A named function: exactly that one.
  for (const name of ["search_docs", "get_time", "get_weather"]) {
    await h.section(`named ${name}`, async () => {
      const r = await client.chat.completions.create(req({
        tool_choice: { type: "function", function: { name } }, parallel_tool_calls: false, temperature: 1, seed: 5,
      }));
      const calls = checkCalls(`named ${name}`, r, { only: name, exactlyOne: true });
      if (calls && name === "get_time") check(JSON.parse(calls[0].arguments) && Object.keys(JSON.parse(calls[0].arguments)).length === 0,
                                              "named get_time: arguments {} (no properties allowed)", calls[0].arguments);
    });
  }
  await h.section("named, parallel allowed", async () => {
    const r = await client.chat.completions.create(req({ tool_choice: { type: "function", function: { name: "get_weather" } } }));
    checkCalls("named, parallel allowed", r, { only: "get_weather" });
  });

  // Streamed tool calls: pieces in order, equal to the non-streamed answer.
  await h.section("streamed required", async () => {
    const { calls } = await streamCalls("streamed required", req({ tool_choice: "required" }));
    check(calls.length === 1, "streamed required: one call (parallel_tool_calls false)", calls);
    for (const [i, e] of calls.entries()) {
      if (!e) continue;
      if (Object.hasOwn(SCHEMA_OF, e.name)) {
        const v = parseAndValidate(SCHEMA_OF[e.name], e.arguments);
        check(v.ok, `streamed required: call ${i}: assembled arguments validate`, { arguments: e.arguments, errors: v.errors });
      }
      if (e.arguments.length >= 12) check(e.fragments >= 2, `streamed required: call ${i}: arguments arrive in fragments`, e);
    }
    const got = calls.map((e) => ({ name: e.name, arguments: e.arguments }));
    check(required && JSON.stringify(got) === JSON.stringify(required), "streamed required equals non-streamed (temperature 0, same seed)",
          { stream: got, nonstream: required });
  });
  await h.section("streamed named", async () => {
    const q = req({ tool_choice: { type: "function", function: { name: "search_docs" } }, parallel_tool_calls: false, temperature: 1, seed: 9 });
    const r = await client.chat.completions.create(q);
    const ns = checkCalls("streamed named (non-streamed)", r, { only: "search_docs", exactlyOne: true });
    const { calls } = await streamCalls("streamed named", q);
    const got = calls.map((e) => ({ name: e.name, arguments: e.arguments }));
    check(ns && JSON.stringify(got) === JSON.stringify(ns), "streamed named equals non-streamed (same seed)", { stream: got, nonstream: ns });
  });

  // tool_choice auto: whatever the model does, the answer is well formed.
  await h.section("auto", async () => {
    const r = await client.chat.completions.create(req({ tool_choice: "auto", max_tokens: 48 }));
    const c = r.choices[0];
    if (c.message.tool_calls && c.message.tool_calls.length) checkCalls("auto (called)", r);
    else {
      check(typeof c.message.content === "string", "auto: text content", c.message);
      check(c.finish_reason === "stop" || c.finish_reason === "length", "auto: finish_reason", c.finish_reason);
    }
  });

  // response_format json_schema (strict), nested.
  let nestedText = null;
  await h.section("json_schema nested", async () => {
    const rf = { type: "json_schema", json_schema: { name: "record", schema: NESTED, strict: true } };
    const msgs = [{ role: "user", content: "Describe a record." }];
    const r = await client.chat.completions.create({ model: MODEL, messages: msgs, response_format: rf, max_tokens: 400, temperature: 0, seed: 3 });
    nestedText = checkStructured("json_schema nested", r, NESTED);
    for (const seed of [1, 2, 3]) {
      const s = await client.chat.completions.create({ model: MODEL, messages: msgs, response_format: rf, max_tokens: 400, temperature: 1, seed });
      checkStructured(`json_schema nested, sampled seed ${seed}`, s, NESTED);
    }
    // streamed: the pieces concatenate to the non-streamed text
    const st = await client.chat.completions.create({ model: MODEL, messages: msgs, response_format: rf, max_tokens: 400, temperature: 0, seed: 3, stream: true });
    let text = "", finish = null;
    for await (const ch of st) {
      if (ch.choices[0]) { text += ch.choices[0].delta.content || ""; finish = ch.choices[0].finish_reason || finish; }
    }
    check(text === nestedText && finish === "stop", "json_schema nested: streamed equals non-streamed", { stream: text, finish, nonstream: nestedText });
  });
  await h.section("json_schema other keywords", async () => {
    const rf = { type: "json_schema", json_schema: { name: "extra", schema: EXTRA, strict: true } };
    const msgs = [{ role: "user", content: "Fill the form." }];
    for (const [temperature, seed] of [[0, 1], [1, 1], [1, 2], [1, 3]]) {
      const r = await client.chat.completions.create({ model: MODEL, messages: msgs, response_format: rf, max_tokens: 400, temperature, seed });
      checkStructured(`json_schema other keywords, temperature ${temperature} seed ${seed}`, r, EXTRA);
    }
  });
  // json_object: any object. Nothing bounds its strings, so random weights
  // may write one until max_tokens (greedy too): an output that stopped is a
  // whole JSON object, one cut at max_tokens a prefix of one.
  await h.section("json_object", async () => {
    for (const [temperature, seed] of [[0, 1], [1, 1], [1, 2]]) {
      const w = `json_object temperature ${temperature} seed ${seed}`;
      const r = await client.chat.completions.create({
        model: MODEL, messages: [{ role: "user", content: "Answer in JSON." }],
        response_format: { type: "json_object" }, max_tokens: temperature ? 48 : 200, temperature, seed,
      });
      const c = r.choices[0];
      const text = c.message.content || "";
      const state = jsonObjectPrefixState(text);
      if (c.finish_reason === "stop") check(state === "complete", `${w}: stopped on a whole JSON object`, { state, content: text });
      else check(c.finish_reason === "length" && state === "prefix" && text.length > 0, `${w}: cut at max_tokens, a prefix of a JSON object`,
                 { finish: c.finish_reason, state, content: text });
    }
  });
  // llama-server's fields: json_schema and grammar (GBNF).
  await h.section("llama-server json_schema", async () => {
    const schema = {
      type: "object", additionalProperties: false, required: ["ok", "n", "word"],
      properties: { ok: { type: "boolean" }, n: { type: "integer", minimum: 0, maximum: 9 }, word: { type: "string", enum: ["red", "green"] } },
    };
    const r = await postJSON(baseURL + "/chat/completions", {
      model: MODEL, messages: [{ role: "user", content: "Go." }], json_schema: schema, max_tokens: 100, temperature: 1, seed: 4,
    });
    if (check(r.status === 200, "json_schema field: HTTP 200", r.text)) checkStructured("json_schema field", r.json, schema);
  });
  await h.section("llama-server grammar", async () => {
    const cases = [
      ['root ::= "yes" | "no"', /^(yes|no)$/],
      ['root ::= [a-c]{3} "-" digit digit\ndigit ::= [0-9]', /^[a-c]{3}-[0-9]{2}$/],
    ];
    for (const [grammar, re] of cases) {
      const r = await postJSON(baseURL + "/chat/completions", {
        model: MODEL, messages: [{ role: "user", content: "Go." }], grammar, max_tokens: 50, temperature: 1, seed: 2,
      });
      if (!check(r.status === 200, `grammar ${JSON.stringify(grammar)}: HTTP 200`, r.text)) continue;
      const c = r.json.choices[0];
      check(re.test(c.message.content), `grammar ${JSON.stringify(grammar)}: output in the language`, c.message.content);
      check(c.finish_reason === "stop", `grammar ${JSON.stringify(grammar)}: finish_reason "stop"`, c.finish_reason);
    }
  });

  // A tool round trip: the assistant's call and the tool's answer go back.
  await h.section("round trip", async () => {
    const conv = (city, result) => [
      { role: "system", content: "You answer questions about the weather." },
      { role: "user", content: "What is the weather in Paris?" },
      {
        role: "assistant", content: null,
        tool_calls: [{ id: "call_w1", type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city, unit: "celsius" }) } }],
      },
      { role: "tool", tool_call_id: "call_w1", content: result },
    ];
    const base = { model: MODEL, tools: [WEATHER], max_tokens: 16, temperature: 0, seed: 1 };
    const a = await client.chat.completions.create({ ...base, messages: conv("Paris", "Sunny, 21 C") });
    const c = a.choices[0];
    check(c && typeof c.message.content === "string" && (c.finish_reason === "stop" || c.finish_reason === "length" || c.finish_reason === "tool_calls"),
          "round trip: an answer", a);
    if (c.message.tool_calls && c.message.tool_calls.length) checkCalls("round trip (called again)", a);
    // The tool's answer and the assistant's call are rendered: longer ones
    // make a longer prompt.
    const b = await client.chat.completions.create({ ...base, messages: conv("Paris", "Sunny, 21 C, light wind from the north-west, humidity 40 percent") });
    check(b.usage.prompt_tokens > a.usage.prompt_tokens, "round trip: the tool message is rendered", { short: a.usage, long: b.usage });
    const d = await client.chat.completions.create({ ...base, messages: conv("Rio de Janeiro do Sul", "Sunny, 21 C") });
    check(d.usage.prompt_tokens > a.usage.prompt_tokens, "round trip: the assistant's tool call is rendered", { short: a.usage, long: d.usage });
    // tool_choice none: no call
    const n = await client.chat.completions.create({ ...base, messages: conv("Paris", "Sunny, 21 C"), tool_choice: "none" });
    check(!n.choices[0].message.tool_calls || n.choices[0].message.tool_calls.length === 0, "round trip, tool_choice none: no tool_calls", n);
    check(n.choices[0].finish_reason !== "tool_calls", "round trip, tool_choice none: finish_reason", n.choices[0].finish_reason);
    // the next turn can be forced again
    const f = await client.chat.completions.create({
      ...base, max_tokens: 200, messages: conv("Paris", "Sunny, 21 C"), tool_choice: "required", parallel_tool_calls: false,
    });
    checkCalls("round trip, next turn required", f, { only: "get_weather", exactlyOne: true });
  });

  // Two calls in one assistant message, each answered (one answer as text
  // parts), then a call of an earlier turn answered after a later one. A
  // template may refuse several calls in one message (Llama 3.2's raises):
  // then the 400 carries the template's own message.
  await h.section("round trip, several calls", async () => {
    const call = (id, city) => ({ id, type: "function", function: { name: "get_weather", arguments: JSON.stringify({ city, unit: "celsius" }) } });
    const msgs = [
      { role: "user", content: "Weather in Paris and Oslo?" },
      { role: "assistant", content: null, tool_calls: [call("call_a", "Paris"), call("call_b", "Oslo")] },
      { role: "tool", tool_call_id: "call_a", content: "Sunny" },
      { role: "tool", tool_call_id: "call_b", content: [{ type: "text", text: "Rain" }] },
    ];
    const r = await postJSON(baseURL + "/chat/completions", { model: MODEL, tools: [WEATHER], messages: msgs, max_tokens: 8, temperature: 0 });
    const refused = r.status === 400 && r.json && r.json.error && /raise_exception/.test(r.json.error.message) && r.json.error.param === "messages";
    check(r.status === 200 || refused, "two calls in one message: answered (or refused by the template itself)", { status: r.status, body: r.text.slice(0, 600) });
    if (r.status === 200) check(r.json.choices[0].message && r.json.usage.prompt_tokens > 20, "two calls in one message: an answer", r.json);
    const later = [
      { role: "user", content: "Weather in Paris?" },
      { role: "assistant", content: null, tool_calls: [call("call_1", "Paris")] },
      { role: "tool", tool_call_id: "call_1", content: "Sunny" },
      { role: "user", content: "And Oslo?" },
      { role: "assistant", content: null, tool_calls: [call("call_2", "Oslo")] },
      { role: "tool", tool_call_id: "call_2", content: "Rain" },
      { role: "tool", tool_call_id: "call_1", content: "Update: cloudy in Paris" },
    ];
    const l = await postJSON(baseURL + "/chat/completions", { model: MODEL, tools: [WEATHER], messages: later, max_tokens: 8, temperature: 0 });
    check(l.status === 200, "a tool message answering a call of an earlier turn is accepted", { status: l.status, body: l.text.slice(0, 600) });
  });

  // developer role (rendered as system) and content as text parts (joined
  // with "\n", docs/chat-templates.md): the same prompt as the plain form.
  await h.section("developer role and content parts", async () => {
    const base = { model: MODEL, max_tokens: 8, temperature: 0, seed: 1 };
    const plain = await client.chat.completions.create({
      ...base, messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hello\nworld" }],
    });
    const parts = await client.chat.completions.create({
      ...base, messages: [
        { role: "developer", content: [{ type: "text", text: "Be brief." }] },
        { role: "user", content: [{ type: "text", text: "Hello" }, { type: "text", text: "world" }] },
      ],
    });
    check(parts.usage.prompt_tokens === plain.usage.prompt_tokens && parts.choices[0].message.content === plain.choices[0].message.content,
          "developer + text parts render like system + the joined string", { plain: [plain.usage, plain.choices[0].message], parts: [parts.usage, parts.choices[0].message] });
    const t = await client.chat.completions.create(req({
      messages: [{ role: "developer", content: "Use tools." }, { role: "user", content: [{ type: "text", text: "Weather in Oslo?" }] }],
      tool_choice: "required",
    }));
    checkCalls("developer role + parts with tools", t);
  });

  // Bad input: 400 with the field named.
  await h.section("bad input", async () => {
    const U = [{ role: "user", content: "Hi" }];
    const rf = (schema) => ({ type: "json_schema", json_schema: { name: "x", schema, strict: true } });
    await expect400("schema maxLength -1", { model: MODEL, messages: U, response_format: rf({ type: "string", maxLength: -1 }) }, { mention: ["maxLength"] });
    // uniqueItems over strings is not enforced (docs/grammar.md: only over finitely many values): strict asks for a 400
    // (patternProperties, the keyword here before, is enforced now)
    await expect400("strict schema uniqueItems", {
      model: MODEL, messages: U, response_format: rf({ type: "array", items: { type: "string" }, uniqueItems: true }),
    }, { mention: ["uniqueItems"] });
    await expect400("json_schema field maxLength -1", { model: MODEL, messages: U, json_schema: { type: "string", maxLength: -1 } }, { mention: ["maxLength"] });
    const badTool = { type: "function", function: { name: "f", strict: true, parameters: { type: "object", properties: { a: { type: "array", items: { type: "string" }, uniqueItems: true } } } } };
    await expect400("strict tool parameters uniqueItems (required)", { model: MODEL, messages: U, tools: [badTool], tool_choice: "required" }, { mention: ["uniqueItems"] });
    await expect400("strict tool parameters uniqueItems (auto)", { model: MODEL, messages: U, tools: [badTool] }, { mention: ["uniqueItems"] });
    await expect400("tool_choice names a missing function", {
      model: MODEL, messages: U, tools: [WEATHER], tool_choice: { type: "function", function: { name: "nope" } },
    }, { param: "tool_choice", mention: ["nope"] });
    await expect400("tool_choice unknown string", { model: MODEL, messages: U, tools: [WEATHER], tool_choice: "sometimes" }, { param: "tool_choice" });
    const call = { role: "assistant", content: null, tool_calls: [{ id: "call_1", type: "function", function: { name: "get_weather", arguments: "{\"city\": \"Oslo\", \"unit\": \"celsius\"}" } }] };
    await expect400("tool message without tool_call_id", { model: MODEL, tools: [WEATHER], messages: [...U, call, { role: "tool", content: "ok" }] }, { param: "messages", mention: ["tool_call_id"] });
    await expect400("tool message with an unknown tool_call_id", {
      model: MODEL, tools: [WEATHER], messages: [...U, call, { role: "tool", tool_call_id: "call_2", content: "ok" }],
    }, { param: "messages", mention: ["tool_call_id"] });
    await expect400("tool message with no earlier call", {
      model: MODEL, tools: [WEATHER], messages: [...U, { role: "tool", tool_call_id: "call_1", content: "ok" }],
    }, { param: "messages" });
    await expect400("tools not an array", { model: MODEL, messages: U, tools: { type: "function" } }, { param: "tools" });
    await expect400("tool without function.name", {
      model: MODEL, messages: U, tools: [{ type: "function", function: { parameters: { type: "object" } } }],
    }, { param: "tools", mention: ["name"] });
    await expect400("response_format json_schema without json_schema", { model: MODEL, messages: U, response_format: { type: "json_schema" } },
                    { mention: ["json_schema"] });
    await expect400("response_format unknown type", { model: MODEL, messages: U, response_format: { type: "xml" } }, { param: "response_format" });
    const g = await postJSON(baseURL + "/chat/completions", { model: MODEL, messages: U, grammar: "root ::= undefined-rule" });
    check(g.status === 400 && g.json && g.json.error && (g.json.error.param === "grammar" || /grammar/.test(g.json.error.message)),
          "invalid GBNF: 400 naming grammar", g.text.slice(0, 600));
    // still serving
    const r = await client.chat.completions.create(req({ tool_choice: "required", max_tokens: 200 }));
    checkCalls("after the bad requests", r);
  });

  // Temperature 0 (and sampled with a seed): a constrained request alone,
  // then 4 at once: identical.
  await h.section("alone vs concurrent", async () => {
    const rf = { type: "json_schema", json_schema: { name: "record", schema: NESTED, strict: true } };
    const js = { model: MODEL, messages: [{ role: "user", content: "Another record, please." }], response_format: rf, max_tokens: 400, temperature: 0 };
    const tc = req({ tool_choice: "required", messages: [{ role: "user", content: "Weather in Lima and docs on the CLI." }] });
    const alone = await client.chat.completions.create(js);
    const aloneT = await client.chat.completions.create(tc);
    checkStructured("alone json_schema", alone, NESTED);
    const aloneCalls = checkCalls("alone tool calls", aloneT);
    // sampled with a seed: reproducible too, whatever runs beside it
    const jsS = { ...js, temperature: 1, seed: 7 };
    const aloneS = await client.chat.completions.create(jsS);
    checkStructured("alone json_schema sampled", aloneS, NESTED);
    // 4 copies of each at once, then the two mixed (2 + 2)
    const batches = [[js, js, js, js], [tc, tc, tc, tc], [js, tc, js, tc], [jsS, tc, jsS, js]];
    for (const [b, batch] of batches.entries()) {
      const rs = await Promise.all(batch.map((q) => client.chat.completions.create(q)));
      for (const [i, r] of rs.entries()) {
        const w = `concurrent batch ${b} request ${i}`;
        if (batch[i] === tc) {
          const got = (r.choices[0].message.tool_calls || []).map((t) => ({ name: t.function.name, arguments: t.function.arguments }));
          check(aloneCalls && JSON.stringify(got) === JSON.stringify(aloneCalls), `${w}: tool calls equal the alone ones`, { got, alone: aloneCalls });
          check(r.choices[0].finish_reason === aloneT.choices[0].finish_reason, `${w}: finish_reason equals the alone one`, r.choices[0].finish_reason);
        } else {
          const a = batch[i] === jsS ? aloneS : alone;
          check(r.choices[0].message.content === a.choices[0].message.content, `${w}: json equals the alone one`,
                { got: r.choices[0].message.content, alone: a.choices[0].message.content });
        }
      }
    }
  });
}

await h.section("main", main);
h.finish();
