//! The Skyhook and DeploymentPolicy custom resources.
