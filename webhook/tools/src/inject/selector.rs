//! The webhook configuration's `objectSelector`, which the API server
//! applies before it calls the webhook at all
//! (`charts/kube-prestop/templates/mutatingwebhookconfiguration.yaml`):
//! `inject` applies it too, to a Pod's labels and to the pod template's
//! labels of a Job or CronJob (the labels the Job controller's pods get), so
//! that a pod opted out by label comes out unchanged offline as well.
//!
//! The `namespaceSelector` (namespace label `kube-prestop.io/inject=enabled`)
//! cannot be applied offline: namespace labels are not in the manifest.

use std::collections::BTreeMap;

use kube_prestop_engine::annotations;

/// Pod label the chart's webhook Deployment sets on its own pods.
pub const COMPONENT_LABEL: &str = "kube-prestop.io/component";

/// The pod labels the `objectSelector` excludes, as (key, value): its
/// `matchExpressions` are `NotIn` these values, so a pod carrying one of
/// them is never sent to the webhook. `kube-prestop.io/inject: "false"`
/// opts a pod out; `kube-prestop.io/component: webhook` marks the webhook's
/// own pods.
pub const EXCLUDED_POD_LABELS: [(&str, &str); 2] =
    [(COMPONENT_LABEL, "webhook"), (annotations::INJECT, "false")];

/// The first excluded label (key, value) the pod `labels` carry, if any.
pub fn excluded_by(
    labels: Option<&BTreeMap<String, String>>,
) -> Option<(&'static str, &'static str)> {
    let labels = labels?;
    EXCLUDED_POD_LABELS
        .into_iter()
        .find(|(key, value)| labels.get(*key).is_some_and(|v| v == value))
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn excluded_labels() {
        assert_eq!(excluded_by(None), None);
        assert_eq!(excluded_by(Some(&labels(&[("app", "x")]))), None);
        assert_eq!(
            excluded_by(Some(&labels(&[("kube-prestop.io/inject", "false")]))),
            Some(("kube-prestop.io/inject", "false"))
        );
        assert_eq!(
            excluded_by(Some(&labels(&[("kube-prestop.io/component", "webhook")]))),
            Some(("kube-prestop.io/component", "webhook"))
        );
        // Other values are not excluded (NotIn).
        assert_eq!(
            excluded_by(Some(&labels(&[("kube-prestop.io/inject", "true")]))),
            None
        );
    }

    /// The chart's `objectSelector`, cut out of the template (its lines have
    /// no template directives) and typed.
    fn chart_object_selector() -> LabelSelector {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../charts/kube-prestop/templates/mutatingwebhookconfiguration.yaml");
        let template = std::fs::read_to_string(&path).unwrap();
        let mut lines = template
            .lines()
            .skip_while(|l| l.trim() != "objectSelector:");
        let head = lines.next().expect("an objectSelector in the chart");
        let indent = head.len() - head.trim_start().len();
        let body: Vec<&str> = lines
            .take_while(|l| l.trim().is_empty() || l.len() - l.trim_start().len() > indent)
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect();
        serde_saphyr::from_str(&body.join("\n")).unwrap()
    }

    #[test]
    fn matches_the_charts_object_selector() {
        let selector = chart_object_selector();
        assert_eq!(selector.match_labels, None);
        let expressions: Vec<(String, String, Vec<String>)> = selector
            .match_expressions
            .unwrap()
            .into_iter()
            .map(|e| (e.key, e.operator, e.values.unwrap_or_default()))
            .collect();
        let ours: Vec<(String, String, Vec<String>)> = EXCLUDED_POD_LABELS
            .iter()
            .map(|(k, v)| ((*k).to_owned(), "NotIn".to_owned(), vec![(*v).to_owned()]))
            .collect();
        assert_eq!(expressions, ours);
    }
}
