// corpus_sdk.mjs — the schemas the OpenAI SDK's zod helpers send for the
// examples of OpenAI's structured-outputs and function-calling guides and
// of the Anthropic tool-use guide (the example shapes written here with
// zod; the JSON Schema is what openai/helpers/zod produces: strict mode,
// every property required, optional ones as nullable, $defs for reuse),
// plus the same shapes through zod's own toJSONSchema as Anthropic clients
// send them. One {"origin", "schema"} object a line:
//
//   node tools/grammar/corpus_sdk.mjs > tests/schemas/sdk.jsonl
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tests/package.json"));
const { z } = require("zod");
const { zodResponseFormat, zodFunction } = require("openai/helpers/zod");
import fs from "node:fs";
const oaiVersion = JSON.parse(fs.readFileSync(path.join(here, "../../tests/node_modules/openai/package.json"), "utf8")).version;

const ex = {};
// OpenAI structured outputs guide
ex.calendar_event = z.object({ name: z.string(), date: z.string(), participants: z.array(z.string()) });
ex.math_reasoning = z.object({ steps: z.array(z.object({ explanation: z.string(), output: z.string() })), final_answer: z.string() });
ex.research_paper = z.object({ title: z.string(), authors: z.array(z.string()), abstract: z.string(), keywords: z.array(z.string()) });
const UI = z.lazy(() => z.object({
  type: z.enum(["div", "button", "header", "section", "field", "form"]),
  label: z.string(),
  children: z.array(UI),
  attributes: z.array(z.object({ name: z.string(), value: z.string() })),
}));
ex.ui_generation = z.object({ ui: UI });
ex.moderation = z.object({ is_violating: z.boolean(), category: z.enum(["violence", "sexual", "self_harm"]).nullable(), explanation_if_violating: z.string().nullable() });
ex.entities = z.object({ attributes: z.array(z.string()), colors: z.array(z.string()), animals: z.array(z.string()) });
ex.chain_of_thought_optional = z.object({ reasoning: z.string().optional(), answer: z.number() });
// function calling guide
ex.get_weather = z.object({ location: z.string().describe("City and country e.g. Bogotá, Colombia"), units: z.enum(["celsius", "fahrenheit"]).nullable() });
ex.send_email = z.object({ to: z.string().describe("recipient email address"), subject: z.string(), body: z.string() });
ex.search_knowledge_base = z.object({
  query: z.string(),
  options: z.object({ num_results: z.number(), domain_filter: z.string().nullable(), sort_by: z.enum(["relevance", "date", "popularity", "alphabetical"]).nullable() }),
});
const Table = z.enum(["orders", "customers", "products"]);
const Column = z.enum(["id", "status", "expected_delivery_date", "delivered_at", "shipped_at", "ordered_at", "canceled_at"]);
const Operator = z.enum(["=", ">", "<", "<=", ">=", "!="]);
const OrderBy = z.enum(["asc", "desc"]);
const DynamicValue = z.object({ column_name: z.string() });
const Condition = z.object({ column: z.string(), operator: Operator, value: z.union([z.string(), z.number(), DynamicValue]) });
ex.query = z.object({ table_name: Table, columns: z.array(Column), conditions: z.array(Condition), order_by: OrderBy });
// Anthropic tool-use guide
ex.anthropic_get_weather = z.object({ location: z.string().describe("The city and state, e.g. San Francisco, CA"), unit: z.enum(["celsius", "fahrenheit"]).optional() });
ex.anthropic_get_stock_price = z.object({ ticker: z.string().describe("The stock ticker symbol, e.g. AAPL for Apple Inc.") });
ex.anthropic_record_summary = z.object({
  key_colors: z.array(z.object({ r: z.number().min(0).max(1), g: z.number().min(0).max(1), b: z.number().min(0).max(1), name: z.string() })),
  description: z.string(),
  estimated_year: z.int().optional(),
});
ex.anthropic_get_time = z.object({ timezone: z.string().describe("The IANA time zone name, e.g. America/Los_Angeles") });
ex.anthropic_customer_lookup = z.object({ customer_id: z.string().regex(/^C\d{5}$/), include_orders: z.boolean().optional() });

for (const [name, schema] of Object.entries(ex)) {
  try {
    const rf = zodResponseFormat(schema, name);
    process.stdout.write(JSON.stringify({ origin: `openai ${oaiVersion} helpers/zod zodResponseFormat (guide example ${name})`, schema: rf.json_schema.schema }) + "\n");
    const fn = zodFunction({ name, parameters: schema });
    process.stdout.write(JSON.stringify({ origin: `openai ${oaiVersion} helpers/zod zodFunction (guide example ${name})`, schema: fn.function.parameters }) + "\n");
  } catch (e) {
    process.stderr.write(`${name}: openai helpers: ${e.message}\n`);
  }
  process.stdout.write(JSON.stringify({ origin: `zod toJSONSchema (guide example ${name}, as Anthropic clients send it)`, schema: z.toJSONSchema(schema, { unrepresentable: "any" }) }) + "\n");
}
