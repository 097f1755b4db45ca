// o200k_vectors.mjs — kvloom's o200k_harmony tokenizer (gpt-oss) against
// js-tiktoken, OpenAI's o200k_base encoding in JavaScript, as an independent
// reference: every case is tokenized by both and the ids must be equal.
//
//   node tests/node/o200k_vectors.mjs BASE_URL FILE...
//
// BASE_URL is a `kvloom serve` of a model that carries the vocabulary
// (kvloom gen --preset gpt-oss-20b, any shape), asked through POST
// /tokenize (add_special false; special tokens in the text are matched, as
// in rendered chat templates); FILE... are texts tokenized whole (real
// documents without "<|": kvloom matches harmony's header tokens in plain
// text too, as llama.cpp does, where tiktoken's plain encode would not).
// Cases cover
// the pattern's branches: case classes (U*L+ / U+L* with Lm, Lo and marks),
// contractions in any case, digit runs cut at 3, punctuation runs with
// trailing newlines and slashes, whitespace before words and newlines,
// scripts without case, emoji, and the harmony special tokens (--special).
// Last line: "N passed, N failed".
import { readFileSync } from "node:fs";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";

const [base, ...files] = process.argv.slice(2);
const harmony = {
    "<|startoftext|>": 199998, "<|return|>": 200002, "<|constrain|>": 200003, "<|channel|>": 200005,
    "<|start|>": 200006, "<|end|>": 200007, "<|message|>": 200008, "<|call|>": 200012,
};
const enc = new Tiktoken(o200k, harmony);

const cases = [
    "Hello world",
    "Hello world! It's 12345 tokens, naïve café. ÉCOLE Straße",
    "I'M SURE THEY'LL COME; we'Ve seen it'D",
    "HTTPServer parseJSONValue iPhone McDonald's XMLHttpRequest",
    "1234567890 3.14159 1,000,000 0x7fffffff",
    "  leading spaces\tand\ttabs   trailing   ",
    "line one\nline two\r\n\r\nthird\n\n\n   indented\n",
    "path/to/file.c: error: expected ';' before '}' token\n",
    "a//b///c  !!!\n\n/// doc comment\n",
    "int main(void) {\n    return printf(\"%d\\n\", 42);\n}\n",
    "def f(x):\n\treturn x**2  # square\n",
    "Привет, мир! Ελληνικά ΚΕΦΑΛΑΙΑ",
    "日本語のテキスト、漢字とカタカナ。中文标点！",
    "한국어 문장입니다. العربية نص. עברית",
    "हिन्दी में लिखा पाठ और संख्या १२३",
    "Emoji: 👍🏽 🇫🇷 👨‍👩‍👧 ✓ ★",
    "ǅemal ǈubljana ʰmodifier ꜰsmall",
    "e\u0301 combining a\u0308\u0323 marks",
    "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}",
    "   \n   \n",
    " ",
    "\n",
    "x",
    "'s 'S 'll 'LL'd",
];
const special = [
    "<|start|>user<|message|>What is 2+2?<|end|><|start|>assistant",
    "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>4<|return|>",
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}<|call|>",
];

let pass = 0, fail = 0;
async function check(label, text, withSpecial) {
    const want = withSpecial ? enc.encode(text, "all") : enc.encode(text, [], []);
    let got;
    try {
        const r = await fetch(`${base}/tokenize`, { method: "POST", headers: { "content-type": "application/json" },
                                                    body: JSON.stringify({ content: text, add_special: false }),
                                                    signal: AbortSignal.timeout(20000) });
        got = (await r.json()).tokens;
        if (!Array.isArray(got)) throw new Error(`status ${r.status}`);
    } catch (e) {
        fail++;
        console.log(`FAIL ${label}: /tokenize failed: ${e.message}`);
        return;
    }
    const same = got.length === want.length && got.every((v, i) => v === want[i]);
    if (same) pass++;
    else {
        fail++;
        let i = 0;
        while (i < got.length && i < want.length && got[i] === want[i]) i++;
        console.log(`FAIL ${label}: first difference at id ${i}: kvloom ${got.slice(i, i + 8).join(" ")} ` +
                    `js-tiktoken ${want.slice(i, i + 8).join(" ")} (lengths ${got.length}, ${want.length})`);
    }
}
for (const [i, t] of cases.entries()) await check(`case ${i} ${JSON.stringify(t.slice(0, 30))}`, t, false);
for (const [i, t] of special.entries()) await check(`special ${i}`, t, true);
for (const f of files) await check(f, readFileSync(f, "utf8"), false);
console.log(`${pass} passed, ${fail} failed`);
process.exit(fail ? 1 : 0);
