//! Dataset cards: a Markdown description of one table, read into its parts, with a stable
//! id (the hash of its content) and the columns that rules set aside as identifiers.
//!
//! ```text
//! # Dataset: <product code> / <table>
//! Product: <product title>
//! Source: <who published it>
//! Sites: <site code>, <site code>, ...
//! Rows: <row count>
//! <optional free-text description paragraph>
//! - <column name> | <description> | <type> | <unit, or -> | <value profile>
//! ```
//!
//! See `docs/cards.md`.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// A card as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Card {
    /// `sha256:` of the card's text with line ends normalised: the same card, the same id.
    pub id: String,
    /// `<product code>/<table>`.
    pub name: String,
    pub product_code: String,
    pub table: String,
    pub product: String,
    pub source: String,
    pub sites: Vec<String>,
    pub rows: u64,
    pub description: String,
    pub columns: Vec<Column>,
}

/// One `- ` line.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Column {
    pub name: String,
    pub description: String,
    /// The declared type (`string`, `integer`, `float`, `date`, …), lower-cased.
    pub kind: String,
    /// `None` for `-`.
    pub unit: Option<String>,
    pub profile: String,
    /// The card line it was read from.
    pub line: usize,
    /// Why a rule takes this column for an identifier (ids, codes, dates, all blank); such
    /// columns are not sent to the questions.
    pub identifier: Option<&'static str>,
}

impl Column {
    /// What names the column ([`name_of`]).
    pub fn name_read(&self) -> &str {
        name_of(&self.name, &self.description)
    }
}

/// What names a column: the part of its name that says what it holds ([`name_read`]), or,
/// where the name says nothing (`f.31.0.0`), its description's first phrase, as a data
/// dictionary names a coded field ("Sex", "Age when attended assessment centre").
pub fn name_of<'a>(name: &'a str, description: &'a str) -> &'a str {
    match name_read(name) {
        "" => description_head(description),
        read => read,
    }
}

/// A description's first phrase: up to its first comma, colon, semicolon, parenthesis or
/// sentence's end.
fn description_head(description: &str) -> &str {
    let end = description
        .char_indices()
        .find(|(i, c)| {
            matches!(c, ',' | ':' | ';' | '(' | '[')
                || (*c == '.'
                    && description[i + 1..]
                        .chars()
                        .next()
                        .is_none_or(char::is_whitespace))
        })
        .map_or(description.len(), |(i, _)| i);
    description[..end].trim()
}

/// The part of a column's name that says what it holds. A dotted path of a schema's export
/// (`donor_organism.diseases.ontology_label`) is read by its last segment that says
/// something: not the schema's scaffolding (`ontology_label`, `text`, `value`), nor a level or
/// an index (`l1`, `0`, `R`). The segments before it say where the field sits in the
/// schema (`donor_organism`), not what it is, and their words would be searched as if they
/// were (a donor is a chemical). A path with nothing said reads as nothing: the description
/// speaks. Any other name is read whole.
pub fn name_read(name: &str) -> &str {
    // ISA-Tab, MAGE-TAB and SDRF name a field by its kind and, in brackets, what it holds
    // (`Characteristics[Organism part]`, `factor value[disease]`, `Comment[...]`).
    if let Some(inner) = bracketed(name) {
        return inner;
    }
    let segments: Vec<&str> = name.split('.').collect();
    // A number such as `2.5` is no path.
    let a_path = segments.len() >= 2
        && name.parse::<f64>().is_err()
        && segments.iter().all(|s| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        });
    if !a_path {
        return name;
    }
    segments
        .iter()
        .rev()
        .find(|s| !scaffolding(s))
        .copied()
        .unwrap_or("")
}

