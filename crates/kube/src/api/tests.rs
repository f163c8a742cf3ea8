//! The adapter's exact requests and error paths, against kube-rs' mocked service: what goes on
//! the wire for a write, and what each status code becomes.

use super::*;
use capstan_controller::api::{Change, MetaPatch};
use capstan_model::taints::{Effect, Taint};
use http::{Request, Response, StatusCode};
use kube::client::Body;
use tower_test::mock;

type Handle = mock::Handle<Request<Body>, Response<Body>>;

fn mocked() -> (KubeApi, Handle) {
    let (service, handle) = mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let settings = Settings {
        qps: 1000,
        burst: 1000,
        ..Default::default()
    };
    (KubeApi::new(client, settings), handle)
}

fn status(code: u16, reason: &str, message: &str) -> Response<Body> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
                      "reason": reason, "message": message});
    Response::builder()
        .status(StatusCode::from_u16(code).unwrap())
        .body(Body::from(serde_json::to_vec(&body).unwrap()))
        .unwrap()
}

fn ok(v: Value) -> Response<Body> {
    Response::builder()
        .body(Body::from(serde_json::to_vec(&v).unwrap()))
        .unwrap()
}

async fn body_of(req: Request<Body>) -> (String, String, Value) {
    let method = req.method().to_string();
    let uri = req.uri().to_string();
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (method, uri, v)
}

/// Serves one request with `answer`, and hands back what was asked.
async fn serve_one(mut handle: Handle, answer: Response<Body>) -> (String, String, Value) {
    let (req, send) = handle.next_request().await.expect("a request");
    let seen = body_of(req).await;
    send.send_response(answer);
    seen
}

#[tokio::test]
async fn a_status_patch_carries_the_resource_version_and_a_stale_one_is_a_conflict() {
    let (api, handle) = mocked();
    let server = tokio::spawn(serve_one(
        handle,
        status(409, "Conflict", "the object has been modified"),
    ));
    let err = api
        .write(Write::ClaimStatus {
            name: "default-1".into(),
            rv: "41".into(),
            status: Box::default(),
        })
        .await
        .unwrap_err();
    let (method, uri, body) = server.await.unwrap();
    assert_eq!(method, "PATCH");
    assert_eq!(uri, "/apis/capstan.dev/v1/nodeclaims/default-1/status?");
    assert_eq!(body["metadata"]["resourceVersion"], "41");
    assert!(matches!(err, ApiError::Conflict { .. }), "{err}");
}

#[tokio::test]
async fn creating_a_claim_that_exists_is_already_exists() {
    let (api, handle) = mocked();
    let server = tokio::spawn(serve_one(
        handle,
        status(
            409,
            "AlreadyExists",
            "nodeclaims.capstan.dev \"default-1\" already exists",
        ),
    ));
    let c = capstan_model::NodeClaim {
        name: "default-1".into(),
        nodepool: "default".into(),
        ..Default::default()
    };
    let err = api
        .write(Write::CreateClaim(Box::new(c)))
        .await
        .unwrap_err();
    let (method, uri, body) = server.await.unwrap();
    assert_eq!(
        (method.as_str(), uri.as_str()),
        ("POST", "/apis/capstan.dev/v1/nodeclaims?")
    );
    assert!(body["metadata"].get("uid").is_none());
    assert!(matches!(err, ApiError::AlreadyExists { .. }), "{err}");
}

#[tokio::test]
async fn an_eviction_a_pdb_refuses_is_too_many_requests_and_a_gone_pod_is_not_found() {
    // (status code, reason, expected)
    let cases = [
        (429, "TooManyRequests", "too many"),
        (404, "NotFound", "not found"),
        (500, "InternalError", "unavailable"),
    ];
    for (code, reason, want) in cases {
        let (api, handle) = mocked();
        let server = tokio::spawn(serve_one(
            handle,
            status(
                code,
                reason,
                "Cannot evict pod as it would violate the pod's disruption budget.",
            ),
        ));
        let err = api
            .write(Write::Evict {
                pod: "shop/web-1".into(),
                uid: "u-1".into(),
            })
            .await
            .unwrap_err();
        let (method, uri, body) = server.await.unwrap();
        assert_eq!(method, "POST");
        assert_eq!(uri, "/api/v1/namespaces/shop/pods/web-1/eviction?");
        assert_eq!(body["kind"], "Eviction", "{body}");
        assert_eq!(body["deleteOptions"]["preconditions"]["uid"], "u-1");
        let got = match err {
            ApiError::TooManyRequests { .. } => "too many",
            ApiError::NotFound { .. } => "not found",
            ApiError::Unavailable(_) => "unavailable",
            _ => "other",
        };
        assert_eq!(got, want, "{code}");
    }
}

