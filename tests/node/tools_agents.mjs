// tools_agents.mjs — the OpenAI Agents SDK (@openai/agents) running whole
// agent loops against a kvloom server through its Chat Completions model: a
// function tool with a zod schema, tool_choice "required" for the first turn
// (the SDK resets it after a tool call: resetToolChoice), the tool really
// executed with validated arguments, its result sent back, and a final text
// output; the same streamed; structured final output (outputType). No
// network but the server (tracing off, the client's baseURL is the server).
//   node tests/node/tools_agents.mjs BASE_URL LABEL [DEADLINE_MS]
// Ends with "tools_agents[LABEL]: N passed, N failed".
import OpenAI from "openai";
import { z } from "zod";
import {
  Agent, run, tool, setTracingDisabled, OpenAIChatCompletionsModel, MaxTurnsExceededError,
} from "@openai/agents";
import { harness, recordingFetch, validate, parseAndValidate, selfTestValidator } from "./tools_common.mjs";

const [baseURL, label = "model", deadline = "150000"] = process.argv.slice(2);
const h = harness(`tools_agents[${label}]`, Number(deadline));
const { check } = h;
setTracingDisabled(true);

const log = [];
const client = new OpenAI({ baseURL, apiKey: "none", timeout: 60000, maxRetries: 0, fetch: recordingFetch(log) });
const model = new OpenAIChatCompletionsModel(client, "kvloom");

