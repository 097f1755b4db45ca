// responses.mjs — the OpenAI Responses API of a kvloom server through real
// clients: the `openai` package's client.responses (create, streamed create,
// the stream helper, parse with a zod text format, retrieve, delete, a tool
// round trip inline and through previous_response_id, errors) and the OpenAI
// Agents SDK on its DEFAULT model (the Responses model of the default
// provider, with a client whose baseURL is the server), running whole agent
// loops with a function tool. The model has random weights: only
// constrained decoding makes calls and structured outputs valid, and every
// one is validated here against its schema. No network but the server.
//   node tests/node/responses.mjs BASE_URL [DEADLINE_MS]
// Ends with "responses: N passed, N failed".
import OpenAI from "openai";
import { zodTextFormat } from "openai/helpers/zod";
import { z } from "zod";
import {
  Agent, run, tool, setTracingDisabled, setDefaultOpenAIClient, setOpenAIAPI, OpenAIResponsesModel,
} from "@openai/agents";
import { harness, recordingFetch, validate, parseAndValidate, selfTestValidator, postJSON } from "./tools_common.mjs";

const [baseURL, deadline = "150000"] = process.argv.slice(2);
const h = harness("responses", Number(deadline));
const { check } = h;
setTracingDisabled(true);

const log = [];
const client = new OpenAI({ baseURL, apiKey: "none", timeout: 60000, maxRetries: 0, fetch: recordingFetch(log) });

const PARAMS_SCHEMA = {
  type: "object", additionalProperties: false, required: ["city", "unit", "days"],
  properties: {
    city: { type: "string", minLength: 1, maxLength: 20 },
    unit: { type: "string", enum: ["celsius", "fahrenheit"] },
    days: { type: "integer", minimum: 1, maximum: 7 },
  },
};
const FORECAST_TOOL = {
  type: "function", name: "get_forecast", description: "The weather forecast of a city", parameters: PARAMS_SCHEMA, strict: true,
};

async function settle() {
  await Promise.all(log.map((e) => e.done));
}
function requestsSince(n) {
  return log.slice(n).filter((e) => e.url.endsWith("/responses"));
}
const textOf = (r) => r.output.filter((i) => i.type === "message").flatMap((m) => m.content).map((c) => c.text ?? "").join("");

// The events of a streamed create, checked as they come: sequence numbers
// from 0, the documented frame of a response.
async function collect(stream) {
  const events = [];
  for await (const ev of stream) events.push(ev);
  check(events.every((e, i) => e.sequence_number === i), "stream: sequence_number counts from 0", events.map((e) => e.sequence_number));
  check(events[0]?.type === "response.created" && events[1]?.type === "response.in_progress", "stream: created, in_progress first",
        events.slice(0, 2).map((e) => e.type));
  const last = events[events.length - 1];
  check(last && (last.type === "response.completed" || last.type === "response.incomplete"), "stream: ends completed or incomplete",
        last && last.type);
  return events;
}

