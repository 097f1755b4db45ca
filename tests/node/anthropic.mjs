// anthropic.mjs — the Anthropic Messages API of a kvloom server through the
// official `@anthropic-ai/sdk` client: messages.create (whole and
// stream: true), the messages.stream helper and its finalMessage(), a tool
// round trip (tool_use -> tool_result -> answer), thinking blocks,
// countTokens, and errors surfacing as the SDK's typed errors. The server
// runs with --api-key KEY (the SDK sends it as x-api-key) on a model with
// random weights: only constrained decoding makes the tool calls valid, and
// every one is validated here against its schema. No network but the server.
//   node tests/node/anthropic.mjs BASE_URL API_KEY [DEADLINE_MS]
// Ends with "anthropic: N passed, N failed".
import Anthropic from "@anthropic-ai/sdk";
import { harness, validate, selfTestValidator } from "./tools_common.mjs";

const [baseURL, apiKey, deadline = "150000"] = process.argv.slice(2);
const h = harness("anthropic", Number(deadline));
const { check } = h;
const client = new Anthropic({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });

const INPUT_SCHEMA = {
  type: "object", additionalProperties: false, required: ["city", "unit", "days"],
  properties: {
    city: { type: "string", minLength: 1, maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
};
const FORECAST = { name: "get_forecast", description: "The weather forecast of a city", input_schema: INPUT_SCHEMA };
const USER = { role: "user", content: "What will the weather be in Lyon for the next three days?" };

const textOf = (m) => m.content.filter((b) => b.type === "text").map((b) => b.text).join("");
const STOP_REASONS = ["end_turn", "max_tokens", "stop_sequence", "tool_use"];

function checkMessage(m, what) {
  check(typeof m.id === "string" && m.id.startsWith("msg_"), `${what}: id msg_...`, m.id);
  check(m.type === "message" && m.role === "assistant", `${what}: an assistant message`, [m.type, m.role]);
  check(Array.isArray(m.content) && m.content.length >= 1, `${what}: content blocks`, m.content);
  check(STOP_REASONS.includes(m.stop_reason), `${what}: stop_reason`, m.stop_reason);
  const u = m.usage ?? {};
  check(Number.isInteger(u.input_tokens) && Number.isInteger(u.output_tokens) && u.output_tokens > 0 &&
        Number.isInteger(u.cache_read_input_tokens) && u.input_tokens + u.cache_read_input_tokens > 0,
        `${what}: usage`, u);
}

function checkToolUse(m, what) {
  const uses = m.content.filter((b) => b.type === "tool_use");
  check(m.stop_reason === "tool_use", `${what}: stop_reason tool_use`, m.stop_reason);
  check(uses.length >= 1, `${what}: a tool_use block`, m.content);
  for (const u of uses) {
    check(typeof u.id === "string" && u.id.startsWith("toolu_"), `${what}: tool_use id toolu_...`, u.id);
    check(u.name === "get_forecast", `${what}: tool name`, u.name);
    const errs = validate(INPUT_SCHEMA, u.input);
    check(errs.length === 0, `${what}: input satisfies the schema`, { input: u.input, errs });
  }
  return uses;
}

selfTestValidator(h);

await h.section("create: text", async () => {
  const params = { model: "kvloom", max_tokens: 16, temperature: 0, system: "You are terse.", messages: [USER] };
  const m = await client.messages.create(params);
  checkMessage(m, "create");
  check(m.content[0].type === "text" && typeof m.content[0].text === "string", "create: a text block", m.content);

  // the same request streamed through the helper: the same message
  const stream = client.messages.stream(params);
  const seen = [];
  stream.on("streamEvent", (ev) => seen.push(ev.type));
  let streamed = "";
  stream.on("text", (t) => { streamed += t; });
  const f = await stream.finalMessage();
  checkMessage(f, "stream helper");
  check(textOf(f) === textOf(m) && streamed === textOf(m), "stream helper: the same text as create",
        { create: textOf(m), final: textOf(f), streamed });
  check(f.stop_reason === m.stop_reason && f.usage.output_tokens === m.usage.output_tokens,
        "stream helper: stop_reason and output_tokens as create", [f.stop_reason, m.stop_reason, f.usage, m.usage]);
  check(f.usage.cache_read_input_tokens > 0, "stream helper: the repeated prompt is read from the cache", f.usage);
  check(seen[0] === "message_start" && seen.at(-1) === "message_stop" && seen.includes("content_block_delta"),
        "stream helper: the event sequence", seen);

  // raw events of stream: true
  const raw = await client.messages.create({ ...params, stream: true });
  const types = [];
  let text = "";
  for await (const ev of raw) {
    types.push(ev.type);
    if (ev.type === "content_block_delta" && ev.delta.type === "text_delta") text += ev.delta.text;
  }
  check(types[0] === "message_start" && types.at(-2) === "message_delta" && types.at(-1) === "message_stop",
        "stream: true: framing events", types);
  check(text === textOf(m), "stream: true: deltas == create's text", { text, create: textOf(m) });

  // max_tokens and stop_sequences
  const short = await client.messages.create({ ...params, max_tokens: 2 });
  check(short.stop_reason === "max_tokens" && short.usage.output_tokens === 2, "max_tokens: stop_reason", short);
  const t = textOf(m);
  if (t.length >= 6) {
    const piece = t.slice(3, 5);
    const s = await client.messages.create({ ...params, stop_sequences: [piece] });
    check(s.stop_reason === "stop_sequence" && s.stop_sequence === piece, "stop_sequences: stop_reason and stop_sequence",
          [s.stop_reason, s.stop_sequence, piece]);
    check(textOf(s) === t.slice(0, t.indexOf(piece)), "stop_sequences: the text ends before it", [textOf(s), t, piece]);
  }

  // countTokens: the prompt create computed or read
  const ct = await client.messages.countTokens({ model: "kvloom", system: params.system, messages: params.messages });
  check(ct.input_tokens === m.usage.input_tokens + m.usage.cache_read_input_tokens, "countTokens: the prompt's tokens",
        [ct, m.usage]);
});

await h.section("tool round trip", async () => {
  const params = {
    model: "kvloom", max_tokens: 200, temperature: 0, tools: [FORECAST],
    tool_choice: { type: "tool", name: "get_forecast" }, messages: [USER],
  };
  const m = await client.messages.create(params);
  checkMessage(m, "tool_use");
  const uses = checkToolUse(m, "tool_use");
  // streamed: the SDK assembles input_json_delta into the same input
  const f = await client.messages.stream(params).finalMessage();
  const su = checkToolUse(f, "streamed tool_use");
  check(JSON.stringify(su.map((u) => u.input)) === JSON.stringify(uses.map((u) => u.input)),
        "streamed tool_use: the same input as create", [su, uses]);
  // the results go back; the model answers (or calls again: any is valid)
  const next = await client.messages.create({
    model: "kvloom", max_tokens: 24, temperature: 0, tools: [FORECAST],
    messages: [
      USER,
      { role: "assistant", content: m.content },
      { role: "user", content: uses.map((u) => ({ type: "tool_result", tool_use_id: u.id, content: "Sunny, 21 C" })) },
    ],
  });
  checkMessage(next, "after tool_result");
  check(next.usage.cache_read_input_tokens > 0, "after tool_result: the conversation so far comes from the cache", next.usage);
  for (const u of next.content.filter((b) => b.type === "tool_use"))
    check(validate(INPUT_SCHEMA, u.input).length === 0, "after tool_result: a new call is valid", u);
  // any: a call to some tool
  const any = await client.messages.create({ ...params, tool_choice: { type: "any" } });
  checkToolUse(any, "tool_choice any");
});

await h.section("thinking", async () => {
  // the grammar (a kvloom extension, passed through) makes the random model
  // think, then answer
  const m = await client.messages.create({
    model: "kvloom", max_tokens: 64, temperature: 0, thinking: { type: "enabled", budget_tokens: 1024 },
    messages: [{ role: "user", content: "Think." }],
    grammar: 'root ::= "<think>\\n" [a-z]{3,8} "\\n</think>\\n\\n" [A-Z]{2,6}',
  });
  check(m.content.length === 2 && m.content[0].type === "thinking" && /^[a-z]{3,8}$/.test(m.content[0].thinking),
        "thinking: a thinking block first", m.content);
  check(/^[A-Z]{2,6}$/.test(textOf(m)), "thinking: then the text", m.content);
});

await h.section("errors", async () => {
  try {
    await client.messages.create({ model: "kvloom", max_tokens: 0, messages: [USER] });
    check(false, "max_tokens 0: an error");
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && e.status === 400, "max_tokens 0: BadRequestError", [e.name, e.status]);
    check(e.error?.type === "error" && e.error?.error?.type === "invalid_request_error" &&
          /max_tokens/.test(e.error?.error?.message), "max_tokens 0: Anthropic's error body", e.error);
  }
  try {
    await client.messages.create({ model: "kvloom", max_tokens: 4, messages: [{ role: "user", content: [{ type: "image", source: { type: "base64", media_type: "image/png", data: "" } }] }] });
    check(false, "image block: an error");
  } catch (e) {
    check(e instanceof Anthropic.BadRequestError && /image/.test(e.error?.error?.message), "image block: BadRequestError naming it",
          [e.name, e.error]);
  }
  const wrong = new Anthropic({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  try {
    await wrong.messages.create({ model: "kvloom", max_tokens: 4, messages: [USER] });
    check(false, "wrong key: an error");
  } catch (e) {
    check(e instanceof Anthropic.AuthenticationError && e.error?.error?.type === "authentication_error",
          "wrong key: AuthenticationError", [e.name, e.error]);
  }
});

h.finish();
