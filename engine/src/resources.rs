//! Resources of the injected containers: QoS class preserved, LimitRanges
//! satisfied, ResourceQuota-friendly.
//!
//! Kubernetes behaviour this relies on:
//!
//! * **QoS class** (kubelet `GetPodQOS`, mirrored by [`pod_qos`]): only `cpu`
//!   and `memory` count, over `containers` *and* `initContainers`. BestEffort
//!   when no container has a non-zero request or limit; Guaranteed when every
//!   container has non-zero cpu *and* memory limits and the summed requests
//!   equal the summed limits; Burstable otherwise. When pod-level
//!   `spec.resources` is set (PodLevelResources), it alone decides. Requests
//!   omitted next to a limit default to the limit (API defaulting), which
//!   [`pod_qos`] applies too, so pod templates classify like their pods.
//! * **LimitRanger** validates every container, init containers included,
//!   against each `type: Container` item: request ≥ `min`, limit ≤ `max`
//!   (a `max` requires a limit, a `min` requires a request) and
//!   limit / request ≤ `maxLimitRequestRatio`. Its defaulting runs *before*
//!   mutating webhooks, so the engine never relies on it: it writes explicit
//!   values that pass validation.
//! * **ResourceQuota** on `requests.*`/`limits.*` rejects a pod with any
//!   container lacking that resource: explicit requests *and* limits for both
//!   cpu and memory admit the pod under any such quota.
//! * **Sidecar accounting** (KEP-753): restartable init containers add their
//!   requests to the pod's for its whole life, so the sidecar's defaults are
//!   small; a regular init container (install) counts only as a maximum.
//!
//! Policy, per injected container, from the pod's QoS class *before* injection:
//!
//! | pod | injected container gets |
//! |---|---|
//! | Guaranteed | requests = limits = the configured *limits*, each clamped into every LimitRange's `[min, max]`: the pod stays Guaranteed |
//! | Burstable | the configured requests and limits, adjusted to the LimitRanges (below) |
//! | BestEffort, or pod-level resources set | nothing, so the class (and the pod-level budget) is untouched — unless a `type: Container` LimitRange constrains cpu or memory, or the pod sets sidecar resource annotations: then as Burstable (the pod becomes Burstable, a higher class) |
//!
//! `ephemeral-storage` is set only when a `type: Container` LimitRange bounds
//! it, whatever the class (it does not count for QoS): see
//! `ephemeral_storage`. Extended resources are never set.
//!
//! LimitRange adjustment (Burstable), for cpu and memory, item by item:
//! a request or limit below `min` is raised to `min`; one above `max` is
//! lowered to `max`; a limit above request × `maxLimitRequestRatio` is
//! lowered to it (rounded down to 1m / 1 byte). The result is then checked
//! against every item; constraints that cannot all hold (e.g. two
//! LimitRanges with disjoint ranges) give
//! [`EngineError::LimitRangeUnsatisfiable`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, LimitRange, LimitRangeItem, PodSpec, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::EngineError;
use super::config::ResourceDefaults;
use super::quantity::{self, NANO};

/// Pod QoS class (`status.qosClass`), ordered from lowest to highest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum QosClass {
    /// No cpu/memory requests or limits anywhere.
    BestEffort,
    /// Neither of the others.
    Burstable,
    /// Every container limits cpu and memory, requests equal limits.
    Guaranteed,
}

const CPU: &str = "cpu";
const MEMORY: &str = "memory";
const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
const QOS_RESOURCES: [&str; 2] = [CPU, MEMORY];

/// Parses `q`; `location` names it in the error (built only on error: this
/// runs for every quantity of every pod).
fn parse_at(q: &Quantity, location: impl FnOnce() -> String) -> Result<i128, EngineError> {
    quantity::parse(q).map_err(|_| EngineError::InvalidQuantity {
        location: location(),
        value: q.0.clone(),
    })
}

