"""OAK's own lexical index (oaklib's create_lexical_index) of one OBO file, saved as JSON:
each normalised key with the terms it names (CURIE, label, predicate). Matching is done by
oak_score.py with the annotator's rule; this step is the slow one (NCBITaxon: 6 min).

    python oak_index.py ONTOLOGY.obo OUT.index.json
"""

import json
import sys
import time

from oaklib import get_adapter
from oaklib.utilities.lexical.lexical_indexer import create_lexical_index

obo, out = sys.argv[1], sys.argv[2]
start = time.time()
index = create_lexical_index(get_adapter(f"simpleobo:{obo}"))
keys = {
    k: [(r.element, r.element_term, r.predicate) for r in g.relationships]
    for k, g in index.groupings.items()
}
with open(out, "w") as f:
    json.dump(keys, f)
print(obo, len(keys), f"{time.time() - start:.1f} s")
