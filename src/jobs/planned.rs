//! A Job a pass decided to create, held from the moment it is built as the JSON that will be
//! sent. A built `Job` is five or six times the size of its JSON (each container and volume
//! carries dozens of empty fields inline): a pass at a thousand nodes plans up to 200 of them,
//! and they were the largest thing alive at the operator's peak.

use k8s_openapi::api::batch::v1::Job;

use super::JobView;
use crate::schema;

#[derive(Debug, Clone)]
pub struct PlannedJob {
    /// What the planner sees of the Job while it is on its way (and what adoption compares).
    pub view: JobView,
    body: Vec<u8>,
}

impl PlannedJob {
    /// `None` for a Job without the stage labels and annotations (never one of the builders').
    pub fn new(job: &Job) -> Option<PlannedJob> {
        let view = JobView::from_job(job, None)?;
        let body = serde_json::to_vec(job).ok()?;
        Some(PlannedJob { view, body })
    }

    pub fn name(&self) -> &str {
        &self.view.name
    }

    pub fn node(&self) -> &str {
        &self.view.node
    }

    /// The JSON to send.
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The Job as built (decoded again: for inspection and tests, not on the write path).
    pub fn job(&self) -> Result<Job, serde_json::Error> {
        serde_json::from_slice(&self.body)
    }

    /// The Job as an object of `api` writes it: its keys under that API's prefix, owned by the
    /// object of that kind. The view keeps the canonical keys the planner reads.
    pub fn localize(&mut self, api: schema::Api) -> Result<(), serde_json::Error> {
        if api == self.view.api {
            return Ok(());
        }
        let mut job = self.job()?;
        super::localize::localize_job(&mut job, api);
        self.body = serde_json::to_vec(&job)?;
        self.view.api = api;
        Ok(())
    }

    /// Records `version` as the node's resourceVersion that stores this stage
    /// ([`schema::NODE_VERSION_ANNOTATION`]), in the body and the view.
    pub fn stamp_node_version(&mut self, version: &str) -> Result<(), serde_json::Error> {
        let api = self.view.api;
        let key = api.local(schema::NODE_VERSION_ANNOTATION);
        let key = key.as_ref();
        // The view read the annotation when the Job was built; as text it is the number's.
        let old = self.view.node_version.map(|v| v.to_string());
        if old.as_deref() == Some(version) {
            return Ok(());
        }
        let replaced = old.as_deref().and_then(|old| {
            let from = annotation_bytes(key, old).ok()?;
            let to = annotation_bytes(key, version).ok()?;
            replace_once(&self.body, &from, &to)
        });
        self.body = match replaced {
            Some(body) => body,
            // Absent, not a number, or not found exactly once as serialised: go through the
            // object.
            None => {
                let mut job = self.job()?;
                job.metadata
                    .annotations
                    .get_or_insert_default()
                    .insert(key.to_string(), version.to_string());
                serde_json::to_vec(&job)?
            }
        };
        self.view.node_version = version.parse().ok();
        Ok(())
    }
}

/// `"key":"value"` as serde_json writes a map entry.
fn annotation_bytes(key: &str, value: &str) -> Result<Vec<u8>, serde_json::Error> {
    let mut out = serde_json::to_vec(key)?;
    out.push(b':');
    out.extend(serde_json::to_vec(value)?);
    Ok(out)
}

/// `body` with its only occurrence of `from` replaced by `to`; `None` unless there is exactly one.
fn replace_once(body: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let mut hits = body
        .windows(from.len())
        .enumerate()
        .filter(|(_, w)| *w == from);
    let (at, _) = hits.next()?;
    if hits.next().is_some() {
        return None;
    }
    let mut out = Vec::with_capacity(body.len() - from.len() + to.len());
    out.extend_from_slice(&body[..at]);
    out.extend_from_slice(to);
    out.extend_from_slice(&body[at + from.len()..]);
    Some(out)
}

/// A Job with just what makes it one of ours (a stage of package `pkg` 1.0.0 of Skyhook `sk`,
/// attempt 0) plus `annotations`: for the tests of whatever holds planned Jobs.
#[cfg(test)]
pub fn minimal_job(name: &str, node: &str, annotations: serde_json::Value) -> Job {
    let pkg = schema::PackageAnnotation {
        name: "pkg".into(),
        version: "1.0.0".into(),
        skyhook: "sk".into(),
        stage: schema::Stage::Apply,
        image: "img".into(),
        container_sha: None,
        invalid: false,
    };
    let mut a = serde_json::json!({
        schema::PACKAGE_ANNOTATION: pkg.to_annotation(),
        schema::NODE_ANNOTATION: node,
        schema::ATTEMPT_ANNOTATION: "0",
    });
    if let (Some(a), Some(extra)) = (a.as_object_mut(), annotations.as_object()) {
        a.extend(extra.clone());
    }
    serde_json::from_value(
        serde_json::json!({"metadata": {"name": name, "annotations": a},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .expect("job")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn job(annotations: serde_json::Value) -> Job {
        minimal_job("j", "n1", annotations)
    }

    #[test]
    fn the_body_is_the_job_and_the_view_reads_it() {
        let j = job(json!({}));
        let p = PlannedJob::new(&j).expect("planned");
        assert_eq!(p.job().expect("decodes"), j);
        assert_eq!((p.name(), p.node()), ("j", "n1"));
        assert!(
            PlannedJob::new(&Job::default()).is_none(),
            "not one of ours"
        );
    }

    #[test]
    fn stamping_the_node_version_changes_only_that_annotation() {
        let key = schema::NODE_VERSION_ANNOTATION;
        // (case, annotation before, stamped)
        let cases = [
            ("replaced in place", Some("17"), "42"),
            ("same value", Some("42"), "42"),
            ("absent: added", None, "42"),
            ("not a number: through the object", Some("n1"), "43"),
            ("not as a number prints it", Some("007"), "43"),
        ];
        for (case, before, version) in cases {
            let extra = before.map_or_else(|| json!({}), |b| json!({ key: b }));
            let mut p = PlannedJob::new(&job(extra.clone())).expect("planned");
            p.stamp_node_version(version).expect("stamped");
            let mut want = job(extra);
            want.metadata
                .annotations
                .get_or_insert_default()
                .insert(key.to_string(), version.to_string());
            assert_eq!(p.job().expect("decodes"), want, "{case}");
            assert_eq!(p.view.node_version, version.parse().ok(), "{case}");
        }
    }

    #[test]
    fn replace_once_needs_exactly_one_occurrence() {
        assert_eq!(
            replace_once(b"a-x-b", b"x", b"yy"),
            Some(b"a-yy-b".to_vec())
        );
        assert_eq!(replace_once(b"x-x", b"x", b"y"), None);
        assert_eq!(replace_once(b"abc", b"x", b"y"), None);
    }
}