/// Adds one `ResourceRequirements` (requests defaulted from limits) to the
/// running sums; returns whether it has non-zero cpu and memory limits.
fn accumulate(
    resources: Option<&ResourceRequirements>,
    location: &dyn Fn() -> String,
    requests: &mut BTreeMap<&'static str, i128>,
    limits: &mut BTreeMap<&'static str, i128>,
) -> Result<bool, EngineError> {
    let mut limited = 0;
    for name in QOS_RESOURCES {
        let limit = resources
            .and_then(|r| r.limits.as_ref())
            .and_then(|l| l.get(name));
        let own_request = resources
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(name));
        // A request left out defaults to the limit: an error then names the
        // limit, the field as written.
        let (request, field) = match own_request {
            Some(q) => (Some(q), "requests"),
            None => (limit, "limits"),
        };
        if let Some(q) = request {
            let v = parse_at(q, || format!("{} {field}.{name}", location()))?;
            if v > 0 {
                let sum = requests.entry(name).or_insert(0);
                *sum = sum.saturating_add(v);
            }
        }
        if let Some(q) = limit {
            let v = parse_at(q, || format!("{} limits.{name}", location()))?;
            if v > 0 {
                limited += 1;
                let sum = limits.entry(name).or_insert(0);
                *sum = sum.saturating_add(v);
            }
        }
    }
    Ok(limited == QOS_RESOURCES.len())
}

/// Whether pod-level `spec.resources` sets any request or limit.
pub fn has_pod_level_resources(spec: &PodSpec) -> bool {
    spec.resources.as_ref().is_some_and(|r| {
        r.requests.as_ref().is_some_and(|m| !m.is_empty())
            || r.limits.as_ref().is_some_and(|m| !m.is_empty())
    })
}

/// The QoS class the kubelet computes for a pod with this spec (see the
/// module docs). Errors: [`EngineError::InvalidQuantity`] for an unparsable
/// cpu/memory quantity.
pub fn pod_qos(spec: &PodSpec) -> Result<QosClass, EngineError> {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    let mut guaranteed = true;
    if has_pod_level_resources(spec) {
        guaranteed = accumulate(
            spec.resources.as_ref(),
            &|| "spec.resources".to_owned(),
            &mut requests,
            &mut limits,
        )?;
    } else {
        let all = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten());
        for c in all {
            let location = || format!("container {:?}", c.name);
            if !accumulate(c.resources.as_ref(), &location, &mut requests, &mut limits)? {
                guaranteed = false;
            }
        }
    }
    if requests.is_empty() && limits.is_empty() {
        return Ok(QosClass::BestEffort);
    }
    if guaranteed && requests == limits {
        return Ok(QosClass::Guaranteed);
    }
    Ok(QosClass::Burstable)
}

/// The `type: Container` items of the LimitRanges, with the name of their
/// LimitRange (for error messages).
fn container_items(limit_ranges: &[LimitRange]) -> Vec<(String, &LimitRangeItem)> {
    limit_ranges
        .iter()
        .flat_map(|lr| {
            let name = lr.metadata.name.clone().unwrap_or_default();
            lr.spec
                .iter()
                .flat_map(|s| s.limits.iter())
                .filter(|item| item.type_ == "Container")
                .map(move |item| (name.clone(), item))
        })
        .collect()
}

/// Whether some `type: Container` item sets `min`, `max`, `default`,
/// `defaultRequest` or `maxLimitRequestRatio` for cpu or memory.
pub fn limit_ranges_constrain(limit_ranges: &[LimitRange]) -> bool {
    container_items(limit_ranges).iter().any(|(_, item)| {
        [
            &item.min,
            &item.max,
            &item.default,
            &item.default_request,
            &item.max_limit_request_ratio,
        ]
        .iter()
        .any(|m| {
            m.as_ref()
                .is_some_and(|m| QOS_RESOURCES.iter().any(|r| m.contains_key(*r)))
        })
    })
}

/// A quantity with its exact value.
#[derive(Debug, Clone)]
struct Value {
    nanos: i128,
    quantity: Quantity,
}

impl Value {
    fn parse(q: &Quantity, location: impl FnOnce() -> String) -> Result<Self, EngineError> {
        Ok(Self {
            nanos: parse_at(q, location)?,
            quantity: q.clone(),
        })
    }

    fn from_nanos(resource: &str, nanos: i128) -> Self {
        let quantity = if resource == CPU {
            quantity::format_cpu_floor(nanos)
        } else {
            quantity::format_memory_floor(nanos)
        };
        // The value written is the rounded-down one.
        let nanos = quantity::parse(&quantity).unwrap_or(nanos);
        Self { nanos, quantity }
    }
}

