// The official MCP TypeScript SDK's own streamable HTTP server answering `echo` in its
// process, stateless (a transport per request, as the SDK's examples do): the peer of
// `mesh serve` in `cargo bench --bench load -- --paths http-ts`. Prints `listening: <url>`.
//
// usage: NODE_PATH=target/js/node_modules node benches/js/http_echo.cjs
const http = require("node:http");
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StreamableHTTPServerTransport } = require("@modelcontextprotocol/sdk/server/streamableHttp.js");
const { z } = require("zod");

const server = http.createServer(async (req, res) => {
  const mcp = new McpServer({ name: "echo", version: "1.0.0" });
  mcp.registerTool(
    "echo",
    { description: "Returns the text it is given", inputSchema: { text: z.string() } },
    async ({ text }) => ({ content: [{ type: "text", text }] }),
  );
  const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined });
  res.on("close", () => {
    transport.close();
    mcp.close();
  });
  await mcp.connect(transport);
  let body = "";
  for await (const chunk of req) body += chunk;
  await transport.handleRequest(req, res, body ? JSON.parse(body) : undefined);
});
server.listen(0, "127.0.0.1", () => {
  console.log(`listening: http://127.0.0.1:${server.address().port}/mcp`);
});
