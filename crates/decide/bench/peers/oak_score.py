"""OAK's lexical annotator on decide's gold cards, aggregate figures only (a sealed part's
rows are never printed). The rule is oaklib 0.7.4's naive matcher (TextAnnotatorInterface.
annotate_text without whole-text matching): every key of the lexical index found in the
lower-cased text, not right after a letter; done here by looking up each substring, which
finds the same matches in a fraction of the time. A column's top annotation is its longest
match, a label before a synonym, then the first in the text. Query forms: the column's name,
its description, both.

    python oak_score.py INDEX_DIR tests/gold/real/dev tests/gold/real/sealed
"""

import glob
import json
import os
import sys

from cards import gold_columns, report

index_dir, parts = sys.argv[1], sys.argv[2:]
index = {}
for f in sorted(glob.glob(os.path.join(index_dir, "*.index.json"))):
    with open(f) as fh:
        for k, v in json.load(fh).items():
            index.setdefault(k, []).extend(v)
longest = max(len(k) for k in index)


def top(text):
    t = text.lower()
    found = []
    for i in range(len(t)):
        if i > 0 and t[i - 1].isalpha():
            continue
        for j in range(i + 1, min(len(t), i + longest) + 1):
            for curie, _, predicate in index.get(t[i:j], ()):
                found.append((-(j - i), predicate != "rdfs:label", i, curie))
    return min(found)[3] if found else None


for part in parts:
    report("OAK", part, list(gold_columns(part)), lambda texts: [top(t) for t in texts])
