//! A user's credential file (a user JWT and its nkey seed), as nsc writes it and every NATS
//! client reads it.

/// Why a credential file does not read.
#[derive(Debug, thiserror::Error)]
pub enum CredsError {
    #[error(
        "the credential file has no {0} block: write it with `mesh accounts --auth operator` or nsc"
    )]
    Missing(&'static str),
}

/// The credential file of a user: `jwt` and the seed of the key it names.
pub fn creds(jwt: &str, seed: &str) -> String {
    format!(
        "-----BEGIN NATS USER JWT-----\n{jwt}\n------END NATS USER JWT------\n\n\
         ************************* IMPORTANT *************************\n\
         NKEY Seed printed below can be used to sign and prove identity.\n\
         NKEYs are sensitive and should be treated as secrets.\n\n\
         -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n\n\
         *************************************************************\n"
    )
}

/// The user JWT and the seed a credential file holds.
pub fn read_creds(text: &str) -> Result<(String, String), CredsError> {
    // Each block is the first line of substance after a `-----BEGIN … -----` line.
    let block = |what: &'static str| {
        let mut lines = text.lines().map(str::trim);
        lines
            .by_ref()
            .find(|l| l.starts_with("-----BEGIN") && l.contains(what))
            .and_then(|_| lines.find(|l| !l.is_empty()))
            .filter(|l| !l.starts_with("---"))
            .map(str::to_owned)
            .ok_or(CredsError::Missing(what))
    };
    Ok((block("JWT")?, block("SEED")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_file_reads_back() {
        let text = creds("eyJ.x.y", "SUAB");
        assert_eq!(
            read_creds(&text).unwrap(),
            ("eyJ.x.y".to_owned(), "SUAB".to_owned())
        );
        assert!(matches!(
            read_creds("nothing"),
            Err(CredsError::Missing("JWT"))
        ));
    }
}
