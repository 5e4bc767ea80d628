// The official MCP TypeScript SDK's client driving server-everything directly over stdio: the
// peer the bridge (`mesh run --mcp`) is measured against in `cargo bench --bench relay --
// bridge`. Starts the server, warms up, then makes CALLS calls of its `echo` tool with
// IN_FLIGHT at a time, and prints JSON: each call's latency in µs and the wall time in s.
//
// usage: NODE_PATH=target/js/node_modules node benches/js/sdk_client_echo.cjs SERVER_JS CALLS IN_FLIGHT
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");

const TEXT = "the quick brown fox jumps over the lazy dog";

async function main() {
  const [server, calls, inFlight] = process.argv.slice(2);
  const transport = new StdioClientTransport({ command: "node", args: [server, "stdio"], stderr: "ignore" });
  const client = new Client({ name: "bench", version: "1.0.0" }, { capabilities: {} });
  await client.connect(transport);
  const call = async () => {
    const r = await client.callTool({ name: "echo", arguments: { message: TEXT } });
    if (r.isError || !r.content[0].text.includes(TEXT)) throw new Error(JSON.stringify(r));
  };
  for (let i = 0; i < 200; i++) await call();
  const per = Math.floor(Number(calls) / Number(inFlight));
  const latencies = [];
  const start = process.hrtime.bigint();
  await Promise.all(
    Array.from({ length: Number(inFlight) }, async () => {
      for (let i = 0; i < per; i++) {
        const t = process.hrtime.bigint();
        await call();
        latencies.push(Number(process.hrtime.bigint() - t) / 1000);
      }
    }),
  );
  const wall = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ latencies, wall }));
  await client.close();
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