#[tokio::test]
async fn a_delete_carries_uid_and_resource_version_preconditions() {
    let (api, handle) = mocked();
    let server = tokio::spawn(serve_one(
        handle,
        ok(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
    ));
    let w = api
        .write(Write::Delete {
            kind: Kind::Node,
            key: "n1".into(),
            uid: "u-9".into(),
            rv: "77".into(),
        })
        .await
        .unwrap();
    let (method, uri, body) = server.await.unwrap();
    assert_eq!(
        (method.as_str(), uri.as_str()),
        ("DELETE", "/api/v1/nodes/n1?")
    );
    assert_eq!(body["preconditions"]["uid"], "u-9");
    assert_eq!(body["preconditions"]["resourceVersion"], "77");
    assert!(matches!(w, Written::Removed));
}

#[tokio::test]
async fn a_metadata_patch_sets_and_removes_labels_under_its_resource_version() {
    let (api, handle) = mocked();
    let node = json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "n1", "uid": "u", "resourceVersion": "8", "labels": {"a": "1"}}});
    let server = tokio::spawn(serve_one(handle, ok(node)));
    let mut patch = MetaPatch::default();
    patch.labels.insert("a".into(), Some("1".into()));
    patch.labels.insert("b".into(), None);
    patch.finalizers = Some(vec!["capstan.dev/termination".into()]);
    // With a finalizer change the node's resourceVersion is the precondition.
    let w = api
        .write(Write::Meta {
            kind: Kind::Node,
            name: "n1".into(),
            rv: "7".into(),
            patch,
        })
        .await
        .unwrap();
    let (method, _, body) = server.await.unwrap();
    assert_eq!(method, "PATCH");
    assert_eq!(body["metadata"]["resourceVersion"], "7");
    assert_eq!(body["metadata"]["labels"]["a"], "1");
    assert!(body["metadata"]["labels"]["b"].is_null());
    assert_eq!(body["metadata"]["finalizers"][0], "capstan.dev/termination");
    let Written::Object(meta, _) = w else {
        panic!("the node as the server returned it");
    };
    assert_eq!(meta.resource_version, "8");
}

#[test]
fn a_taint_patch_pins_the_resource_version_and_the_index_it_removes() {
    let t = |key: &str| Taint {
        key: key.into(),
        value: String::new(),
        effect: Effect::NoSchedule,
    };
    let current = vec![t("a"), t("capstan.dev/disrupted"), t("c")];
    let p = taint_patch(
        Some("12"),
        &current,
        &TaintChange::Remove("capstan.dev/disrupted".into()),
    );
    assert_eq!(
        p,
        json!([
            {"op": "replace", "path": "/metadata/resourceVersion", "value": "12"},
            {"op": "test", "path": "/spec/taints/1/key", "value": "capstan.dev/disrupted"},
            {"op": "remove", "path": "/spec/taints/1"},
        ])
    );
    let first = taint_patch(None, &[], &TaintChange::Add(t("x")));
    assert_eq!(first[0]["path"], "/spec/taints");
    let more = taint_patch(None, &current, &TaintChange::Add(t("x")));
    assert_eq!(more[0]["path"], "/spec/taints/-");
}

#[tokio::test]
async fn a_watch_that_expires_answers_gone_and_the_kind_is_listed_again() {
    let (api, mut handle) = mocked();
    // The first poll starts the watch from the listing's resourceVersion.
    let first = api.watch(Kind::Node, "100").await.unwrap();
    assert!(first.changes.is_empty());
    let (req, send) = handle.next_request().await.expect("a watch request");
    assert!(
        req.uri().to_string().contains("watch=true"),
        "{}",
        req.uri()
    );
    assert!(
        req.uri().to_string().contains("resourceVersion=100"),
        "{}",
        req.uri()
    );
    let events = [
        json!({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "n1", "uid": "u1", "resourceVersion": "101"}}}),
        json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
            "code": 410, "reason": "Expired", "message": "too old resource version"}}),
    ];
    let lines: Vec<u8> = events
        .iter()
        .flat_map(|e| {
            let mut v = serde_json::to_vec(e).unwrap();
            v.push(b'\n');
            v
        })
        .collect();
    send.send_response(Response::builder().body(Body::from(lines)).unwrap());
    // The buffered change comes first, then the expiry.
    let mut seen = Vec::new();
    let mut gone = false;
    for _ in 0..100 {
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        let since = seen
            .last()
            .map(|(rv, _): &(String, Change)| rv.clone())
            .unwrap_or_else(|| "100".to_string());
        match api.watch(Kind::Node, &since).await {
            Ok(c) => {
                for ch in c.changes {
                    seen.push((c.resource_version.clone(), ch));
                }
            }
            Err(ApiError::Gone { kind, .. }) => {
                assert_eq!(kind, Kind::Node);
                gone = true;
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(seen.len(), 1, "the node added before the expiry");
    assert!(gone, "the expiry reaches the cache as Gone");
}

#[tokio::test]
async fn a_nomination_patches_the_pods_status_and_clearing_it_sends_null() {
    // (node, the body's nominatedNodeName)
    let cases = [(Some("n-1"), json!("n-1")), (None, Value::Null)];
    for (node, want) in cases {
        let (api, handle) = mocked();
        let server = tokio::spawn(serve_one(
            handle,
            status(404, "NotFound", "pods \"web-1\" not found"),
        ));
        let err = api
            .write(Write::Nominate {
                pod: "shop/web-1".into(),
                node: node.map(String::from),
            })
            .await
            .unwrap_err();
        let (method, uri, body) = server.await.unwrap();
        assert_eq!(method, "PATCH");
        assert_eq!(uri, "/api/v1/namespaces/shop/pods/web-1/status?");
        let status = body["status"].as_object().expect("a status");
        assert_eq!(status.get("nominatedNodeName"), Some(&want), "{body}");
        assert!(matches!(err, ApiError::NotFound { .. }), "{err}");
    }
}