async function main() {
  selfTestValidator(h);

  await h.section("create", async () => {
    const req = { model: "kvloom", input: "Tell me about the weather.", instructions: "You are brief.", max_output_tokens: 24, temperature: 0 };
    const r = await client.responses.create(req);
    check(r.object === "response" && /^resp_/.test(r.id), "create: a response object", r);
    check(r.status === "completed" || r.status === "incomplete", "create: status", r.status);
    check(typeof r.output_text === "string" && r.output_text === textOf(r), "create: output_text (the SDK's helper)", r.output_text);
    check(r.usage.input_tokens > 0 && r.usage.output_tokens > 0 && r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens,
          "create: usage", r.usage);
    check(r.instructions === "You are brief." && r.max_output_tokens === 24, "create: request fields echoed", r);

    // streamed: the deltas are the whole text
    const events = await collect(await client.responses.create({ ...req, stream: true }));
    const deltas = events.filter((e) => e.type === "response.output_text.delta").map((e) => e.delta).join("");
    const final = events[events.length - 1].response;
    check(deltas === r.output_text, "stream: deltas == the non-streamed text (temperature 0)", { deltas, whole: r.output_text });
    check(textOf(final) === r.output_text, "stream: final response text", textOf(final));
    const types = events.map((e) => e.type);
    const want = ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"];
    check(want.every((t, i) => types[i] === t), "stream: the message opens in order", types.slice(0, 4));
    const tail = ["response.output_text.done", "response.content_part.done", "response.output_item.done"];
    check(tail.every((t, i) => types[types.length - 4 + i] === t), "stream: the message closes in order", types.slice(-4));

    // the stream helper
    const s = client.responses.stream(req);
    let n = 0;
    s.on("response.output_text.delta", () => n++);
    const fr = await s.finalResponse();
    check(fr.output_text === r.output_text && n > 0, "responses.stream: finalResponse().output_text", { got: fr.output_text, n });
  });

  await h.section("tool round trip", async () => {
    const tools = [FORECAST_TOOL];
    const r1 = await client.responses.create({
      model: "kvloom", input: "What will the weather be in Paris?", tools, tool_choice: "required", parallel_tool_calls: false,
      max_output_tokens: 200, temperature: 0,
    });
    const calls = r1.output.filter((i) => i.type === "function_call");
    check(calls.length === 1 && calls[0].name === "get_forecast" && /^call_/.test(calls[0].call_id) && calls[0].status === "completed",
          "required: one function_call item", r1.output);
    if (!calls.length) return;
    const v = parseAndValidate(PARAMS_SCHEMA, calls[0].arguments);
    check(v.ok, "required: the arguments validate", { arguments: calls[0].arguments, errors: v.errors });

    // streamed: argument deltas assemble to the call
    const events = await collect(await client.responses.create({
      model: "kvloom", input: "What will the weather be in Paris?", tools, tool_choice: "required", parallel_tool_calls: false,
      max_output_tokens: 200, temperature: 0, stream: true,
    }));
    const args = events.filter((e) => e.type === "response.function_call_arguments.delta").map((e) => e.delta).join("");
    const done = events.find((e) => e.type === "response.function_call_arguments.done");
    check(done && done.arguments === args && args === calls[0].arguments, "stream: argument deltas == done == whole", { args, done });

    // inline: the items back with the output
    const r2 = await client.responses.create({
      model: "kvloom", tools, tool_choice: "none", max_output_tokens: 16, temperature: 0,
      input: [
        { role: "user", content: "What will the weather be in Paris?" },
        ...r1.output,
        { type: "function_call_output", call_id: calls[0].call_id, output: "Sunny, 21 degrees." },
      ],
    });
    check(r2.output.some((i) => i.type === "message") && typeof r2.output_text === "string", "inline round trip: a message", r2.output);
    check(r2.usage.input_tokens_details.cached_tokens > 0, "inline round trip: the first turn from the cache", r2.usage);

    // chained: only the tool's output, after previous_response_id
    const r3 = await client.responses.create({
      model: "kvloom", tools, tool_choice: "none", max_output_tokens: 16, temperature: 0, previous_response_id: r1.id,
      input: [{ type: "function_call_output", call_id: calls[0].call_id, output: "Sunny, 21 degrees." }],
    });
    check(r3.previous_response_id === r1.id && r3.usage.input_tokens === r2.usage.input_tokens,
          "previous_response_id: the same prompt as the inline round trip", { r2: r2.usage, r3: r3.usage });
    check(r3.usage.input_tokens_details.cached_tokens >= r1.usage.input_tokens - 16, "previous_response_id: from the cache", r3.usage);
  });

  await h.section("structured output", async () => {
    const Report = z.object({ verdict: z.enum(["sunny", "rainy"]), high: z.number().int().min(-30).max(50) });
    const r = await client.responses.parse({
      model: "kvloom", input: "Weather report.", text: { format: zodTextFormat(Report, "report") }, max_output_tokens: 100, temperature: 1,
    });
    check(Report.safeParse(r.output_parsed).success, "parse: output_parsed validates (zod)", r.output_text);
  });

  await h.section("retrieve and delete", async () => {
    const r = await client.responses.create({ model: "kvloom", input: "Hi", max_output_tokens: 4, metadata: { run: "1" } });
    const g = await client.responses.retrieve(r.id);
    check(g.id === r.id && JSON.stringify(g.output) === JSON.stringify(r.output) && g.metadata.run === "1", "retrieve: the stored response", g);
    const d = await client.responses.delete(r.id);
    check(d === undefined || d === null || d.deleted === true || typeof d === "object", "delete: answered", d);
    let err = null;
    try { await client.responses.retrieve(r.id); } catch (e) { err = e; }
    check(err instanceof OpenAI.NotFoundError, "retrieve after delete: 404", String(err));
    err = null;
    try { await client.responses.create({ model: "kvloom", input: "Hi", previous_response_id: r.id }); } catch (e) { err = e; }
    check(err && err.status === 404 && err.error?.param === "previous_response_id", "previous_response_id deleted: 404 naming it", err && err.error);
    const bad = await postJSON(`${baseURL}/responses`, { input: "x", tools: [{ type: "web_search" }] });
    check(bad.status === 400 && /web_search/.test(bad.json?.error?.message) && bad.json.error.param === "tools",
          "a hosted tool: 400 naming it", bad.json);
  });

  // The Agents SDK on its default model: the default provider's Responses
  // model, with the server as the default client.
  const calls = [], invalid = [];
  const Params = z.object({
    city: z.string().min(1).max(20), unit: z.enum(["celsius", "fahrenheit"]), days: z.number().int().min(1).max(7),
  });
  const forecast = tool({
    name: "get_forecast", description: "The weather forecast of a city for a number of days", parameters: Params,
    execute: async (a) => { calls.push(a); return `Forecast for ${a.city}: sunny, 21 degrees ${a.unit}, for ${a.days} days.`; },
    errorFunction: (_ctx, error) => { invalid.push(String(error?.message ?? error)); return "invalid arguments"; },
  });
  function checkLoop(what, reqs, { streamed }) {
    if (!check(reqs.length >= 2, `${what}: two model requests or more (call, answer)`, reqs.map((r) => r.body))) return;
    const [first, second] = reqs;
    check(reqs.every((r) => r.url.endsWith("/responses")), `${what}: the Responses API`, reqs.map((r) => r.url));
    check(first.body.tool_choice === "required" && first.body.tools?.[0]?.name === "get_forecast", `${what}: first request forces the tool`, first.body);
    check(!!first.body.stream === streamed, `${what}: stream flag`, first.body.stream);
    check(reqs.every((r) => r.status === 200), `${what}: HTTP 200`, reqs.map((r) => [r.status, r.response]));
    check(second.body.tool_choice === undefined || second.body.tool_choice === "auto", `${what}: tool_choice reset after the call`, second.body.tool_choice);
    const input = Array.isArray(second.body.input) ? second.body.input : [];
    const fc = input.find((i) => i.type === "function_call"), out = input.find((i) => i.type === "function_call_output");
    if (check(fc && out && fc.call_id === out.call_id, `${what}: the call and its output go back`, input)) {
      check(parseAndValidate(PARAMS_SCHEMA, fc.arguments).ok, `${what}: the call's arguments validate`, fc.arguments);
      check(calls.length > 0 && String(out.output).includes(`Forecast for ${calls[calls.length - 1].city}`), `${what}: the tool's result`, out);
    }
    check(calls.length > 0 && invalid.length === 0 && calls.every((a) => validate(PARAMS_SCHEMA, a).length === 0),
          `${what}: the tool ran with valid arguments`, { calls, invalid });
  }

  await h.section("agents: default model", async () => {
    setDefaultOpenAIClient(client);
    setOpenAIAPI("responses");
    const agent = new Agent({
      name: "Forecaster", instructions: "You answer weather questions. Use the get_forecast tool.", tools: [forecast],
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200, providerData: { seed: 1 } },
    });
    const n0 = log.length;
    const result = await run(agent, "What will the weather be in Paris this week?", { maxTurns: 4 });
    await settle();
    const reqs = requestsSince(n0);
    check(reqs.length > 0 && typeof reqs[0].body.model === "string" && reqs[0].body.model !== "kvloom", "default model: the SDK's default model name",
          reqs[0] && reqs[0].body.model);
    checkLoop("default model", reqs, { streamed: false });
    check(typeof result.finalOutput === "string", "default model: a final output", result.finalOutput);
    const last = reqs[reqs.length - 1];
    let lastJson = null;
    try { lastJson = JSON.parse(last.response); } catch { /* */ }
    check(lastJson && textOf(lastJson) === result.finalOutput, "default model: the final output is the last response's text",
          { final: result.finalOutput, last: last && last.response });
    check(lastJson && result.lastResponseId === lastJson.id, "default model: lastResponseId", result.lastResponseId);

    // the next turn chained by previous_response_id: only the new input goes
    const n1 = log.length;
    const next = await run(agent, "And in Lisbon?", { maxTurns: 4, previousResponseId: result.lastResponseId });
    await settle();
    const reqs2 = requestsSince(n1);
    check(reqs2[0] && reqs2[0].body.previous_response_id === result.lastResponseId, "next turn: previous_response_id sent", reqs2[0] && reqs2[0].body);
    let u = null;
    try { u = JSON.parse(reqs2[0].response).usage; } catch { /* */ }
    check(u && lastJson && u.input_tokens > lastJson.usage.input_tokens && u.input_tokens_details.cached_tokens >= lastJson.usage.input_tokens - 16,
          "next turn: the stored conversation is the prompt's prefix (cached)", { previous: lastJson && lastJson.usage, next: u });
    check(typeof next.finalOutput === "string", "next turn: a final output", next.finalOutput);
  });

  await h.section("agents: streamed", async () => {
    const agent = new Agent({
      name: "Forecaster", instructions: "You answer weather questions. Use the get_forecast tool.", tools: [forecast],
      model: new OpenAIResponsesModel(client, "kvloom"),
      modelSettings: { toolChoice: "required", parallelToolCalls: false, temperature: 0, maxTokens: 200, providerData: { seed: 3 } },
    });
    const n0 = log.length;
    const result = await run(agent, "And in Tokyo?", { maxTurns: 4, stream: true });
    let n = 0;
    for await (const _ev of result) n++;
    await result.completed;
    await settle();
    const reqs = requestsSince(n0);
    check(n > 0, "streamed: events");
    checkLoop("streamed", reqs, { streamed: true });
    check(typeof result.finalOutput === "string", "streamed: a final output", result.finalOutput);
    check(/event: response\.function_call_arguments\.done/.test(reqs[0]?.response || ""), "streamed: the first stream carries the call",
          (reqs[0]?.response || "").slice(-400));
  });

  await h.section("agents: structured output", async () => {
    const Out = z.object({ verdict: z.enum(["sunny", "rainy", "cloudy"]), high: z.number().int().min(-30).max(50) });
    const agent = new Agent({
      name: "Reporter", instructions: "Report the weather.", outputType: Out,
      modelSettings: { temperature: 1, maxTokens: 200, providerData: { seed: 4 } },
    });
    const n0 = log.length;
    const result = await run(agent, "Weather report for Berlin.", { maxTurns: 2 });
    await settle();
    const reqs = requestsSince(n0);
    const fmt = reqs[0]?.body.text?.format;
    check(fmt && fmt.type === "json_schema" && fmt.strict === true, "structured: text.format json_schema strict", fmt);
    check(Out.safeParse(result.finalOutput).success, "structured: the final output validates (zod)", result.finalOutput);
  });
}

await h.section("main", main);
h.finish();
