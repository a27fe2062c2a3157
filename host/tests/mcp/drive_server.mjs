// Drives `chitin mcp serve` (stdio) or the gateway's /mcp (streamable HTTP)
// with the official MCP TypeScript SDK's client and prints one JSON object
// of what it saw, for host/tests/e2e/mcp_serve.rs to check.
//
//   node drive_server.mjs stdio CHITIN ARGS...
//   node drive_server.mjs http URL TOKEN
//
// The server runs with --max-calls 1 and a 20 s time limit, so the call
// after a cancelled `spin` answers at once only if the cancelled instance
// was really stopped.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [transportKind, ...rest] = process.argv.slice(2);
const transport =
  transportKind === "stdio"
    ? new StdioClientTransport({ command: rest[0], args: rest.slice(1), env: process.env, stderr: "inherit" })
    : new StreamableHTTPClientTransport(new URL(rest[0]), { requestInit: { headers: { Authorization: `Bearer ${rest[1]}` } } });

const text = (result) => result.content.map((block) => block.text ?? "").join("");
const client = new Client({ name: "chitin-test", version: "1.0.0" });
await client.connect(transport);
const seen = {};

const listed = await client.listTools();
seen.tools = listed.tools.map((tool) => tool.name).sort();

const echo = await client.callTool({ name: "echo", arguments: { text: "hi from typescript" } });
seen.echo = { text: text(echo), isError: echo.isError ?? false };
seen.counters = [];
for (let i = 0; i < 2; i++) seen.counters.push(text(await client.callTool({ name: "counter", arguments: {} })));
const panicked = await client.callTool({ name: "panic", arguments: { message: "boom" } });
seen.panic = { text: text(panicked), isError: panicked.isError ?? false };

const updates = [];
const flooded = await client.callTool({ name: "progress_flood", arguments: { text: "step", count: 100000 } }, undefined, {
  onprogress: (p) => updates.push(p),
});
seen.progress = { result: text(flooded), updates };

const abort = new AbortController();
setTimeout(() => abort.abort(), 500);
try {
  await client.callTool({ name: "spin", arguments: {} }, undefined, { signal: abort.signal });
  seen.cancel = "answered";
} catch (e) {
  seen.cancel = `aborted: ${e.message}`;
}
const started = Date.now();
const after = await client.callTool({ name: "counter", arguments: {} }, undefined, { timeout: 8000 });
seen.afterCancel = { text: text(after), ms: Date.now() - started };

await client.close();
console.log(JSON.stringify(seen));
