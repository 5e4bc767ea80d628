//! `--jwks URL`: the identity provider's keys fetched from its jwks_uri (https; plain http
//! only on this machine), for the auth callout (mesh-bus's `callout::Provider`, which says
//! when to fetch again).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};

/// How long one fetch may take: the callout waits for it before answering a sign-in.
const WITHIN: Duration = Duration::from_secs(10);
/// The most a JWKS may weigh (a provider's holds a few keys).
const MAX_BYTES: usize = 1 << 20;

/// The identity provider `idp` names, its keys read from the file or fetched from the URL
/// `--jwks` gives; none without `--idp`.
pub async fn provider(
    idp: &super::args::IdpArgs,
) -> anyhow::Result<Option<mesh_bus::callout::Provider>> {
    let (Some(issuer), Some(jwks), Some(audience)) = (&idp.idp, &idp.jwks, &idp.audience) else {
        return Ok(None);
    };
    let provider = match url(jwks)? {
        Some(url) => mesh_bus::callout::Provider::fetching(
            issuer.clone(),
            audience.clone(),
            Some(idp.claim.clone()),
            fetcher(url.clone())?,
        )
        .await
        .with_context(|| format!("the identity provider's keys at {url}"))?,
        None => {
            let keys = std::fs::read_to_string(jwks)
                .with_context(|| format!("cannot read the identity provider's keys {jwks}"))?;
            mesh_bus::callout::Provider::new(
                issuer.clone(),
                audience.clone(),
                Some(idp.claim.clone()),
                &keys,
            )
            .with_context(|| format!("{jwks} is not the identity provider's JWKS"))?
        }
    };
    Ok(Some(provider))
}

/// The URL `--jwks` gives, or none when it names a file; an http URL off this machine is
/// refused (the keys decide who signs in: they must not cross a network in the clear).
pub fn url(jwks: &str) -> anyhow::Result<Option<reqwest::Url>> {
    let lower = jwks.to_ascii_lowercase();
    if !lower.starts_with("https://") && !lower.starts_with("http://") {
        return Ok(None);
    }
    let url = reqwest::Url::parse(jwks).with_context(|| format!("--jwks {jwks} is not a URL"))?;
    let local = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    if url.scheme() == "http" && !local {
        bail!(
            "--jwks {jwks}: the identity provider's keys are fetched over https (http only from 127.0.0.1 or localhost)"
        );
    }
    Ok(Some(url))
}

/// What fetches the JWKS at `url`: a GET answered 200 with at most a megabyte, within 10 s.
pub fn fetcher(url: reqwest::Url) -> anyhow::Result<mesh_bus::callout::Fetch> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    for cert in found.certs {
        // A certificate the system keeps that does not parse is one fewer authority.
        let _ = roots.add(cert);
    }
    let tls = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .context("cannot set up TLS for fetching the identity provider's keys")?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let client = reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .timeout(WITHIN)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .context("cannot make the HTTP client that fetches the identity provider's keys")?;
    Ok(Arc::new(move || {
        let (client, url) = (client.clone(), url.clone());
        Box::pin(async move {
            let answer = client
                .get(url.clone())
                .header("accept", "application/json")
                .send()
                .await
                .map_err(|e| format!("{url} cannot be reached: {e}"))?;
            if !answer.status().is_success() {
                return Err(format!("{url} answered {}", answer.status()));
            }
            let body = answer
                .bytes()
                .await
                .map_err(|e| format!("{url} did not send its keys whole: {e}"))?;
            if body.len() > MAX_BYTES {
                return Err(format!("{url} sent more than a megabyte: not a JWKS"));
            }
            String::from_utf8(body.to_vec()).map_err(|_| format!("{url} sent no text"))
        })
    }))
}