// The tool's parameters, and the same constraints written as JSON Schema for
// the independent validator.
const Params = z.object({
  city: z.string().min(1).max(20),
  unit: z.enum(["celsius", "fahrenheit"]),
  days: z.number().int().min(1).max(7),
});
const PARAMS_SCHEMA = {
  type: "object", additionalProperties: false, required: ["city", "unit", "days"],
  properties: {
    city: { type: "string", minLength: 1, maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
};

function weatherTool(calls, invalid) {
  return tool({
    name: "get_forecast",
    description: "The weather forecast of a city for a number of days",
    parameters: Params,
    execute: async (args) => {
      calls.push(args);
      return `Forecast for ${args.city}: sunny, 21 degrees ${args.unit}, for ${args.days} days.`;
    },
    // invalid arguments (the SDK's zod parse failed) would land here instead
    // of execute: recorded, so that the test fails on them
    errorFunction: (_ctx, error) => {
      invalid.push(String(error && error.message ? error.message : error));
      return "invalid arguments";
    },
  });
}

async function settle() {
  await Promise.all(log.map((e) => e.done));
}
function requestsSince(n) {
  return log.slice(n).filter((e) => e.url.endsWith("/chat/completions"));
}

function checkToolArgs(what, calls, invalid) {
  check(calls.length >= 1, `${what}: the tool's execute ran`, { calls, invalid });
  check(invalid.length === 0, `${what}: no invalid tool arguments`, invalid);
  for (const [i, a] of calls.entries()) {
    check(Params.safeParse(a).success, `${what}: call ${i}: arguments validate (zod)`, a);
    const errs = validate(PARAMS_SCHEMA, a);
    check(errs.length === 0, `${what}: call ${i}: arguments validate (JSON Schema)`, { a, errs });
  }
}

// One call per turn (parallelToolCalls false): with random weights nothing
// bounds how many parallel calls the model would chain, and the Llama 3.2
// template refuses more than one call per assistant message.
// The requests of one run: the first forced, the tool round trip, the reset.
function checkLoop(what, reqs, calls, { streamed }) {
  if (!check(reqs.length >= 2, `${what}: at least two model requests (call, then answer)`, reqs.map((r) => r.body))) return;
  const [first, second] = reqs;
  check(first.body.tool_choice === "required", `${what}: first request has tool_choice "required"`, first.body.tool_choice);
  check(Array.isArray(first.body.tools) && first.body.tools.length === 1 && first.body.tools[0].function.name === "get_forecast",
        `${what}: first request sends the tool`, first.body.tools);
  check(!!first.body.stream === streamed, `${what}: stream flag`, first.body.stream);
  check(first.body.parallel_tool_calls === false, `${what}: parallel_tool_calls false sent`, first.body.parallel_tool_calls);
  check(first.status === 200 && second.status === 200, `${what}: HTTP 200 for both`, [first.status, second.status, first.response, second.response]);
  // resetToolChoice (default true): after a tool call the SDK drops the
  // forced choice, so the next turn may answer in text.
  check(second.body.tool_choice === undefined || second.body.tool_choice === "auto",
        `${what}: second request's tool_choice reset (resetToolChoice)`, second.body.tool_choice);
  const msgs = second.body.messages || [];
  const asst = msgs.find((m) => m.role === "assistant" && Array.isArray(m.tool_calls) && m.tool_calls.length);
  const toolMsg = msgs.find((m) => m.role === "tool");
  if (check(asst && toolMsg, `${what}: second request carries the assistant's call and the tool's result`, msgs)) {
    check(asst.tool_calls.some((tc) => tc.id === toolMsg.tool_call_id), `${what}: the tool message answers the call's id`, { asst, toolMsg });
    const content = typeof toolMsg.content === "string" ? toolMsg.content : JSON.stringify(toolMsg.content);
    check(calls.length && content.includes(`Forecast for ${calls[0].city}`), `${what}: the tool's result is sent back`, toolMsg);
    for (const tc of asst.tool_calls) {
      const v = parseAndValidate(PARAMS_SCHEMA, tc.function.arguments);
      check(v.ok, `${what}: the call's arguments as the server wrote them validate`, { arguments: tc.function.arguments, errors: v.errors });
    }
  }
}

async function main() {
  selfTestValidator(h);

  // One loop, non-streamed.
  await h.section("agent run", async () => {
    const calls = [], invalid = [];
    const agent = new Agent({
      name: "Forecaster",
      instructions: "You answer weather questions. Use the get_forecast tool.",
      model,
      tools: [weatherTool(calls, invalid)],
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200, providerData: { seed: 1 } },
    });
    check(agent.resetToolChoice === true, "Agent.resetToolChoice defaults to true");
    const n0 = log.length;
    const result = await run(agent, "What will the weather be in Paris this week?", { maxTurns: 4 });
    await settle();
    const reqs = requestsSince(n0);
    checkToolArgs("agent run", calls, invalid);
    checkLoop("agent run", reqs, calls, { streamed: false });
    check(typeof result.finalOutput === "string", "agent run: the final output is a string", result.finalOutput);
    check(reqs.length <= 4, "agent run: within maxTurns", reqs.length);
    const last = reqs[reqs.length - 1];
    let lastJson = null;
    try { lastJson = JSON.parse(last.response); } catch { /* */ }
    check(lastJson && lastJson.choices[0].message.content === result.finalOutput && !lastJson.choices[0].message.tool_calls,
          "agent run: the final output is the last answer's text", { final: result.finalOutput, last: last.response });
  });

  // The next turn of the same conversation (the history with the call and
  // its result, then a new question): the server takes it, and its prefix
  // cache serves what the previous turn already computed (the earlier call
  // is rendered from the same canonical arguments text).
  await h.section("next turn", async () => {
    const calls = [], invalid = [];
    const agent = new Agent({
      name: "Forecaster",
      instructions: "You answer weather questions. Use the get_forecast tool.",
      model,
      tools: [weatherTool(calls, invalid)],
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200, providerData: { seed: 5 } },
    });
    const n0 = log.length;
    const first = await run(agent, "What will the weather be in Madrid?", { maxTurns: 4 });
    await settle();
    const reqs1 = requestsSince(n0);
    const n1 = log.length;
    const second = await run(agent, [...first.history, { role: "user", content: "And in Lisbon?" }], { maxTurns: 4 });
    await settle();
    const reqs2 = requestsSince(n1);
    checkToolArgs("next turn", calls, invalid);
    check(calls.length >= 2, "next turn: the tool ran in both runs", calls);
    check(typeof second.finalOutput === "string", "next turn: a final output", second.finalOutput);
    const last1 = reqs1[reqs1.length - 1], first2 = reqs2[0];
    let u1 = null, u2 = null;
    try { u1 = JSON.parse(last1.response).usage; u2 = JSON.parse(first2.response).usage; } catch { /* */ }
    check(u1 && u2 && first2.body.messages.length > last1.body.messages.length, "next turn: the history grew", { m1: last1 && last1.body.messages.length, m2: first2 && first2.body.messages.length });
    // everything the last request of run 1 computed, but at most the last
    // partial block (16 tokens) and one more block, comes from the cache
    check(u1 && u2 && u2.prompt_tokens_details.cached_tokens >= u1.prompt_tokens - 32,
          "next turn: the previous turn's prompt comes from the prefix cache", { previous: u1, next: u2 });
  });

  // Without the reset, "required" forces a call on every turn: the run
  // cannot end, and the SDK stops it at maxTurns.
  await h.section("no resetToolChoice", async () => {
    const calls = [], invalid = [];
    const agent = new Agent({
      name: "Looper",
      instructions: "Use the get_forecast tool.",
      model,
      tools: [weatherTool(calls, invalid)],
      resetToolChoice: false,
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 1, maxTokens: 200, providerData: { seed: 2 } },
    });
    const n0 = log.length;
    let err = null;
    try {
      await run(agent, "Weather in Rome?", { maxTurns: 3 });
    } catch (e) {
      err = e;
    }
    await settle();
    const reqs = requestsSince(n0);
    check(err instanceof MaxTurnsExceededError, "no resetToolChoice: MaxTurnsExceededError", String(err && err.stack ? err.stack : err));
    check(reqs.length === 3 && reqs.every((r) => r.body.tool_choice === "required"), "no resetToolChoice: 3 forced requests",
          reqs.map((r) => r.body.tool_choice));
    check(calls.length === 3, "no resetToolChoice: the tool ran on each turn", { calls, invalid });
    checkToolArgs("no resetToolChoice", calls, invalid);
  });

  // The same loop streamed (delta.tool_calls through the SDK's stream parser).
  await h.section("agent run streamed", async () => {
    const calls = [], invalid = [];
    const agent = new Agent({
      name: "Forecaster",
      instructions: "You answer weather questions. Use the get_forecast tool.",
      model,
      tools: [weatherTool(calls, invalid)],
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200, providerData: { seed: 3 } },
    });
    const n0 = log.length;
    const result = await run(agent, "And in Tokyo?", { maxTurns: 4, stream: true });
    let events = 0;
    for await (const _ev of result) events++;
    await result.completed;
    await settle();
    const reqs = requestsSince(n0);
    check(events > 0, "agent run streamed: stream events");
    checkToolArgs("agent run streamed", calls, invalid);
    checkLoop("agent run streamed", reqs, calls, { streamed: true });
    check(typeof result.finalOutput === "string", "agent run streamed: the final output is a string", result.finalOutput);
    check(reqs.length > 0 && /"finish_reason":"tool_calls"/.test(reqs[0].response || ""), "agent run streamed: first stream ends with tool_calls",
          (reqs[0] && reqs[0].response || "").slice(-600));
  });

  // Structured final output: outputType (response_format json_schema).
  await h.section("structured output", async () => {
    const Out = z.object({
      verdict: z.enum(["sunny", "rainy", "cloudy"]),
      high: z.number().int().min(-30).max(50),
      summary: z.string().max(20),
    });
    const OUT_SCHEMA = {
      type: "object", additionalProperties: false, required: ["verdict", "high", "summary"],
      properties: {
        verdict: { type: "string", enum: ["sunny", "rainy", "cloudy"] },
        high: { type: "integer", minimum: -30, maximum: 50 },
        summary: { type: "string", maxLength: 20 },
      },
    };
    const agent = new Agent({
      name: "Reporter", instructions: "Report the weather.", model, outputType: Out,
      modelSettings: { temperature: 1, maxTokens: 200, providerData: { seed: 4 } },
    });
    const n0 = log.length;
    const result = await run(agent, "Weather report for Berlin.", { maxTurns: 2 });
    await settle();
    const reqs = requestsSince(n0);
    const rf = reqs[0] && reqs[0].body.response_format;
    check(rf && rf.type === "json_schema" && rf.json_schema && rf.json_schema.strict === true, "structured output: response_format json_schema strict", rf);
    check(Out.safeParse(result.finalOutput).success, "structured output: final output validates (zod)", result.finalOutput);
    check(validate(OUT_SCHEMA, result.finalOutput).length === 0, "structured output: final output validates (JSON Schema)",
          validate(OUT_SCHEMA, result.finalOutput ?? null));
  });
}

await h.section("main", main);
h.finish();
