//! Connecting as kubectl does (`--kubeconfig`, else `KUBECONFIG`, else `~/.kube/config`, else
//! in-cluster), a client-side rate limit (QPS and burst, as client-go has), and how API errors
//! map onto capstan's.

use capstan_controller::api::{ApiError, Kind};
use governor::{DefaultDirectRateLimiter, Quota};
use std::num::NonZeroU32;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("{path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("no cluster configuration: {0}")]
    Infer(String),
    #[error("cannot build a client: {0}")]
    Client(String),
}

/// A client from `kubeconfig` if given, else as kubectl finds one.
pub async fn connect(kubeconfig: Option<&str>) -> Result<kube::Client, ConnectError> {
    // With the AWS SDK linked too, rustls has two crypto providers and picks none: use ring,
    // as kube is built with (a no-op when the process already chose one).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match kubeconfig {
        Some(path) => {
            let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| {
                ConnectError::Kubeconfig {
                    path: path.into(),
                    message: e.to_string(),
                }
            })?;
            kube::Config::from_custom_kubeconfig(kc, &Default::default())
                .await
                .map_err(|e| ConnectError::Kubeconfig {
                    path: path.into(),
                    message: e.to_string(),
                })?
        }
        None => kube::Config::infer()
            .await
            .map_err(|e| ConnectError::Infer(e.to_string()))?,
    };
    let mut config = config;
    // No retries inside the client: a 429 from the eviction API is a PDB saying "not yet", which
    // the drain must see at once (kube-rs would otherwise retry it for seconds, holding the
    // loop); every other failure is retried by the loops on their next pass.
    config.default_retry = false;
    kube::Client::try_from(config).map_err(|e| ConnectError::Client(e.to_string()))
}

/// Client-side throttling: `qps` requests per second on average, bursts of `burst`.
#[derive(Clone)]
pub struct Throttle(Arc<DefaultDirectRateLimiter>);

impl Throttle {
    pub fn new(qps: u32, burst: u32) -> Throttle {
        let q = Quota::per_second(NonZeroU32::new(qps.max(1)).expect("at least 1"))
            .allow_burst(NonZeroU32::new(burst.max(1)).expect("at least 1"));
        Throttle(Arc::new(DefaultDirectRateLimiter::direct(q)))
    }

    /// Waits for a request's turn.
    pub async fn wait(&self) {
        self.0.until_ready().await;
    }
}

/// An API error as capstan's: 409 is a conflict (or AlreadyExists), 404 not found, 429 a PDB
/// refusing an eviction, 410 an expired watch, 422/400 invalid, 401/403 forbidden, the rest
/// transient.
pub fn api_error(target: &str, kind: Kind, e: kube::Error) -> ApiError {
    match e {
        kube::Error::Api(s) => {
            let message = s.message.clone();
            match s.code {
                409 if s.reason == "AlreadyExists" => ApiError::AlreadyExists {
                    target: target.into(),
                },
                409 => ApiError::Conflict {
                    target: target.into(),
                    message,
                },
                404 => ApiError::NotFound {
                    target: target.into(),
                },
                429 => ApiError::TooManyRequests {
                    pod: target.into(),
                    message,
                },
                410 => ApiError::Gone {
                    kind,
                    since: message,
                },
                400 | 422 => ApiError::Invalid {
                    target: target.into(),
                    message,
                },
                401 | 403 => ApiError::Forbidden {
                    target: target.into(),
                    message,
                },
                code => ApiError::Unavailable(format!("{target}: HTTP {code}: {message}")),
            }
        }
        other => ApiError::Unavailable(format!("{target}: {other}")),
    }
}