/// What a name of the form `Kind[what]` holds in its brackets (`Characteristics[Organism]`:
/// `Organism`); `None` for any other name.
fn bracketed(name: &str) -> Option<&str> {
    let (kind, rest) = name.split_once('[')?;
    let inner = rest.strip_suffix(']')?;
    let word = |c: char| c.is_alphanumeric() || matches!(c, '_' | ' ' | '-');
    (!kind.is_empty()
        && kind.chars().all(word)
        && !inner.trim().is_empty()
        && inner.chars().all(word))
    .then(|| inner.trim())
}

/// Words a schema's export adds to a field's path, whatever the field holds.
const SCAFFOLDING: [&str; 14] = [
    "ontology", "label", "labels", "term", "id", "ids", "curie", "iri", "text", "value", "values",
    "name", "code", "raw",
];

/// A segment of a path that names no part of what a field holds: scaffolding words alone, or
/// a level or index (`l1`, `0`, `v2`, a single letter).
fn scaffolding(segment: &str) -> bool {
    let words: Vec<String> = segment
        .split(['_', '-'])
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect();
    let level = |w: &str| {
        let digits = w.trim_start_matches(|c: char| c.is_ascii_alphabetic());
        w.chars().count() == 1
            || (!digits.is_empty()
                && digits.chars().all(|c| c.is_ascii_digit())
                && w.len() - digits.len() <= 1)
    };
    words.is_empty()
        || words
            .iter()
            .all(|w| SCAFFOLDING.contains(&w.as_str()) || level(w))
}

/// A card that cannot be read, and the line that says why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("card line {line}: {message}")]
pub struct CardError {
    pub line: usize,
    pub message: String,
}

fn fail<T>(line: usize, message: impl Into<String>) -> Result<T, CardError> {
    Err(CardError {
        line,
        message: message.into(),
    })
}

const HEADER: &str = "# Dataset:";

/// The largest card decide reads, in bytes.
pub const MAX_CARD_BYTES: usize = 512 << 10;
/// The most columns one card may have.
pub const MAX_COLUMNS: usize = 1000;
const FIELDS: [&str; 4] = ["Product", "Source", "Sites", "Rows"];