/// The bounds one LimitRange item puts on one resource.
struct Bounds {
    limit_range: String,
    min: Option<Value>,
    max: Option<Value>,
    ratio: Option<Value>,
}

fn bounds(limit_ranges: &[LimitRange], resource: &str) -> Result<Vec<Bounds>, EngineError> {
    container_items(limit_ranges)
        .into_iter()
        .map(|(name, item)| {
            let get = |m: &Option<BTreeMap<String, Quantity>>, field: &str| {
                m.as_ref()
                    .and_then(|m| m.get(resource))
                    .map(|q| Value::parse(q, || format!("LimitRange {name:?} {field}.{resource}")))
                    .transpose()
            };
            Ok(Bounds {
                min: get(&item.min, "min")?,
                max: get(&item.max, "max")?,
                ratio: get(&item.max_limit_request_ratio, "maxLimitRequestRatio")?,
                limit_range: name,
            })
        })
        .collect()
}

/// Fits `(request, limit)` of `resource` into the LimitRanges (see module docs).
fn fit(
    resource: &str,
    mut request: Value,
    mut limit: Value,
    equal: bool,
    all: &[Bounds],
) -> Result<(Value, Value), EngineError> {
    for b in all {
        if let Some(min) = &b.min {
            if request.nanos < min.nanos {
                request = min.clone();
            }
            if limit.nanos < min.nanos {
                limit = min.clone();
            }
        }
        if let Some(max) = &b.max {
            if limit.nanos > max.nanos {
                limit = max.clone();
            }
            if request.nanos > max.nanos {
                request = max.clone();
            }
        }
        if equal {
            request = limit.clone();
        } else if let Some(ratio) = &b.ratio {
            let allowed = request.nanos.saturating_mul(ratio.nanos) / NANO;
            if limit.nanos > allowed {
                let lowered = Value::from_nanos(resource, allowed);
                limit = if lowered.nanos < request.nanos {
                    request.clone()
                } else {
                    lowered
                };
            }
        }
    }
    for b in all {
        let fail = |detail: String| EngineError::LimitRangeUnsatisfiable {
            limit_range: b.limit_range.clone(),
            resource: resource.to_owned(),
            detail,
        };
        if let Some(min) = &b.min
            && request.nanos < min.nanos
        {
            return Err(fail(format!(
                "request {} is below min {}",
                request.quantity.0, min.quantity.0
            )));
        }
        if let Some(max) = &b.max
            && limit.nanos > max.nanos
        {
            return Err(fail(format!(
                "limit {} is above max {}",
                limit.quantity.0, max.quantity.0
            )));
        }
        if let Some(ratio) = &b.ratio
            && limit.nanos.saturating_mul(NANO) > request.nanos.saturating_mul(ratio.nanos)
        {
            return Err(fail(format!(
                "limit {} / request {} exceeds maxLimitRequestRatio {}",
                limit.quantity.0, request.quantity.0, ratio.quantity.0
            )));
        }
    }
    if request.nanos > limit.nanos {
        return Err(EngineError::LimitRangeUnsatisfiable {
            limit_range: all
                .first()
                .map(|b| b.limit_range.clone())
                .unwrap_or_default(),
            resource: resource.to_owned(),
            detail: format!(
                "request {} would exceed limit {}",
                request.quantity.0, limit.quantity.0
            ),
        });
    }
    Ok((request, limit))
}

/// What decided an injected container's resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceContext {
    /// The pod's QoS class before injection.
    pub qos: QosClass,
    /// Pod-level `spec.resources` is set.
    pub pod_level: bool,
    /// The pod asked for sidecar resources explicitly (annotations).
    pub explicit: bool,
}

