// openai_client.mjs — drives a running kvloom server with the official
// `openai` npm client: chat and completions, streaming and not.
//   node tests/node/openai_client.mjs BASE_URL API_KEY
// Prints one line per check and ends with "openai_client: N passed, N failed".
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, timeout: 60000, maxRetries: 0 });
let passed = 0, failed = 0;
function check(cond, what) {
  if (cond) passed++;
  else { failed++; console.log("FAIL " + what); }
}

async function main() {
  const models = await client.models.list();
  check(models.data.length === 1 && models.data[0].id === "stories260K", "models.list");

  const c = await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 12, temperature: 0,
  });
  check(c.object === "text_completion", "completions object");
  check(c.choices[0].text.startsWith(", there was a little girl"), "completions text: " + JSON.stringify(c.choices[0].text));
  check(c.choices[0].finish_reason === "length", "completions finish_reason");
  check(c.usage.prompt_tokens === 5 && c.usage.completion_tokens === 12, "completions usage");

  const cs = await client.completions.create({
    model: "stories260K", prompt: "Once upon a time", max_tokens: 12, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = "", usage = null, finish = null;
  for await (const chunk of cs) {
    if (chunk.choices.length) { text += chunk.choices[0].text; finish = chunk.choices[0].finish_reason || finish; }
    if (chunk.usage) usage = chunk.usage;
  }
  check(text === c.choices[0].text, "completions stream text equals non-stream");
  check(finish === "length", "completions stream finish_reason");
  check(usage && usage.completion_tokens === 12, "completions stream usage");

  const messages = [{ role: "system", content: "You tell stories." }, { role: "user", content: "A story about a cat." }];
  const ch = await client.chat.completions.create({ model: "stories260K", messages, max_tokens: 16, temperature: 0 });
  check(ch.object === "chat.completion", "chat object");
  check(ch.choices[0].message.role === "assistant" && typeof ch.choices[0].message.content === "string" &&
        ch.choices[0].message.content.length > 0, "chat message");
  check(ch.usage.completion_tokens === 16 && ch.usage.prompt_tokens > 10, "chat usage");

  const chs = await client.chat.completions.create({
    model: "stories260K", messages, max_tokens: 16, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let ctext = "", role = null, cusage = null;
  for await (const chunk of chs) {
    if (chunk.choices.length) {
      const d = chunk.choices[0].delta;
      if (d.role) role = d.role;
      if (d.content) ctext += d.content;
    }
    if (chunk.usage) cusage = chunk.usage;
  }
  check(role === "assistant", "chat stream role");
  check(ctext === ch.choices[0].message.content, "chat stream text equals non-stream");
  check(cusage && cusage.completion_tokens === 16, "chat stream usage");

  // Errors come back as OpenAI errors the client understands.
  try {
    await client.completions.create({ model: "x", prompt: "hi", temperature: 9 });
    check(false, "bad temperature accepted");
  } catch (e) {
    check(e.status === 400 && e.error && e.error.param === "temperature", "400 error object: " + e.message);
  }
  const bad = new OpenAI({ baseURL, apiKey: "wrong-key", maxRetries: 0 });
  try {
    await bad.models.list();
    check(false, "bad key accepted");
  } catch (e) {
    check(e.status === 401, "401 for a bad key");
  }
}

try {
  await main();
} catch (e) {
  failed++;
  console.log("FAIL exception: " + (e && e.stack ? e.stack : e));
}
console.log(`openai_client: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