/// Reads a card.
pub fn parse(text: &str) -> Result<Card, CardError> {
    // Bounds checked before any work: one card must not tie decide up for everyone.
    if text.len() > MAX_CARD_BYTES {
        return fail(
            0,
            format!(
                "the card is {} bytes; a card may have at most {MAX_CARD_BYTES} (split the table into several cards)",
                text.len()
            ),
        );
    }
    // A NUL is no text a card means, and a database text column (PostgreSQL's) refuses it.
    if let Some(at) = text.find('\0') {
        let line = text[..at].matches('\n').count() + 1;
        return fail(
            line,
            "the card holds a NUL byte; a card is text (remove it)".to_owned(),
        );
    }
    let normalised = text.replace("\r\n", "\n");
    let digest = Sha256::digest(normalised.trim().as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let id = format!("sha256:{hex}");
    let mut lines = normalised
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end()))
        .filter(|(_, l)| !l.trim().is_empty());

    let Some((first, header)) = lines.next() else {
        return fail(
            1,
            "the card is empty; it starts with \"# Dataset: <product code> / <table>\"",
        );
    };
    let Some(title) = header.strip_prefix(HEADER) else {
        return fail(
            first,
            "a card starts with \"# Dataset: <product code> / <table>\"",
        );
    };
    let Some((code, table)) = title.split_once('/') else {
        return fail(
            first,
            "the title names a product code and a table: \"<code> / <table>\"",
        );
    };
    let (code, table) = (code.trim(), table.trim());
    if code.is_empty() || table.is_empty() {
        return fail(first, "the product code and the table may not be empty");
    }

    let mut fields: [Option<String>; 4] = Default::default();
    let mut description = Vec::new();
    let mut columns: Vec<Column> = Vec::new();
    for (n, line) in lines {
        if let Some(rest) = line
            .strip_prefix("- ")
            .or_else(|| (line == "-").then_some(""))
        {
            if columns.len() == MAX_COLUMNS {
                return fail(
                    n,
                    format!(
                        "more than {MAX_COLUMNS} columns: split the table into cards of at most {MAX_COLUMNS}"
                    ),
                );
            }
            columns.push(column(n, rest)?);
            if columns[..columns.len() - 1]
                .iter()
                .any(|c| c.name == columns[columns.len() - 1].name)
            {
                return fail(
                    n,
                    format!("column {} is listed twice", columns[columns.len() - 1].name),
                );
            }
            continue;
        }
        if !columns.is_empty() {
            return fail(
                n,
                "after the first column only \"- \" column lines may follow",
            );
        }
        if let Some((key, value)) = line.split_once(':')
            && let Some(i) = FIELDS
                .iter()
                .position(|f| f.eq_ignore_ascii_case(key.trim()))
        {
            if fields[i].is_some() {
                return fail(n, format!("{} is given twice", FIELDS[i]));
            }
            fields[i] = Some(value.trim().to_owned());
            continue;
        }
        if line.starts_with('#') {
            return fail(
                n,
                "a card describes one table: only one \"# Dataset:\" title",
            );
        }
        description.push(line.trim());
    }
    let [product, source, sites, rows] = fields;
    let need = |f: Option<String>, name: &str| match f {
        Some(v) => Ok(v),
        None => fail(first, format!("the card has no \"{name}:\" line")),
    };
    let (product, source, sites, rows) = (
        need(product, "Product")?,
        need(source, "Source")?,
        need(sites, "Sites")?,
        need(rows, "Rows")?,
    );
    let rows: u64 = rows
        .replace([',', '_', ' '], "")
        .parse()
        .map_err(|_| CardError {
            line: first,
            message: format!("Rows must be a whole number, not {rows:?}"),
        })?;
    if columns.is_empty() {
        return fail(
            first,
            "the card lists no columns (\"- <name> | <description> | <type> | <unit> | <profile>\")",
        );
    }
    Ok(Card {
        id,
        name: format!("{code}/{table}"),
        product_code: code.to_owned(),
        table: table.to_owned(),
        product,
        source,
        sites: sites
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty() && *s != "-")
            .map(String::from)
            .collect(),
        rows,
        description: description.join(" "),
        columns,
    })
}

fn column(n: usize, rest: &str) -> Result<Column, CardError> {
    let parts: Vec<&str> = rest.splitn(5, '|').map(str::trim).collect();
    if parts.len() != 5 {
        return fail(
            n,
            format!(
                "a column line has five fields, name | description | type | unit | profile; this one has {}",
                parts.len()
            ),
        );
    }
    let [name, description, kind, unit, profile] =
        [parts[0], parts[1], parts[2], parts[3], parts[4]];
    if name.is_empty() {
        return fail(n, "the column has no name");
    }
    if kind.is_empty() {
        return fail(n, format!("column {name} has no type"));
    }
    let kind = kind.to_ascii_lowercase();
    let unit = match unit {
        "" | "-" => None,
        u => Some(u.to_owned()),
    };
    Ok(Column {
        identifier: identifier(name, description, &kind, unit.as_deref(), profile),
        name: name.to_owned(),
        description: description.to_owned(),
        kind,
        unit,
        profile: profile.to_owned(),
        line: n,
    })
}

/// The profile's values with their shares: `a 21%, b, c 18%, 24 more` gives (a, 0.21) and
/// (b, c, 0.18); a profile without shares (a range, counts) gives none.
pub fn profile_values(profile: &str) -> Vec<(String, f64)> {
    let mut out = Vec::new();
    let mut rest = profile;
    while let Some(at) = rest.find('%') {
        let chunk = rest[..at].trim().trim_start_matches(',').trim();
        rest = &rest[at + 1..];
        let Some((value, share)) = chunk.rsplit_once(' ') else {
            continue;
        };
        // `<1%`: a value of the column at some share under 1%, counted at half of it.
        let share = match share.strip_prefix('<') {
            Some(under) => under.parse::<f64>().map(|u| u / 2.0),
            None => share.parse::<f64>(),
        };
        let Ok(share) = share else {
            continue;
        };
        let value = value.trim().trim_end_matches(',').trim();
        // After a list of examples (`1,206 distinct, e.g. DMD, CFTR, blank 58%`) the share is
        // the last item's alone.
        let value = match value.find(EXAMPLES) {
            Some(at) => value[at..].rsplit(", ").next().unwrap_or_default().trim(),
            None => value,
        };
        if !value.is_empty() {
            out.push((value.to_owned(), share / 100.0));
        }
    }
    out
}