/// Resources of one injected container from `defaults` (already merged with
/// annotations), following the policy of the module docs.
///
/// Returns `None` when the container must carry no resources (BestEffort or
/// pod-level pods without LimitRange constraints or explicit annotations).
/// Errors: [`EngineError::InvalidQuantity`] for unparsable values,
/// [`EngineError::LimitRangeUnsatisfiable`] when no values satisfy every
/// LimitRange.
pub fn container_resources(
    defaults: &ResourceDefaults,
    ctx: ResourceContext,
    limit_ranges: &[LimitRange],
) -> Result<Option<ResourceRequirements>, EngineError> {
    let mut requests = BTreeMap::new();
    let mut limits = BTreeMap::new();
    if let Some((request, limit)) = ephemeral_storage(limit_ranges)? {
        requests.insert(EPHEMERAL_STORAGE.to_owned(), request.quantity);
        if let Some(limit) = limit {
            limits.insert(EPHEMERAL_STORAGE.to_owned(), limit.quantity);
        }
    }
    let unconstrained = ctx.qos == QosClass::BestEffort || ctx.pod_level;
    let compute = if unconstrained && !ctx.explicit && !limit_ranges_constrain(limit_ranges) {
        &[][..]
    } else {
        &[
            (CPU, &defaults.cpu_request, &defaults.cpu_limit),
            (MEMORY, &defaults.memory_request, &defaults.memory_limit),
        ][..]
    };
    let equal = ctx.qos == QosClass::Guaranteed && !ctx.pod_level;
    for &(resource, request, limit) in compute {
        let limit = Value::parse(limit, || format!("limits.{resource}"))?;
        let request = if equal {
            limit.clone()
        } else {
            Value::parse(request, || format!("requests.{resource}"))?
        };
        let (request, limit) = fit(
            resource,
            request,
            limit,
            equal,
            &bounds(limit_ranges, resource)?,
        )?;
        requests.insert(resource.to_owned(), request.quantity);
        limits.insert(resource.to_owned(), limit.quantity);
    }
    if requests.is_empty() && limits.is_empty() {
        return Ok(None);
    }
    Ok(Some(ResourceRequirements {
        requests: Some(requests),
        limits: Some(limits),
        ..Default::default()
    }))
}

/// `ephemeral-storage` for an injected container when a `type: Container`
/// LimitRange bounds it (`min` needs a request, `max` a limit, a ratio
/// both). The values are what LimitRanger's defaulting would give — request
/// from the first `defaultRequest`, else `default`, else `min`; limit from the
/// first `default`, else `max`, else (when a `max` or ratio needs one) the
/// request, else none — then fitted like cpu and memory. It does not affect
/// the QoS class. `None` when unbounded.
fn ephemeral_storage(
    limit_ranges: &[LimitRange],
) -> Result<Option<(Value, Option<Value>)>, EngineError> {
    let all = bounds(limit_ranges, EPHEMERAL_STORAGE)?;
    if all
        .iter()
        .all(|b| b.min.is_none() && b.max.is_none() && b.ratio.is_none())
    {
        return Ok(None);
    }
    let first = |pick: fn(&LimitRangeItem) -> &Option<BTreeMap<String, Quantity>>| {
        container_items(limit_ranges)
            .into_iter()
            .find_map(|(name, item)| {
                pick(item)
                    .as_ref()
                    .and_then(|m| m.get(EPHEMERAL_STORAGE))
                    .map(|q| (name, q.clone()))
            })
    };
    let parse = |found: Option<(String, Quantity)>| {
        found
            .map(|(name, q)| {
                Value::parse(&q, || format!("LimitRange {name:?} {EPHEMERAL_STORAGE}"))
            })
            .transpose()
    };
    let request = parse(
        first(|i| &i.default_request)
            .or_else(|| first(|i| &i.default))
            .or_else(|| first(|i| &i.min)),
    )?;
    let limit = parse(first(|i| &i.default).or_else(|| first(|i| &i.max)))?;
    let needs_limit = all.iter().any(|b| b.max.is_some() || b.ratio.is_some());
    let (request, limit) = match (request, limit) {
        (Some(r), Some(l)) => (r, Some(l)),
        (Some(r), None) if needs_limit => (r.clone(), Some(r)),
        (Some(r), None) => (r, None),
        (None, Some(l)) => (l.clone(), Some(l)),
        (None, None) => return Ok(None),
    };
    match limit {
        Some(limit) => {
            let (r, l) = fit(EPHEMERAL_STORAGE, request, limit, false, &all)?;
            Ok(Some((r, Some(l))))
        }
        // Only `min`s: a request (at least every min) and no limit, since
        // exceeding an ephemeral-storage limit evicts the whole pod.
        None => {
            let request = all
                .iter()
                .filter_map(|b| b.min.clone())
                .fold(request, |r, m| if m.nanos > r.nanos { m } else { r });
            Ok(Some((request, None)))
        }
    }
}

