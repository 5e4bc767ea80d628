//! An OBO 1.4 reader for the parts an ontology index needs: `[Term]` stanzas' id, name,
//! definition, synonyms, `is_a` parents and obsolete flag. Streams the file (gzip or not),
//! so a 1.26 M-term ontology never sits in memory whole.

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One term.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Term {
    pub id: String,
    pub name: String,
    pub definition: String,
    pub synonyms: Vec<String>,
    pub parents: Vec<String>,
    pub obsolete: bool,
    /// Its taxonomic rank where the file says (`property_value: has_rank NCBITaxon:class`):
    /// `class`.
    pub rank: Option<String>,
}

/// The file's header lines that say what it is.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Header {
    pub ontology: Option<String>,
    pub data_version: Option<String>,
}

/// An OBO file that cannot be read, and where.
#[derive(Debug, thiserror::Error)]
pub enum OboError {
    #[error("cannot read {file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}:{line}: {message}")]
    Syntax {
        file: String,
        line: usize,
        message: String,
    },
}

/// Streams the terms of an OBO file.
pub struct Reader {
    file: String,
    lines: std::io::Lines<BufReader<Box<dyn Read + Send>>>,
    line: usize,
    pub header: Header,
    /// A stanza header read ahead while finishing the previous stanza.
    pending: Option<String>,
}

impl Reader {
    /// Opens `path`, decompressing when it is gzip (by its first bytes, whatever its name:
    /// a file fetched from a URL has none to go by), and reads the header.
    pub fn open(path: &Path) -> Result<Reader, OboError> {
        let file = path.display().to_string();
        let io = |source| OboError::Io {
            file: file.clone(),
            source,
        };
        let mut raw = BufReader::new(File::open(path).map_err(io)?);
        let gzip = raw.fill_buf().map_err(io)?.starts_with(&[0x1f, 0x8b]);
        let input: Box<dyn Read + Send> = if gzip {
            Box::new(flate2::read::MultiGzDecoder::new(raw))
        } else {
            Box::new(raw)
        };
        Reader::from_reader(file, input)
    }

    pub fn from_reader(file: String, input: Box<dyn Read + Send>) -> Result<Reader, OboError> {
        let mut reader = Reader {
            file,
            lines: BufReader::with_capacity(1 << 16, input).lines(),
            line: 0,
            header: Header::default(),
            pending: None,
        };
        while let Some(line) = reader.next_line()? {
            if line.starts_with('[') {
                reader.pending = Some(line);
                break;
            }
            if let Some((tag, value)) = line.split_once(':') {
                match tag.trim() {
                    "ontology" => reader.header.ontology = Some(value.trim().to_owned()),
                    "data-version" => reader.header.data_version = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        Ok(reader)
    }

    fn next_line(&mut self) -> Result<Option<String>, OboError> {
        match self.lines.next() {
            None => Ok(None),
            Some(Ok(l)) => {
                self.line += 1;
                Ok(Some(l))
            }
            Some(Err(source)) => Err(OboError::Io {
                file: self.file.clone(),
                source,
            }),
        }
    }

    fn syntax<T>(&self, message: impl Into<String>) -> Result<T, OboError> {
        Err(OboError::Syntax {
            file: self.file.clone(),
            line: self.line,
            message: message.into(),
        })
    }

    /// The next `[Term]`, skipping other stanzas; `None` at the end.
    pub fn next_term(&mut self) -> Result<Option<Term>, OboError> {
        loop {
            let header = match self.pending.take() {
                Some(h) => h,
                None => match self.next_line()? {
                    None => return Ok(None),
                    Some(l) if l.starts_with('[') => l,
                    Some(_) => continue,
                },
            };
            let is_term = header.trim() == "[Term]";
            let mut term = Term::default();
            while let Some(line) = self.next_line()? {
                if line.starts_with('[') {
                    self.pending = Some(line);
                    break;
                }
                if !is_term || line.trim().is_empty() || line.starts_with('!') {
                    continue;
                }
                let Some((tag, value)) = line.split_once(':') else {
                    return self.syntax(format!("expected \"tag: value\", found {line:?}"));
                };
                let value = value.trim();
                match tag {
                    "id" => term.id = value.to_owned(),
                    "name" => term.name = value.to_owned(),
                    "def" => term.definition = self.quoted(value)?,
                    "synonym" => term.synonyms.push(self.quoted(value)?),
                    "is_a" => {
                        let parent = value.split([' ', '!', '{']).next().unwrap_or_default();
                        if !parent.is_empty() {
                            term.parents.push(parent.to_owned());
                        }
                    }
                    "is_obsolete" => term.obsolete = value == "true",
                    "property_value" => {
                        if let Some(rank) = rank_of(value) {
                            term.rank = Some(rank);
                        }
                    }
                    _ => {}
                }
            }
            if !is_term {
                continue;
            }
            if term.id.is_empty() {
                return self.syntax("a [Term] stanza without an id");
            }
            return Ok(Some(term));
        }
    }

    /// The text of a `"…"` value (with `\"` escapes), the rest of the line ignored.
    fn quoted(&self, value: &str) -> Result<String, OboError> {
        let Some(rest) = value.strip_prefix('"') else {
            return self.syntax(format!("expected a quoted text, found {value:?}"));
        };
        let mut out = String::with_capacity(rest.len());
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(next) = chars.next() {
                        out.push(next);
                    }
                }
                '"' => return Ok(out),
                c => out.push(c),
            }
        }
        self.syntax("a quoted text is not closed")
    }
}

