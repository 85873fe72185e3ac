//! Support bundles written by `kubectl skyhook debug collect`, read back.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

/// Every file of the bundle at `path`, keyed by its path under the bundle's root directory.
pub fn unpack(path: &Path) -> BTreeMap<String, Vec<u8>> {
    let file = std::fs::File::open(path).expect("open archive");
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(file));
    let mut files = BTreeMap::new();
    for entry in tar.entries().expect("tar entries") {
        let mut entry = entry.expect("tar entry");
        let name = entry
            .path()
            .expect("entry path")
            .to_string_lossy()
            .into_owned();
        let (_, rel) = name
            .split_once('/')
            .expect("entries sit under a root directory");
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes).expect("read entry");
        files.insert(rel.to_string(), bytes);
    }
    files
}
