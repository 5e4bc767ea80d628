"""A third-party client following a claim, as subjects/README.md ("Large results") tells it:
nats-py calls a tool whose answer is larger than one message, fetches the chunks from the
`result` verb of the module instance the claim names and checks the digest.

usage: claim.py <url> <user> <password | credential file> <module> <tool> <args-json>; prints JSON."""

import asyncio
import base64
import hashlib
import json
import sys

import nats


async def main():
    url, user, password, module, tool, args = sys.argv[1:7]
    # A credential file (operator mode), else a password.
    if password.endswith(".creds"):
        auth = {"user_credentials": password}
    else:
        auth = {"user": user, "password": password}
    nc = await nats.connect(url, inbox_prefix=f"_INBOX.{user}", **auth)
    reply = await nc.request(f"mesh.{module}.{tool}", args.encode(), timeout=10)
    out = {"claimed": "Mesh-Claim" in (reply.headers or {})}
    result = json.loads(reply.data)
    if out["claimed"]:
        claim = result["_meta"]["mesh/claim"]
        whole, after = b"", 0
        for chunk in range(claim["chunks"]):
            fetch = {"id": claim["id"], "chunk": chunk, "after": after}
            subject = f"mesh.{module}.result.{claim['instance']}"
            part = await nc.request(subject, json.dumps(fetch).encode(), timeout=10)
            after = int(part.headers["Mesh-Claim-Seq"])
            whole += part.data
        digest = "SHA-256=" + base64.urlsafe_b64encode(hashlib.sha256(whole).digest()).decode()
        out["digest_ok"] = digest == claim["digest"]
        result = json.loads(whole)
    out["result"] = result
    await nc.close()
    print(json.dumps(out))


asyncio.run(main())
