// tools_vercel.mjs — the Vercel AI SDK (`ai` + @ai-sdk/openai-compatible)
// against a kvloom server: generateObject / streamObject with zod schemas
// (structured outputs: response_format json_schema; the SDK throws when the
// object does not validate), and generateText / streamText with a tool and
// toolChoice 'required' / a named tool (the call's input validated by zod),
// and a two-step tool loop.
//   node tests/node/tools_vercel.mjs BASE_URL LABEL [DEADLINE_MS]
// Ends with "tools_vercel[LABEL]: N passed, N failed".
import { z } from "zod";
import { generateObject, streamObject, generateText, streamText, tool, stepCountIs } from "ai";
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { harness, recordingFetch, validate, selfTestValidator } from "./tools_common.mjs";

const [baseURL, label = "model", deadline = "150000"] = process.argv.slice(2);
const h = harness(`tools_vercel[${label}]`, Number(deadline));
const { check } = h;

const log = [];
const provider = createOpenAICompatible({
  name: "kvloom", baseURL, apiKey: "none", supportsStructuredOutputs: true, includeUsage: true,
  fetch: recordingFetch(log),
});
const model = provider.chatModel("kvloom");
const signal = () => AbortSignal.timeout(60000);

// zod schemas and the same constraints as JSON Schema (independent check).
const Record = z.object({
  kind: z.enum(["alpha", "beta", "gamma"]),
  count: z.number().int().min(0).max(100),
  tags: z.array(z.string().max(8)).min(1).max(3),
  owner: z.object({ name: z.string().max(20), active: z.boolean() }),
  note: z.string().max(20),
});
const RECORD_SCHEMA = {
  type: "object", additionalProperties: false, required: ["kind", "count", "tags", "owner", "note"],
  properties: {
    kind: { type: "string", enum: ["alpha", "beta", "gamma"] },
    count: { type: "integer", minimum: 0, maximum: 100 },
    tags: { type: "array", items: { type: "string", maxLength: 8 }, minItems: 1, maxItems: 3 },
    owner: {
      type: "object", additionalProperties: false, required: ["name", "active"],
      properties: { name: { type: "string", maxLength: 20 }, active: { type: "boolean" } },
    },
    note: { type: "string", maxLength: 20 },
  },
};
const Lookup = z.object({ city: z.string().min(1).max(20), unit: z.enum(["celsius", "fahrenheit"]) });
const LOOKUP_SCHEMA = {
  type: "object", additionalProperties: false, required: ["city", "unit"],
  properties: { city: { type: "string", minLength: 1, maxLength: 20 }, unit: { type: "string", enum: ["celsius", "fahrenheit"] } },
};
const Convert = z.object({ amount: z.number().int().min(1).max(1000), currency: z.enum(["EUR", "USD", "JPY"]) });

function makeTools(executed) {
  return {
    get_weather: tool({
      description: "Current weather of a city",
      inputSchema: Lookup,
      execute: async (input) => { executed.push(["get_weather", input]); return { city: input.city, sky: "sunny", degrees: 21 }; },
    }),
    convert: tool({
      description: "Convert an amount of money",
      inputSchema: Convert,
      execute: async (input) => { executed.push(["convert", input]); return { result: input.amount * 2 }; },
    }),
  };
}
// One call per step: with random weights nothing bounds how many parallel
// calls the model would chain (the extra body field goes through
// providerOptions).
const ONE_CALL = { kvloom: { parallel_tool_calls: false } };
const SCHEMAS = { get_weather: [Lookup, LOOKUP_SCHEMA], convert: [Convert, null] };

// The content of a chat answer as the server sent it: a whole answer's
// message.content, or a stream's delta.content joined.
function answerContent(raw) {
  if (typeof raw !== "string") return null;
  if (!raw.startsWith("data:")) return JSON.parse(raw).choices[0].message.content ?? "";
  let s = "";
  for (const line of raw.split("\n")) {
    if (!line.startsWith("data: {")) continue;
    const c = JSON.parse(line.slice(6)).choices;
    if (c && c[0] && c[0].delta && c[0].delta.content) s += c[0].delta.content;
  }
  return s;
}

