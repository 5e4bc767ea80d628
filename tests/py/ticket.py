"""A third-party client with tickets, as subjects/README.md ("Tickets") tells it: nats-py asks the
mesh's issuer for a ticket, calls a tool that acts for it with the ticket, and checks the ticket's
signature against the keys the issuer publishes with nothing but `cryptography`'s ed25519.

usage: ticket.py <url> <user> <password | credential file> <module> <tool> <args-json>; prints JSON."""

import asyncio
import base64
import json
import sys
import time

import nats
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey


def b64(s):
    return base64.urlsafe_b64decode(s + "=" * (-len(s) % 4))


def verified(ticket, keys):
    """The claims of a ticket signed by one of `keys`, else None."""
    body, sig = ticket.split(".")
    claims = json.loads(b64(body))
    if claims["iss"] not in keys:
        return None
    # An nkey is base32 of a prefix byte, the 32-byte ed25519 key and a CRC-16.
    raw = base64.b32decode(claims["iss"] + "=" * (-len(claims["iss"]) % 8))[1:33]
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(b64(sig), body.encode())
    except InvalidSignature:
        return None
    return claims


async def main():
    url, user, password, module, tool, args = sys.argv[1:7]
    # A credential file (operator mode), else a password.
    if password.endswith(".creds"):
        auth = {"user_credentials": password}
    else:
        auth = {"user": user, "password": password}
    nc = await nats.connect(url, inbox_prefix=f"_INBOX.{user}", **auth)
    out = {}
    deadline_ms = int((time.time() + 10) * 1000)
    subject = f"mesh.{module}.{tool}"

    # Without a ticket: the tool says it needs one, and does not run.
    plain = await nc.request(subject, args.encode(), timeout=10)
    out["without"] = {
        "code": (plain.headers or {}).get("Nats-Service-Error-Code"),
        "result": json.loads(plain.data),
    }

    request = {"audience": module, "tool": f"{module}_{tool}", "expires_ms": deadline_ms}
    issued = json.loads((await nc.request("mesh.catalog.ticket", json.dumps(request).encode(), timeout=5)).data)
    ticket = issued["ticket"]
    keys = json.loads((await nc.request("mesh.catalog.keys", b"", timeout=5)).data)["keys"]
    out["claims"] = verified(ticket, keys)
    # The claims rewritten to name someone else: the signature no longer holds.
    body, sig = ticket.split(".")
    claims = json.loads(b64(body))
    claims["sub"] = "guest@PEOPLE"
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).decode().rstrip("=")
    out["tampered"] = verified(forged + "." + sig, keys)

    try:
        reply = await nc.request(
            subject,
            args.encode(),
            timeout=10,
            headers={"Mesh-Ticket": ticket, "Mesh-Deadline": str(deadline_ms)},
        )
    finally:
        # The call ended: from now on no module acts on its ticket.
        ended = await nc.request("mesh.catalog.ended", json.dumps({"ticket": ticket}).encode(), timeout=5)
        out["ended"] = json.loads(ended.data)
    out["with"] = json.loads(reply.data)
    await nc.close()
    print(json.dumps(out))


asyncio.run(main())
