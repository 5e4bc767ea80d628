// Starts a call through the console with the official MCP TypeScript SDK's client and gives
// it up after a second (AbortController: the SDK sends notifications/cancelled and drops the
// request), then prints JSON. The console's bearer token comes in $MESH_CONSOLE_TOKEN.
//
// usage: NODE_PATH=<node_modules with @modelcontextprotocol/sdk> node cancel_call.cjs URL TOOL ARGUMENTS_JSON
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

async function main() {
  const [url, tool, args] = process.argv.slice(2);
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${process.env.MESH_CONSOLE_TOKEN || ""}` } },
  });
  const client = new Client({ name: "cancel-call", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  await client.listTools();
  const abort = new AbortController();
  const call = client.callTool({ name: tool, arguments: JSON.parse(args) }, undefined, { signal: abort.signal });
  await new Promise((resolve) => setTimeout(resolve, 1000));
  abort.abort("the person gave up");
  let aborted = false;
  try {
    await call;
  } catch (e) {
    aborted = true;
  }
  await new Promise((resolve) => setTimeout(resolve, 500));
  console.log(JSON.stringify({ aborted }));
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
