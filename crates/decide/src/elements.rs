//! The chemical elements by symbol and name: a column of `Fe` or of "total nitrogen" is about
//! the element, which ChEBI names "iron atom" and "nitrogen atom" — a bare "nitrogen" there is
//! the radical `nitrogen(.)`, which no curator means.

/// Symbol and English name of every element, in order of atomic number.
const ELEMENTS: &str = "H hydrogen He helium Li lithium Be beryllium B boron C carbon N nitrogen \
O oxygen F fluorine Ne neon Na sodium Mg magnesium Al aluminium Si silicon P phosphorus S sulfur \
Cl chlorine Ar argon K potassium Ca calcium Sc scandium Ti titanium V vanadium Cr chromium \
Mn manganese Fe iron Co cobalt Ni nickel Cu copper Zn zinc Ga gallium Ge germanium As arsenic \
Se selenium Br bromine Kr krypton Rb rubidium Sr strontium Y yttrium Zr zirconium Nb niobium \
Mo molybdenum Tc technetium Ru ruthenium Rh rhodium Pd palladium Ag silver Cd cadmium In indium \
Sn tin Sb antimony Te tellurium I iodine Xe xenon Cs caesium Ba barium La lanthanum Ce cerium \
Pr praseodymium Nd neodymium Pm promethium Sm samarium Eu europium Gd gadolinium Tb terbium \
Dy dysprosium Ho holmium Er erbium Tm thulium Yb ytterbium Lu lutetium Hf hafnium Ta tantalum \
W tungsten Re rhenium Os osmium Ir iridium Pt platinum Au gold Hg mercury Tl thallium Pb lead \
Bi bismuth Po polonium At astatine Rn radon Fr francium Ra radium Ac actinium Th thorium \
Pa protactinium U uranium Np neptunium Pu plutonium Am americium Cm curium";

fn pairs() -> impl Iterator<Item = (&'static str, &'static str)> {
    let mut words = ELEMENTS.split_whitespace();
    std::iter::from_fn(move || Some((words.next()?, words.next()?)))
}

/// The element a symbol stands for, spelled exactly (`Fe`, not `fe` or `FE`).
pub fn by_symbol(symbol: &str) -> Option<&'static str> {
    pairs().find(|(s, _)| *s == symbol).map(|(_, n)| n)
}

/// Whether a lower-case word is an element's name (`nitrogen`; `aluminum` and `sulphur` too).
pub fn is_name(word: &str) -> Option<&'static str> {
    let word = match word {
        "aluminum" => "aluminium",
        "sulphur" => "sulfur",
        "cesium" => "caesium",
        w => w,
    };
    pairs().find(|(_, n)| *n == word).map(|(_, n)| n)
}

/// What ChEBI calls the substance a measurement of `element` means: the atom ("nitrogen
/// atom" for total nitrogen, "iron atom" for iron), but for oxygen, which is measured as the
/// gas (dissolved oxygen, oxygen saturation): dioxygen.
pub fn substance(element: &str) -> String {
    match element {
        "oxygen" => "dioxygen".to_owned(),
        e => format!("{e} atom"),
    }
}

/// The element whose [`substance`] a phrase is.
pub fn of_substance(phrase: &str) -> Option<&'static str> {
    if phrase == "dioxygen" {
        return Some("oxygen");
    }
    is_name(phrase.strip_suffix(" atom")?)
}

/// An element's atomic number: its place in the table.
fn atomic_number(element: &str) -> Option<u32> {
    pairs()
        .position(|(_, n)| n == element)
        .map(|i| i as u32 + 1)
}

