//! Durations as a person writes them (`500ms`, `10s`, `2m`, `30d`): the grants file's log
//! and every command's `--timeout` and `--since`.

use std::time::Duration;

/// `500ms`, `10s`, `2m`, or a plain number of seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, unit) = match s.find(|c: char| !(c.is_ascii_digit() || c == '.')) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a duration: expected e.g. 500ms, 10s, 2m"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        "d" => n * 86_400.0,
        "w" => n * 604_800.0,
        other => return Err(format!("{other:?} is not a unit: use ms, s, m, h, d or w")),
    };
    if !(secs > 0.0 && secs.is_finite()) {
        return Err(format!("{s:?} is not a positive duration"));
    }
    Duration::try_from_secs_f64(secs)
        .map_err(|_| format!("{s:?} is too long: give a duration of at most a few years"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("10"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert!(
            parse_duration("99999999999999999999h")
                .unwrap_err()
                .contains("too long")
        );
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("ten").is_err());
        // Days and weeks, as the grants file's log and `--since` write them.
        assert_eq!(parse_duration("3d"), Ok(Duration::from_secs(3 * 86_400)));
        assert_eq!(parse_duration("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert!(parse_duration("3y").unwrap_err().contains("not a unit"));
    }
}
