"""The gold cards of one folder as (name, description, right terms) per column, and the
figures a peer's top terms score on them: top-1 over the columns with a term, precision over
the columns it annotated (every column of the card, identifiers too: a peer has no rules
setting them aside)."""

import glob
import os

FORMS = {
    "name": lambda name, description: name,
    "description": lambda name, description: description,
    "name + description": lambda name, description: f"{name} {description}",
}


def gold_columns(folder):
    for card in sorted(glob.glob(os.path.join(folder, "*.md"))):
        gold = {}
        with open(card[:-3] + ".gold") as f:
            for line in f:
                line = line.split("#")[0].strip()
                if line:
                    fields = line.split()
                    gold[fields[0]] = [] if fields[1:] == ["-"] else fields[1:]
        with open(card) as f:
            for line in f:
                if line.startswith("- ") and line.count("|") >= 4:
                    cells = [c.strip() for c in line[2:].split("|")]
                    if cells[0] in gold:
                        yield cells[0], cells[1], gold[cells[0]]


def report(peer, folder, rows, tops):
    with_terms = sum(1 for r in rows if r[2])
    for form_name, form in FORMS.items():
        found = tops([form(name, description) for name, description, _ in rows])
        annotated = sum(1 for t in found if t is not None)
        right = sum(1 for t, r in zip(found, rows) if t is not None and t in r[2])
        print(
            f"{peer}\t{os.path.basename(folder.rstrip('/'))}\t{form_name}\t"
            f"top-1 {right / max(1, with_terms):.3f}\tprecision {right / max(1, annotated):.3f}\t"
            f"annotated {annotated} of {len(rows)} columns ({with_terms} with a term)",
            flush=True,
        )
