"""A credential helper for tests/it/bridge.rs, as `mesh run --mcp … --credential-helper` runs
one: for the caller in $MESH_CALLER, a backend token numbered by how many it has given out
(in $HELPER_DIR/count), holding five seconds; for callers named cat…, a failure whose output
must never reach anyone.

usage: credential_helper.py MODULE
"""

import json
import os
import sys

caller = os.environ["MESH_CALLER"]
if caller.startswith("cat"):
    print("a secret the helper printed before failing")
    sys.exit(1)
path = os.path.join(os.environ["HELPER_DIR"], "count")
n = int(open(path).read()) + 1 if os.path.exists(path) else 1
with open(path, "w") as f:
    f.write(str(n))
print(json.dumps({"env": {"BACKEND_TOKEN": f"token-for-{caller}-{n}"}, "expires_in_s": 5}))
