// embed.mjs — embeddings of a running kvloom server through real clients,
// each vector compared with the independent numpy reference
// (tools/ref/gguf_ref.py embed, run here on the same GGUF and on the ids the
// server's /tokenize gives):
//   the `openai` client (its default base64 transfer, "float", token-id
//   input, dimensions = truncation + renormalisation, batch = singles),
//   LangChain.js OpenAIEmbeddings (embedQuery, embedDocuments), the `ollama`
//   client (embed, the older embeddings), and bad input (dimensions above
//   the model's, an empty input array, an empty token array, an id out of
//   range); on a decoder embedder, an embedding while a generation streams.
//   node tests/node/embed.mjs URL MODEL_ID MODEL_FILE REF_PY [GEN_URL] DEADLINE_MS
// GEN_URL: a server of a generation-only model, which must answer 400.
// Ends with "embed (MODEL_ID): N passed, N failed".
import { execFileSync } from "node:child_process";
import OpenAI from "openai";
import { OpenAIEmbeddings } from "@langchain/openai";
import { Ollama } from "ollama";
import { harness } from "./tools_common.mjs";

const [url, modelId, modelFile, refPy, genUrl, deadline] = process.argv.slice(2);
const h = harness(`embed (${modelId})`, Number(deadline || 60000));
const { check, section } = h;
const client = new OpenAI({ baseURL: url + "/v1", apiKey: "none", maxRetries: 0 });
const ollama = new Ollama({ host: url });

const texts = ["hello world", "The quick brown fox jumps over the lazy dog.", "kvloom"];

async function tokenize(text) {
  const r = await fetch(url + "/tokenize", { method: "POST", body: JSON.stringify({ content: text, add_special: true, model: modelId }) });
  return (await r.json()).tokens;
}

// The reference vectors of several id lists, in one python run.
function reference(idLists) {
  const args = [refPy, "embed", modelFile];
  for (const ids of idLists) args.push("--tokens", ids.join(" "));
  const out = execFileSync("/usr/bin/python3", args, { encoding: "utf8" });
  return out.trim().split("\n").map((l) => l.trim().split(/\s+/).map(Number));
}

const maxDiff = (a, b) => a.length !== b.length ? Infinity : Math.max(...a.map((v, i) => Math.abs(v - b[i])));
const norm = (a) => Math.sqrt(a.reduce((s, v) => s + v * v, 0));
const TOL = 2e-4; // F32 weights; the reference is float64 (and models the f16 KV cache of decoders)

function near(got, want, what) {
  const d = maxDiff(got, want);
  check(d <= TOL, `${what}: max |kvloom - reference| ${d.toExponential(2)} <= ${TOL}`, { got: got.slice(0, 4), want: want.slice(0, 4) });
}

