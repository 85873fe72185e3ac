//! The archive being built: files kept in memory (scrubbed as they come in), the pieces that
//! produced them (timing and failures), and the atomic write of the `.tar.gz` with its
//! `manifest.json` and `redaction.txt`, readable by its owner only.

use std::fmt::Display;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use flate2::Compression;
use flate2::write::GzEncoder;
use serde_json::{Value, json};

use super::scrub;

/// One part of the collection (e.g. `logs`): its timing and what in it failed.
pub struct Piece {
    name: &'static str,
    started: Instant,
    errors: Vec<Value>,
    /// Objects read only after more than one request (what and how many).
    retried: Vec<Value>,
}

impl Piece {
    pub fn start(name: &'static str) -> Piece {
        Piece {
            name,
            started: Instant::now(),
            errors: Vec::new(),
            retried: Vec::new(),
        }
    }

    /// A failure reading one named object (`pod skyhook/x container y`).
    pub fn object_failed(&mut self, object: impl Into<String>, error: impl Display) {
        self.errors
            .push(json!({"object": object.into(), "error": error.to_string()}));
    }

    /// An object read after `attempts` requests (the earlier ones failed in a way that may pass),
    /// so a bundle from a struggling cluster says so even when it holds everything.
    pub fn retried(&mut self, object: impl Into<String>, attempts: u32) {
        self.retried
            .push(json!({"object": object.into(), "attempts": attempts}));
    }

    /// A failure of a list or other request not tied to one object.
    pub fn request_failed(&mut self, request: impl Into<String>, error: impl Display) {
        self.errors
            .push(json!({"request": request.into(), "error": error.to_string()}));
    }
}

/// Owner read/write only: the archive holds cluster internals even when scrubbed.
const FILE_MODE: u32 = 0o600;

pub struct Archive {
    files: Vec<(String, Vec<u8>)>,
    pieces: Vec<Value>,
    error_files: Vec<String>,
    redact: bool,
}

impl Archive {
    /// `redact`: scrub every file added (see [`scrub`]); off only for `--no-redact`.
    pub fn new(redact: bool) -> Archive {
        Archive {
            files: Vec::new(),
            pieces: Vec::new(),
            error_files: Vec::new(),
            redact,
        }
    }

    /// Every file goes through here, so no piece can forget to scrub what it adds.
    pub fn add(&mut self, path: impl Into<String>, bytes: impl Into<Vec<u8>>) {
        let bytes = bytes.into();
        let bytes = if self.redact {
            scrub::scrub(&bytes)
        } else {
            bytes
        };
        self.files.push((path.into(), bytes));
    }

    /// Records a finished piece; its failures go to `<piece>-errors.json`.
    pub fn finish(&mut self, piece: Piece) {
        let errors_file = (!piece.errors.is_empty()).then(|| format!("{}-errors.json", piece.name));
        if let Some(file) = &errors_file {
            let text = serde_json::to_string_pretty(&piece.errors).unwrap_or_default() + "\n";
            self.add(file.clone(), text);
            self.error_files.push(file.clone());
        }
        let mut entry = json!({
            "name": piece.name,
            "durationMs": u64::try_from(piece.started.elapsed().as_millis()).unwrap_or(u64::MAX),
            "failed": errors_file.is_some(),
            "errors": piece.errors.len(),
            "errorsFile": errors_file,
        });
        if !piece.retried.is_empty() {
            entry["retried"] = Value::Array(piece.retried);
        }
        self.pieces.push(entry);
    }

    pub fn error_files(&self) -> &[String] {
        &self.error_files
    }

    /// `manifest.json`: `about` (who, what, when) plus every piece and every other file.
    pub fn manifest(&self, about: Value) -> Value {
        let files: Vec<Value> = self
            .files
            .iter()
            .map(|(path, bytes)| json!({"path": path, "size": bytes.len()}))
            .collect();
        json!({"about": about, "pieces": self.pieces, "files": files})
    }

    /// Writes `<root>/…` entries plus the manifest to `path` through a temporary file in the
    /// same directory, renamed into place, so an interrupted run never leaves a truncated
    /// archive under the requested name. Returns the archive's size.
    pub fn write(mut self, path: &Path, root: &str, about: Value) -> io::Result<u64> {
        self.add(REDACTION_FILE, redaction_note(self.redact));
        let manifest = serde_json::to_string_pretty(&self.manifest(about))? + "\n";
        // Scrubbed too: `about` carries the server URL, which may hold credentials.
        let manifest = if self.redact {
            scrub::scrub(manifest.as_bytes())
        } else {
            manifest.into_bytes()
        };
        self.files.insert(0, ("manifest.json".into(), manifest));
        let tmp = temp_path(path);
        let result = write_tar(&tmp, root, &self.files).and_then(|()| fs::rename(&tmp, path));
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result?;
        Ok(fs::metadata(path)?.len())
    }
}

fn temp_path(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "skyhook-debug".into());
    path.with_file_name(format!(".{name}.{}.tmp", std::process::id()))
}

