//! D29: a package image on a registry with a port is accepted and keeps its port (the Go
//! operator cut `host:5000/org/pkg` to `host`); an inline tag is still cut, as in v0.13, and
//! the stage runs `<repo>:<version>`.

use std::time::Duration;

use serde_json::json;
use skyhook::schema::Status;

use crate::support::{pkg, setup, skyhook};

#[tokio::test]
async fn a_registry_port_is_kept_and_a_tag_is_cut() {
    let env = setup("up-image-port", 1, &[]).await;
    let name = env.ctx.name("sk");
    let mut ported = pkg("1.0.0", json!([]));
    ported["image"] = json!("localhost:5000/org/pkg");
    let mut tagged = pkg("2.0.0", json!([]));
    tagged["image"] = json!("ghcr.io/x/pkg:1.2.3");
    env.create(&skyhook(
        &env.ctx,
        &name,
        json!({"packages": {"ported": ported, "tagged": tagged}}),
    ))
    .await;
    let sk = env
        .wait_status(&name, Status::Complete, Duration::from_secs(120))
        .await;
    assert_eq!(sk.spec.packages["ported"].image, "localhost:5000/org/pkg");
    let images: Vec<String> = env
        .jobs_of(&name)
        .await
        .iter()
        .filter_map(|j| j.spec.as_ref()?.template.spec.as_ref())
        .flat_map(|p| {
            p.init_containers
                .iter()
                .flatten()
                .chain(p.containers.iter())
        })
        .filter_map(|c| c.image.clone())
        .collect();
    for want in ["localhost:5000/org/pkg:1.0.0", "ghcr.io/x/pkg:2.0.0"] {
        assert!(images.iter().any(|i| i == want), "no {want} in {images:?}");
    }
    assert!(
        !images
            .iter()
            .any(|i| i.starts_with("localhost:") && !i.starts_with("localhost:5000/")),
        "a port was cut: {images:?}"
    );
}
