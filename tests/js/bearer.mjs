// Preloaded into the MCP conformance suite (NODE_OPTIONS=--import): every HTTP request it
// makes carries MESH_BEARER as its Authorization header, as any client of the console
// sends its token. The suite has no option for headers of its own, and its raw
// http.request probes drop a URL's query, so `?token=` reaches only some of them.
import http from 'node:http';

const bearer = process.env.MESH_BEARER;
if (bearer) {
  const fetching = globalThis.fetch;
  globalThis.fetch = (input, init = {}) => {
    const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
    if (!headers.has('authorization')) headers.set('Authorization', `Bearer ${bearer}`);
    return fetching(input, { ...init, headers });
  };
  const requesting = http.request;
  http.request = function (options, ...rest) {
    if (options && typeof options === 'object' && !(options instanceof URL)) {
      options = { ...options, headers: { Authorization: `Bearer ${bearer}`, ...(options.headers || {}) } };
    }
    return requesting.call(this, options, ...rest);
  };
}
