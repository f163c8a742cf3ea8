//! Watches as the controller polls them: one background watch per kind, from the
//! resourceVersion the cache asked for, buffering what arrives until the next poll. A watch
//! that ends (the server's timeout) is resumed from the last resourceVersion seen; an error is
//! retried after a jittered backoff; `410 Gone` makes the next poll answer
//! [`ApiError::Gone`], so the cache lists that kind again.

use crate::client::Throttle;
use capstan_controller::api::{ApiError, Change, Changes, Kind, Object};
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::api::{Api, WatchEvent, WatchParams};
use rand::Rng;
use serde::de::DeserializeOwned;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

#[derive(Default)]
struct Inner {
    /// The resourceVersion the caller will poll from next.
    expected: Option<String>,
    changes: Vec<Change>,
    /// The resourceVersion after the buffered changes.
    rv: String,
    gone: bool,
    task: Option<JoinHandle<()>>,
}

/// One kind's watch.
#[derive(Default)]
pub struct KindWatch {
    inner: Arc<Mutex<Inner>>,
}

impl Drop for KindWatch {
    fn drop(&mut self) {
        if let Ok(mut g) = self.inner.lock() {
            if let Some(t) = g.task.take() {
                t.abort();
            }
        }
    }
}

/// The key an object is cached under.
pub fn key_of(m: &ObjectMeta) -> String {
    match &m.namespace {
        Some(ns) => format!("{ns}/{}", m.name.clone().unwrap_or_default()),
        None => m.name.clone().unwrap_or_default(),
    }
}

impl KindWatch {
    /// The changes since `since`; starts (or restarts) the background watch when `since` is
    /// not where the last poll left off.
    pub fn poll<K>(
        &self,
        kind: Kind,
        since: &str,
        api: Api<K>,
        throttle: Throttle,
        convert: fn(&K) -> Object,
    ) -> Result<Changes, ApiError>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    {
        self.poll_with(kind, since, move |inner| {
            tokio::spawn(run(kind, since.to_string(), api, throttle, convert, inner))
        })
    }

    fn poll_with(
        &self,
        kind: Kind,
        since: &str,
        spawn: impl FnOnce(Arc<Mutex<Inner>>) -> JoinHandle<()>,
    ) -> Result<Changes, ApiError> {
        let mut g = self.inner.lock().expect("watch state");
        let continuing = g.task.is_some() && g.expected.as_deref() == Some(since);
        if !continuing {
            if let Some(t) = g.task.take() {
                t.abort();
            }
            g.changes.clear();
            g.gone = false;
            g.rv = since.to_string();
            g.expected = Some(since.to_string());
            drop(g);
            let task = spawn(self.inner.clone());
            let mut g = self.inner.lock().expect("watch state");
            g.task = Some(task);
            return Ok(Changes {
                changes: Vec::new(),
                resource_version: since.to_string(),
            });
        }
        // What arrived before an expiry is delivered first; the expiry at the next poll.
        if g.gone && g.changes.is_empty() {
            if let Some(t) = g.task.take() {
                t.abort();
            }
            g.expected = None;
            return Err(ApiError::Gone {
                kind,
                since: since.to_string(),
            });
        }
        let changes = std::mem::take(&mut g.changes);
        let rv = g.rv.clone();
        g.expected = Some(rv.clone());
        Ok(Changes {
            changes,
            resource_version: rv,
        })
    }
}

async fn run<K>(
    kind: Kind,
    since: String,
    api: Api<K>,
    throttle: Throttle,
    convert: fn(&K) -> Object,
    inner: Arc<Mutex<Inner>>,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    let mut rv = since;
    let mut failures = 0u32;
    loop {
        throttle.wait().await;
        let wp = WatchParams::default().timeout(290);
        match api.watch(&wp, &rv).await {
            Ok(stream) => {
                let mut stream = std::pin::pin!(stream);
                while let Some(ev) = stream.next().await {
                    let change = match ev {
                        Ok(WatchEvent::Added(o)) | Ok(WatchEvent::Modified(o)) => {
                            rv = o.meta().resource_version.clone().unwrap_or(rv);
                            let meta = crate::convert::meta(o.meta());
                            Some(Change::Applied(meta, convert(&o)))
                        }
                        Ok(WatchEvent::Deleted(o)) => {
                            rv = o.meta().resource_version.clone().unwrap_or(rv);
                            Some(Change::Deleted(kind, key_of(o.meta())))
                        }
                        Ok(WatchEvent::Bookmark(b)) => {
                            rv = b.metadata.resource_version.clone();
                            None
                        }
                        Ok(WatchEvent::Error(e)) if e.code == 410 => {
                            tracing::info!(?kind, rv, "watch expired");
                            inner.lock().expect("watch state").gone = true;
                            return;
                        }
                        Ok(WatchEvent::Error(e)) => {
                            tracing::warn!(?kind, error = %e.message, "watch error; resuming");
                            break;
                        }
                        Err(e) => {
                            tracing::warn!(?kind, error = %e, "watch stream failed; resuming");
                            break;
                        }
                    };
                    failures = 0;
                    let mut g = inner.lock().expect("watch state");
                    if let Some(c) = change {
                        g.changes.push(c);
                    }
                    g.rv = rv.clone();
                }
            }
            Err(kube::Error::Api(s)) if s.code == 410 => {
                inner.lock().expect("watch state").gone = true;
                return;
            }
            Err(e) => {
                failures += 1;
                tracing::warn!(?kind, error = %e, "watch request failed; backing off");
                let cap = (0.5 * 2f64.powi(failures.min(6) as i32)).min(30.0);
                let wait = cap / 2.0 + rand::rng().random::<f64>() * cap / 2.0;
                tokio::time::sleep(Duration::from_secs_f64(wait)).await;
            }
        }
    }
}
