//! Every `§` citation in the repository resolves to a heading in `docs/reference/`, so a reader
//! can follow it without the reference's own specification.

use std::path::{Path, PathBuf};

use regex::Regex;

const SCANNED: [&str; 8] = [
    "src",
    "operator",
    "plugin",
    "tests",
    "docs",
    "deploy",
    "completions",
    "README.md",
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn files(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        let Ok(entries) = std::fs::read_dir(path) else {
            return;
        };
        for e in entries.flatten() {
            files(&e.path(), out);
        }
    } else {
        out.push(path.to_path_buf());
    }
}

/// `§N.M` numbers used as headings in docs/reference.
fn headings(re: &Regex) -> Vec<String> {
    let mut all = Vec::new();
    files(&root().join("docs/reference"), &mut all);
    let mut out = Vec::new();
    for f in all {
        let text = std::fs::read_to_string(&f).unwrap_or_default();
        for line in text.lines().filter(|l| l.starts_with('#')) {
            out.extend(re.captures_iter(line).map(|c| c[1].to_string()));
        }
    }
    out
}

/// Every citation, as (file:line, number).
fn citations(re: &Regex) -> Vec<(String, String)> {
    let mut all = Vec::new();
    for top in SCANNED {
        files(&root().join(top), &mut all);
    }
    let mut out = Vec::new();
    for f in all {
        // Binary files and snapshots of other formats read as non-UTF-8: nothing to cite there.
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        let rel = f.strip_prefix(root()).unwrap_or(&f).display().to_string();
        for (i, line) in text.lines().enumerate() {
            for c in re.captures_iter(line) {
                out.push((format!("{rel}:{}", i + 1), c[1].to_string()));
            }
        }
    }
    out
}

fn section_re() -> Regex {
    // A number ends where no further `.<digit>` or digit follows.
    Regex::new(r"§\s?(\d+(?:\.\d+)*)").expect("regex")
}

#[test]
fn every_section_citation_resolves_to_a_reference_heading() {
    let re = section_re();
    let known = headings(&re);
    assert!(
        known.len() > 50,
        "docs/reference has {} § headings",
        known.len()
    );
    let cited = citations(&re);
    assert!(cited.len() > 50, "found only {} citations", cited.len());
    let missing: Vec<String> = cited
        .iter()
        .filter(|(_, n)| !known.contains(n))
        .map(|(at, n)| format!("{at}: §{n}"))
        .collect();
    assert!(
        missing.is_empty(),
        "citations without a heading in docs/reference:\n  {}",
        missing.join("\n  ")
    );
}

#[test]
fn an_unknown_citation_is_caught() {
    let re = section_re();
    let known = headings(&re);
    // Assembled at run time, so this file itself cites nothing unknown.
    let text = format!("see {s}99.42 and {s}3.9.4", s = '\u{a7}');
    let made_up: Vec<String> = re.captures_iter(&text).map(|c| c[1].to_string()).collect();
    assert_eq!(made_up, ["99.42", "3.9.4"]);
    assert!(!known.contains(&made_up[0]));
    assert!(known.contains(&made_up[1]));
}
