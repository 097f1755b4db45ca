#!/usr/bin/env node
// o200k_harmony.mjs — writes gpt-oss's tokenizer, o200k_harmony, as a
// Hugging Face tokenizer.json (+ tokenizer_config.json) that `kvloom gen`
// imports (tok_import_hf), so random-weight gpt-oss models carry the real
// vocabulary.
//
//   node tools/o200k_harmony.mjs OUT_DIR     (writes OUT_DIR/tokenizer.json
//                                             and OUT_DIR/tokenizer_config.json)
//
// Origin of the data: the o200k_base byte-pair ranks shipped by the npm
// package js-tiktoken (tests/package.json; MIT licence), which is OpenAI's
// tiktoken encoding. o200k_harmony is o200k_base plus gpt-oss's special
// tokens (OpenAI's harmony format): ids 199998 <|startoftext|>, 199999
// <|endoftext|>, 200002 <|return|>, 200003 <|constrain|>, 200005
// <|channel|>, 200006 <|start|>, 200007 <|end|>, 200008 <|message|>, 200012
// <|call|>, 200018 <|endofprompt|>, and <|reserved_N|> for every other id up
// to 201087 (201,088 in all, the model's embedding rows).
//
// tiktoken stores ranks, not merges: a token of rank r is what byte-pair
// merging in rank order makes, and its last merge joins the two pieces that
// merging its bytes with the ranks below r leaves. That pair, in rank order,
// is the merge list a BPE tokenizer needs (the way byte-level BPE
// tokenizer.json files of tiktoken vocabularies are built). Tokens are
// written in the GPT-2 byte-to-code-point alphabet (ByteLevel), the
// pre-tokenizer as tiktoken's pattern (a Split regex; kvloom maps it to its
// "gpt-4o" matcher).
//
// No chat template is written: kvloom gen takes one with --template (the
// tests use tests/fixtures/templates/gpt-oss.jinja).
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const out = process.argv[2];
if (!out) {
    console.error("usage: node tools/o200k_harmony.mjs OUT_DIR");
    process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const ranksPath = join(here, "..", "tests", "node_modules", "js-tiktoken", "dist", "ranks", "o200k_base.js");
const base = (await import(ranksPath)).default;

// rank -> bytes (as a latin1 string: one char a byte), and back
const byRank = [];
const rankOf = new Map();
for (const line of base.bpe_ranks.split("\n")) {
    if (!line) continue;
    const [, offsetStr, ...toks] = line.split(" ");
    const offset = Number.parseInt(offsetStr, 10);
    toks.forEach((t, i) => {
        const b = Buffer.from(t, "base64").toString("latin1");
        byRank[offset + i] = b;
        rankOf.set(b, offset + i);
    });
}
const nRanks = byRank.length;
for (let r = 0; r < nRanks; r++) if (!byRank[r]) throw new Error(`rank ${r} missing`);
if (nRanks !== 199998) throw new Error(`o200k_base has ${nRanks} ranks, expected 199998`);

// GPT-2's byte -> code point alphabet
const byteChar = [];
{
    const keep = [];
    for (let b = 0x21; b <= 0x7e; b++) keep.push(b);
    for (let b = 0xa1; b <= 0xac; b++) keep.push(b);
    for (let b = 0xae; b <= 0xff; b++) keep.push(b);
    let n = 0;
    for (let b = 0; b < 256; b++) byteChar[b] = String.fromCodePoint(keep.includes(b) ? b : 256 + n++);
}
const show = (str) => Array.from(str, (ch) => byteChar[ch.charCodeAt(0)]).join("");

// The last merge of each token: merge its bytes with the ranks below its own.
const merges = [];
for (let r = 0; r < nRanks; r++) {
    const tok = byRank[r];
    if (tok.length < 2) continue;
    const parts = tok.split("");
    while (parts.length > 2) {
        let best = -1, bestRank = Infinity;
        for (let i = 0; i + 1 < parts.length; i++) {
            const k = rankOf.get(parts[i] + parts[i + 1]);
            if (k !== undefined && k < r && k < bestRank) best = i, bestRank = k;
        }
        if (best < 0) throw new Error(`rank ${r}: no merge below it`);
        parts.splice(best, 2, parts[best] + parts[best + 1]);
    }
    merges.push(`${show(parts[0])} ${show(parts[1])}`);
}

const specials = {
    199998: "<|startoftext|>", 199999: "<|endoftext|>", 200002: "<|return|>", 200003: "<|constrain|>",
    200005: "<|channel|>", 200006: "<|start|>", 200007: "<|end|>", 200008: "<|message|>", 200012: "<|call|>",
    200018: "<|endofprompt|>",
};
const vocab = {};
for (let r = 0; r < nRanks; r++) vocab[show(byRank[r])] = r;
const added = [];
for (let id = 199998; id < 201088; id++)
    added.push({ id, content: specials[id] ?? `<|reserved_${id}|>`, single_word: false, lstrip: false, rstrip: false,
                 normalized: false, special: true });

const tokenizer = {
    version: "1.0",
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: {
        type: "Sequence",
        pretokenizers: [
            { type: "Split", pattern: { Regex: base.pat_str }, behavior: "Isolated", invert: false },
            { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
        ],
    },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: { type: "BPE", dropout: null, unk_token: null, continuing_subword_prefix: null, end_of_word_suffix: null,
             fuse_unk: false, byte_fallback: false, ignore_merges: false, vocab, merges },
};
const config = { bos_token: "<|startoftext|>", eos_token: "<|return|>", pad_token: "<|endoftext|>",
                 add_bos_token: false, add_eos_token: false, model_max_length: 131072 };
mkdirSync(out, { recursive: true });
writeFileSync(join(out, "tokenizer.json"), JSON.stringify(tokenizer));
writeFileSync(join(out, "tokenizer_config.json"), JSON.stringify(config, null, 1));
console.error(`o200k_harmony: ${nRanks} ranks, ${merges.length} merges, ${added.length} special tokens -> ${out}`);
