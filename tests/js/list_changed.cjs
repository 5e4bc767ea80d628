// Follows mesh's tool list with the official MCP TypeScript SDK's client: prints the list, then
// after each notifications/tools/list_changed the list again, one JSON line each, until it has
// seen CHANGES changes. The console's bearer token comes in $MESH_CONSOLE_TOKEN.
//
// usage: NODE_PATH=<node_modules with @modelcontextprotocol/sdk> node list_changed.cjs CHANGES TARGET [ARG...]
//   TARGET  an http(s) URL of `mesh serve`, or the path of the mesh binary (stdio; ARGs follow)
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ToolListChangedNotificationSchema } = require("@modelcontextprotocol/sdk/types.js");

async function show(client) {
  const listed = await client.listTools();
  console.log(JSON.stringify({ tools: listed.tools.map((t) => t.name).sort() }));
}

async function main() {
  const [changes, target, ...args] = process.argv.slice(2);
  const transport = target.startsWith("http")
    ? new StreamableHTTPClientTransport(new URL(target), {
        requestInit: { headers: { Authorization: `Bearer ${process.env.MESH_CONSOLE_TOKEN || ""}` } },
      })
    : new StdioClientTransport({ command: target, args, stderr: "inherit" });
  const client = new Client({ name: "list-changed", version: "1.0.0" }, { capabilities: {} });
  let wake = null;
  let pending = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, async () => {
    pending += 1;
    if (wake) wake();
  });
  await client.connect(transport);
  if (!client.getServerCapabilities()?.tools?.listChanged) {
    throw new Error("the server does not declare tools.listChanged");
  }
  await show(client);
  for (let seen = 0; seen < Number(changes); seen++) {
    while (pending === 0) await new Promise((resolve) => (wake = resolve));
    pending -= 1;
    await show(client);
  }
  await client.close();
}

main().catch((e) => {
  console.error(`list_changed.cjs: ${e.stack || e}`);
  process.exit(1);
});
