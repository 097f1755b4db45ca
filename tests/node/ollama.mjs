// ollama.mjs — the Ollama API of a running kvloom server through the official
// `ollama` npm client (tests/package.json): version, list (tags), show, chat
// and generate (whole and streamed, raw and templated), structured output
// with format (a JSON Schema, validated here by tools_common.mjs's own
// validator, and "json"), tool calls (forced with the tool_choice extension)
// and a tool round trip with role "tool" messages, think, logprobs, errors as the
// client's ResponseError, and an aborted stream.
//   node tests/node/ollama.mjs HOST MODEL_ID MODEL_FILE DEADLINE_MS
// e.g. HOST http://127.0.0.1:8080. Ends with "ollama (MODEL_ID): N passed, N failed".
import { createHash } from "node:crypto";
import { statSync } from "node:fs";
import { Ollama } from "ollama";
import { harness, jsonObjectPrefixState, parseAndValidate, selfTestValidator } from "./tools_common.mjs";

const [host, modelId, modelFile, deadline] = process.argv.slice(2);
const h = harness(`ollama (${modelId})`, Number(deadline || 60000));
const { check, section } = h;
const ollama = new Ollama({ host });
const isQwen = modelId.startsWith("qwen3");

const validDate = (s) => typeof s === "string" && /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z$/.test(s) &&
  !Number.isNaN(new Date(s).getTime());

// The last part of a generation: done, the reason and the counts.
function checkFinal(r, what, reason, nEval) {
  check(r.done === true, `${what}: done`, r);
  if (reason) check(r.done_reason === reason, `${what}: done_reason ${reason}`, r.done_reason);
  if (nEval !== undefined) check(r.eval_count === nEval, `${what}: eval_count ${nEval}`, r.eval_count);
  check(r.prompt_eval_count > 0, `${what}: prompt_eval_count`, r.prompt_eval_count);
  for (const k of ["total_duration", "load_duration", "prompt_eval_duration", "eval_duration"])
    check(Number.isInteger(r[k]) && r[k] >= 0, `${what}: ${k}`, r[k]);
  check(r.total_duration >= r.eval_duration, `${what}: total_duration >= eval_duration`);
  check(r.model === modelId, `${what}: model`, r.model);
  check(validDate(r.created_at), `${what}: created_at RFC 3339 with ns`, r.created_at);
}

// Reads a stream: the text of content/response and thinking, and the parts.
async function drain(stream, field) {
  const parts = [];
  let text = "", thinking = "";
  for await (const p of stream) {
    parts.push(p);
    const holder = field === "message" ? p.message : p;
    text += holder[field === "message" ? "content" : "response"] ?? "";
    thinking += holder.thinking ?? "";
  }
  return { parts, text, thinking, last: parts[parts.length - 1] };
}

function checkParts(parts, what) {
  check(parts.length >= 2, `${what}: several parts`, parts.length);
  check(parts.slice(0, -1).every((p) => p.done === false && validDate(p.created_at)), `${what}: parts before the last are not done`);
}

const person = {
  type: "object", additionalProperties: false, required: ["name", "age", "pets"],
  properties: {
    name: { type: "string", maxLength: 12 },
    age: { type: "integer", minimum: 0, maximum: 120 },
    pets: { type: "array", minItems: 1, maxItems: 3, items: { enum: ["cat", "dog", "fish"] } },
  },
};
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather", description: "The weather in a city",
    parameters: {
      type: "object", additionalProperties: false, required: ["city", "unit"],
      properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["celsius", "fahrenheit"] } },
    },
  },
};

async function expectError(what, promise, status, needle) {
  try {
    await promise;
    check(false, `${what}: should fail`);
  } catch (e) {
    check(e.name === "ResponseError", `${what}: a ResponseError`, e.name);
    if (status) check(e.status_code === status, `${what}: status ${status}`, e.status_code);
    check(String(e.error ?? e.message).includes(needle), `${what}: message names '${needle}'`, e.error ?? e.message);
  }
}