/// How a profile introduces values it shows only as examples, with no share.
const EXAMPLES: &str = "e.g.";

/// The values a profile shows only as examples of many (`4,620 distinct, e.g. Bisphenol A,
/// Atrazine, blank 4%` gives Bisphenol A and Atrazine): what the column holds, at no known
/// share of its rows. An item cut short (`…`) or with a share is not one.
pub fn example_values(profile: &str) -> Vec<String> {
    let Some(at) = profile.find(EXAMPLES) else {
        return Vec::new();
    };
    profile[at + EXAMPLES.len()..]
        .split(", ")
        .map(str::trim)
        .take_while(|v| !v.ends_with('%'))
        .filter(|v| !v.is_empty() && !v.ends_with("...") && !v.ends_with('…'))
        .map(str::to_owned)
        .collect()
}

/// Whether a profile's values are only yes and no, in one of the usual spellings (blanks
/// aside): one of each, or one alone (`True 100%`); a value written as a code with its label
/// (`0 (no)`, `1 (yes)`) read by its label.
fn yes_or_no(profile: &str) -> bool {
    let values: Vec<String> = profile_values(profile)
        .into_iter()
        .map(|(v, _)| labelled(&v).unwrap_or(&v).to_owned())
        .filter(|v| v != "blank")
        .collect();
    let pairs: [(&str, &str); 4] = [("true", "false"), ("yes", "no"), ("y", "n"), ("t", "f")];
    match values.as_slice() {
        // One letter alone (`F 100%`) may be a sex; a word alone is a mark.
        [one] => pairs
            .iter()
            .any(|(y, n)| one.len() > 1 && (one == y || one == n)),
        [_, _] => pairs
            .iter()
            .any(|(y, n)| values.iter().any(|v| v == y) && values.iter().any(|v| v == n)),
        _ => false,
    }
}

/// The label of a value written as a short code with it (`0 (no)`, `2 (No)`): what the code
/// stands for.
fn labelled(value: &str) -> Option<&str> {
    let (code, rest) = value.split_once(" (")?;
    let label = rest.strip_suffix(')')?;
    (!code.is_empty() && code.len() <= 3 && !code.contains(' ') && !label.contains('('))
        .then_some(label.trim())
}

/// Whether the values the profile lists are mostly links (`http://purl.obolibrary.org/...`).
fn links(profile: &str) -> bool {
    let values: Vec<(String, f64)> = profile_values(profile)
        .into_iter()
        .filter(|(v, _)| v != "blank")
        .collect();
    let linked: f64 = values
        .iter()
        .filter(|(v, _)| v.starts_with("http://") || v.starts_with("https://"))
        .map(|(_, s)| s)
        .sum();
    !values.is_empty() && linked >= 0.5 * values.iter().map(|(_, s)| s).sum::<f64>()
}

