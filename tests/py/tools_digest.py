"""The tools digest computed in Python by the recipe in subjects/README.md, for every vector
in subjects/tools-digest-vectors.json: prints {"digests": [...]} in the file's order."""

import hashlib
import json
import sys

with open(sys.argv[1], encoding="utf-8") as f:
    vectors = json.load(f)["vectors"]
digests = []
for v in vectors:
    text = json.dumps(v["tools"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    digests.append(hashlib.sha256(text.encode("utf-8")).hexdigest()[:32])
print(json.dumps({"digests": digests}))
