"""text2term's TF-IDF mapper on decide's gold cards, aggregate figures only (a sealed part's
rows are never printed): text2term 4.6.0's TFIDFMapper with its defaults (character 3-grams,
min score 0.3), the top mapping of each column, over the live terms of decide's index
(labels and synonyms of all seven ontologies, as the OBO files give them: text2term reads
OWL, not OBO). Query forms: the column's name, its description, both.

    python t2t_score.py INDEX.sqlite tests/gold/real/dev tests/gold/real/sealed
"""

import contextlib
import io
import logging
import sqlite3
import sys

from text2term.term import OntologyTerm
from text2term.tfidf_mapper import TFIDFMapper

from cards import gold_columns, report

logging.disable(logging.WARNING)
db, parts = sys.argv[1], sys.argv[2:]
terms = {
    curie: OntologyTerm(curie, [label], synonyms=[s for s in synonyms.split(" | ") if s])
    for curie, label, synonyms in sqlite3.connect(db).execute(
        "SELECT curie, label, synonyms FROM terms WHERE obsolete = 0"
    )
}
mapper = TFIDFMapper(terms)


def tops(texts):
    # text2term prints a line for each CURIE it cannot turn into an IRI: not ours to show.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        df = mapper.map([t or "-" for t in texts], [str(i) for i in range(len(texts))], max_mappings=1)
    best = {}
    for _, r in df.iterrows():
        i = int(r["Source Term ID"])
        if i not in best or r["Mapping Score"] > best[i][1]:
            best[i] = (r["Mapped Term IRI"], r["Mapping Score"])
    return [best.get(i, (None,))[0] for i in range(len(texts))]


for part in parts:
    report("text2term", part, list(gold_columns(part)), tops)