async function main() {
  const ids = [];
  for (const t of texts) ids.push(await tokenize(t));
  const ref = reference(ids);
  const n = ref[0].length;

  await section("openai: strings (the client's default base64 transfer)", async () => {
    const r = await client.embeddings.create({ model: modelId, input: texts });
    check(r.data.length === texts.length, "one vector per input", r.data.length);
    r.data.forEach((d, i) => {
      check(d.index === i, `index ${i}`, d.index);
      near(Array.from(d.embedding), ref[i], `openai input ${i}`);
      check(Math.abs(norm(d.embedding) - 1) < 1e-5, `input ${i} is unit length`, norm(d.embedding));
    });
    const tok = ids.reduce((s, a) => s + a.length, 0);
    check(r.usage.prompt_tokens === tok && r.usage.total_tokens === tok, "usage counts the input tokens", r.usage);
    check(r.model === modelId, "model", r.model);
  });

  await section("openai: float, token ids, batch invariance", async () => {
    const f = await client.embeddings.create({ model: modelId, input: texts[1], encoding_format: "float" });
    near(f.data[0].embedding, ref[1], "encoding_format float");
    const t = await client.embeddings.create({ model: modelId, input: ids[0], encoding_format: "float" });
    near(t.data[0].embedding, ref[0], "token-id input");
    const tt = await client.embeddings.create({ model: modelId, input: ids, encoding_format: "float" });
    check(tt.data.length === 3, "arrays of token ids: one vector each");
    // a vector does not depend on what else is in the batch
    const single = await client.embeddings.create({ model: modelId, input: [texts[2]], encoding_format: "float" });
    check(maxDiff(single.data[0].embedding, tt.data[2].embedding) === 0, "alone == in a batch of 3, bitwise",
      maxDiff(single.data[0].embedding, tt.data[2].embedding));
  });

  await section("openai: dimensions", async () => {
    const k = Math.min(16, n);
    const r = await client.embeddings.create({ model: modelId, input: texts[0], dimensions: k, encoding_format: "float" });
    const cut = ref[0].slice(0, k), s = norm(cut);
    check(r.data[0].embedding.length === k, `${k} dimensions`, r.data[0].embedding.length);
    near(r.data[0].embedding, cut.map((v) => v / s), "truncated and renormalised");
  });

  await section("openai: bad input", async () => {
    for (const [body, param, what] of [
      [{ input: "x", dimensions: n + 1 }, "dimensions", "dimensions above the model's"],
      [{ input: [] }, "input", "an empty input array"],
      [{ input: [[]] }, "input", "an empty token array"],
      [{ input: [1e9] }, "input", "a token id out of range"],
    ]) {
      let err = null;
      try {
        await client.embeddings.create({ model: modelId, encoding_format: "float", ...body });
      } catch (e) {
        err = e;
      }
      check(err && err.status === 400 && err.param === param, `${what}: 400 naming ${param}`, err && { s: err.status, p: err.param, m: err.message });
    }
  });

  await section("langchain OpenAIEmbeddings", async () => {
    const lc = new OpenAIEmbeddings({ model: modelId, apiKey: "none", configuration: { baseURL: url + "/v1" }, maxRetries: 0 });
    near(await lc.embedQuery(texts[0]), ref[0], "embedQuery");
    const docs = await lc.embedDocuments(texts);
    check(docs.length === 3, "embedDocuments: 3 vectors", docs.length);
    docs.forEach((d, i) => near(d, ref[i], `embedDocuments ${i}`));
  });

  await section("ollama client", async () => {
    const r = await ollama.embed({ model: modelId, input: texts });
    check(r.embeddings.length === 3, "embed: 3 vectors", r.embeddings.length);
    r.embeddings.forEach((v, i) => near(v, ref[i], `ollama embed ${i}`));
    check(r.prompt_eval_count === ids.reduce((s, a) => s + a.length, 0), "embed: prompt_eval_count", r.prompt_eval_count);
    const one = await ollama.embed({ model: modelId, input: texts[1] });
    near(one.embeddings[0], ref[1], "ollama embed (one string)");
    const old = await ollama.embeddings({ model: modelId, prompt: texts[2] });
    near(old.embedding, ref[2], "ollama embeddings (the older route)");
    let err = null;
    try {
      await ollama.embed({ model: modelId, input: [] });
    } catch (e) {
      err = e;
    }
    check(err && err.status_code === 400 && /empty/.test(err.error), "embed: an empty input is a 400 in Ollama's shape", err && { s: err.status_code, e: err.error });
    err = null;
    try {
      await ollama.embed({ model: modelId, input: "x", dimensions: n + 1 });
    } catch (e) {
      err = e;
    }
    check(err && err.status_code === 400 && /dimensions/.test(err.error), "embed: dimensions above the model's is a 400 naming it", err && { s: err.status_code, e: err.error });
  });

  // A decoder embedder runs through the engine: an embedding request while a
  // generation streams on the same model is answered in the steps that decode
  // it (the server runs with --step-delay-us, so the generation lasts a
  // second or more), neither waits for the other, and the vector is bitwise
  // the one the input gets alone.
  const caps = (await (await fetch(url + "/api/show", { method: "POST", body: JSON.stringify({ model: modelId }) })).json()).capabilities || [];
  if (caps.includes("completion")) {
    await section("embeddings beside a generation", async () => {
      const alone = await client.embeddings.create({ model: modelId, input: texts[1], encoding_format: "float" });
      const stream = await client.completions.create({ model: modelId, prompt: [1, 2, 3], max_tokens: 400, ignore_eos: true,
        temperature: 0, stream: true });
      let chunks = 0, atAnswer = -1, finish = null;
      const it = stream[Symbol.asyncIterator]();
      const first = await it.next(); // the generation runs
      chunks += first.done ? 0 : 1;
      const during = client.embeddings.create({ model: modelId, input: texts[1], encoding_format: "float" })
        .then((r) => { atAnswer = chunks; return r; });
      for (let r = await it.next(); !r.done; r = await it.next()) {
        chunks++;
        if (r.value.choices[0] && r.value.choices[0].finish_reason) finish = r.value.choices[0].finish_reason;
      }
      const e = await during;
      check(atAnswer > 0 && chunks > atAnswer, `answered while the generation streamed (chunk ${atAnswer} of ${chunks})`, { atAnswer, chunks });
      check(finish === "length", "the generation ran to max_tokens", finish);
      const a = alone.data[0].embedding, b = e.data[0].embedding;
      check(a.length === b.length && a.every((v, i) => v === b[i]), "the vector is bitwise the one alone", { a: a.slice(0, 3), b: b.slice(0, 3) });
    });
  }

  if (genUrl) {
    await section("a generation-only model", async () => {
      const g = new OpenAI({ baseURL: genUrl + "/v1", apiKey: "none", maxRetries: 0 });
      let err = null;
      try {
        await g.embeddings.create({ model: "any", input: "hi" });
      } catch (e) {
        err = e;
      }
      check(err && err.status === 400 && /not an embedding model/.test(err.message), "400: not an embedding model", err && err.message);
    });
  }
  h.finish();
}

main().catch((e) => {
  console.log("FAIL embed.mjs: " + (e && e.stack));
  h.finish();
});
