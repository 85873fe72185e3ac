//! Issue 37, deliver 6: the package ConfigMaps of versions no longer in the spec are deleted
//! (the reference deletes them in the pass that writes the new ones; here they used to pile up
//! until the Skyhook was deleted).

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use skyhook::schema::{self, Status};

use crate::support::{pkg, setup, skyhook};

#[tokio::test]
async fn configmaps_of_old_versions_and_removed_packages_are_deleted() {
    let env = setup("up-stale-cms", 1, &[]).await;
    let cms: Api<ConfigMap> = Api::namespaced(env.ctx.client.clone(), &env.ctx.ns);
    let sk = env.ctx.name("sk");
    let with_config = |version: &str| {
        let mut p = pkg(version, json!([]));
        p["configMap"] = json!({"a.conf": version});
        p
    };
    env.create(&skyhook(
        &env.ctx,
        &sk,
        json!({"packages": {"conf": with_config("1.0.0"), "other": with_config("1.0.0")}}),
    ))
    .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
    let name = |p: &str, v: &str| schema::package_configmap_name(&sk, p, v);
    for p in ["conf", "other"] {
        assert!(cms.get_opt(&name(p, "1.0.0")).await.expect("get").is_some());
    }

    // conf 1.0.0 -> 1.1.0, other removed.
    env.skyhooks
        .patch(
            &sk,
            &PatchParams::default(),
            &Patch::Merge(&json!({"spec": {"packages": {
                "conf": with_config("1.1.0"), "other": null}}})),
        )
        .await
        .expect("bump conf, remove other");
    env.ctx
        .wait_for(
            "the stale ConfigMaps gone",
            Duration::from_secs(120),
            || async {
                let old = cms.get_opt(&name("conf", "1.0.0")).await.ok()?;
                let removed = cms.get_opt(&name("other", "1.0.0")).await.ok()?;
                let new = cms.get_opt(&name("conf", "1.1.0")).await.ok()?;
                (old.is_none() && removed.is_none() && new.is_some()).then_some(())
            },
        )
        .await;
    env.wait_status(&sk, Status::Complete, Duration::from_secs(120))
        .await;
}
