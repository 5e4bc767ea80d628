// Between the MCP conformance suite and `mesh serve`: adds the console's bearer token, which
// the suite has no way to send. Requests naming this proxy (Host, Origin) are passed on as
// naming the console; any other Host or Origin goes on as it came, so that the suite's
// DNS-rebinding checks still reach the console's own. Prints "proxy on <port>" when ready.
// Usage: node conformance_proxy.mjs <console URL> <token> <port, 0 for any>
import http from "node:http";

const [target, token, port] = process.argv.slice(2);
const console_ = new URL(target);
let own = null;

const server = http.createServer((req, res) => {
  const headers = { ...req.headers, authorization: `Bearer ${token}` };
  const mine = (h) => h === `127.0.0.1:${own}` || h === `localhost:${own}`;
  if (mine(headers.host)) headers.host = console_.host;
  if (headers.origin && mine(headers.origin.replace(/^https?:\/\//, ""))) {
    headers.origin = `${console_.protocol}//${console_.host}`;
  }
  const upstream = http.request(
    { host: console_.hostname, port: console_.port, path: req.url, method: req.method, headers },
    (answer) => {
      res.writeHead(answer.statusCode, answer.headers);
      answer.pipe(res);
    },
  );
  upstream.on("error", (e) => {
    if (!res.headersSent) res.writeHead(502);
    res.end(String(e));
  });
  req.pipe(upstream);
  res.on("close", () => upstream.destroy());
});

server.listen(Number(port), "127.0.0.1", () => {
  own = server.address().port;
  console.log(`proxy on ${own}`);
});