function checkToolCalls(what, toolCalls, { only = null } = {}) {
  if (!check(Array.isArray(toolCalls) && toolCalls.length >= 1, `${what}: tool calls`, toolCalls)) return;
  for (const [i, tc] of toolCalls.entries()) {
    check(Object.hasOwn(SCHEMAS, tc.toolName), `${what}: call ${i}: a known tool`, tc);
    if (only) check(tc.toolName === only, `${what}: call ${i}: the named tool`, tc.toolName);
    check(!tc.invalid && !tc.error, `${what}: call ${i}: not marked invalid by the SDK`, tc);
    if (!Object.hasOwn(SCHEMAS, tc.toolName)) continue;
    const [zs, js] = SCHEMAS[tc.toolName];
    check(zs.safeParse(tc.input).success, `${what}: call ${i}: input validates (zod)`, tc.input);
    if (js) check(validate(js, tc.input).length === 0, `${what}: call ${i}: input validates (JSON Schema)`, validate(js, tc.input ?? null));
  }
}

async function main() {
  selfTestValidator(h);

  await h.section("generateObject", async () => {
    const n0 = log.length;
    const { object, finishReason } = await generateObject({
      model, schema: Record, schemaName: "record", prompt: "Make up a record.", temperature: 0, seed: 1,
      maxOutputTokens: 400, maxRetries: 0, abortSignal: signal(),
    });
    check(Record.safeParse(object).success, "generateObject: the object validates (zod)", object);
    check(validate(RECORD_SCHEMA, object).length === 0, "generateObject: the object validates (JSON Schema)", validate(RECORD_SCHEMA, object ?? null));
    check(finishReason === "stop", "generateObject: finishReason stop", finishReason);
    const body = log[n0] && log[n0].body;
    check(body && body.response_format && body.response_format.type === "json_schema" && body.response_format.json_schema.strict === true,
          "generateObject: sent response_format json_schema strict", body && body.response_format);
  });
  for (const seed of [2, 3]) {
    await h.section(`generateObject sampled seed ${seed}`, async () => {
      const { object } = await generateObject({
        model, schema: Record, prompt: "Another record.", temperature: 1, seed, maxOutputTokens: 400, maxRetries: 0, abortSignal: signal(),
      });
      check(Record.safeParse(object).success && validate(RECORD_SCHEMA, object).length === 0, `generateObject seed ${seed}: validates`, object);
    });
  }
  await h.section("streamObject", async () => {
    const r = streamObject({
      model, schema: Record, prompt: "Make up a record.", temperature: 0, seed: 1, maxOutputTokens: 400, maxRetries: 0, abortSignal: signal(),
      onError: ({ error }) => check(false, "streamObject: error", String(error)),
    });
    let partials = 0;
    for await (const _p of r.partialObjectStream) partials++;
    const object = await r.object;
    check(partials >= 2, "streamObject: partial objects arrive", partials);
    check(Record.safeParse(object).success, "streamObject: the object validates", object);
    const again = await generateObject({
      model, schema: Record, prompt: "Make up a record.", temperature: 0, seed: 1, maxOutputTokens: 400, maxRetries: 0, abortSignal: signal(),
    });
    check(JSON.stringify(again.object) === JSON.stringify(object), "streamObject equals generateObject (temperature 0)", { stream: object, gen: again.object });
  });

  await h.section("generateText toolChoice required", async () => {
    const executed = [];
    const n0 = log.length;
    const r = await generateText({
      model, tools: makeTools(executed), toolChoice: "required", prompt: "What is the weather in Paris?",
      temperature: 0, seed: 1, maxOutputTokens: 200, providerOptions: ONE_CALL, stopWhen: stepCountIs(1), maxRetries: 0, abortSignal: signal(),
    });
    check(log[n0] && log[n0].body.tool_choice === "required" && log[n0].body.parallel_tool_calls === false,
          "generateText required: sent tool_choice required, parallel_tool_calls false", log[n0] && log[n0].body);
    checkToolCalls("generateText required", r.toolCalls);
    check(r.finishReason === "tool-calls", "generateText required: finishReason tool-calls", r.finishReason);
    check(executed.length === r.toolCalls.length && r.toolResults.length === r.toolCalls.length,
          "generateText required: every call executed", { executed, results: r.toolResults });
  });
  await h.section("generateText named tool", async () => {
    const executed = [];
    const r = await generateText({
      model, tools: makeTools(executed), toolChoice: { type: "tool", toolName: "convert" }, prompt: "Convert 20 euros.",
      temperature: 1, seed: 5, maxOutputTokens: 200, providerOptions: ONE_CALL, stopWhen: stepCountIs(1), maxRetries: 0, abortSignal: signal(),
    });
    checkToolCalls("generateText named", r.toolCalls, { only: "convert" });
    check(executed.length >= 1 && executed.every(([n]) => n === "convert"), "generateText named: convert executed", executed);
  });
  await h.section("streamText toolChoice required", async () => {
    const executed = [];
    const r = streamText({
      model, tools: makeTools(executed), toolChoice: "required", prompt: "Weather in Oslo?",
      temperature: 0, seed: 2, maxOutputTokens: 200, providerOptions: ONE_CALL, stopWhen: stepCountIs(1), maxRetries: 0, abortSignal: signal(),
      onError: ({ error }) => check(false, "streamText: error", String(error)),
    });
    let deltas = 0;
    for await (const part of r.fullStream) if (part.type === "tool-input-delta") deltas++;
    const calls = await r.toolCalls;
    checkToolCalls("streamText required", calls);
    check(deltas >= 2, "streamText required: tool input arrives in deltas", deltas);
    check((await r.finishReason) === "tool-calls", "streamText required: finishReason tool-calls", await r.finishReason);
  });

  // The tool loop with parallel_tool_calls at its default (parallel) and a
  // small maxOutputTokens: the model chains calls until the limit cuts one.
  // The cut call is never text (no "<tool_call>" or call JSON in the step's
  // text), the complete calls come as valid tool calls with finishReason
  // "tool-calls" (the server's "tool_calls": ai 6 executes no tool of a
  // "length" step, isToolExecutionAllowedFinishReason), and the loop runs
  // them: each valid call of the step is executed, and its result goes back
  // to the model in the next request. Streamed, the cut call's start was
  // already sent and the SDK lists it as an invalid call (not executed).
  // Seeds are tried until a step ends at the limit with a complete call.
  // A template that refuses two calls in one message (Llama 3.2) gets one
  // call per answer (/props chat_template_caps): no call completes before
  // the limit cuts the next, so there each step must end with one complete
  // call or a cut first one ("length"), and the loop must go on with it.
  const caps = (await (await fetch(baseURL.replace(/\/v1$/, "") + "/props")).json()).chat_template_caps || {};
  // One tool loop of two steps (a forced call, then text) at maxOutputTokens
  // 45; resolves to its steps once every logged request has ended.
  const cutLoop = async (executed, seed, stream, what) => {
    const args = {
      model, tools: makeTools(executed), prompt: "Weather in Paris, Oslo and Rome?",
      prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: "required" } : { toolChoice: "none" }),
      temperature: 1, seed, maxOutputTokens: 45, stopWhen: stepCountIs(2), maxRetries: 0, abortSignal: signal(),
    };
    let steps;
    if (stream) {
      const r = streamText({ ...args, onError: ({ error }) => check(false, `${what}: error`, String(error)) });
      for await (const _ of r.fullStream) { /* drain */ }
      steps = await r.steps;
    } else {
      steps = (await generateText(args)).steps;
    }
    await Promise.all(log.map((e) => e.done));
    return steps;
  };
  for (const stream of [false, true]) {
    const what = `cut by maxOutputTokens${stream ? ", streamed" : ""}`;
    if (caps.supports_parallel_tool_calls === false) {
      await h.section(`${what} (one call per answer)`, async () => {
        let ran = 0;
        for (let seed = 1; seed <= 4; seed++) {
          const executed = [];
          const n0 = log.length;
          const steps = await cutLoop(executed, seed, stream, what);
          const s0 = steps[0];
          const valid = s0 ? s0.toolCalls.filter((tc) => !tc.invalid) : [];
          check(valid.length <= 1, `${what} seed ${seed}: at most one call per answer`, s0 && s0.toolCalls);
          check(s0 && !/tool_call|"name"|python_tag/.test(s0.text), `${what} seed ${seed}: no call markup in the text`, s0 && s0.text);
          if (valid.length === 0) continue;
          ran++;
          check(s0.finishReason === "tool-calls" && executed.length === 1, `${what} seed ${seed}: the call executed`, [s0.finishReason, executed]);
          const second = log[n0 + 1];
          check(steps.length === 2 && second && second.status === 200, `${what} seed ${seed}: a second step with the result, taken by the template`,
                { steps: steps.length, status: second && second.status });
        }
        check(ran >= 1, `${what}: some step made a complete call`, ran);
      });
      continue;
    }
    await h.section(what, async () => {
      let cut = 0;
      for (let seed = 1; seed <= 8 && cut < 2; seed++) {
        const executed = [];
        const n0 = log.length;
        const steps = await cutLoop(executed, seed, stream, what);
        const first = log[n0] && log[n0].body;
        check(first && first.parallel_tool_calls === undefined && first.max_tokens === 45,
              `${what}: parallel_tool_calls left at its default`, first);
        const s0 = steps[0];
        const content = answerContent(log[n0] && log[n0].response);
        check(content === "", `${what} seed ${seed}: no content in the answer (forced calls; a cut one is not text)`, content);
        if (!s0 || !(s0.usage.outputTokens >= 45)) continue; // not cut: the calls ended before the limit
        const valid = s0.toolCalls.filter((tc) => !tc.invalid);
        if (valid.length === 0) continue; // the first call itself was cut: nothing to run ("length")
        cut++;
        check(s0.finishReason === "tool-calls", `${what} seed ${seed}: finishReason tool-calls with complete calls`, s0.finishReason);
        check(!/tool_call|TOOL_CALLS|"name"|python_tag/.test(s0.text), `${what} seed ${seed}: no call markup in the text`, s0.text);
        checkToolCalls(`${what} seed ${seed}`, valid);
        check(s0.toolCalls.length - valid.length <= (stream ? 1 : 0), `${what} seed ${seed}: invalid calls: ${stream ? "at most the cut one" : "none"}`, s0.toolCalls);
        // the tools ran: every valid call of the cut step, with its input
        const ran = executed.slice(0, valid.length);
        check(ran.length === valid.length && ran.every(([n, input], i) => n === valid[i].toolName && JSON.stringify(input) === JSON.stringify(valid[i].input)),
              `${what} seed ${seed}: the step's ${valid.length} complete call(s) executed`, { executed, valid: valid.map((t) => [t.toolName, t.input]) });
        check(s0.toolResults.length === valid.length, `${what} seed ${seed}: a result per complete call`, s0.toolResults);
        // ... and the loop went on: the second request carries the results
        const second = log[n0 + 1] && log[n0 + 1].body;
        const results = second ? second.messages.filter((m) => m.role === "tool") : [];
        check(steps.length === 2 && results.length >= valid.length,
              `${what} seed ${seed}: a second step with the tool results`, { steps: steps.length, results: results.length });
      }
      check(cut >= 1, `${what}: some step was cut by the limit after a complete call`, cut);
    });
  }

  // Two steps: a forced call, its result back to the model, then text.
  await h.section("generateText two steps", async () => {
    const executed = [];
    const n0 = log.length;
    const r = await generateText({
      model, tools: makeTools(executed), prompt: "What is the weather in Rome?",
      prepareStep: ({ stepNumber }) => (stepNumber === 0 ? { toolChoice: "required" } : { toolChoice: "none" }),
      temperature: 0, seed: 3, maxOutputTokens: 200, providerOptions: ONE_CALL, stopWhen: stepCountIs(2), maxRetries: 0, abortSignal: signal(),
    });
    await Promise.all(log.map((e) => e.done));
    check(r.steps.length === 2, "two steps: two steps ran", r.steps.map((s) => s.finishReason));
    checkToolCalls("two steps", r.steps[0] && r.steps[0].toolCalls);
    check(executed.length >= 1, "two steps: the tool executed", executed);
    const second = log.slice(n0).filter((e) => e.url.endsWith("/chat/completions"))[1];
    const msgs = (second && second.body.messages) || [];
    const toolMsg = msgs.find((m) => m.role === "tool");
    check(toolMsg && second.status === 200, "two steps: the tool result went back and the server took it", second && [second.status, msgs, second.response]);
    check(second && second.body.tool_choice === "none", "two steps: second step tool_choice none", second && second.body.tool_choice);
    check(typeof r.text === "string" && r.steps[1] && r.steps[1].toolCalls.length === 0, "two steps: a text answer last", r.steps[1]);
  });
}

await h.section("main", main);
h.finish();
