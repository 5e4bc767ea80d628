// Calls one tool with the official MCP TypeScript SDK's client and prints JSON: the tools
// listed, the call's isError, its text, and the types of its content. The console's bearer
// token comes in $MESH_CONSOLE_TOKEN.
//
// usage: NODE_PATH=<node_modules with @modelcontextprotocol/sdk> node call_tool.cjs TOOL ARGUMENTS_JSON TARGET [ARG...]
//   TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const [tool, args, target, ...rest] = process.argv.slice(2);
  const transport = target.startsWith("http")
    ? new StreamableHTTPClientTransport(new URL(target), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MESH_CONSOLE_TOKEN || ""}` } },
      })
    : new StdioClientTransport({ command: target, args: rest, stderr: "inherit" });
  const client = new Client({ name: "call-tool", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  const listed = await client.listTools();
  const r = await client.callTool({ name: tool, arguments: JSON.parse(args) });
  const text = r.content.filter((c) => c.type === "text").map((c) => c.text).join("\n");
  console.log(
    JSON.stringify({
      tools: listed.tools.map((t) => t.name).sort(),
      isError: Boolean(r.isError),
      text,
      types: r.content.map((c) => c.type),
    }),
  );
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
