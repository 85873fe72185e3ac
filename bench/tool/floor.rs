//! The floor: a Skyhook's stage Jobs run with no operator (see the crate docs).

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, bail};
use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use skyhook::crd::DeploymentBudget;
use skyhook::crd::{Package, Skyhook};
use skyhook::jobs::{JobView, Outcome, StageJob, stage_job};
use skyhook::schema::{self, Stage};
use skyhook::settings::{Config, Settings};
use tokio::sync::Semaphore;

#[derive(clap::Args)]
pub struct Args {
    /// The Skyhook whose packages to run (it must exist; no operator may be running).
    #[arg(long)]
    skyhook: String,
    /// Nodes to run on (a label selector).
    #[arg(long)]
    selector: String,
    /// Nodes at work at once, as a percentage of the matched nodes (the legacy budget).
    #[arg(long, default_value_t = 100)]
    percent: i64,
    /// Job creations in flight at once.
    #[arg(long, default_value_t = 64)]
    parallel: usize,
    #[command(flatten)]
    settings: Settings,
}

struct Floor {
    jobs: Api<Job>,
    skyhook: Skyhook,
    packages: Vec<Package>,
    cfg: Config,
    gate: Arc<Semaphore>,
}

pub async fn run(client: Client, args: Args) -> anyhow::Result<()> {
    let cfg = args
        .settings
        .validate()
        .map_err(|e| anyhow::anyhow!("settings: {}", e.0.join("; ")))?;
    let skyhook = Api::<Skyhook>::all(client.clone())
        .get(&args.skyhook)
        .await
        .with_context(|| format!("reading Skyhook {}", args.skyhook))?;
    let packages: Vec<Package> = skyhook
        .spec
        .packages
        .iter()
        .map(|(k, p)| Package {
            name: k.clone(),
            ..p.clone()
        })
        .collect();
    if packages.iter().any(|p| !p.depends_on.is_empty()) {
        bail!("the floor runs independent packages only; drop dependsOn from the Skyhook");
    }
    let mut nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list_metadata(&ListParams::default().labels(&args.selector))
        .await?
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect();
    nodes.sort();
    if nodes.is_empty() {
        bail!("no node matches {}", args.selector);
    }
    let percent = DeploymentBudget {
        percent: Some(args.percent),
        count: None,
    };
    let budget = percent.ceiling(nodes.len() as i64).max(1) as usize;
    let floor = Arc::new(Floor {
        jobs: Api::namespaced(client.clone(), &cfg.namespace),
        skyhook,
        packages,
        cfg,
        gate: Arc::new(Semaphore::new(args.parallel.max(1))),
    });
    let started = Instant::now();
    floor.roll(nodes, budget).await?;
    println!(
        "{{\"rollout_s\":{:.3},\"budget\":{budget}}}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

impl Floor {
    /// Start up to `budget` nodes; each finished node lets the next one start.
    async fn roll(self: &Arc<Self>, nodes: Vec<String>, budget: usize) -> anyhow::Result<()> {
        let mut waiting: VecDeque<String> = nodes.into();
        // node -> packages not yet through config
        let mut active: BTreeMap<String, usize> = BTreeMap::new();
        let mut seen: HashSet<String> = HashSet::new();
        let selector = format!(
            "{}={}",
            schema::NAME_LABEL,
            self.skyhook.metadata.name.as_deref().unwrap_or_default()
        );
        let mut events = std::pin::pin!(
            watcher(
                self.jobs.clone(),
                watcher::Config::default().labels(&selector)
            )
            .default_backoff()
            .applied_objects()
        );
        self.fill(&mut waiting, &mut active, budget);
        while !active.is_empty() {
            let Some(job) = events.next().await else {
                bail!("the Job watch ended");
            };
            let job = job?;
            let Some(view) = JobView::from_job(&job, None) else {
                continue;
            };
            match view.outcome {
                Outcome::Running => continue,
                Outcome::Failed { reason, .. } => {
                    bail!(
                        "Job {} failed ({reason}); the floor expects every stage to succeed",
                        view.name
                    )
                }
                Outcome::Complete { .. } => {}
            }
            if !seen.insert(view.name.to_string()) {
                continue;
            }
            match view.stage {
                Stage::Apply => self.start(&view.package, Stage::Config, &view.node),
                _ => {
                    let left = active.entry(view.node.to_string()).or_insert(1);
                    *left -= 1;
                    if *left == 0 {
                        active.remove(view.node.as_str());
                        self.fill(&mut waiting, &mut active, budget);
                    }
                }
            }
        }
        Ok(())
    }

    fn fill(
        self: &Arc<Self>,
        waiting: &mut VecDeque<String>,
        active: &mut BTreeMap<String, usize>,
        budget: usize,
    ) {
        while active.len() < budget {
            let Some(node) = waiting.pop_front() else {
                break;
            };
            for p in &self.packages {
                self.start(&p.name, Stage::Apply, &node);
            }
            active.insert(node, self.packages.len());
        }
    }

    /// Create the Job in the background, retrying until the API server takes it.
    fn start(self: &Arc<Self>, package: &str, stage: Stage, node: &str) {
        let Some(pkg) = self.packages.iter().find(|p| p.name == package) else {
            return;
        };
        let job = stage_job(
            &StageJob {
                place: skyhook::jobs::JobPlace {
                    skyhook: &self.skyhook,
                    node,
                    attempt: 0,
                    spec_hash: "",
                    node_order: 0,
                },
                package: pkg,
                stage,
            },
            &self.cfg,
        );
        let me = self.clone();
        tokio::spawn(async move {
            let Ok(_permit) = me.gate.acquire().await else {
                return;
            };
            loop {
                match me.jobs.create(&PostParams::default(), &job).await {
                    Ok(_) => return,
                    Err(kube::Error::Api(e)) if e.code == 409 => return,
                    Err(e) => {
                        tracing::warn!(error = %e, "creating a Job failed; retrying");
                        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                    }
                }
            }
        });
    }
}