/// The isotopes a column's text writes in the usual notation, mass number before symbol
/// (`d15N`, `δ13C`, "delta 15N", "isotopes 15N:14N"), as ChEBI names them ("nitrogen-15
/// atom"): only where the text speaks of isotopes or deltas (`25C` is a temperature), and
/// of a ratio the first (`15N:14N`: the heavy isotope measured).
/// At most `most`, the first found.
pub fn isotopes(text: &str, most: usize) -> Vec<String> {
    let lower = text.to_lowercase();
    let speaks = lower.contains("isotop") || lower.contains("delta") || lower.contains('δ');
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        if !c.is_ascii_digit() {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && chars[j].1.is_ascii_digit() {
            j += 1;
        }
        let before = i.checked_sub(1).map(|b| chars[b].1);
        // `d15N` and `δ13C` at a word's start; else the digits start a word.
        let prefixed = before.is_some_and(|b| b == 'd' || b == 'δ')
            && i.checked_sub(2)
                .is_none_or(|bb| !chars[bb].1.is_alphanumeric());
        let after_ratio = before.is_some_and(|b| b == ':' || b == '/');
        let word_start = before.is_none_or(|b| !b.is_alphanumeric());
        let mut k = j;
        if k < chars.len() && chars[k].1.is_ascii_uppercase() {
            k += 1;
            if k < chars.len() && chars[k].1.is_ascii_lowercase() {
                k += 1;
            }
        }
        let end = chars.get(k).map_or(text.len(), |(at, _)| *at);
        let ends_word = chars.get(k).is_none_or(|(_, c)| !c.is_alphabetic());
        if k > j
            && ends_word
            && (prefixed || (word_start && speaks))
            && !after_ratio
            && let Some(element) = by_symbol(&text[chars[j].0..end])
            && let Ok(mass) = text[start..chars[j].0].parse::<u32>()
            // No lighter than its protons (`3B` in "delta site 3B" is no boron).
            && atomic_number(element).is_some_and(|z| mass >= z)
            && mass < 300
        {
            let name = match (element, mass) {
                ("hydrogen", 2) => "deuterium atom".to_owned(),
                ("hydrogen", 3) => "tritium atom".to_owned(),
                (e, m) => format!("{e}-{m} atom"),
            };
            if !out.contains(&name) {
                out.push(name);
                if out.len() >= most {
                    break;
                }
            }
        }
        i = k.max(j);
    }
    out
}

/// A name's pieces with their case kept: split at anything not a letter or digit and where
/// a lower-case letter meets a capital (`As_ugL` → `As`, `ug`, `L`; `NO3_N` → `NO3`, `N`).
pub fn pieces(name: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = None;
    let mut previous_lower = false;
    for (i, c) in name.char_indices() {
        if !c.is_alphanumeric() {
            if let Some(s) = start.take() {
                out.push(&name[s..i]);
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase()
            && previous_lower
            && let Some(s) = start.take()
        {
            out.push(&name[s..i]);
        }
        start.get_or_insert(i);
        previous_lower = c.is_lowercase();
    }
    if let Some(s) = start {
        out.push(&name[s..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_whole() {
        assert_eq!(pairs().count(), 96);
        assert_eq!(by_symbol("Fe"), Some("iron"));
        assert_eq!(by_symbol("N"), Some("nitrogen"));
        assert_eq!(by_symbol("fe"), None);
        assert_eq!(by_symbol("Cm"), Some("curium"));
        assert_eq!(is_name("sulphur"), Some("sulfur"));
        assert_eq!(is_name("total"), None);
        assert_eq!(substance("iron"), "iron atom");
        assert_eq!(substance("oxygen"), "dioxygen");
        assert_eq!(of_substance("dioxygen"), Some("oxygen"));
        assert_eq!(of_substance("nitrogen atom"), Some("nitrogen"));
        assert_eq!(of_substance("water atom"), None);
    }

    #[test]
    fn isotopes_in_their_notation() {
        assert_eq!(isotopes("d15N", 4), ["nitrogen-15 atom"]);
        assert_eq!(isotopes("δ13C", 4), ["carbon-13 atom"]);
        assert_eq!(
            isotopes("the ratio of stable isotopes 15N:14N", 4),
            ["nitrogen-15 atom"]
        );
        assert_eq!(
            isotopes("Carbon stable isotope ratio, delta 13C against VPDB", 4),
            ["carbon-13 atom"]
        );
        assert_eq!(isotopes("d2H of water", 4), ["deuterium atom"]);
        assert_eq!(
            isotopes("delta 13C δ18O 34S 2H", 2),
            ["carbon-13 atom", "oxygen-18 atom"],
            "the first found, no more"
        );
        assert_eq!(isotopes("temperature at 25C", 4), Vec::<String>::new());
        assert_eq!(isotopes("NO3 and PO4", 4), Vec::<String>::new());
        assert_eq!(isotopes("isotopes 13Cx", 4), Vec::<String>::new());
        assert_eq!(isotopes("delta 15", 4), Vec::<String>::new());
        assert_eq!(isotopes("river delta site 3B", 4), Vec::<String>::new());
        assert_eq!(isotopes("δ", 4), Vec::<String>::new());
        assert_eq!(
            isotopes("delta 13C δ18O 34S", 4),
            ["carbon-13 atom", "oxygen-18 atom", "sulfur-34 atom"]
        );
    }

    #[test]
    fn pieces_keep_their_case() {
        assert_eq!(pieces("As_ugL"), ["As", "ug", "L"]);
        assert_eq!(pieces("NO3_N"), ["NO3", "N"]);
        assert_eq!(pieces("soilInWater"), ["soil", "In", "Water"]);
        assert_eq!(pieces("Fe"), ["Fe"]);
        assert_eq!(pieces(""), Vec::<&str>::new());
    }
}
