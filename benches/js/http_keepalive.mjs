// Sequential tools/call through one kept-alive MCP client over streamable HTTP: the official
// TypeScript SDK's client against a URL (mesh serve), or against the SDK's own streamable
// HTTP server answering `echo` in this process. Prints p50/p99 and a last line
// `http_keepalive <name> p50_ms=<x> p99_ms=<y>`.
//
//   node http_keepalive.mjs url <url> <bearer token> [tool] [calls]
//   node http_keepalive.mjs sdk-server [calls]
import http from "node:http";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

async function measure(name, url, headers, tool, calls) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: "bench", version: "0" });
  await client.connect(transport);
  for (let i = 0; i < 20; i++) await client.callTool({ name: tool, arguments: { text: "hi" } });
  const times = [];
  for (let i = 0; i < calls; i++) {
    const t = process.hrtime.bigint();
    const r = await client.callTool({ name: tool, arguments: { text: "hi" } });
    times.push(Number(process.hrtime.bigint() - t) / 1e6);
    if (r.isError) throw new Error(JSON.stringify(r));
  }
  await client.close();
  times.sort((a, b) => a - b);
  const p = (q) => times[Math.min(times.length - 1, Math.floor(q * times.length))];
  console.log(`${name}: ${calls} calls, p50 ${p(0.5).toFixed(3)} ms, p99 ${p(0.99).toFixed(3)} ms`);
  console.log(`http_keepalive ${name} p50_ms=${p(0.5).toFixed(3)} p99_ms=${p(0.99).toFixed(3)}`);
}

// The SDK's own server, stateless (a transport per request, as its examples do).
async function sdkServer() {
  const server = http.createServer(async (req, res) => {
    const mcp = new McpServer({ name: "echo", version: "0" });
    mcp.tool("echo", { text: z.string() }, async ({ text }) => ({ content: [{ type: "text", text }] }));
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
    res.on("close", () => { transport.close(); mcp.close(); });
    await mcp.connect(transport);
    let body = "";
    for await (const chunk of req) body += chunk;
    await transport.handleRequest(req, res, body ? JSON.parse(body) : undefined);
  });
  await new Promise((ok) => server.listen(0, "127.0.0.1", ok));
  return server;
}

const [mode, ...rest] = process.argv.slice(2);
if (mode === "url") {
  const [url, token, tool = "echo", calls = "500"] = rest;
  await measure("mesh-serve", url, { Authorization: `Bearer ${token}` }, tool, Number(calls));
} else if (mode === "sdk-server") {
  const server = await sdkServer();
  const { port } = server.address();
  await measure("ts-sdk-server", `http://127.0.0.1:${port}/mcp`, {}, "echo", Number(rest[0] ?? "500"));
  server.close();
} else {
  console.error("usage: http_keepalive.mjs url <url> <token> [tool] [calls] | sdk-server [calls]");
  process.exit(2);
}
