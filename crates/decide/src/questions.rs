//! The questions decide asks, each with a fixed key derived from its kind, text and
//! options and pinned in `questions.lock`: a changed question is a new key, and learned
//! artifacts and labels recorded under the old one are never mixed into it. What varies
//! from one asking to the next goes in the question's *state*, never in its key.

use std::sync::OnceLock;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// A question as the decision graph asks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Question {
    pub kind: &'static str,
    pub text: &'static str,
    pub options: &'static [&'static str],
}

pub const ANNOTATE: Question = Question {
    kind: "column.annotate",
    text: "Should this column be annotated with ontology terms?",
    options: &["yes", "no"],
};

pub const ASPECT: Question = Question {
    kind: "column.aspect",
    text: "Which aspect of the data does this column describe?",
    options: &[
        "quality",
        "anatomy",
        "organism",
        "chemical",
        "disease",
        "cell",
        "experimental factor",
    ],
};

pub const ONTOLOGY: Question = Question {
    kind: "column.ontology",
    text: "Which ontology's terms describe this column?",
    options: &["pato", "uberon", "ncbitaxon", "chebi", "mondo", "cl", "efo"],
};

pub const TERM_FITS: Question = Question {
    kind: "term.fits",
    text: "Does this ontology term describe this column?",
    options: &["yes", "no"],
};

pub const VALUE_KIND: Question = Question {
    kind: "avu.value_kind",
    text: "What should the AVU's value be?",
    options: &["column name", "observed value", "term label"],
};

pub const KEEP: Question = Question {
    kind: "avu.keep",
    // Its state's `winner.p` is how likely the winner is right (the winner head's), not its
    // p(fits), and `winner.keep_at` the p its head keeps from: a new text each time, so that
    // a bundle fitted on the old states is refused.
    text: "Should this AVU be kept, given how likely its term is right and the p its head keeps from?",
    options: &["yes", "no"],
};

/// The chooser's question: only what `avu_apply_term`'s picker carries (ontology, value,
/// candidate); it has artifacts of its own and never borrows `term.fits`'.
pub const CHOOSER: Question = Question {
    kind: "term.fits.chooser",
    text: "Does this candidate term fit the value it is offered for?",
    options: &["yes", "no"],
};

/// Every question, in the order of the lock file.
pub const ALL: [Question; 7] = [
    ANNOTATE, ASPECT, ONTOLOGY, TERM_FITS, VALUE_KIND, KEEP, CHOOSER,
];

/// The lock file as committed.
pub const LOCK: &str = include_str!("questions.lock");

impl Question {
    /// `<kind>@<12 hex digits of the hash of kind, text and options>`.
    pub fn key(&self) -> String {
        // Every decision recorded names its question's key: those of the questions in ALL
        // are worked out once, not hashed again for each of a run's two hundred decisions.
        static KEYS: OnceLock<Vec<(Question, String)>> = OnceLock::new();
        let known = KEYS.get_or_init(|| ALL.iter().map(|q| (*q, q.key_now())).collect());
        match known.iter().find(|(q, _)| q == self) {
            Some((_, key)) => key.clone(),
            None => self.key_now(),
        }
    }

    fn key_now(&self) -> String {
        let identity = json!({"kind": self.kind, "text": self.text, "options": self.options});
        format!("{}@{}", self.kind, &sha256_hex(&canonical(&identity))[..12])
    }
}

/// What a bundle names the lock it was fitted against: `sha256:` of the committed lock file.
pub fn lock_id() -> String {
    format!("sha256:{}", sha256_hex(LOCK))
}

/// The lock file's text for the questions as they are now.
pub fn lock_text() -> String {
    let mut out = String::from(
        "# The questions' keys. A changed question gets a new key: update this file in the\n# same change (the test that compares them prints the new text).\n",
    );
    for q in ALL {
        out.push_str(&format!("{}\n", q.key()));
    }
    out
}

/// A question's state: the variable content of one asking, as canonical JSON and its hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub json: String,
    pub hash: String,
}

impl State {
    pub fn of(value: &Value) -> State {
        let json = canonical(value);
        let hash = format!("sha256:{}", sha256_hex(&json));
        State { json, hash }
    }
}

/// JSON with object keys sorted at every level and no blank space: one text per value,
/// whatever order the keys were built in.
pub use mesh_core::canonical::canonical;

pub fn sha256_hex(text: &str) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(64);
    for b in Sha256::digest(text.as_bytes()) {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 0xf) as usize] as char);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lock_file_pins_every_question() {
        let now = lock_text();
        assert!(
            LOCK == now,
            "a question changed without crates/decide/src/questions.lock; if the change is \
             meant, write this into the lock file:\n{now}"
        );
    }

    #[test]
    fn keys_follow_the_question_not_its_state() {
        let changed = Question {
            text: "Should this column be annotated?",
            ..ANNOTATE
        };
        assert_ne!(changed.key(), ANNOTATE.key());
        assert!(ANNOTATE.key().starts_with("column.annotate@"));
        let keys: std::collections::BTreeSet<String> = ALL.iter().map(Question::key).collect();
        assert_eq!(keys.len(), ALL.len());
    }

    #[test]
    fn state_is_canonical() {
        let a = State::of(&json!({"column": "sex", "card": {"rows": 3, "name": "x"}}));
        let b = State::of(&json!({"card": {"name": "x", "rows": 3}, "column": "sex"}));
        assert_eq!(a, b);
        assert_eq!(a.json, r#"{"card":{"name":"x","rows":3},"column":"sex"}"#);
        assert_ne!(a.hash, State::of(&json!({"column": "sex2"})).hash);
    }
}
