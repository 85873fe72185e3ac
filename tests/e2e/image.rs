//! The operator image, built here without a Docker engine (`deploy/image/build`): a valid OCI
//! layout and archive, the Dockerfile's entrypoint, user, environment, ports and labels, and a
//! static `/manager` that answers `--version` and runs the operator when given no arguments.
//! Needs no cluster. It packages the musl release binary already built (`.ci/run` builds it with
//! `deploy/image/build` before the suite) rather than compiling it mid-suite, and builds it only
//! when there is none (several minutes). After changing the code, run `deploy/image/build` to
//! check the image of the new binary.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read as _;
use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn target_dir() -> PathBuf {
    crate::support::image::target_dir()
}

fn sha256(data: &[u8]) -> String {
    format!("sha256:{}", skyhook::schema::sha256_hex(data, 64))
}

fn build_image() -> String {
    crate::support::image::build()
}

/// A blob of the layout, checked against its descriptor (digest, size, file name).
fn blob(layout: &Path, descriptor: &Value) -> Vec<u8> {
    let digest = descriptor["digest"].as_str().expect("digest");
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let data = std::fs::read(layout.join("blobs/sha256").join(hex))
        .unwrap_or_else(|e| panic!("blob {digest}: {e}"));
    assert_eq!(
        sha256(&data),
        digest,
        "blob content does not match its name"
    );
    assert_eq!(
        descriptor["size"].as_u64(),
        Some(data.len() as u64),
        "size of {digest}"
    );
    data
}

fn json(data: &[u8]) -> Value {
    serde_json::from_slice(data).expect("JSON")
}

/// The runtime stage of the Dockerfile: what the image config must say.
#[derive(Debug, Default)]
struct Dockerfile {
    labels: BTreeMap<String, String>,
    env: Vec<String>,
    user: String,
    entrypoint: Vec<String>,
    exposed: BTreeSet<String>,
    version: String,
}

/// Reads the instructions after the last `FROM` (only the forms this repository's Dockerfile
/// uses: `ARG K=V`, `LABEL k="v" …`, `ENV K=V`, `USER`, `EXPOSE`, JSON `ENTRYPOINT`).
fn parse_dockerfile(text: &str) -> Dockerfile {
    let mut instructions = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(line);
                instructions.push(std::mem::take(&mut current));
            }
        }
    }
    let last_from = instructions
        .iter()
        .rposition(|i| i.to_uppercase().starts_with("FROM "))
        .expect("a FROM");
    let mut args = BTreeMap::new();
    let mut d = Dockerfile::default();
    for instruction in &instructions[last_from + 1..] {
        let (word, rest) = instruction.split_once(' ').expect("instruction arguments");
        let rest = rest.trim();
        match word.to_uppercase().as_str() {
            "ARG" => {
                let (k, v) = rest.split_once('=').expect("ARG with a default");
                args.insert(format!("${{{k}}}"), v.to_string());
            }
            "LABEL" => {
                for (k, v) in key_values(rest) {
                    let v = args.iter().fold(v, |v, (var, val)| v.replace(var, val));
                    d.labels.insert(k, v);
                }
            }
            "ENV" => d.env.push(rest.to_string()),
            "USER" => d.user = rest.to_string(),
            "EXPOSE" => {
                d.exposed = rest
                    .split_whitespace()
                    .map(|p| format!("{p}/tcp"))
                    .collect()
            }
            "ENTRYPOINT" => d.entrypoint = serde_json::from_str(rest).expect("JSON ENTRYPOINT"),
            _ => {}
        }
    }
    d.version = args.remove("${VERSION}").expect("ARG VERSION");
    d
}

/// `k1="v 1" k2=v2` as pairs.
fn key_values(mut s: &str) -> Vec<(String, String)> {
    let mut pairs = Vec::new();
    while let Some((k, rest)) = s.trim_start().split_once('=') {
        let (v, rest) = match rest.strip_prefix('"') {
            Some(quoted) => quoted.split_once('"').expect("closing quote"),
            None => rest.split_once(' ').unwrap_or((rest, "")),
        };
        pairs.push((k.trim().to_string(), v.to_string()));
        s = rest;
    }
    pairs
}

/// A 64-bit little-endian ELF file without a PT_INTERP program header needs no dynamic loader
/// (a static or static-pie executable): it runs on an empty base image.
fn is_static_elf(elf: &[u8]) -> bool {
    assert_eq!(&elf[..5], b"\x7fELF\x02", "a 64-bit ELF file");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().expect("2 bytes"));
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().expect("4 bytes"));
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().expect("8 bytes")) as usize;
    let (phentsize, phnum) = (usize::from(u16_at(0x36)), usize::from(u16_at(0x38)));
    const PT_INTERP: u32 = 3;
    (0..phnum).all(|i| u32_at(phoff + i * phentsize) != PT_INTERP)
}