/// The rule that sets a column aside, if one does. Names are read as written: `plotID`,
/// `site_id` and `uid` are identifiers, `fluid` is not.
fn identifier(
    name: &str,
    description: &str,
    kind: &str,
    unit: Option<&str>,
    profile: &str,
) -> Option<&'static str> {
    let profile = profile.to_ascii_lowercase();
    if profile.contains("all blank") || profile.contains("all empty") {
        return Some("all blank");
    }
    let lower = name.to_ascii_lowercase();
    let camel_or_snake = |word: &str| {
        let capital = format!("{}{}", word[..1].to_ascii_uppercase(), &word[1..]);
        lower == word
            || name.ends_with(&format!("_{word}"))
            || name.ends_with(&capital)
            || name.ends_with(&word.to_ascii_uppercase())
    };
    if matches!(kind, "date" | "datetime" | "timestamp" | "time")
        || ["date", "time", "timestamp", "datetime"]
            .iter()
            .any(|w| camel_or_snake(w))
    {
        return Some("a date or time");
    }
    if ["id", "uid", "uuid"].iter().any(|w| camel_or_snake(w)) {
        return Some("an identifier");
    }
    if camel_or_snake("code") {
        return Some("a code");
    }
    // `fishDataQF`, `lab_flag`: how a row was checked, not what it measured.
    if ["qf", "flag", "flags", "qc"]
        .iter()
        .any(|w| camel_or_snake(w))
    {
        return Some("a quality flag");
    }
    // `decimalLatitude`, `longitude`: where a row was taken, a place no term names; so is a
    // column its description calls one (`ShootLong`: "Longitude of the shooting position").
    let described: Vec<String> = crate::backend::words(description);
    if ["latitude", "longitude", "lat", "lon", "lng"]
        .iter()
        .any(|w| camel_or_snake(w))
        || described
            .first()
            .is_some_and(|w| w == "latitude" || w == "longitude")
    {
        return Some("a coordinate");
    }
    // `is_primary_data: True 80%, False 20%`: a yes/no mark on the row, not a thing a term
    // names (a disease's presence is the disease's own column, if any).
    if kind == "boolean" || yes_or_no(&profile) {
        return Some("a yes/no mark");
    }
    // `Term_Source_REF`, `Protocol_REF`, `Term_Accession_Number`: which record or term
    // another column's value is, not a thing of its own; so are values that are links.
    // Names, not quantities: a measured value whose name ends in REF (a reference method's)
    // is a measurement.
    let read: Vec<String> = crate::backend::words(name_read(name));
    if kind == "string"
        && unit.is_none()
        && (read.last().is_some_and(|w| w == "ref") || read.iter().any(|w| w == "accession"))
    {
        return Some("a reference to another record");
    }
    if links(&profile) {
        return Some("links");
    }
    // `Unit`, `age_units`: what another column is counted in.
    if read.last().is_some_and(|w| w == "unit" || w == "units") && unit.is_none() {
        return Some("the unit of another column");
    }
    // `individualCount`, `specimenNumber`: how many records or animals, no quantity with a
    // unit (a platelet count per litre is one).
    if kind == "integer" && unit.is_none() && ["count", "number"].iter().any(|w| camel_or_snake(w))
    {
        return Some("a count of records");
    }
    // The same said by the description ("Total number of fish of the species in the haul",
    // `TotalNo`): how many, of nothing a unit measures.
    let said = described
        .strip_prefix(&["total".to_owned()][..])
        .unwrap_or(&described);
    if unit.is_none()
        && matches!(kind, "integer" | "float" | "number")
        && said.len() > 2
        && matches!(said[0].as_str(), "number" | "count")
        && said[1] == "of"
    {
        return Some("a count of records");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    const EXAMPLE: &str = include_str!("../../../tests/cards/example.md");

    #[test]
    fn a_dotted_path_is_read_by_its_last_segment_that_says_something() {
        let cases = [
            ("donor_organism.diseases.ontology_label", "diseases"),
            ("donor_organism.organism_age", "organism_age"),
            ("specimen_from_organism.organ.text", "organ"),
            ("condition.l1", "condition"),
            ("Solar.R", "Solar"),
            ("sample.temperature.value", "temperature"),
            ("measurement.unit", "unit"),
            // Nothing said: the description speaks.
            ("f.31.0.0", ""),
            ("31-0.0", ""),
            // Not a path: read whole.
            ("hindfootLength", "hindfootLength"),
            ("Sex (1 = male. 2 = female)", "Sex (1 = male. 2 = female)"),
            ("2.5", "2.5"),
            ("a..b", "a..b"),
            (".hidden", ".hidden"),
        ];
        for (name, read) in cases {
            assert_eq!(name_read(name), read, "{name}");
        }
        // A field named by its kind and, in brackets, what it holds.
        assert_eq!(name_read("Characteristics[Organism part]"), "Organism part");
        assert_eq!(name_read("factor value[disease]"), "disease");
        assert_eq!(name_read("Factor_Value[Gender]"), "Gender");
        assert_eq!(name_read("x[]"), "x[]");
        assert_eq!(name_read("[a]"), "[a]");
        // A name that says nothing is the description's first phrase.
        assert_eq!(name_of("f.31.0.0", "Sex"), "Sex");
        assert_eq!(
            name_of("f.21001.0.0", "Body mass index (BMI)"),
            "Body mass index"
        );
        assert_eq!(
            name_of("f.20116.0.0", "Smoking status, as answered. Coded"),
            "Smoking status"
        );
        assert_eq!(
            name_of("f.1.0.0", "Version 2.5 of the form"),
            "Version 2.5 of the form"
        );
        assert_eq!(name_of("sex", "Sex, as answered"), "sex");
    }

    #[test]
    fn the_example_card() {
        let card = parse(EXAMPLE).unwrap();
        assert_eq!(card.name, "DP1.10072.001/mam_pertrapnight");
        assert_eq!(card.sites, ["HARV", "BART", "SCBI"]);
        assert_eq!(card.rows, 48213);
        assert!(
            card.description.starts_with("Small mammals"),
            "{}",
            card.description
        );
        let by_name = |n: &str| card.columns.iter().find(|c| c.name == n).unwrap();
        assert_eq!(by_name("uid").identifier, Some("an identifier"));
        assert_eq!(by_name("collectDate").identifier, Some("a date or time"));
        assert_eq!(by_name("plotID").identifier, Some("an identifier"));
        assert_eq!(by_name("remarks").identifier, Some("all blank"));
        assert_eq!(
            by_name("hindfootLength").unit.as_deref(),
            Some("millimeter")
        );
        assert_eq!(by_name("sex").identifier, None);
        // Same text, same id; any change, another.
        assert_eq!(parse(EXAMPLE).unwrap().id, card.id);
        assert_ne!(
            parse(&EXAMPLE.replace("48213", "48214")).unwrap().id,
            card.id
        );
        assert_eq!(parse(&EXAMPLE.replace('\n', "\r\n")).unwrap().id, card.id);
    }

    #[test]
    fn flags_and_counts_of_records_are_set_aside() {
        assert_eq!(
            identifier("fishDataQF", "", "string", None, ""),
            Some("a quality flag")
        );
        assert_eq!(
            identifier("lab_flag", "", "string", None, ""),
            Some("a quality flag")
        );
        assert_eq!(identifier("flagellum_length", "", "float", None, ""), None);
        assert_eq!(
            identifier("individualCount", "", "integer", None, ""),
            Some("a count of records")
        );
        // A count with a unit is a measurement (cells per litre).
        assert_eq!(
            identifier("platelet_count", "", "integer", Some("10^9/L"), ""),
            None
        );
        assert_eq!(identifier("county", "", "integer", None, ""), None);
        assert_eq!(
            identifier("decimalLatitude", "", "float", Some("degree"), ""),
            Some("a coordinate")
        );
        assert_eq!(
            identifier("lon", "", "float", None, ""),
            Some("a coordinate")
        );
        assert_eq!(
            identifier("plateletCount", "", "integer", Some("10^9/L"), ""),
            None
        );
        assert_eq!(identifier("salon", "", "string", None, ""), None);
        // Said by the description.
        assert_eq!(
            identifier(
                "ShootLong",
                "Longitude of the shooting position",
                "float",
                Some("degree"),
                ""
            ),
            Some("a coordinate")
        );
        assert_eq!(
            identifier(
                "TotalNo",
                "Total number of fish in the haul",
                "float",
                None,
                ""
            ),
            Some("a count of records")
        );
        assert_eq!(
            identifier("wbc", "Number of leukocytes", "float", Some("10^9/L"), ""),
            None
        );
        assert_eq!(
            identifier(
                "Term_Source_REF",
                "Ontology of the term",
                "string",
                None,
                ""
            ),
            Some("a reference to another record")
        );
        assert_eq!(
            identifier(
                "NEE_REF",
                "Net ecosystem exchange",
                "float",
                Some("umol/m2/s"),
                ""
            ),
            None
        );
        assert_eq!(
            identifier("Unit", "Unit of the age", "string", None, "year 100%"),
            Some("the unit of another column")
        );
        assert_eq!(
            identifier(
                "acc",
                "Accession",
                "string",
                None,
                "http://purl.obolibrary.org/obo/UBERON_0001088 100%"
            ),
            Some("links")
        );
        assert_eq!(
            identifier("is_primary_data", "", "string", None, "true 80%, false 20%"),
            Some("a yes/no mark")
        );
        assert_eq!(
            identifier("ascites", "", "string", None, "n 90%, y 8%, blank 2%"),
            Some("a yes/no mark")
        );
        assert_eq!(identifier("sex", "", "string", None, "m 51%, f 43%"), None);
        assert_eq!(
            identifier("is_primary_data", "", "boolean", None, "true 100%"),
            Some("a yes/no mark")
        );
        assert_eq!(
            identifier("canonical", "", "string", None, "true 100%"),
            Some("a yes/no mark")
        );
        assert_eq!(
            identifier("sex", "", "string", None, "f 98%, blank 2%"),
            None
        );
        // Coded, read by the labels; not a pair once other answers are coded beside them.
        let mark = Some("a yes/no mark");
        for (name, profile, expected) in [
            ("hemo", "0 (no) 92%, 1 (yes) 8%", mark),
            ("zprior", "1 (yes) 100%", mark),
            (
                "smoke100",
                "1 (yes) 38%, 2 (no) 58%, 7 (don't know/not sure) <1%, 9 (refused) <1%",
                None,
            ),
        ] {
            assert_eq!(
                identifier(name, "", "categorical", None, profile),
                expected,
                "{name}"
            );
        }
        assert_eq!(
            identifier("answer", "", "string", None, "yes 50%, no 40%, maybe 10%"),
            None
        );
    }

    #[test]
    fn malformed_cards_name_the_line() {
        let good = "# Dataset: P / t\nProduct: p\nSource: s\nSites: A\nRows: 3\n- a | b | string | - | x\n";
        assert!(parse(good).is_ok());
        let cases = [
            ("", 1, "empty"),
            ("Dataset: P / t\n", 1, "starts with"),
            ("# Dataset: P t\n", 1, "product code and a table"),
            (&good.replace("Rows: 3", "Rows: many"), 1, "whole number"),
            (&good.replace("Source: s\n", ""), 1, "no \"Source:\""),
            (
                &good.replace("- a | b | string | - | x", "- a | b | string"),
                6,
                "five fields",
            ),
            (
                &format!("{good}- a | c | string | - | y\n"),
                7,
                "listed twice",
            ),
            (
                &format!("{good}some prose\n"),
                7,
                "only \"- \" column lines",
            ),
            (
                &good.replace("Sites: A", "Sites: A\nRows: 4"),
                6,
                "Rows is given twice",
            ),
            (
                &good.replace("- a | b | string | - | x\n", ""),
                1,
                "lists no columns",
            ),
            (&good.replace("- a |", "-  |"), 6, "no name"),
        ];
        for (text, line, want) in cases {
            let e = parse(text).unwrap_err();
            assert_eq!(e.line, line, "{text:?}: {e}");
            assert!(e.message.contains(want), "{text:?}: {e}");
        }
    }
}
