// corpus_zod.mjs — writes the JSON Schemas zod 4's toJSONSchema produces for
// every public zod type and common combinations, one {"origin", "schema"}
// object a line, for the schema corpus (tests/schemas/, docs/grammar.md).
//
//   node tools/grammar/corpus_zod.mjs > tests/schemas/zod.jsonl
//
// zod comes from tests/node_modules (tests/package.json). Each schema is
// written for both targets (draft-2020-12 and draft-7); types JSON Schema
// cannot express (bigint, date, map ...) are written as {} by zod
// (unrepresentable: "any") and kept: agents send them too.
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tests/package.json"));
const { z } = require("zod");
const version = require("zod/package.json").version;

const S = {};
// primitives and string formats
S.string = z.string();
S.string_min_max = z.string().min(1).max(64);
S.string_length = z.string().length(5);
S.string_regex = z.string().regex(/^[a-z0-9_-]{3,16}$/);
S.string_startsWith = z.string().startsWith("sk-");
S.string_endsWith = z.string().endsWith(".json");
S.string_includes = z.string().includes("@");
S.string_lowercase = z.string().lowercase();
S.string_uppercase = z.string().uppercase();
S.string_trim = z.string().trim();
S.email = z.email();
S.email_max = z.email().max(254);
S.url = z.url();
S.httpUrl = z.httpUrl ? z.httpUrl() : z.url();
S.uuid = z.uuid();
S.uuidv4 = z.uuidv4();
S.guid = z.guid();
S.cuid = z.cuid();
S.cuid2 = z.cuid2();
S.ulid = z.ulid();
S.nanoid = z.nanoid();
S.emoji = z.emoji();
S.ipv4 = z.ipv4();
S.ipv6 = z.ipv6();
S.cidrv4 = z.cidrv4();
S.cidrv6 = z.cidrv6();
S.base64 = z.base64();
S.base64url = z.base64url();
S.e164 = z.e164();
S.jwt = z.jwt();
S.hostname = z.hostname ? z.hostname() : z.string();
S.hex = z.hex ? z.hex() : z.string();
S.iso_date = z.iso.date();
S.iso_time = z.iso.time();
S.iso_datetime = z.iso.datetime();
S.iso_datetime_offset = z.iso.datetime({ offset: true });
S.iso_datetime_local = z.iso.datetime({ local: true });
S.iso_duration = z.iso.duration();
S.templateLiteral = z.templateLiteral(["user-", z.number()]);
S.number = z.number();
S.int = z.int();
S.int32 = z.int32();
S.uint32 = z.uint32();
S.float32 = z.float32();
S.float64 = z.float64();
S.number_min_max = z.number().min(0).max(100);
S.number_gt_lt = z.number().gt(0).lt(1);
S.number_positive = z.number().positive();
S.number_nonnegative = z.number().nonnegative();
S.number_negative = z.number().negative();
S.number_multipleOf = z.number().multipleOf(0.01);
S.int_multipleOf = z.int().multipleOf(5);
S.int_range = z.int().min(1).max(10);
S.boolean = z.boolean();
S.null = z.null();
S.any = z.any();
S.unknown = z.unknown();
S.never = z.never();
S.literal_string = z.literal("tool");
S.literal_number = z.literal(42);
S.literal_multi = z.literal(["a", "b", 3]);
S.enum = z.enum(["low", "medium", "high"]);
S.nativeEnum = z.enum({ A: "a", B: "b" });
S.stringbool = z.stringbool ? z.stringbool() : z.boolean();
S.json = z.json ? z.json() : z.any();
S.bigint = z.bigint();
S.date = z.date();
S.undefined = z.undefined();
S.symbol = z.symbol();
S.map = z.map(z.string(), z.number());
S.set = z.set(z.string());
S.nan = z.nan();
// containers
const base = z.object({ id: z.string(), count: z.number().int().nonnegative() });
S.object = base;
S.object_optional = z.object({ a: z.string(), b: z.number().optional(), c: z.boolean().nullable() });
S.object_strict = base.strict();
S.object_passthrough = base.passthrough();
S.object_loose = z.looseObject({ a: z.string() });
S.object_strictObject = z.strictObject({ a: z.string() });
S.object_catchall = base.catchall(z.string());
S.object_partial = base.partial();
S.object_required = base.partial().required();
S.object_extend = base.extend({ extra: z.string() });
S.object_pick = base.pick({ id: true });
S.object_omit = base.omit({ id: true });
S.object_merge = base.merge(z.object({ more: z.boolean() }));
S.object_default = z.object({ mode: z.string().default("fast"), n: z.number().default(3) });
S.object_describe = z.object({ q: z.string().describe("the query") }).describe("search args");
S.array = z.array(z.string());
S.array_min_max = z.array(z.number()).min(1).max(5);
S.array_length = z.array(z.boolean()).length(3);
S.array_nonempty = z.array(z.string()).nonempty();
S.array_objects = z.array(base);
S.tuple = z.tuple([z.string(), z.number()]);
S.tuple_rest = z.tuple([z.string()], z.number());
S.union = z.union([z.string(), z.number()]);
S.union_objects = z.union([z.object({ a: z.string() }), z.object({ b: z.number() })]);
S.xor = z.xor ? z.xor([z.string(), z.number()]) : z.union([z.string(), z.number()]);
S.discriminatedUnion = z.discriminatedUnion("type", [
  z.object({ type: z.literal("text"), text: z.string() }),
  z.object({ type: z.literal("image"), url: z.url(), alt: z.string().optional() }),
]);
S.intersection = z.intersection(z.object({ a: z.string() }), z.object({ b: z.number() }));
S.record = z.record(z.string(), z.number());
S.record_enum = z.record(z.enum(["x", "y"]), z.string());
S.partialRecord = z.partialRecord ? z.partialRecord(z.enum(["x", "y"]), z.string()) : z.record(z.string(), z.string());
S.record_regex_keys = z.record(z.string().regex(/^[a-z]+$/), z.boolean());
S.optional = z.string().optional();
S.nullable = z.string().nullable();
S.nullish = z.number().nullish();
S.default = z.string().default("x");
S.catch = z.number().catch(0);
S.readonly = z.array(z.string()).readonly();
S.brand = z.string().brand("UserId");
S.pipe = z.string().pipe(z.string().min(2));
S.transform = z.string().transform((s) => s.length);
S.preprocess = z.preprocess((v) => String(v), z.string());
S.refine = z.string().refine((s) => s.length > 0);
S.success = z.success ? z.success(z.string()) : z.boolean();
const Category = z.object({
  name: z.string(),
  get subcategories() {
    return z.array(Category);
  },
});
S.recursive_getter = Category;
const Tree = z.lazy(() => z.object({ value: z.number(), children: z.array(Tree) }));
S.lazy = Tree;
const Json = z.lazy(() => z.union([z.string(), z.number(), z.boolean(), z.null(), z.array(Json), z.record(z.string(), Json)]));
S.lazy_json = Json;
// tool-shaped combinations (what agents send)
S.tool_search = z.object({
  query: z.string().min(1).describe("search terms"),
  limit: z.number().int().min(1).max(50).default(10),
  site: z.url().optional(),
  since: z.iso.date().optional(),
});
S.tool_fetch = z.object({ url: z.url(), max_length: z.number().int().positive().max(1000000).optional(), raw: z.boolean().default(false) });
S.tool_email = z.object({ to: z.array(z.email()).min(1), cc: z.array(z.email()).optional(), subject: z.string().max(200), body: z.string() });
S.tool_calendar = z.object({
  title: z.string(),
  start: z.iso.datetime(),
  end: z.iso.datetime(),
  attendees: z.array(z.object({ email: z.email(), optional: z.boolean().optional() })).optional(),
  reminder: z.iso.duration().optional(),
});
S.tool_file_edit = z.object({
  path: z.string(),
  edits: z.array(z.object({ oldText: z.string(), newText: z.string() })),
  dryRun: z.boolean().default(false),
});
S.tool_weather = z.object({ location: z.string(), unit: z.enum(["celsius", "fahrenheit"]).optional(), days: z.int().min(1).max(14) });
S.tool_sql = z.object({ query: z.string(), params: z.array(z.union([z.string(), z.number(), z.boolean(), z.null()])).optional() });
S.tool_user = z.object({
  id: z.uuid(),
  name: z.string().min(1).max(100),
  age: z.number().int().nonnegative().optional(),
  email: z.email(),
  tags: z.array(z.string()).max(10),
  meta: z.record(z.string(), z.string()).optional(),
  address: z.object({ street: z.string(), zip: z.string().regex(/^\d{5}$/), country: z.string().length(2) }).optional(),
});
S.tool_http = z.object({
  method: z.enum(["GET", "POST", "PUT", "DELETE"]),
  url: z.url(),
  headers: z.record(z.string(), z.string()).optional(),
  body: z.union([z.string(), z.record(z.string(), z.unknown())]).optional(),
  timeout_ms: z.number().int().min(0).max(600000).optional(),
});
S.tool_ip = z.object({ host: z.union([z.ipv4(), z.ipv6()]), port: z.int().min(1).max(65535) });
S.answer_rating = z.object({ score: z.number().min(0).max(1), label: z.enum(["good", "bad"]), reasons: z.array(z.string()).min(1).max(3) });
S.answer_steps = z.object({ steps: z.array(z.object({ explanation: z.string(), output: z.string() })), final_answer: z.string() });

const targets = ["draft-2020-12", "draft-7"];
let n = 0, failed = [];
for (const [name, schema] of Object.entries(S)) {
  for (const target of targets) {
    for (const io of ["output", "input"]) {
      if (io === "input" && !["transform", "pipe", "default", "object_default", "preprocess", "catch", "tool_search", "tool_fetch", "tool_file_edit", "stringbool"].includes(name)) continue;
      let js;
      try {
        js = z.toJSONSchema(schema, { target, unrepresentable: "any", io, cycles: "ref", reused: "inline" });
      } catch (e) {
        failed.push(`${name}/${target}/${io}: ${e.message}`);
        continue;
      }
      process.stdout.write(JSON.stringify({ origin: `zod ${version} toJSONSchema ${name} target=${target} io=${io}`, schema: js }) + "\n");
      n++;
    }
  }
}
process.stderr.write(`${n} schemas; not representable: ${failed.length}\n${failed.join("\n")}\n`);
