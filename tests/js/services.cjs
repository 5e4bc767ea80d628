// The NATS services protocol from a person's context, with nats.js's own services client:
// ping every service, then ask each for its info and stats. Prints what it saw as JSON.
//
// usage: NODE_PATH=<node_modules with nats> node services.cjs URL USER PASSWORD|CREDS_FILE
// (a path ending in .creds is the user's credential file: operator mode)
const fs = require("fs");
const { connect, credsAuthenticator, RequestStrategy } = require("nats");

async function collect(pending) {
  const out = [];
  for await (const item of await pending) out.push(item);
  return out;
}

async function main() {
  const [url, user, pass] = process.argv.slice(2);
  const auth = pass.endsWith(".creds")
    ? { authenticator: credsAuthenticator(fs.readFileSync(pass)) }
    : { user, pass };
  const nc = await connect({ servers: url, ...auth, inboxPrefix: `_INBOX.${user}` });
  // Done once no answer came for 300 ms (every instance answers at once), at most 5 s.
  const client = nc.services.client({ strategy: RequestStrategy.JitterTimer, jitter: 300, maxWait: 5000 });
  const pings = await collect(client.ping());
  const names = [...new Set(pings.map((p) => p.name))].sort();
  const info = {};
  const stats = {};
  for (const name of names) {
    info[name] = await collect(client.info(name));
    stats[name] = await collect(client.stats(name));
  }
  console.log(JSON.stringify({ pings, names, info, stats }));
  await nc.close();
}

main().catch((e) => {
  console.error(`services.cjs: ${e.stack || e}`);
  process.exit(1);
});