fn write_tar(tmp: &Path, root: &str, files: &[(String, Vec<u8>)]) -> io::Result<()> {
    let mut options = OpenOptions::new();
    options.write(true).create_new(true);
    // Created 0600, not chmod-ed later: no moment where another user can open it.
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, FILE_MODE);
    let file: File = options.open(tmp)?;
    let mut tar = tar::Builder::new(GzEncoder::new(file, Compression::default()));
    let mtime = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    for (name, bytes) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(FILE_MODE);
        header.set_mtime(mtime);
        header.set_cksum();
        tar.append_data(&mut header, format!("{root}/{name}"), bytes.as_slice())?;
    }
    let mut file = tar.into_inner()?.finish()?;
    file.flush()?;
    file.sync_all()
}

/// The archive's own account of what was scrubbed.
const REDACTION_FILE: &str = "redaction.txt";

fn redaction_note(redact: bool) -> String {
    if !redact {
        return "Collected with --no-redact: NOTHING was redacted. Env values, package configMap \
                contents, logs and messages are as the cluster holds them and may contain \
                secrets.\n"
            .into();
    }
    let mut note = String::from(
        "Redaction is best effort: a secret with neither a recognisable shape nor a secret-sounding \
         name next to it (e.g. a bare password in a log line) is not found. Check before sharing.\n\n\
         Replaced in the objects (YAML):\n\
         - env values whose names look secret -> [REDACTED]\n\
         - package configMap values, ConfigMap data/binaryData -> [REDACTED sha256:<12 hex>, <n> bytes] (keys kept)\n\n\
         Replaced in every file (objects, logs, summaries, Events, error files, manifest):\n",
    );
    for line in scrub::SCRUBBED {
        note.push_str(&format!("- {line}\n"));
    }
    note.push_str(
        "\nMarkers with sha256 are the first 12 hex digits of the value's SHA-256: equal markers \
         mean equal values. Secrets (the Secret kind) are never read.\n",
    );
    note
}

/// Human size (`12.3 KiB`).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut size = bytes as f64 / 1024.0;
    let mut unit = 0;
    while size >= 1024.0 && unit + 1 < UNITS.len() {
        size /= 1024.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    #[test]
    fn manifest_lists_files_and_pieces() {
        let mut a = Archive::new(true);
        let ok = Piece::start("skyhooks");
        a.add("skyhooks/x.yaml", "kind: Skyhook\n");
        a.finish(ok);
        let mut bad = Piece::start("logs");
        bad.object_failed("pod ns/p container c", "forbidden");
        a.finish(bad);
        assert_eq!(a.error_files(), ["logs-errors.json"]);
        let m = a.manifest(json!({"pluginVersion": "0"}));
        assert_eq!(m["pieces"][0]["name"], "skyhooks");
        assert_eq!(m["pieces"][0]["failed"], false);
        assert_eq!(m["pieces"][1]["failed"], true);
        assert_eq!(m["pieces"][1]["errorsFile"], "logs-errors.json");
        assert_eq!(
            m["files"][0],
            json!({"path": "skyhooks/x.yaml", "size": 14})
        );
        assert_eq!(m["files"][1]["path"], "logs-errors.json");

        let dir = std::env::temp_dir().join(format!("skyhook-debug-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x.tar.gz");
        let size = a.write(&path, "root", json!({})).unwrap();
        assert_eq!(size, fs::metadata(&path).unwrap().len());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let names: Vec<String> = entries(&path).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "root/manifest.json",
                "root/skyhooks/x.yaml",
                "root/logs-errors.json",
                "root/redaction.txt"
            ]
        );
        assert_eq!(
            fs::read_dir(&dir).unwrap().count(),
            1,
            "temp file left behind"
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    /// Every entry's name and text, after checking its header's mode.
    fn entries(path: &Path) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(File::open(path).unwrap()));
        for entry in tar.entries().unwrap() {
            let mut entry = entry.unwrap();
            assert_eq!(entry.header().mode().unwrap(), 0o600);
            let mut text = String::new();
            entry.read_to_string(&mut text).unwrap();
            out.push((entry.path().unwrap().to_string_lossy().into_owned(), text));
        }
        out
    }

    #[test]
    fn files_are_scrubbed_unless_redaction_is_off() {
        let dir = tempfile::tempdir().unwrap();
        for redact in [true, false] {
            let mut a = Archive::new(redact);
            a.add("logs/p/c.log", "connecting with DB_PASS=hunter2\n");
            let path = dir.path().join(format!("{redact}.tar.gz"));
            a.write(&path, "r", json!({"server": "https://u:pw@api"}))
                .unwrap();
            let files = entries(&path);
            let all: String = files.iter().map(|(_, t)| t.as_str()).collect();
            assert_eq!(all.contains("hunter2"), !redact, "{all}");
            assert_eq!(all.contains("u:pw@"), !redact, "{all}");
            let note = &files.last().unwrap().1;
            assert_eq!(note.contains("best effort"), redact, "{note}");
            assert_eq!(note.contains("NOTHING was redacted"), !redact, "{note}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(human_size(10), "10 B");
        assert_eq!(human_size(2048), "2.0 KiB");
        assert_eq!(human_size(3 * 1024 * 1024 + 1), "3.0 MiB");
    }
}