/// QoS class of a pod after adding `added` containers as init containers
/// (used by tests to check the class is never lowered).
pub fn qos_with(spec: &PodSpec, added: &[Container]) -> Result<QosClass, EngineError> {
    let mut spec = spec.clone();
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .extend(added.iter().cloned());
    pod_qos(&spec)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;
    use k8s_openapi::api::core::v1::LimitRangeSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn rl(pairs: &[(&str, &str)]) -> Option<BTreeMap<String, Quantity>> {
        Some(
            pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), Quantity((*v).to_owned())))
                .collect(),
        )
    }

    fn container(name: &str, requests: &[(&str, &str)], limits: &[(&str, &str)]) -> Container {
        Container {
            name: name.into(),
            resources: Some(ResourceRequirements {
                requests: if requests.is_empty() {
                    None
                } else {
                    rl(requests)
                },
                limits: if limits.is_empty() { None } else { rl(limits) },
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn spec(containers: Vec<Container>, init: Vec<Container>) -> PodSpec {
        PodSpec {
            containers,
            init_containers: Some(init),
            ..Default::default()
        }
    }

    fn limit_range(name: &str, item: LimitRangeItem) -> LimitRange {
        LimitRange {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(LimitRangeSpec { limits: vec![item] }),
        }
    }

    fn item(min: &[(&str, &str)], max: &[(&str, &str)], ratio: &[(&str, &str)]) -> LimitRangeItem {
        let opt = |p: &[(&str, &str)]| if p.is_empty() { None } else { rl(p) };
        LimitRangeItem {
            type_: "Container".into(),
            min: opt(min),
            max: opt(max),
            max_limit_request_ratio: opt(ratio),
            ..Default::default()
        }
    }

    fn get(r: &ResourceRequirements, which: &str, res: &str) -> String {
        let m = if which == "requests" {
            &r.requests
        } else {
            &r.limits
        };
        m.as_ref().unwrap()[res].0.clone()
    }

    const BOTH: [(&str, &str); 2] = [("cpu", "1"), ("memory", "1Gi")];

    #[test]
    fn an_unparsable_limit_without_request_is_named_as_the_limit() {
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "work", "resources": {"limits": {"cpu": "lots"}}}]
        }))
        .unwrap();
        let e = pod_qos(&spec).unwrap_err();
        let message = e.to_string();
        assert!(message.contains("limits.cpu"), "{message}");
        assert!(!message.contains("requests.cpu"), "{message}");
        // With its own request, a bad request is named as the request.
        let spec: PodSpec = serde_json::from_value(serde_json::json!({
            "containers": [{"name": "work", "resources": {
                "requests": {"cpu": "lots"}, "limits": {"cpu": "1"}
            }}]
        }))
        .unwrap();
        let message = pod_qos(&spec).unwrap_err().to_string();
        assert!(message.contains("requests.cpu"), "{message}");
    }

    #[test]
    fn qos_classes() {
        assert_eq!(
            pod_qos(&spec(vec![container("a", &[], &[])], vec![])).unwrap(),
            QosClass::BestEffort
        );
        assert_eq!(
            pod_qos(&spec(vec![container("a", &BOTH, &BOTH)], vec![])).unwrap(),
            QosClass::Guaranteed
        );
        // Limits only: requests default to limits.
        assert_eq!(
            pod_qos(&spec(vec![container("a", &[], &BOTH)], vec![])).unwrap(),
            QosClass::Guaranteed
        );
        // Equal values written differently.
        assert_eq!(
            pod_qos(&spec(
                vec![container(
                    "a",
                    &[("cpu", "1000m"), ("memory", "1024Mi")],
                    &BOTH
                )],
                vec![]
            ))
            .unwrap(),
            QosClass::Guaranteed
        );
        // An init container without limits makes it Burstable.
        assert_eq!(
            pod_qos(&spec(
                vec![container("a", &BOTH, &BOTH)],
                vec![container("i", &[], &[])]
            ))
            .unwrap(),
            QosClass::Burstable
        );
        // Only cpu limited.
        assert_eq!(
            pod_qos(&spec(
                vec![container("a", &[("cpu", "1")], &[("cpu", "1")])],
                vec![]
            ))
            .unwrap(),
            QosClass::Burstable
        );
        assert_eq!(
            pod_qos(&spec(
                vec![container("a", &[("cpu", "500m"), ("memory", "1Gi")], &BOTH)],
                vec![]
            ))
            .unwrap(),
            QosClass::Burstable
        );
        // Extended resources do not count.
        assert_eq!(
            pod_qos(&spec(
                vec![container("a", &[("nvidia.com/gpu", "1")], &[])],
                vec![]
            ))
            .unwrap(),
            QosClass::BestEffort
        );
        // Pod-level resources decide alone.
        let mut s = spec(vec![container("a", &[], &[])], vec![]);
        s.resources = Some(ResourceRequirements {
            limits: rl(&BOTH),
            ..Default::default()
        });
        assert_eq!(pod_qos(&s).unwrap(), QosClass::Guaranteed);
        // Bad quantity: an error, never a panic.
        assert!(matches!(
            pod_qos(&spec(vec![container("a", &[("cpu", "x")], &[])], vec![])),
            Err(EngineError::InvalidQuantity { .. })
        ));
    }

    fn ctx(qos: QosClass) -> ResourceContext {
        ResourceContext {
            qos,
            pod_level: false,
            explicit: false,
        }
    }

    #[test]
    fn guaranteed_gets_requests_equal_limits_and_stays_guaranteed() {
        let s = spec(vec![container("a", &BOTH, &BOTH)], vec![]);
        let r = container_resources(&ResourceDefaults::sidecar(), ctx(QosClass::Guaranteed), &[])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "200m");
        assert_eq!(get(&r, "limits", "cpu"), "200m");
        assert_eq!(get(&r, "requests", "memory"), "256Mi");
        let added = Container {
            name: "x".into(),
            resources: Some(r),
            ..Default::default()
        };
        assert_eq!(qos_with(&s, &[added]).unwrap(), QosClass::Guaranteed);
    }

    #[test]
    fn burstable_gets_defaults() {
        let r = container_resources(&ResourceDefaults::sidecar(), ctx(QosClass::Burstable), &[])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "10m");
        assert_eq!(get(&r, "requests", "memory"), "32Mi");
        assert_eq!(get(&r, "limits", "cpu"), "200m");
        assert_eq!(get(&r, "limits", "memory"), "256Mi");
    }

    #[test]
    fn best_effort_and_pod_level_get_nothing_unless_asked() {
        let d = ResourceDefaults::sidecar();
        assert!(
            container_resources(&d, ctx(QosClass::BestEffort), &[])
                .unwrap()
                .is_none()
        );
        let pod_level = ResourceContext {
            qos: QosClass::Guaranteed,
            pod_level: true,
            explicit: false,
        };
        assert!(container_resources(&d, pod_level, &[]).unwrap().is_none());
        let explicit = ResourceContext {
            explicit: true,
            ..ctx(QosClass::BestEffort)
        };
        assert!(container_resources(&d, explicit, &[]).unwrap().is_some());
        let lr = limit_range("lr", item(&[], &[("memory", "1Gi")], &[]));
        let r = container_resources(&d, ctx(QosClass::BestEffort), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "limits", "memory"), "256Mi");
        // A LimitRange that constrains other resources only adds no cpu/memory.
        let lr = limit_range("lr", item(&[], &[("ephemeral-storage", "1Gi")], &[]));
        let r = container_resources(&d, ctx(QosClass::BestEffort), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(r.limits.as_ref().unwrap().len(), 1);
        assert_eq!(get(&r, "limits", "ephemeral-storage"), "1Gi");
        // Pod-type items do not count.
        let mut pod_item = item(&[("cpu", "1")], &[], &[]);
        pod_item.type_ = "Pod".into();
        assert!(
            container_resources(&d, ctx(QosClass::BestEffort), &[limit_range("p", pod_item)])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn limit_range_min_max_clamp() {
        let d = ResourceDefaults::sidecar();
        let lr = limit_range(
            "lr",
            item(
                &[("cpu", "50m"), ("memory", "64Mi")],
                &[("cpu", "100m"), ("memory", "128Mi")],
                &[],
            ),
        );
        let r = container_resources(&d, ctx(QosClass::Burstable), std::slice::from_ref(&lr))
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "50m");
        assert_eq!(get(&r, "limits", "cpu"), "100m");
        assert_eq!(get(&r, "requests", "memory"), "64Mi");
        assert_eq!(get(&r, "limits", "memory"), "128Mi");
        let r = container_resources(&d, ctx(QosClass::Guaranteed), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "100m");
        assert_eq!(get(&r, "limits", "cpu"), "100m");
        assert_eq!(get(&r, "requests", "memory"), "128Mi");
        // min above our limit: both raised.
        let lr = limit_range("lr", item(&[("cpu", "1")], &[], &[]));
        let r = container_resources(&d, ctx(QosClass::Burstable), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "1");
        assert_eq!(get(&r, "limits", "cpu"), "1");
        // max below our request: both lowered.
        let lr = limit_range("lr", item(&[], &[("memory", "16Mi")], &[]));
        let r = container_resources(&d, ctx(QosClass::Burstable), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "memory"), "16Mi");
        assert_eq!(get(&r, "limits", "memory"), "16Mi");
    }

    #[test]
    fn limit_range_ratio_lowers_limit() {
        let d = ResourceDefaults::sidecar();
        let lr = limit_range("lr", item(&[], &[], &[("cpu", "4"), ("memory", "1.5")]));
        let r = container_resources(&d, ctx(QosClass::Burstable), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "cpu"), "10m");
        assert_eq!(get(&r, "limits", "cpu"), "40m");
        assert_eq!(get(&r, "limits", "memory"), "48Mi");
    }

    #[test]
    fn conflicting_limit_ranges_are_an_error() {
        let d = ResourceDefaults::sidecar();
        let a = limit_range("a", item(&[("cpu", "2")], &[], &[]));
        let b = limit_range("b", item(&[], &[("cpu", "1")], &[]));
        match container_resources(&d, ctx(QosClass::Burstable), &[a, b]) {
            Err(EngineError::LimitRangeUnsatisfiable {
                limit_range,
                resource,
                ..
            }) => {
                assert_eq!(limit_range, "a");
                assert_eq!(resource, "cpu");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn ephemeral_storage_only_when_bounded() {
        let d = ResourceDefaults::sidecar();
        // Only a min: a request, no limit.
        let lr = limit_range("eph", item(&[("ephemeral-storage", "64Mi")], &[], &[]));
        let r = container_resources(&d, ctx(QosClass::BestEffort), &[lr])
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "ephemeral-storage"), "64Mi");
        assert!(r.limits.as_ref().unwrap().is_empty());
        let d = ResourceDefaults::sidecar();
        let lr = limit_range(
            "eph",
            item(
                &[("ephemeral-storage", "100Mi")],
                &[("ephemeral-storage", "2Gi")],
                &[],
            ),
        );
        // BestEffort stays without cpu/memory, but gets ephemeral-storage.
        let r = container_resources(&d, ctx(QosClass::BestEffort), std::slice::from_ref(&lr))
            .unwrap()
            .unwrap();
        assert_eq!(get(&r, "requests", "ephemeral-storage"), "100Mi");
        assert_eq!(get(&r, "limits", "ephemeral-storage"), "2Gi");
        assert!(!r.requests.as_ref().unwrap().contains_key("cpu"));
        // With defaults, LimitRanger's defaults are used.
        let mut with_default = item(&[("ephemeral-storage", "100Mi")], &[], &[]);
        with_default.default = rl(&[("ephemeral-storage", "1Gi")]);
        with_default.default_request = rl(&[("ephemeral-storage", "200Mi")]);
        let r = container_resources(
            &d,
            ctx(QosClass::Burstable),
            &[limit_range("e", with_default)],
        )
        .unwrap()
        .unwrap();
        assert_eq!(get(&r, "requests", "ephemeral-storage"), "200Mi");
        assert_eq!(get(&r, "limits", "ephemeral-storage"), "1Gi");
        assert_eq!(get(&r, "requests", "cpu"), "10m");
        // Unbounded: not set.
        let r = container_resources(&d, ctx(QosClass::Burstable), &[])
            .unwrap()
            .unwrap();
        assert!(
            !r.requests
                .as_ref()
                .unwrap()
                .contains_key("ephemeral-storage")
        );
    }

    #[test]
    fn invalid_limit_range_quantity_is_an_error() {
        let lr = limit_range("bad", item(&[("cpu", "one")], &[], &[]));
        assert!(matches!(
            container_resources(
                &ResourceDefaults::sidecar(),
                ctx(QosClass::Burstable),
                &[lr]
            ),
            Err(EngineError::InvalidQuantity { .. })
        ));
    }
}
