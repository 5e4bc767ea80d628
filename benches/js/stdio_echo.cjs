// The official MCP TypeScript SDK's own stdio server answering `echo` in its process: the
// peer `mesh mcp` is measured against in `cargo bench --bench relay -- mcp`.
//
// usage: NODE_PATH=target/js/node_modules node benches/js/stdio_echo.cjs
const { McpServer } = require("@modelcontextprotocol/sdk/server/mcp.js");
const { StdioServerTransport } = require("@modelcontextprotocol/sdk/server/stdio.js");
const { z } = require("zod");

const server = new McpServer({ name: "echo", version: "1.0.0" });
server.registerTool(
  "echo",
  { description: "Returns the text it is given", inputSchema: { text: z.string() } },
  async ({ text }) => ({ content: [{ type: "text", text }] }),
);
server.connect(new StdioServerTransport()).catch((e) => {
  console.error(`stdio_echo.cjs: ${e.stack || e}`);
  process.exit(1);
});
