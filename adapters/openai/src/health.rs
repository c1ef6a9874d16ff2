//! The adapter's health: each endpoint answering HTTP.
//!
//! One `GET {baseUrl}/models` per endpoint, without the key and bounded by
//! [`PROBE_TIMEOUT`]; any HTTP answer (a `401` or a `404` included) means the endpoint is
//! reachable, a refused connection or no answer in time means it is not. Nothing is
//! generated, so nothing is billed.
//!
//! Decisions where the spec is silent: the key is not sent (reachability is all that is
//! asked, and a probe should not spread the secret); the endpoints are probed concurrently;
//! the caller sees a short category naming the endpoint, the operator's log the URL and the
//! error.

use std::time::Duration;

use futures_util::future::join_all;
use harness_core::adapter::HarnessHealth;

use crate::config::Endpoint;

/// The longest a probe of one endpoint takes (connection and answer).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether `endpoint` answers HTTP within the bound; the reason category when not.
async fn probe(http: &reqwest::Client, name: &str, endpoint: &Endpoint) -> Result<(), String> {
    let url = format!("{}/models", endpoint.base_url.trim_end_matches('/'));
    match http.get(&url).send().await {
        Ok(_) => Ok(()),
        Err(e) => {
            let category = if e.is_timeout() {
                "does not answer in time"
            } else {
                "is not reachable"
            };
            tracing::warn!(endpoint = name, url = %url, error = %e, "a model endpoint {category}");
            Err(format!("endpoint `{name}` {category}"))
        }
    }
}

/// The health of `endpoints`: ready when every one answers.
pub(crate) async fn endpoints(endpoints: Vec<(String, Endpoint)>) -> HarnessHealth {
    let http = match reqwest::Client::builder()
        .timeout(PROBE_TIMEOUT)
        .connect_timeout(PROBE_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
    {
        Ok(http) => http,
        Err(e) => {
            tracing::error!(error = %e, "no HTTP client for the model endpoints' health");
            return HarnessHealth::not_ready("the endpoints cannot be probed");
        }
    };
    let probes = endpoints
        .iter()
        .map(|(name, endpoint)| probe(&http, name, endpoint));
    match join_all(probes).await.into_iter().find_map(Result::err) {
        Some(reason) => HarnessHealth::not_ready(reason),
        None => HarnessHealth::ready(),
    }
}