struct Entry {
    kind: tar::EntryType,
    mode: u32,
    link: Option<String>,
    data: Vec<u8>,
}

fn layer_entries(layer: &[u8]) -> BTreeMap<String, Entry> {
    let mut entries = BTreeMap::new();
    let mut archive = tar::Archive::new(layer);
    for entry in archive.entries().expect("layer entries") {
        let mut entry = entry.expect("layer entry");
        let header = entry.header().clone();
        assert_eq!(header.uid().expect("uid"), 0, "files are owned by root");
        assert_eq!(header.mtime().expect("mtime"), 0, "fixed timestamps");
        let name = entry.path().expect("path").to_string_lossy().into_owned();
        let link = entry
            .link_name()
            .expect("link name")
            .map(|l| l.to_string_lossy().into_owned());
        let mut data = Vec::new();
        entry.read_to_end(&mut data).expect("entry data");
        let (kind, mode) = (header.entry_type(), header.mode().expect("mode"));
        entries.insert(
            name.trim_end_matches('/').to_string(),
            Entry {
                kind,
                mode,
                link,
                data,
            },
        );
    }
    entries
}

#[test]
fn the_image_built_without_docker_matches_the_dockerfile_and_runs() {
    let _image = crate::support::image::lock();
    let printed = build_image();
    assert!(
        printed.contains("compressed") && printed.contains("ghcr.io/skyhook-rs/skyhook-operator:v"),
        "the build prints the image and its size:\n{printed}"
    );
    let out = target_dir().join("image");
    let layout = out.join("oci");

    // The layout: every blob is named by its digest, every descriptor matches its blob.
    assert_eq!(
        json(&std::fs::read(layout.join("oci-layout")).expect("oci-layout")),
        json!({"imageLayoutVersion": "1.0.0"})
    );
    let index_bytes = std::fs::read(layout.join("index.json")).expect("index.json");
    let index = json(&index_bytes);
    assert_eq!(index["schemaVersion"], 2);
    let [descriptor] = index["manifests"].as_array().expect("manifests").as_slice() else {
        panic!("one manifest in {index}");
    };
    assert_eq!(
        descriptor["mediaType"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(
        descriptor["platform"],
        json!({
            "os": "linux",
            "architecture": if cfg!(target_arch = "aarch64") { "arm64" } else { "amd64" },
        })
    );
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        descriptor["annotations"]["org.opencontainers.image.ref.name"],
        format!("v{version}")
    );
    let manifest = json(&blob(&layout, descriptor));
    assert_eq!(manifest["schemaVersion"], 2);
    assert_eq!(
        manifest["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    let config = json(&blob(&layout, &manifest["config"]));
    let [layer_descriptor] = manifest["layers"].as_array().expect("layers").as_slice() else {
        panic!("one layer in {manifest}");
    };
    assert_eq!(
        layer_descriptor["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    let layer_gz = blob(&layout, layer_descriptor);
    let mut layer = Vec::new();
    flate2::read::GzDecoder::new(layer_gz.as_slice())
        .read_to_end(&mut layer)
        .expect("gunzip the layer");
    assert_eq!(config["rootfs"]["diff_ids"], json!([sha256(&layer)]));
    for file in std::fs::read_dir(layout.join("blobs/sha256")).expect("blobs") {
        let file = file.expect("blob").path();
        let name = file
            .file_name()
            .expect("name")
            .to_string_lossy()
            .into_owned();
        let data = std::fs::read(&file).expect("read blob");
        assert_eq!(
            sha256(&data),
            format!("sha256:{name}"),
            "{}",
            file.display()
        );
    }

    // The config says what the Dockerfile says.
    let dockerfile = parse_dockerfile(
        &std::fs::read_to_string(repo().join("Dockerfile")).expect("read the Dockerfile"),
    );
    assert_eq!(dockerfile.version, version, "Dockerfile ARG VERSION");
    assert_eq!(dockerfile.entrypoint, ["/manager"]);
    assert_eq!(dockerfile.user, "65532:65532");
    let c = &config["config"];
    assert_eq!(c["Entrypoint"], json!(dockerfile.entrypoint));
    assert_eq!(c["Cmd"], Value::Null, "no arguments: the operator runs");
    assert_eq!(c["User"], dockerfile.user);
    assert_eq!(c["Env"], json!(dockerfile.env));
    let exposed: BTreeSet<String> = c["ExposedPorts"]
        .as_object()
        .expect("ExposedPorts")
        .keys()
        .cloned()
        .collect();
    assert_eq!(exposed, dockerfile.exposed);
    let labels: BTreeMap<String, String> =
        serde_json::from_value(c["Labels"].clone()).expect("Labels");
    assert_eq!(labels, dockerfile.labels);
    for key in ["source", "title", "version", "licenses", "description"] {
        assert!(
            labels.contains_key(&format!("org.opencontainers.image.{key}")),
            "label {key}: {labels:?}"
        );
    }
    assert_eq!(labels["org.opencontainers.image.version"], version);
    assert_eq!(config["os"], "linux");

    // The files: /manager, skyhook-operator on PATH for deploy/'s `command: [skyhook-operator,
    // run]`, the non-root user, a writable /tmp.
    let files = layer_entries(&layer);
    let manager = &files["manager"];
    assert!(manager.kind.is_file() && manager.mode == 0o755);
    let on_path = &files["usr/local/bin/skyhook-operator"];
    assert!(on_path.kind.is_symlink() && on_path.link.as_deref() == Some("/manager"));
    assert_eq!(dockerfile.env, ["PATH=/usr/local/bin"]);
    assert!(files["tmp"].kind.is_dir() && files["tmp"].mode == 0o1777);
    let passwd = String::from_utf8_lossy(&files["etc/passwd"].data).into_owned();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
    assert!(
        is_static_elf(&manager.data),
        "/manager needs a dynamic loader"
    );

    // The binary runs on its own: `--version`, and no arguments is `run` (here it stops at the
    // settings check, before it looks for a cluster).
    let dir = tempfile::tempdir().expect("tempdir");
    let exe = dir.path().join("manager");
    std::fs::write(&exe, &manager.data).expect("write /manager");
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let ver = output_of(Command::new(&exe).arg("--version").env_clear());
    assert!(ver.status.success(), "/manager --version: {ver:?}");
    assert_eq!(
        String::from_utf8_lossy(&ver.stdout).trim(),
        format!("skyhook-operator {version}")
    );
    let run = output_of(Command::new(&exe).env_clear().env("DEFAULT_INTERVAL", "1s"));
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    assert!(
        stderr.contains("invalid skyhook operator options: DEFAULT_INTERVAL must be at least"),
        "/manager with no arguments validates the operator's settings: {stderr}"
    );

    // The archive holds the layout, byte for byte; a second build gives the same digests.
    let archive = std::fs::read(out.join("skyhook-operator.tar")).expect("the OCI archive");
    let in_archive: BTreeMap<String, Entry> = layer_entries(&archive)
        .into_iter()
        .filter(|(_, e)| e.kind.is_file())
        .collect();
    assert!(
        in_archive.contains_key("manifest.json"),
        "docker load reads it"
    );
    for (name, entry) in &in_archive {
        assert_eq!(
            entry.data,
            std::fs::read(layout.join(name)).expect("layout file"),
            "{name}"
        );
    }
    build_image();
    assert_eq!(
        std::fs::read(layout.join("index.json")).expect("index.json"),
        index_bytes,
        "the build is reproducible"
    );
}

#[test]
fn dockerfile_parsing() {
    let d = parse_dockerfile(
        "FROM a AS b\nLABEL x=1\nFROM scratch\nARG VERSION=1.2\n# c\nLABEL a=\"b c\" \\\n  \
         v=\"${VERSION}\"\nENV P=/x\nUSER 1:2\nEXPOSE 80 81\nENTRYPOINT [\"/m\"]\n",
    );
    assert_eq!(
        d.labels,
        BTreeMap::from([
            ("a".to_string(), "b c".to_string()),
            ("v".to_string(), "1.2".to_string())
        ])
    );
    assert_eq!((d.env, d.user.as_str()), (vec!["P=/x".to_string()], "1:2"));
    assert_eq!(d.entrypoint, ["/m"]);
    assert_eq!(
        d.exposed,
        BTreeSet::from(["80/tcp".into(), "81/tcp".into()])
    );
    assert_eq!(d.version, "1.2");
}

/// `cmd`'s output. A binary just written can be "busy" for a moment: a process another test
/// thread forks meanwhile holds the write descriptor until its exec closes it.
fn output_of(cmd: &mut Command) -> std::process::Output {
    for _ in 0..50 {
        match cmd.output() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => return other.unwrap_or_else(|e| panic!("run {cmd:?}: {e}")),
        }
    }
    panic!("run {cmd:?}: the file stayed busy for 5 s")
}
