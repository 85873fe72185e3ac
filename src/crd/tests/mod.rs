//! File-based tests of the CRD module: generated CRDs against upstream and `deploy/crds`, and the
//! valid/invalid fixture corpora under `tests/fixtures`.

mod compat;
mod drift;
mod fixtures;
mod validate;

use std::path::{Path, PathBuf};

use serde_json::Value;

pub(super) fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

pub(super) fn fixtures_dir(kind: &str) -> PathBuf {
    manifest_dir().join("tests/fixtures").join(kind)
}

/// Every `*.yaml` file of a directory, sorted.
pub(super) fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    files.sort();
    files
}

/// The YAML documents of a file as JSON values (empty documents skipped).
pub(super) fn yaml_docs(path: &Path) -> Vec<Value> {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)
        .unwrap_or_else(|e| panic!("parsing {}: {e}", path.display()));
    docs.into_iter().filter(|d| !d.is_null()).collect()
}
