// models.mjs — several models by name in one kvloom server (models.h),
// through the `openai` client (chat, completions, embeddings, Responses,
// models.list/retrieve), the `ollama` client (chat, embed, list, ps) and the
// Anthropic Messages route: the model field selects on every API,
// generation and embedding models side by side, LRU beyond --models-max,
// POST /models/load and /models/unload, idle unload (--models-idle), and an
// unknown name as a 404 model_not_found in each API's own error shape.
//   node tests/node/models.mjs URL IDLE_S DEADLINE_MS
// The server serves "stories" (stories260K), "bert-tiny" (an encoder) and
// "qwen3-emb-tiny" (a last-token embedder) with --models-max 2.
// Ends with "models: N passed, N failed".
import OpenAI from "openai";
import { Ollama } from "ollama";
import { harness } from "./tools_common.mjs";

const [url, idleS, deadline] = process.argv.slice(2);
const h = harness("models", Number(deadline || 60000));
const { check, section } = h;
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
const ollama = new Ollama({ host: url });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const resident = async () => (await ollama.ps()).models.map((m) => m.name.replace(/:latest$/, "")).sort();
const post = (path, body) => fetch(url + path, { method: "POST", body: JSON.stringify(body) });

async function main() {
  await section("listing before any use", async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m);
    check(ids.map((m) => m.id).join(",") === "stories,bert-tiny,qwen3-emb-tiny", "three models in -m order", ids.map((m) => m.id));
    check(ids.every((m) => m.status === "unloaded"), "none loaded yet", ids.map((m) => m.status));
    check((await resident()).length === 0, "/api/ps is empty");
    const tags = await ollama.list();
    check(tags.models.length === 3, "/api/tags lists all three", tags.models.map((m) => m.name));
  });

  await section("the model field selects on every API", async () => {
    const c = await client.chat.completions.create({ model: "stories", messages: [{ role: "user", content: "Once upon" }], max_tokens: 4, temperature: 0 });
    check(c.model === "stories" && c.choices[0].message.content.length > 0, "chat on stories", c.model);
    const t = await client.completions.create({ model: "stories", prompt: "Once upon a time", max_tokens: 4, temperature: 0 });
    check(t.model === "stories" && t.choices[0].text.length > 0, "completions on stories", t.model);
    const r = await client.responses.create({ model: "stories", input: "Hello", max_output_tokens: 4 });
    check(r.model === "stories", "Responses on stories", r.model);
    const a = await (await post("/v1/messages", { model: "stories", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] })).json();
    check(a.type === "message" && a.model === "stories", "Anthropic Messages on stories", a);
    const o = await ollama.chat({ model: "stories:latest", messages: [{ role: "user", content: "Hi" }], options: { num_predict: 4 } });
    check(o.model === "stories" || o.model === "stories:latest", "Ollama chat on stories:latest", o.model);
    // stories used again just before: on a loaded machine the requests above
    // can take longer than --models-idle, which would unload it before the check
    await client.completions.create({ model: "stories", prompt: "Once", max_tokens: 1 });
    const e = await client.embeddings.create({ model: "bert-tiny", input: ["hello", "world"], encoding_format: "float" });
    check(e.data.length === 2 && e.data[0].embedding.length === 64 && e.model === "bert-tiny", "embeddings on the encoder beside it", e.model);
    check((await resident()).join(",") === "bert-tiny,stories", "both resident (--models-max 2)", await resident());
    let err = null;
    try {
      await client.chat.completions.create({ model: "bert-tiny", messages: [{ role: "user", content: "Hi" }] });
    } catch (x) { err = x; }
    check(err && err.status === 400, "chat on the encoder: 400", err && err.message);
  });

  await section("LRU beyond --models-max", async () => {
    // stories was used before bert-tiny: loading a third model unloads it
    const e = await ollama.embed({ model: "qwen3-emb-tiny", input: "hello" });
    check(e.embeddings.length === 1 && e.embeddings[0].length === 64, "embed on the decoder embedder");
    check((await resident()).join(",") === "bert-tiny,qwen3-emb-tiny", "stories (least recently used) unloaded", await resident());
    const list = [];
    for await (const m of client.models.list()) list.push(m);
    check(list.find((m) => m.id === "stories").status === "unloaded" && list.find((m) => m.id === "bert-tiny").status === "loaded",
      "/v1/models shows each state", list.map((m) => [m.id, m.status]));
    const c = await client.chat.completions.create({ model: "stories", messages: [{ role: "user", content: "Once upon" }], max_tokens: 4, temperature: 0 });
    check(c.choices[0].message.content.length > 0, "stories loads again on use");
    check((await client.models.retrieve("stories")).status === "loaded", "models.retrieve: loaded");
  });

  await section("side routes answer for the model they name", async () => {
    const tok = async (body) => { const r = await post("/tokenize", body); return [r.status, await r.json()]; };
    // bert-base-uncased WordPiece ids ([CLS] hello world [SEP]), from its vocab.txt
    let [st, j] = await tok({ model: "bert-tiny", content: "hello world" });
    check(st === 200 && j.tokens.join(",") === "101,7592,2088,102", "/tokenize on bert-tiny: its WordPiece ids", j);
    [st, j] = await tok({ model: "stories", content: "hello world" });
    const d = await (await post("/detokenize", { model: "stories", tokens: j.tokens })).json();
    check(st === 200 && j.tokens.every((t) => t < 512) && d.content.includes("hello world"),
      "/tokenize and /detokenize on stories: its 512-token vocabulary, round trip", [j, d]);
    [st, j] = await tok({ content: "hello world" });
    check(st === 400 && j.error.param === "model", "/tokenize without a model with three served: 400 naming model", j);
    const props = async (q) => (await fetch(url + "/props" + q)).json();
    const pb = await props("?model=bert-tiny"), ps = await props("?model=stories");
    check(pb.model_alias === "bert-tiny" && pb.model_path.endsWith("/bert-tiny.gguf") &&
      ps.model_alias === "stories" && ps.model_path.endsWith("/stories260K.gguf"), "/props?model= names that model's file", [pb.model_path, ps.model_path]);
    check((await fetch(url + "/props")).status === 400, "/props without ?model=: 400");
    const sb = await ollama.show({ model: "bert-tiny" }), ss = await ollama.show({ model: "stories" });
    check(sb.model_info["general.architecture"] === "bert" && sb.capabilities.join() === "embedding" &&
      ss.model_info["general.architecture"] === "llama" && ss.capabilities.includes("completion"),
      "/api/show reads the named model", [sb.capabilities, ss.capabilities]);
    const met = await (await fetch(url + "/metrics")).text();
    check(/^kvloom_requests_running\{model="stories"\} 0$/m.test(met) && /^kvloom_kv_blocks_total\{model="bert-tiny"\} 0$/m.test(met) &&
      !/^kvloom_requests_running \d/m.test(met), "/metrics: one labelled sample per loaded model (the encoder has no pool)");
    const load = await (await fetch(url + "/load")).json(), ls = await (await fetch(url + "/load?model=stories")).json();
    check(Object.keys(load.models).sort().join() === "bert-tiny,stories" && Object.keys(ls.models).join() === "stories",
      "/load: every loaded model, or ?model='s", [load, ls]);
    check((await fetch(url + "/load?model=nope")).status === 404, "/load?model=nope: 404");
  });

  await section("a load does not hold up the other models (--load-delay-ms)", async () => {
    await client.chat.completions.create({ model: "stories", messages: [{ role: "user", content: "Hi" }], max_tokens: 2 });
    let loadDone = false;
    const loading = post("/models/load", { model: "qwen3-emb-tiny" }).then((r) => { loadDone = true; return r.status; });
    const twice = ollama.embed({ model: "qwen3-emb-tiny", input: "hello" }); // waits for that load, no second one
    await sleep(100);
    const list = [];
    for await (const m of client.models.list()) list.push(m);
    check(list.find((m) => m.id === "qwen3-emb-tiny").status === "loading", "listed as loading meanwhile", list.map((m) => m.status));
    const c = await client.chat.completions.create({ model: "stories", messages: [{ role: "user", content: "Once upon" }], max_tokens: 3, temperature: 0 });
    check(c.choices[0].message.content.length > 0 && !loadDone, "a chat on the loaded model answers during the load", loadDone);
    check((await loading) === 200 && (await twice).embeddings[0].length === 64, "the load and a request waiting on it both succeed");
  });

  await section("unknown names: 404 model_not_found in each API's shape", async () => {
    let err = null;
    try {
      await client.chat.completions.create({ model: "nope", messages: [{ role: "user", content: "Hi" }] });
    } catch (x) { err = x; }
    check(err && err.status === 404 && err.code === "model_not_found", "OpenAI chat", err && { s: err.status, c: err.code });
    err = null;
    try {
      await client.embeddings.create({ model: "nope", input: "x" });
    } catch (x) { err = x; }
    check(err && err.status === 404 && err.code === "model_not_found", "OpenAI embeddings", err && err.status);
    err = null;
    try {
      await client.models.retrieve("nope");
    } catch (x) { err = x; }
    check(err && err.status === 404, "models.retrieve", err && err.status);
    const a = await post("/v1/messages", { model: "nope", max_tokens: 4, messages: [{ role: "user", content: "Hi" }] });
    const ab = await a.json();
    check(a.status === 404 && ab.type === "error" && ab.error.type === "not_found_error", "Anthropic shape", ab);
    err = null;
    try {
      await ollama.chat({ model: "nope", messages: [{ role: "user", content: "Hi" }] });
    } catch (x) { err = x; }
    check(err && err.status_code === 404 && /nope/.test(err.error), "Ollama shape (the client's ResponseError)", err && { s: err.status_code, e: err.error });
    // ... and the other routes of each API
    for (const [what, call] of [
      ["OpenAI completions", () => client.completions.create({ model: "nope", prompt: "Hi", max_tokens: 1 })],
      ["Responses", () => client.responses.create({ model: "nope", input: "Hi", max_output_tokens: 1 })],
    ]) {
      err = null;
      try { await call(); } catch (x) { err = x; }
      check(err && err.status === 404 && err.code === "model_not_found", what, err && { s: err.status, c: err.code });
    }
    for (const [what, call] of [
      ["Ollama generate", () => ollama.generate({ model: "nope", prompt: "Hi", stream: false })],
      ["Ollama embed", () => ollama.embed({ model: "nope", input: "Hi" })],
      ["Ollama show", () => ollama.show({ model: "nope" })],
    ]) {
      err = null;
      try { await call(); } catch (x) { err = x; }
      check(err && err.status_code === 404 && /nope/.test(err.error), what, err && { s: err.status_code, e: err.error });
    }
    const ct = await post("/v1/messages/count_tokens", { model: "nope", messages: [{ role: "user", content: "Hi" }] });
    check(ct.status === 404 && (await ct.json()).error.type === "not_found_error", "Anthropic count_tokens", ct.status);
  });

  await section("POST /models/load and /models/unload", async () => {
    let r = await post("/models/unload", { model: "bert-tiny" });
    check(r.status === 200, "unload bert-tiny", r.status);
    check(!(await resident()).includes("bert-tiny"), "gone from /api/ps", await resident());
    r = await post("/models/load", { model: "bert-tiny" });
    check(r.status === 200, "load bert-tiny", r.status);
    check((await resident()).includes("bert-tiny"), "back in /api/ps", await resident());
    r = await post("/models/load", { model: "nope" });
    check(r.status === 404 && (await r.json()).error.code === "model_not_found", "load of an unknown name: 404");
  });

  await section("idle unload (--models-idle)", async () => {
    await sleep((Number(idleS) + 2.5) * 1000);
    check((await resident()).length === 0, `nothing resident after ${idleS} s idle + the tick`, await resident());
  });
  h.finish();
}

main().catch((e) => {
  console.log("FAIL models.mjs: " + (e && e.stack));
  h.finish();
});