async function main() {
  selfTestValidator(h);
  const size = statSync(modelFile).size;

  await section("version", async () => {
    const v = await ollama.version();
    check(/^\d+\.\d+\.\d+$/.test(v.version), "version x.y.z", v);
  });

  await section("list", async () => {
    const l = await ollama.list();
    check(l.models.length === 1, "list: one model", l);
    const m = l.models[0];
    check(m.name === modelId && m.model === modelId, "list: name and model", m);
    check(m.size === size, "list: size is the file's", [m.size, size]);
    const want = createHash("sha256").update(`${modelId}\n${size}`).digest("hex");
    check(m.digest === want, "list: digest is sha256(id \\n size)", [m.digest, want]);
    check(validDate(m.modified_at), "list: modified_at", m.modified_at);
    check(m.details.format === "gguf", "list: details.format", m.details);
    check(m.details.family === (isQwen ? "qwen3" : "llama"), "list: details.family", m.details);
    check(m.details.quantization_level === (isQwen ? "Q8_0" : "F32"), "list: quantization_level", m.details);
    check(/^\d+(\.\d+)?[KMB]$/.test(m.details.parameter_size), "list: parameter_size", m.details);
  });

  await section("show", async () => {
    for (const name of [modelId, `${modelId}:latest`]) {
      const s = await ollama.show({ model: name });
      check(typeof s.template === "string" && s.template.length > 0, `show ${name}: template`);
      check(s.model_info["general.architecture"] === (isQwen ? "qwen3" : "llama"), `show ${name}: architecture`, s.model_info);
      const arch = s.model_info["general.architecture"];
      check(Number.isInteger(s.model_info[`${arch}.context_length`]), `show ${name}: context_length`, s.model_info);
      check(s.details.family === arch, `show ${name}: details.family`);
      const caps = isQwen ? ["completion", "tools", "thinking"] : ["completion", "tools"];
      check(JSON.stringify(s.capabilities) === JSON.stringify(caps), `show ${name}: capabilities`, s.capabilities);
    }
    await expectError("show unknown", ollama.show({ model: "llama3.2:latest" }), 404, "model 'llama3.2:latest' not found");
  });

  const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a cat." }];
  const greedy = { temperature: 0, seed: 7, num_predict: 16 };

  await section("chat", async () => {
    const r = await ollama.chat({ model: modelId, messages, options: greedy });
    check(r.message.role === "assistant" && typeof r.message.content === "string", "chat: message", r.message);
    checkFinal(r, "chat", "length", 16);
    const s = await drain(await ollama.chat({ model: modelId, messages, options: greedy, stream: true }), "message");
    checkParts(s.parts, "chat stream");
    check(s.text === r.message.content, "chat stream: text equals the whole answer", [s.text, r.message.content]);
    check(s.last.message.content === "", "chat stream: last part has no text", s.last);
    checkFinal(s.last, "chat stream", "length", 16);
    check(s.last.prompt_eval_count === r.prompt_eval_count, "chat stream: same prompt count");
    // with ":latest", and a stop string
    const r2 = await ollama.chat({ model: `${modelId}:latest`, messages, options: { ...greedy, num_predict: 4 } });
    check(r2.model === `${modelId}:latest` && r2.eval_count === 4, "chat with :latest", r2);
  });

  await section("generate", async () => {
    for (const raw of [false, true]) {
      const req = { model: modelId, prompt: "Once upon a time", raw, options: greedy };
      if (!raw) req.system = "You tell stories.";
      const r = await ollama.generate(req);
      check(typeof r.response === "string", `generate raw=${raw}: response`, r);
      checkFinal(r, `generate raw=${raw}`, "length", 16);
      const s = await drain(await ollama.generate({ ...req, stream: true }), "response");
      checkParts(s.parts, `generate raw=${raw} stream`);
      check(s.text === r.response, `generate raw=${raw} stream: text equals the whole answer`, [s.text, r.response]);
      checkFinal(s.last, `generate raw=${raw} stream`, "length", 16);
      if (raw) check(r.prompt_eval_count <= 6, "generate raw: the prompt alone", r.prompt_eval_count);
      else check(r.prompt_eval_count > 10, "generate: the prompt in the chat template", r.prompt_eval_count);
    }
  });

  await section("logprobs", async () => {
    const r = await ollama.chat({ model: modelId, messages, logprobs: true, top_logprobs: 2, options: { ...greedy, num_predict: 5 } });
    const lp = r.logprobs ?? [];
    check(lp.length === 5, "logprobs: one entry per token", lp.length);
    check(lp.every((e) => typeof e.token === "string" && e.logprob <= 0 && e.top_logprobs.length === 2),
      "logprobs: token, logprob, two alternatives", lp);
    const s = await drain(await ollama.chat({ model: modelId, messages, logprobs: true, top_logprobs: 2,
      options: { ...greedy, num_predict: 5 }, stream: true }), "message");
    const slp = s.parts.flatMap((p) => p.logprobs ?? []);
    check(JSON.stringify(slp) === JSON.stringify(lp), "logprobs: streamed the same", [slp, lp]);
  });

  await section("structured output", async () => {
    const opts = { temperature: 0.8, seed: 11, num_predict: 200 };
    const c = await ollama.chat({ model: modelId, messages, format: person, options: opts });
    let v = parseAndValidate(person, c.message.content);
    check(v.ok, "chat format schema: valid", v.errors);
    check(c.done_reason === "stop", "chat format schema: stop", c.done_reason);
    const cs = await drain(await ollama.chat({ model: modelId, messages, format: person, options: opts, stream: true }), "message");
    v = parseAndValidate(person, cs.text);
    check(v.ok, "chat format schema streamed: valid", v.errors);
    check(cs.text === c.message.content, "chat format schema: streamed equals whole (seeded)", [cs.text, c.message.content]);
    for (const raw of [false, true]) {
      const g = await ollama.generate({ model: modelId, prompt: "A person:", raw, format: person, options: opts });
      v = parseAndValidate(person, g.response);
      check(v.ok, `generate raw=${raw} format schema: valid`, v.errors);
    }
    const j = await ollama.chat({ model: modelId, messages, format: "json", options: { temperature: 0, num_predict: 200 } });
    const state = jsonObjectPrefixState(j.message.content);
    check(state === "complete" || (state === "prefix" && j.done_reason === "length"), "chat format json: an object",
      [state, j.message.content]);
  });

  await section("tools", async () => {
    const conv = [{ role: "user", content: "What is the weather in Paris?" }];
    const r = await ollama.chat({
      model: modelId, messages: conv, tools: [weatherTool], tool_choice: "required", parallel_tool_calls: false,
      options: { temperature: 0 },
    });
    const calls = r.message.tool_calls ?? [];
    check(calls.length === 1, "tools: one call", r.message);
    for (const c of calls) {
      check(c.function.name === "get_weather", "tools: name", c);
      check(typeof c.function.arguments === "object", "tools: arguments are an object", c);
      v_args(c.function.arguments);
    }
    check(r.done_reason === "stop", "tools: stop", r.done_reason);
    // streamed: the calls come once complete, the same
    const s = await drain(await ollama.chat({
      model: modelId, messages: conv, tools: [weatherTool], tool_choice: "required", parallel_tool_calls: false,
      options: { temperature: 0 }, stream: true,
    }), "message");
    const scalls = s.parts.flatMap((p) => p.message.tool_calls ?? []);
    check(JSON.stringify(scalls) === JSON.stringify(calls), "tools stream: the same calls", [scalls, calls]);
    // the round trip: the call and its result go back
    conv.push(r.message);
    conv.push({ role: "tool", content: "21 degrees and sunny", tool_name: "get_weather" });
    const r2 = await ollama.chat({ model: modelId, messages: conv, tools: [weatherTool], options: { temperature: 0, num_predict: 8 } });
    check(r2.done === true && typeof r2.message.content === "string", "tools: round trip answered", r2);
    check(r2.prompt_eval_count > r.prompt_eval_count, "tools: round trip prompt holds the call and result",
      [r2.prompt_eval_count, r.prompt_eval_count]);
    // tools without a forced call: the model may answer in text
    const r3 = await ollama.chat({ model: modelId, messages: conv.slice(0, 1), tools: [weatherTool], options: { temperature: 0, num_predict: 8 } });
    check(r3.done === true, "tools: auto answered", r3);
  });

  await section("think", async () => {
    if (isQwen) {
      for (const think of [true, false, "high"]) {
        const r = await ollama.chat({ model: modelId, messages, think, options: { temperature: 1, seed: 3, num_predict: 8 } });
        check(r.done === true && (r.message.thinking === undefined || typeof r.message.thinking === "string"),
          `think ${think}: answered`, r.message);
      }
    } else {
      await expectError("think on a model without it", ollama.chat({ model: modelId, messages, think: true }), 400, "thinking");
    }
  });

  await section("errors", async () => {
    await expectError("chat unknown model", ollama.chat({ model: "nope", messages }), 404, "model 'nope' not found");
    await expectError("images", ollama.chat({ model: modelId, messages: [{ role: "user", content: "x", images: ["aGk="] }] }),
      400, "messages[0].images");
    await expectError("suffix", ollama.generate({ model: modelId, prompt: "x", suffix: "y" }), 400, "suffix");
    await expectError("options.temperature", ollama.generate({ model: modelId, prompt: "x", options: { temperature: 7 } }),
      400, "options.temperature");
    await expectError("format", ollama.generate({ model: modelId, prompt: "x", format: "xml" }), 400, "format");
    // an error after the headers would come as a line; a stream refused
    // before starting is a ResponseError too
    await expectError("stream refused", ollama.chat({ model: modelId, messages, stream: true, options: { top_p: 0 } }),
      400, "options.top_p");
  });

  // Errors the server answers before any Ollama handler runs (an unknown
  // /api route, a wrong method, a body over --max-body from the HTTP layer)
  // and the model-management routes: all in Ollama's {"error": "..."} shape,
  // so the client's ResponseError carries the message (never
  // "[object Object]").
  await section("transport errors", async () => {
    const noObject = (what, e) => check(!String(e.error ?? e.message).includes("[object Object]"), `${what}: no [object Object]`, e.error);
    // Each request starts when the loop reaches it: made all at once, a
    // later one could fail while an earlier one was awaited, and Node ends
    // the process on that unhandled rejection (seen under ASan on a loaded
    // machine: "ResponseError: /api/pull is not supported", exit 1).
    for (const [what, call, status, needle] of [
      ["pull", () => ollama.pull({ model: "llama3" }), 501, "loads models from GGUF files on disk"],
      ["pull stream", () => ollama.pull({ model: "llama3", stream: true }), 501, "/api/pull is not supported"],
      ["delete", () => ollama.delete({ model: modelId }), 501, "/api/delete"],
      ["copy", () => ollama.copy({ source: modelId, destination: "x" }), 501, "/api/copy"],
      ["413", () => ollama.chat({ model: modelId, messages: [{ role: "user", content: "x".repeat(300 * 1024) }] }), 413,
        "larger than the limit"],
    ]) {
      try {
        await call();
        check(false, `${what}: should fail`);
      } catch (e) {
        check(e.name === "ResponseError" && e.status_code === status, `${what}: ResponseError ${status}`, [e.name, e.status_code, e.error]);
        check(String(e.error ?? e.message).includes(needle), `${what}: message names '${needle}'`, e.error ?? e.message);
        noObject(what, e);
      }
    }
    for (const [method, path, status] of [["POST", "/api/nope", 404], ["GET", "/api/chat", 405], ["GET", "/api", 404]]) {
      const r = await fetch(host + path, { method, body: method === "POST" ? "{}" : undefined, signal: AbortSignal.timeout(10000) });
      const j = await r.json().catch(() => null);
      check(r.status === status && j && typeof j.error === "string" && Object.keys(j).length === 1,
            `${method} ${path}: ${status} {"error": string}`, [r.status, j]);
    }
  });

  await section("abort", async () => {
    const st = await ollama.generate({ model: modelId, prompt: "Once", raw: true, stream: true,
      options: { temperature: 1, num_predict: 100000 } });
    let n = 0, aborted = false;
    try {
      for await (const p of st) {
        if (p.done) break;
        if (++n === 3) ollama.abort();
      }
    } catch (e) {
      aborted = e.name === "AbortError";
    }
    check(aborted, "abort: the stream ends with an AbortError");
    const v = await ollama.version();
    check(typeof v.version === "string", "abort: the server still serves");
  });

  h.finish();
}

function v_args(args) {
  const v = parseAndValidate(weatherTool.function.parameters, JSON.stringify(args));
  check(v.ok, "tools: arguments satisfy the schema", v.errors);
}

main().catch((e) => {
  check(false, "uncaught: " + (e && e.stack ? e.stack : String(e)));
  h.finish();
});