/// The rank a `property_value` gives, in either form NCBITaxon's files use:
/// `has_rank NCBITaxon:species` or `http://purl.obolibrary.org/obo/ncbitaxon#has_rank
/// NCBITaxon:species`; the rank's word, without the `NCBITaxon:` prefix.
fn rank_of(value: &str) -> Option<String> {
    let mut parts = value.split_whitespace();
    let property = parts.next()?;
    if property != "has_rank" && !property.ends_with("#has_rank") {
        return None;
    }
    let rank = parts.next()?.trim_start_matches("NCBITaxon:");
    let ok = !rank.is_empty()
        && rank.len() <= 40
        && rank.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| rank.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gzip_is_read_by_its_bytes_not_its_name() {
        use std::io::Write;
        let text = "format-version: 1.2\nontology: t\n\n[Term]\nid: T:1\nname: one\n";
        let dir = tempfile::tempdir().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(text.as_bytes()).unwrap();
        for (name, bytes) in [
            ("fetched.obo", gz.finish().unwrap()),
            ("plain.obo.gz", text.as_bytes().to_vec()),
        ] {
            let path = dir.path().join(name);
            std::fs::write(&path, bytes).unwrap();
            let mut r = Reader::open(&path).unwrap();
            assert_eq!(r.header.ontology.as_deref(), Some("t"), "{name}");
            assert_eq!(r.next_term().unwrap().unwrap().id, "T:1", "{name}");
        }
    }

    fn read(text: &str) -> Result<(Header, Vec<Term>), OboError> {
        let mut r = Reader::from_reader(
            "t.obo".into(),
            Box::new(std::io::Cursor::new(text.to_owned())),
        )?;
        let mut terms = Vec::new();
        while let Some(t) = r.next_term()? {
            terms.push(t);
        }
        Ok((r.header, terms))
    }

    #[test]
    fn terms_synonyms_parents_and_obsolete() {
        let (header, terms) = read(
            "format-version: 1.4\ndata-version: v1\nontology: pato\n\n[Term]\nid: PATO:1\nname: quality\ndef: \"A \\\"dependent\\\" entity\" []\n\n[Typedef]\nid: part_of\nname: part of\n\n[Term]\nid: PATO:2\nname: length\nsynonym: \"len\" EXACT []\nis_a: PATO:1 ! quality\nis_a: PATO:3 {source=\"x\"}\n\n[Term]\nid: PATO:9\nname: obsolete thing\nis_obsolete: true\n",
        )
        .unwrap();
        assert_eq!(header.ontology.as_deref(), Some("pato"));
        assert_eq!(header.data_version.as_deref(), Some("v1"));
        assert_eq!(terms.len(), 3);
        assert_eq!(terms[0].definition, "A \"dependent\" entity");
        assert_eq!(terms[1].synonyms, ["len"]);
        assert_eq!(terms[1].rank, None);
        assert_eq!(terms[1].parents, ["PATO:1", "PATO:3"]);
        assert!(terms[2].obsolete);
    }

    #[test]
    fn broken_stanzas_name_the_line() {
        let e = read("[Term]\nname: no id\n").unwrap_err().to_string();
        assert!(
            e.starts_with("t.obo:2:") && e.contains("without an id"),
            "{e}"
        );
        let e = read("[Term]\nid: X:1\ndef: \"open\n")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("t.obo:3:") && e.contains("not closed"), "{e}");
    }

    #[test]
    fn a_taxon_keeps_its_rank_in_either_form() {
        let text = "format-version: 1.4\nontology: ncbitaxon\n\n[Term]\nid: NCBITaxon:8782\nname: Aves\nproperty_value: has_rank NCBITaxon:class\n\n[Term]\nid: NCBITaxon:9606\nname: Homo sapiens\nproperty_value: http://purl.obolibrary.org/obo/ncbitaxon#has_rank NCBITaxon:species\n\n[Term]\nid: NCBITaxon:1\nname: x\nproperty_value: has_rank NCBITaxon:no rank here\nproperty_value: IAO:0000115 \"text\" xsd:string\n";
        let (_, terms) = read(text).unwrap();
        let ranks: Vec<Option<String>> = terms.into_iter().map(|t| t.rank).collect();
        assert_eq!(
            ranks,
            [
                Some("class".to_owned()),
                Some("species".to_owned()),
                Some("no".to_owned())
            ]
        );
    }
}
