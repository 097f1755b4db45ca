// openai_params.mjs — request parameters through the official `openai` npm
// client against a kvloom server on stories260K (default queue; the prefill
// counter of /metrics read around a request): n forks of one prompt
// (prefilled once), several prompts per completion, n > 1 streamed, echo,
// best_of, logit_bias (alone and with a grammar), vLLM's guided_* fields
// on the grammar engine, reasoning_effort, and the fields kvloom refuses by
// name (400, never ignored).
//   node tests/node/openai_params.mjs BASE_URL API_KEY
// Ends with "openai_params: N passed, N failed".
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });
let passed = 0, failed = 0;
function check(cond, what) {
  if (cond) passed++;
  else { failed++; console.log("FAIL " + what); }
}
const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a cat." }];

async function main() {
  const c = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
  // n forks of one prompt: the prompt is prefilled once (the radix tree
  // shares its blocks; each fork computes only its last partial block
  // again), checked on the server's prefill counter; several prompts.
  const metricsURL = baseURL.replace(/\/v1$/, "") + "/metrics";
  const computed = async () => {
    const t = await (await fetch(metricsURL, { headers: { Authorization: "Bearer " + apiKey } })).text();
    return Number((t.match(/^kvloom_prompt_tokens_computed_total ([0-9]+)/m) || [])[1]);
  };
  const long = Array.from({ length: 20 }, (_, i) => `Day ${i}: the little dog ran to the park with Tom.`).join(" ");
  const c0 = await computed();
  const fk = await client.completions.create({ model: "stories260K", prompt: long, n: 4, max_tokens: 6, temperature: 1, seed: 7 });
  const c1 = await computed();
  const P = fk.usage.prompt_tokens;
  check(fk.choices.length === 4 && fk.choices.every((c, i) => c.index === i && c.finish_reason === "length" && c.text.length > 0),
        "n 4: four choices, indexes 0..3: " + JSON.stringify(fk.choices.map((c) => [c.index, c.text])));
  check(new Set(fk.choices.map((c) => c.text)).size > 1, "n 4: the forks sample differently");
  check(P > 200 && fk.usage.completion_tokens === 24, "n 4: usage counts the prompt once: " + JSON.stringify(fk.usage));
  check(c1 - c0 >= P && c1 - c0 <= P + 3 * 16, `n 4: the prompt is prefilled once: ${c1 - c0} tokens computed for a ${P}-token prompt (4 x ${P} = ${4 * P} without sharing)`);
  const again = await client.completions.create({ model: "stories260K", prompt: long, n: 4, max_tokens: 6, temperature: 1, seed: 7 });
  check(JSON.stringify(again.choices.map((c) => c.text)) === JSON.stringify(fk.choices.map((c) => c.text)), "n 4 with a seed is reproducible");
  const mp = await client.completions.create({ model: "stories260K", prompt: ["Once upon a time", "The cat"], n: 2, max_tokens: 5, temperature: 0 });
  const one = await client.completions.create({ model: "stories260K", prompt: "The cat", max_tokens: 5, temperature: 0 });
  check(mp.choices.length === 4 && mp.choices[0].text === c.choices[0].text.slice(0, mp.choices[0].text.length) &&
        mp.choices[2].text === one.choices[0].text && mp.choices[3].text === one.choices[0].text,
        "several prompts: choices prompt by prompt, n each: " + JSON.stringify(mp.choices.map((c) => c.text)));
  for (const [extra, param] of [[{ n: 17 }, "n"], [{ best_of: 3, stream: true }, "best_of"], [{ n: 3, best_of: 2 }, "best_of"],
                                [{ prompt: ["a", 5] }, "prompt"], [{ n: 8, prompt: Array(9).fill("a") }, "n"]]) {
    try {
      await client.completions.create({ model: "stories260K", prompt: "hi", max_tokens: 2, ...extra });
      check(false, `${JSON.stringify(extra)} accepted`);
    } catch (e) {
      check(e.status === 400 && e.error && e.error.param === param, `${JSON.stringify(extra)}: 400 naming '${param}': ${e.message}`);
    }
  }
  const cn = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 4, n: 3, temperature: 1, seed: 2 });
  check(cn.choices.length === 3 && cn.choices.every((c, i) => c.index === i && typeof c.message.content === "string"), "chat n 3");

  // n > 1 streamed: each chunk's choice index; per index the same text as
  // the whole answer with the same seed (fork j samples with seed + j)
  const byIndex = async (stream, field) => {
    const out = {}, fins = {};
    let usage = null;
    for await (const ch of stream) {
      if (ch.usage) usage = ch.usage;
      for (const c of ch.choices) {
        out[c.index] = (out[c.index] || "") + ((field === "text" ? c.text : c.delta.content) || "");
        if (c.finish_reason) fins[c.index] = c.finish_reason;
      }
    }
    return [out, fins, usage];
  };
  const sreq = { model: "stories260K", prompt: ["Once upon a time", "The cat"], n: 2, max_tokens: 6, temperature: 1, seed: 11 };
  const [st, sf, su] = await byIndex(await client.completions.create({ ...sreq, stream: true, stream_options: { include_usage: true } }), "text");
  const whole = await client.completions.create(sreq);
  check(whole.choices.every((c) => st[c.index] === c.text && sf[c.index] === c.finish_reason) && Object.keys(st).length === 4,
        "stream n 2 x 2 prompts: per index the whole answer's text: " + JSON.stringify([st, whole.choices.map((c) => c.text)]));
  check(su && su.completion_tokens === whole.usage.completion_tokens && su.prompt_tokens === whole.usage.prompt_tokens,
        "stream n 2: one usage chunk for all choices: " + JSON.stringify([su, whole.usage]));
  const creq = { model: "stories260K", messages, max_tokens: 5, n: 2, temperature: 1, seed: 12 };
  const [sc] = await byIndex(await client.chat.completions.create({ ...creq, stream: true }), "delta");
  const wc = await client.chat.completions.create(creq);
  check(wc.choices.every((c) => sc[c.index] === c.message.content), "chat stream n 2: per index the whole answer's content");

  // echo: the prompt before the text (streamed: in the first chunk)
  const ec = await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 12, temperature: 0, echo: true });
  check(ec.choices[0].text === "Once upon a time" + c.choices[0].text, "echo: prompt + text: " + JSON.stringify(ec.choices[0].text));
  const [es] = await byIndex(await client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 12, temperature: 0, echo: true, stream: true }), "text");
  check(es[0] === ec.choices[0].text, "echo streamed");

  // best_of: the forks ranked by cumulative logprob (checked on the
  // logprobs they return), and best_of 3 with n 1 answers the first of them
  const breq = { model: "stories260K", prompt: "The dog", max_tokens: 6, temperature: 1, seed: 21, best_of: 3 };
  const b3 = await client.completions.create({ ...breq, n: 3, logprobs: 0 });
  const sums = b3.choices.map((c) => c.logprobs.token_logprobs.reduce((a, b) => a + b, 0));
  check(sums.length === 3 && sums.every((v, i) => i === 0 || sums[i - 1] >= v - 1e-6), "best_of 3, n 3: best first: " + JSON.stringify(sums));
  const b1 = await client.completions.create({ ...breq, n: 1 });
  check(b1.choices.length === 1 && b1.choices[0].text === b3.choices[0].text && b1.choices[0].logprobs === null,
        "best_of 3, n 1: the best fork, no logprobs unasked: " + JSON.stringify([b1.choices[0].text, b3.choices.map((c) => c.text)]));
  check(b1.usage.completion_tokens === b3.usage.completion_tokens, "best_of: usage counts every fork's tokens");

  // logit_bias: -100 bans a token, +100 all but forces it; with a grammar
  // the bias picks among what the grammar allows.
  const root = baseURL.replace(/\/v1$/, "");
  // token ids of a text as generated mid-output: SentencePiece's tokenizer
  // adds a space before the text (stories260K gives it a piece of its own
  // when the next one cannot take it); output has none
  const tokenize = async (content) => {
    const t = (await (await fetch(root + "/tokenize", {
      method: "POST", headers: { Authorization: "Bearer " + apiKey, "Content-Type": "application/json" },
      body: JSON.stringify({ content, add_special: false, with_pieces: true }) })).json()).tokens;
    return t.filter((x, i) => !(i === 0 && x.piece === " " && t.length > 1)).map((x) => x.id);
  };
  const greedy = (extra) => client.completions.create({ model: "stories260K", prompt: "Once upon a time", max_tokens: 6, temperature: 0, ...extra });
  const g0 = (await greedy()).choices[0].text;
  const first = (await tokenize(g0))[0];
  const banned = (await greedy({ logit_bias: { [first]: -100 } })).choices[0].text;
  const firstAfter = (await tokenize(banned))[0];
  check(banned !== g0 && firstAfter !== first, `logit_bias -100 bans the greedy first token ${first}: ${JSON.stringify(g0)} -> ${JSON.stringify(banned)}`);
  const cat = (await tokenize(" cat"))[0]; // " c"
  const forced = (await greedy({ logit_bias: { [cat]: 100 } })).choices[0].text;
  check((await tokenize(forced)).every((t) => t === cat), `logit_bias +100 picks token ${cat} every time: ${JSON.stringify(forced)}`);
  const yn = [" cat", " dog"];
  const gc = (extra) => client.completions.create({ model: "stories260K", prompt: "The pet was a", max_tokens: 8, temperature: 0, guided_choice: yn, ...extra });
  const plain = (await gc()).choices[0].text;
  const other = yn.find((w) => w !== plain);
  const biased = (await gc({ logit_bias: { [(await tokenize(other))[0]]: 100 } })).choices[0].text;
  check(yn.includes(plain) && biased === other, `logit_bias with a grammar: ${JSON.stringify(plain)} -> ${JSON.stringify(biased)} (want ${other})`);
  for (const [lb, what] of [[{ abc: 1 }, "a key that is not a token id"], [{ 999999: 1 }, "an id past the vocabulary"],
                            [{ 5: 101 }, "a bias over 100"], [Object.fromEntries(Array.from({ length: 301 }, (_, i) => [i, 1])), "301 entries"]]) {
    try {
      await greedy({ logit_bias: lb });
      check(false, `logit_bias ${what}: accepted`);
    } catch (e) {
      check(e.status === 400 && e.error && e.error.param === "logit_bias", `logit_bias ${what}: 400 naming it: ${e.message}`);
    }
  }

  // vLLM's guided decoding fields, on the grammar engine.
  const choices = ["yes", "no", "maybe \"so\""];
  for (const seed of [1, 2, 3]) {
    const g = await client.completions.create({
      model: "stories260K", prompt: "Is it?", max_tokens: 20, temperature: 1, seed, guided_choice: choices,
    });
    check(choices.includes(g.choices[0].text) && g.choices[0].finish_reason === "stop",
          `guided_choice seed ${seed}: one of the choices: ${JSON.stringify(g.choices[0].text)}`);
  }
  const gg = await client.chat.completions.create({
    model: "stories260K", messages, max_tokens: 20, temperature: 1, seed: 4, guided_grammar: 'root ::= "cat" | "dog" [0-9]',
  });
  check(/^(cat|dog[0-9])$/.test(gg.choices[0].message.content), "guided_grammar: " + JSON.stringify(gg.choices[0].message.content));
  const schema = { type: "object", properties: { n: { type: "integer", minimum: 0, maximum: 9 } }, required: ["n"], additionalProperties: false };
  for (const gj of [schema, JSON.stringify(schema)]) {
    const r = await client.completions.create({ model: "stories260K", prompt: "{", max_tokens: 40, temperature: 1, seed: 5, guided_json: gj });
    let o = null;
    try { o = JSON.parse(r.choices[0].text); } catch {}
    check(o && Number.isInteger(o.n) && o.n >= 0 && o.n <= 9 && Object.keys(o).length === 1,
          `guided_json (${typeof gj}): ${JSON.stringify(r.choices[0].text)}`);
  }
  for (const seed of [1, 2, 3]) {
    const re = "[0-9]{2,3}-[a-z]{2}( ok| \"no\")?";
    const g = await client.completions.create({ model: "stories260K", prompt: "Code:", max_tokens: 20, temperature: 1, seed, guided_regex: re });
    check(new RegExp("^(?:" + re + ")$").test(g.choices[0].text), `guided_regex seed ${seed}: the whole text matches: ${JSON.stringify(g.choices[0].text)}`);
  }
  const ok = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 4, reasoning_effort: "low" });
  check(ok.choices[0].message.role === "assistant", "reasoning_effort accepted on chat");

  // Fields not implemented are a 400 naming them, never silently ignored.
  for (const [kind, extra, param] of [
    ["completions", { echo: true, logprobs: 1 }, "echo"],
    ["completions", { suffix: "The end." }, "suffix"], // stories260K has no fill-in-the-middle tokens
    ["chat", { best_of: 2 }, "best_of"],
    ["completions", { guided_regex: "(a" }, "guided_regex"],
    ["completions", { guided_choice: ["a"], grammar: 'root ::= "b"' }, "guided_choice"],
    ["completions", { guided_choice: [] }, "guided_choice"],
    ["chat", { reasoning_effort: "extreme" }, "reasoning_effort"],
    ["chat", { guided_json: "{not json" }, "guided_json"],
    ["chat", { guided_whitespace_pattern: " *" }, "guided_whitespace_pattern"],
  ]) {
    try {
      if (kind === "chat") await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 4, ...extra });
      else await client.completions.create({ model: "stories260K", prompt: "hi", max_tokens: 4, ...extra });
      check(false, `${param}: accepted`);
    } catch (e) {
      check(e.status === 400 && e.error && e.error.param === param && e.message.includes(param), `${kind} ${param}: 400 naming it: ${e.message}`);
    }
  }
  // their no-op values are fine
  const noop = await client.completions.create({ model: "stories260K", prompt: "hi", max_tokens: 2, echo: false, suffix: "", best_of: 1, logit_bias: {} });
  check(noop.choices[0].text.length > 0, "an empty logit_bias is no bias");
  check(noop.choices.length === 1, "no-op values of the refused fields are accepted");

}

try {
  await main();
} catch (e) {
  failed++;
  console.log("FAIL exception: " + (e && e.stack ? e.stack : e));
}
console.log(`openai_params: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
