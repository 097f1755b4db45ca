// corpus_mcp.mjs — extracts the tool input schemas that published MCP
// servers announce (tools/list), one {"origin", "schema"} object a line,
// for the schema corpus (tests/schemas/mcp.jsonl, docs/grammar.md).
//
//   mkdir -p /tmp/mcp && cd /tmp/mcp && npm install --ignore-scripts \
//       @modelcontextprotocol/server-filesystem @modelcontextprotocol/server-memory ...
//   node tools/grammar/corpus_mcp.mjs /tmp/mcp > tests/schemas/mcp.jsonl
//
// Every server under DIR/node_modules/@modelcontextprotocol/server-* is
// started on stdio (with dummy credentials in its environment: nothing is
// called, only listed) and asked for initialize + tools/list; its answer
// is what an agent would forward as tool parameters.
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";

const dir = process.argv[2] || "/tmp/mcp";
const base = path.join(dir, "node_modules/@modelcontextprotocol");
const env = { ...process.env, GITHUB_PERSONAL_ACCESS_TOKEN: "x", GITLAB_PERSONAL_ACCESS_TOKEN: "x", BRAVE_API_KEY: "x",
  SLACK_BOT_TOKEN: "x", SLACK_TEAM_ID: "x", GOOGLE_MAPS_API_KEY: "x", EVERART_API_KEY: "x", AWS_ACCESS_KEY_ID: "x",
  AWS_SECRET_ACCESS_KEY: "x", AWS_REGION: "us-east-1", MEMORY_FILE_PATH: path.join(dir, "memory.json") };
const args = { "server-filesystem": [path.join(dir, "fsroot")], "server-postgres": ["postgresql://localhost/x"],
  "server-redis": ["redis://localhost:6379"], "server-everything": ["stdio"] };

function list(name, pkg) {
  return new Promise((resolve) => {
    const main = path.join(base, name, pkg.bin[Object.keys(pkg.bin)[0]]);
    const p = spawn(process.execPath, [main, ...(args[name] || [])], { env, stdio: ["pipe", "pipe", "ignore"] });
    let buf = "";
    const done = (v) => { clearTimeout(t); p.kill(); resolve(v); };
    const t = setTimeout(() => done(null), 15000);
    p.stdout.on("data", (d) => {
      buf += d;
      for (;;) {
        const i = buf.indexOf("\n");
        if (i < 0) break;
        const line = buf.slice(0, i);
        buf = buf.slice(i + 1);
        let m;
        try { m = JSON.parse(line); } catch { continue; }
        if (m.id === 1) {
          p.stdin.write(JSON.stringify({ jsonrpc: "2.0", method: "notifications/initialized" }) + "\n");
          p.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 2, method: "tools/list", params: {} }) + "\n");
        } else if (m.id === 2) done(m.result ? m.result.tools : null);
      }
    });
    p.on("error", () => done(null));
    p.on("exit", () => done(null));
    p.stdin.write(JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18",
      capabilities: {}, clientInfo: { name: "kvloom-corpus", version: "1" } } }) + "\n");
  });
}

let n = 0;
for (const name of fs.readdirSync(base).filter((x) => x.startsWith("server-")).sort()) {
  const pkg = JSON.parse(fs.readFileSync(path.join(base, name, "package.json"), "utf8"));
  const tools = await list(name, pkg);
  if (!tools) { process.stderr.write(`${name}: no tools/list answer\n`); continue; }
  for (const t of tools) {
    process.stdout.write(JSON.stringify({ origin: `npm @modelcontextprotocol/${name}@${pkg.version} tool ${t.name} inputSchema`, schema: t.inputSchema }) + "\n");
    n++;
    if (t.outputSchema) {
      process.stdout.write(JSON.stringify({ origin: `npm @modelcontextprotocol/${name}@${pkg.version} tool ${t.name} outputSchema`, schema: t.outputSchema }) + "\n");
      n++;
    }
  }
  process.stderr.write(`${name}: ${tools.length} tools\n`);
}
process.stderr.write(`${n} schemas\n`);
