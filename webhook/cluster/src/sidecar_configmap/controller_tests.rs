use super::*;

use std::collections::BTreeMap;
use std::sync::Mutex as StdMutex;

use k8s_openapi::ByteString;

use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;

/// What admission did before the lookup and the creation were two calls:
/// the ready name, else `None` and (unless `dry_run`) a scheduled creation.
fn lookup(cms: &SidecarConfigMaps, namespace: &str, dry_run: bool) -> Option<String> {
    let name = cms.ready_name(namespace);
    if name.is_none() && !dry_run {
        cms.schedule_creation(namespace);
    }
    name
}

/// A write scope whose namespace watch has listed `selected`; the
/// webhook's own namespace is `kube-prestop`.
fn scope(selected: &[&str], metrics: &Metrics) -> WriteScope {
    let scope = WriteScope::unwatched(
        "kube-prestop.io/inject=enabled",
        ["kube-prestop".to_owned()],
        metrics.clone(),
    );
    scope.apply(&watcher::Event::Init);
    for name in selected {
        scope.apply(&watcher::Event::InitApply(namespace(name)));
    }
    scope.apply(&watcher::Event::InitDone);
    scope
}

/// A Namespace as the metadata-only watch delivers it.
fn namespace(name: &str) -> kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace> {
    kube::core::PartialObjectMeta {
        types: None,
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            ..kube::api::ObjectMeta::default()
        },
        _phantom: std::marker::PhantomData,
    }
}

fn binary(bytes: &[u8]) -> SidecarBinary {
    SidecarBinary::from_bytes(bytes.to_vec(), "amd64")
}

#[test]
fn disabled_names_nothing() {
    let d = SidecarConfigMaps::disabled();
    assert_eq!(lookup(&d, "default", false), None);
    assert_eq!(lookup(&d, "default", true), None);
    assert_eq!(d.name(), None);
    assert!(d.is_synced());
    assert!(format!("{d:?}").contains("enabled: false"));
}

// The thin I/O layer against a local HTTP stub that answers creates by
// namespace name: `ok*` 201, `dup*` 409 AlreadyExists, anything else 403.
// It says nothing about the API server's behaviour, only about which
// requests this module sends and how it reads the answers.

type Posts = Arc<StdMutex<Vec<(String, serde_json::Value)>>>;

async fn create_stub(
    State(posts): State<Posts>,
    UrlPath(namespace): UrlPath<String>,
    body: axum::body::Bytes,
) -> (StatusCode, [(&'static str, &'static str); 1], String) {
    let object: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    posts
        .lock()
        .unwrap()
        .push((namespace.clone(), object.clone()));
    let status = |code: u16, reason: &str| {
        serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "reason": reason, "code": code,
            "message": format!("{reason} in {namespace}"),
        })
        .to_string()
    };
    let (code, body) = if namespace.starts_with("ok") {
        (StatusCode::CREATED, object.to_string())
    } else if namespace.starts_with("dup") {
        (StatusCode::CONFLICT, status(409, "AlreadyExists"))
    } else {
        (StatusCode::FORBIDDEN, status(403, "Forbidden"))
    };
    (code, [("content-type", "application/json")], body)
}

async fn stub_client() -> (kube::Client, Posts) {
    let posts = Posts::default();
    let app = axum::Router::new()
        .route(
            "/api/v1/namespaces/{namespace}/configmaps",
            axum::routing::post(create_stub),
        )
        .with_state(posts.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
    (kube::Client::try_from(config).unwrap(), posts)
}

fn posts_to(posts: &Posts, namespace: &str) -> Vec<serde_json::Value> {
    posts
        .lock()
        .unwrap()
        .iter()
        .filter(|(ns, _)| ns == namespace)
        .map(|(_, o)| o.clone())
        .collect()
}

/// Feeds one watch event to `cms`.
fn observe(cms: &SidecarConfigMaps, event: watcher::Event<ConfigMap>) {
    Inner::observe(cms.inner.as_ref().unwrap(), &event);
}

/// Our object in `namespace`, as the watch would deliver it.
fn ours(cms: &SidecarConfigMaps, namespace: &str) -> ConfigMap {
    let mut cm = build_config_map(&cms.inner.as_ref().unwrap().binary, namespace);
    cm.metadata.namespace = Some(namespace.to_owned());
    cm
}

fn sync(cms: &SidecarConfigMaps, present_in: &[&str]) {
    observe(cms, watcher::Event::Init);
    for ns in present_in {
        observe(cms, watcher::Event::InitApply(ours(cms, ns)));
    }
    observe(cms, watcher::Event::InitDone);
}

fn in_flight(cms: &SidecarConfigMaps, namespace: &str) -> bool {
    let inner = cms.inner.as_ref().unwrap();
    inner.attempts.lock().unwrap().in_flight(namespace)
}

async fn until_settled(cms: &SidecarConfigMaps, namespace: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while in_flight(cms, namespace) {
        assert!(
            Instant::now() < deadline,
            "creation in {namespace} never ended"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn sample(metrics: &Metrics, result: &str) -> String {
    let series = format!(r#"kube_prestop_sidecar_configmap_creations_total{{result="{result}"}}"#);
    let text = metrics.encode().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("{series} not in\n{text}"))
}

#[tokio::test]
async fn creates_missing_config_maps_off_the_request_path() {
    let (client, posts) = stub_client().await;
    let metrics = Metrics::new();
    let b = binary(b"the sidecar");
    let everywhere = scope(&["ok-a", "dup-b", "quota-c"], &metrics);
    let cms = SidecarConfigMaps::unwatched(client, b.clone(), metrics.clone(), everywhere);
    for result in ["created", "exists", "error"] {
        assert_eq!(sample(&metrics, result), "0");
    }

    // Before the first list: nothing is ready and nothing is created.
    assert!(!cms.is_synced());
    assert_eq!(lookup(&cms, "ok-a", false), None);
    assert!(!in_flight(&cms, "ok-a"));

    sync(&cms, &["listed"]);
    assert!(cms.is_synced());
    assert_eq!(cms.name(), Some(b.name()));
    // Listed by the watch: named, no request.
    assert_eq!(lookup(&cms, "listed", false).as_deref(), Some(b.name()));
    assert_eq!(lookup(&cms, "listed", true).as_deref(), Some(b.name()));

    // Dry run: never creates.
    assert_eq!(lookup(&cms, "ok-a", true), None);
    assert!(!in_flight(&cms, "ok-a"));

    // A miss schedules one creation; repeated misses meanwhile add none.
    assert_eq!(lookup(&cms, "ok-a", false), None);
    assert!(in_flight(&cms, "ok-a"));
    for _ in 0..10 {
        let _ = lookup(&cms, "ok-a", false);
    }
    until_settled(&cms, "ok-a").await;
    // 201: ready at once, before the watch reports it.
    assert_eq!(lookup(&cms, "ok-a", false).as_deref(), Some(b.name()));
    let sent = posts_to(&posts, "ok-a");
    assert_eq!(sent.len(), 1);
    let expected = serde_json::to_value(build_config_map(&b, "ok-a")).unwrap();
    assert_eq!(sent[0], expected);
    assert_eq!(sample(&metrics, "created"), "1");

    // 409: not an error, but not ready until the watch says so; no retry
    // within the window.
    assert_eq!(lookup(&cms, "dup-b", false), None);
    until_settled(&cms, "dup-b").await;
    assert_eq!(lookup(&cms, "dup-b", false), None);
    assert!(!in_flight(&cms, "dup-b"));
    assert_eq!(posts_to(&posts, "dup-b").len(), 1);
    assert_eq!(sample(&metrics, "exists"), "1");
    // The watch reports an object of that name with other content (made
    // by someone else): it does not count.
    let mut foreign = ours(&cms, "dup-b");
    foreign.binary_data = Some(BTreeMap::from([(
        BINARY_KEY.to_owned(),
        ByteString(b"not the sidecar".to_vec()),
    )]));
    observe(&cms, watcher::Event::Apply(foreign));
    assert_eq!(lookup(&cms, "dup-b", false), None);
    // The right content in an object that is not immutable (made by
    // someone else, who could update it under the pods mounting it): it
    // does not count either.
    for immutable in [None, Some(false)] {
        let mut mutable = ours(&cms, "dup-b");
        mutable.immutable = immutable;
        observe(&cms, watcher::Event::Apply(mutable));
        assert_eq!(lookup(&cms, "dup-b", false), None, "{immutable:?}");
    }
    // Then ours.
    observe(&cms, watcher::Event::Apply(ours(&cms, "dup-b")));
    assert_eq!(lookup(&cms, "dup-b", false).as_deref(), Some(b.name()));
    // Deleted while ready: created again at once (a pod admitted just
    // before may not have mounted it yet), without waiting for a miss.
    observe(&cms, watcher::Event::Delete(ours(&cms, "dup-b")));
    assert!(
        in_flight(&cms, "dup-b"),
        "no re-creation after the deletion"
    );
    until_settled(&cms, "dup-b").await;
    assert_eq!(posts_to(&posts, "dup-b").len(), 2);

    // Refused: no retry within the window.
    assert_eq!(lookup(&cms, "quota-c", false), None);
    until_settled(&cms, "quota-c").await;
    for _ in 0..10 {
        assert_eq!(lookup(&cms, "quota-c", false), None);
    }
    assert!(!in_flight(&cms, "quota-c"));
    assert_eq!(posts_to(&posts, "quota-c").len(), 1);
    assert_eq!(sample(&metrics, "error"), "1");
    assert_eq!(sample(&metrics, "created"), "1");

    // A relist without "ok-a" drops it (deleted while the watch was down);
    // the next miss creates it again.
    sync(&cms, &["listed"]);
    assert_eq!(lookup(&cms, "ok-a", false), None);
    until_settled(&cms, "ok-a").await;
    assert_eq!(posts_to(&posts, "ok-a").len(), 2);
    assert!(format!("{cms:?}").contains(b.name()));
}

fn refusals(metrics: &Metrics, reason: &str) -> String {
    let series = format!(r#"kube_prestop_sidecar_configmap_refusals_total{{reason="{reason}"}}"#);
    let text = metrics.encode().unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .map(|v| v.trim().to_owned())
        .unwrap_or_else(|| panic!("{series} not in\n{text}"))
}

/// Waits until no creation is in flight anywhere the tests look, then a
/// little for a POST that was (wrongly) sent to reach the stub: a bounded
/// poll of the recorded POSTs, not a fixed sleep before the assertion.
async fn no_post_to(cms: &SidecarConfigMaps, posts: &Posts, namespace: &str) {
    no_post_to_more_than(cms, posts, namespace, 0).await;
}

/// Issue 25: a review for a pod in a namespace the selector does not
/// select (crafted by anyone who reaches the HTTPS port: the namespace is
/// the request's word) sends no create; a selected namespace does; an
/// excluded one never does, even when the selector matches it.
#[tokio::test]
async fn creates_only_in_selected_namespaces() {
    let (client, posts) = stub_client().await;
    let metrics = Metrics::new();
    // A selector that (wrongly) matches kube-system and the webhook's own
    // namespace: they stay excluded. The stub records every POST whatever
    // it answers, so "no POST" means no request was sent.
    let writes = scope(&["ok-selected", "kube-system", "kube-prestop"], &metrics);
    let cms = SidecarConfigMaps::unwatched(
        client,
        binary(b"the sidecar"),
        metrics.clone(),
        writes.clone(),
    );
    sync(&cms, &[]);
    let cache =
        crate::cluster_cache::ClusterCache::disconnected().with_sidecar_config_maps(cms.clone());

    // Unselected (an unlabelled namespace): answered, no POST.
    assert_eq!(lookup(&cms, "ok-unlabelled", false), None);
    cache.ensure_sidecar_config_map("ok-unlabelled", "amd64", false);
    no_post_to(&cms, &posts, "ok-unlabelled").await;
    assert_eq!(refusals(&metrics, "unselected"), "2");

    // Excluded, though the selector's watch reports them: no POST.
    for excluded in ["kube-system", "kube-prestop"] {
        cache.ensure_sidecar_config_map(excluded, "amd64", false);
        no_post_to(&cms, &posts, excluded).await;
    }
    assert_eq!(refusals(&metrics, "excluded"), "2");

    // Selected: one POST, ready.
    cache.ensure_sidecar_config_map("ok-selected", "amd64", false);
    until_settled(&cms, "ok-selected").await;
    assert_eq!(posts_to(&posts, "ok-selected").len(), 1);
    assert!(cms.ready_name("ok-selected").is_some());
    assert_eq!(sample(&metrics, "created"), "1");

    // A namespace unlabelled since (the selector watch reports its
    // deletion): its object deleted afterwards is not made again.
    writes.apply(&watcher::Event::Delete(namespace("ok-selected")));
    observe(&cms, watcher::Event::Delete(ours(&cms, "ok-selected")));
    no_post_to_more_than(&cms, &posts, "ok-selected", 1).await;

    // Labelled later: the next review's miss creates it.
    writes.apply(&watcher::Event::Apply(namespace("ok-unlabelled")));
    assert_eq!(lookup(&cms, "ok-unlabelled", false), None);
    until_settled(&cms, "ok-unlabelled").await;
    assert_eq!(posts_to(&posts, "ok-unlabelled").len(), 1);
    // Nothing but these two namespaces was ever written.
    let written: std::collections::BTreeSet<String> = posts
        .lock()
        .unwrap()
        .iter()
        .map(|(ns, _)| ns.clone())
        .collect();
    assert_eq!(
        written.into_iter().collect::<Vec<_>>(),
        ["ok-selected", "ok-unlabelled"]
    );
}

/// [`no_post_to`] allowing `most` POSTs (those made before the call).
async fn no_post_to_more_than(
    cms: &SidecarConfigMaps,
    posts: &Posts,
    namespace: &str,
    most: usize,
) {
    until_settled(cms, namespace).await;
    let deadline = Instant::now() + Duration::from_millis(300);
    while Instant::now() < deadline {
        let posted = posts_to(posts, namespace).len();
        assert!(
            posted <= most,
            "a ConfigMap was POSTed to {namespace} {posted} times, at most {most} expected"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Before the namespace watch has listed, no namespace is selected: no
/// write, even for one that will be selected.
#[tokio::test]
async fn nothing_is_created_before_the_namespace_watch_lists() {
    let (client, posts) = stub_client().await;
    let metrics = Metrics::new();
    let writes = WriteScope::unwatched("kube-prestop.io/inject=enabled", [], metrics.clone());
    let cms = SidecarConfigMaps::unwatched(
        client,
        binary(b"the sidecar"),
        metrics.clone(),
        writes.clone(),
    );
    sync(&cms, &[]);
    assert_eq!(lookup(&cms, "ok-later", false), None);
    no_post_to(&cms, &posts, "ok-later").await;
    writes.apply(&watcher::Event::Init);
    writes.apply(&watcher::Event::InitApply(namespace("ok-later")));
    writes.apply(&watcher::Event::InitDone);
    assert_eq!(lookup(&cms, "ok-later", false), None);
    until_settled(&cms, "ok-later").await;
    assert_eq!(posts_to(&posts, "ok-later").len(), 1);
}
