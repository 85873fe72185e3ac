//! The crate's modules import each other in one direction only: no cycle between modules, and no
//! import against the layers `schema → crd → jobs → plan → controller` (the binaries above them).
//! A cycle or a back-import is how a functional core quietly grows I/O and how a room of the
//! shell starts to depend on its neighbour's insides; this test makes either fail at once.
//!
//! It reads the sources, not the compiler's view: every `crate::`, `super::` and `self::` path
//! outside comments and test modules, and every path that starts with the name of a child
//! module, is an edge to the deepest module the path names. A path through an item a module
//! re-exports (`pub use child::Item`) leads to the module that defines it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use regex::Regex;

/// The library's top-level modules, lowest first. A module may import from its own layer and
/// the layers before it. Small helpers with no imports of their own sit at the bottom; metrics
/// reads what the planner counts and is read by the controller.
const LAYERS: [&[&str]; 8] = [
    &["interned", "streamed", "kubeconfig"],
    &["schema"],
    &["settings", "node"],
    &["crd"],
    &["jobs"],
    &["plan"],
    &["metrics"],
    &["controller"],
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// One crate's modules, by path (`""` for the root, `plan::stage` for `src/plan/stage/mod.rs`).
struct Crate {
    modules: BTreeMap<String, String>,
}

impl Crate {
    fn load(root_file: &Path) -> Crate {
        let mut modules = BTreeMap::new();
        load_module(root_file, "", true, &mut modules);
        Crate { modules }
    }

    /// The deepest module a path names, following re-exports to where an item is defined.
    fn resolve(&self, segments: &[String], reexports: &Reexports) -> Option<String> {
        let mut found = (String::new(), 0);
        for n in 1..=segments.len() {
            let path = segments[..n].join("::");
            if self.modules.contains_key(&path) {
                found = (path, n);
            }
        }
        let (module, n) = found;
        let Some(item) = segments.get(n) else {
            return Some(module);
        };
        if let Some(source) = reexports.items.get(&(module.clone(), item.clone())) {
            return Some(source.clone());
        }
        let globbed = reexports.globs.get(&module).into_iter().flatten();
        let defines = |m: &String| {
            let re = format!(r"\b(?:fn|const|static|struct|enum|type|trait|mod)\s+{item}\b");
            Regex::new(&re).is_ok_and(|re| self.modules.get(m).is_some_and(|c| re.is_match(c)))
        };
        Some(
            globbed
                .into_iter()
                .find(|m| defines(m))
                .cloned()
                .unwrap_or(module),
        )
    }
}

/// What modules re-export: `(module, item)` → the module the item comes from, and the modules
/// whose items a module re-exports whole (`pub use x::*`).
#[derive(Default)]
struct Reexports {
    items: BTreeMap<(String, String), String>,
    globs: BTreeMap<String, Vec<String>>,
}

/// Reads a module file and its non-test children, recursively.
fn load_module(file: &Path, path: &str, dir_owner: bool, out: &mut BTreeMap<String, String>) {
    let Ok(text) = std::fs::read_to_string(file) else {
        return;
    };
    let code = strip(&text);
    let dir = if dir_owner {
        file.parent().map(Path::to_path_buf).unwrap_or_default()
    } else {
        file.with_extension("")
    };
    let decl = Regex::new(r"(?m)^\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;").unwrap();
    for c in decl.captures_iter(&code) {
        let name = &c[1];
        let child = if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}::{name}")
        };
        let flat = dir.join(format!("{name}.rs"));
        if flat.exists() {
            load_module(&flat, &child, false, out);
        } else {
            load_module(&dir.join(name).join("mod.rs"), &child, true, out);
        }
    }
    out.insert(path.to_string(), code);
}

/// The code without comments, string contents and test-only modules.
fn strip(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    let visibility = Regex::new(r"pub\s*\(\s*in\s+[^)]*\)").unwrap();
    while let Some(line) = lines.next() {
        let trimmed = line.trim_start();
        if trimmed.starts_with("#[cfg(test)]") {
            // A test-only item: a `mod x;` declaration or an inline module, which by this
            // crate's convention runs to the end of the file.
            match lines.peek() {
                Some(next) if next.trim_end().ends_with(';') => {
                    lines.next();
                    continue;
                }
                _ => break,
            }
        }
        if trimmed.starts_with("//") {
            continue;
        }
        let code = line.split(" //").next().unwrap_or(line);
        // `pub(in crate::x)` names where an item is visible, not what it imports.
        let code = visibility.replace_all(code, "pub");
        out.push_str(&strip_strings(&code));
        out.push('\n');
    }
    out
}

fn strip_strings(line: &str) -> String {
    let mut out = String::new();
    let mut in_str = false;
    let mut escaped = false;
    for ch in line.chars() {
        if in_str {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_str = false;
                out.push('"');
            }
            continue;
        }
        if ch == '"' {
            in_str = true;
        }
        out.push(ch);
    }
    out
}

/// Expands `a::{b, c::{d, e}}` into `a::b`, `a::c::d`, `a::c::e`.
fn expand(tree: &str) -> Vec<String> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        return vec![tree.to_string()];
    };
    let prefix = tree[..open].trim_end_matches("::").trim();
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, ch) in inner.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(expand)
        .map(|p| {
            if prefix.is_empty() {
                p
            } else {
                format!("{prefix}::{p}")
            }
        })
        .collect()
}

/// Turns a path as written in `module` into absolute segments, or `None` for an outside crate.
fn absolute(module: &str, path: &str, krate: &Crate) -> Option<Vec<String>> {
    let path = path.split(" as ").next().unwrap_or(path).trim();
    let mut segs: Vec<String> = path.split("::").map(|s| s.trim().to_string()).collect();
    let mut base: Vec<String> = if module.is_empty() {
        Vec::new()
    } else {
        module.split("::").map(String::from).collect()
    };
    match segs.first().map(String::as_str) {
        Some("crate") => {
            segs.remove(0);
            return Some(segs);
        }
        Some("self") => {
            segs.remove(0);
        }
        Some("super") => {
            while segs.first().map(String::as_str) == Some("super") {
                segs.remove(0);
                base.pop();
            }
        }
        Some(first) => {
            let child = if module.is_empty() {
                first.to_string()
            } else {
                format!("{module}::{first}")
            };
            if !krate.modules.contains_key(&child) {
                return None;
            }
        }
        None => return None,
    }
    base.extend(segs.into_iter().filter(|s| s != "self" && s != "*"));
    Some(base)
}

/// Every `use` tree of a module's code, expanded.
fn use_paths(code: &str) -> Vec<(bool, String)> {
    let re = Regex::new(r"(?s)\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);").unwrap();
    re.captures_iter(code)
        .flat_map(|c| {
            let public = c.get(1).is_some_and(|p| p.as_str().trim() == "pub");
            expand(&c[2].split_whitespace().collect::<Vec<_>>().join(" "))
                .into_iter()
                .map(move |p| (public, p))
        })
        .collect()
}

fn reexports(krate: &Crate) -> Reexports {
    let mut out = Reexports::default();
    for (module, code) in &krate.modules {
        for (public, path) in use_paths(code) {
            if !public {
                continue;
            }
            let glob = path.ends_with("::*");
            let Some(segs) = absolute(module, &path, krate) else {
                continue;
            };
            let Some(target) = krate.resolve(&segs, &Reexports::default()) else {
                continue;
            };
            if glob {
                out.globs.entry(module.clone()).or_default().push(target);
                continue;
            }
            let alias = path.rsplit(" as ").next().filter(|_| path.contains(" as "));
            if let Some(item) = alias.map(str::trim).or(segs.last().map(String::as_str)) {
                out.items.insert((module.clone(), item.to_string()), target);
            }
        }
    }
    out
}

/// module → the modules it imports from (itself left out).
fn edges(krate: &Crate) -> BTreeMap<String, BTreeSet<String>> {
    let reexports = reexports(krate);
    let inline = Regex::new(
        r"(?:^|[^:\w])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:::[A-Za-z_][A-Za-z0-9_]*)+)",
    )
    .unwrap();
    let uses = Regex::new(r"(?s)\buse\s+[^;]+;").unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in &krate.modules {
        let mut paths: Vec<String> = use_paths(code).into_iter().map(|(_, p)| p).collect();
        let body = uses.replace_all(code, "");
        paths.extend(inline.captures_iter(&body).map(|c| c[1].to_string()));
        let targets = out.entry(module.clone()).or_default();
        for p in paths {
            let Some(segs) = absolute(module, &p, krate) else {
                continue;
            };
            if let Some(target) = krate.resolve(&segs, &reexports)
                && target != *module
                && !(target.is_empty() && segs.is_empty())
            {
                // An item taken through a sibling's re-export depends on that sibling too: only
                // an ancestor's re-exports (a facade such as `plan::Plan`) are see-through.
                if let Some(named) = krate.resolve(&segs, &Reexports::default())
                    && named != target
                    && named != *module
                    && !is_ancestor(&named, module)
                {
                    targets.insert(named);
                }
                targets.insert(target);
            }
        }
    }
    out
}

/// `ancestor` is `module` 's parent, grandparent, … or the crate root.
fn is_ancestor(ancestor: &str, module: &str) -> bool {
    ancestor.is_empty() || module.starts_with(&format!("{ancestor}::"))
}

/// One cycle, if the graph has any.
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<String, u8>,
        stack: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        state.insert(n.to_string(), 1);
        stack.push(n.to_string());
        for m in graph.get(n).into_iter().flatten() {
            match state.get(m.as_str()) {
                Some(1) => {
                    let from = stack.iter().position(|s| s == m).unwrap_or(0);
                    let mut c = stack[from..].to_vec();
                    c.push(m.clone());
                    return Some(c);
                }
                Some(_) => {}
                None => {
                    if let Some(c) = visit(m, graph, state, stack) {
                        return Some(c);
                    }
                }
            }
        }
        stack.pop();
        state.insert(n.to_string(), 2);
        None
    }
    let mut state = BTreeMap::new();
    for n in graph.keys() {
        if !state.contains_key(n.as_str())
            && let Some(c) = visit(n, graph, &mut state, &mut Vec::new())
        {
            return Some(c);
        }
    }
    None
}

fn layer(module: &str) -> Option<usize> {
    let top = module.split("::").next().unwrap_or(module);
    LAYERS.iter().position(|l| l.contains(&top))
}

fn name(module: &str) -> &str {
    if module.is_empty() {
        "crate root"
    } else {
        module
    }
}

/// Every group of modules that import each other in a circle, with one circle through each.
fn cycles_in(krate: &Crate) -> Result<(), String> {
    let graph = edges(krate);
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.to_string()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut groups: Vec<String> = Vec::new();
    let mut placed = BTreeSet::new();
    for (n, from_n) in &reached {
        if placed.contains(*n) || !from_n.contains(*n) {
            continue;
        }
        let group: BTreeMap<String, BTreeSet<String>> = from_n
            .iter()
            .filter(|m| reached.get(m).is_some_and(|r| r.contains(*n)))
            .map(|m| {
                let inside = graph[m]
                    .iter()
                    .filter(|t| from_n.contains(*t) && reached[*t].contains(*n));
                (m.clone(), inside.cloned().collect())
            })
            .collect();
        placed.extend(group.keys().cloned());
        let circle = cycle(&group).unwrap_or_default();
        let members: Vec<&str> = group.keys().map(|m| name(m)).collect();
        let circle: Vec<&str> = circle.iter().map(|m| name(m)).collect();
        groups.push(format!(
            "{} (all of: {})",
            circle.join(" → "),
            members.join(", ")
        ));
    }
    if groups.is_empty() {
        Ok(())
    } else {
        Err(format!("import cycles:\n{}", groups.join("\n")))
    }
}

fn back_imports(krate: &Crate) -> Vec<String> {
    let mut wrong = Vec::new();
    for (from, targets) in edges(krate) {
        for to in targets {
            if let (Some(a), Some(b)) = (layer(&from), layer(&to))
                && b > a
            {
                wrong.push(format!("{from} imports {to}, a later layer"));
            }
        }
    }
    wrong
}

#[test]
fn the_library_has_no_import_cycle() {
    let krate = Crate::load(&root().join("src/lib.rs"));
    assert!(
        krate.modules.len() > 50,
        "read {} modules",
        krate.modules.len()
    );
    if let Err(e) = cycles_in(&krate) {
        panic!("{e}");
    }
}

#[test]
fn the_library_imports_only_down_its_layers() {
    let krate = Crate::load(&root().join("src/lib.rs"));
    let top: BTreeSet<&str> = krate
        .modules
        .keys()
        .filter_map(|m| m.split("::").next())
        .collect();
    let unplaced: Vec<&&str> = top
        .iter()
        .filter(|m| !m.is_empty() && layer(m).is_none())
        .collect();
    assert!(
        unplaced.is_empty(),
        "place these modules in LAYERS: {unplaced:?}"
    );
    let wrong = back_imports(&krate);
    assert!(
        wrong.is_empty(),
        "imports against the layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_binaries_have_no_import_cycle() {
    for main in ["plugin/main.rs", "operator/main.rs"] {
        let krate = Crate::load(&root().join(main));
        assert!(
            main.starts_with("operator") || krate.modules.len() > 10,
            "{main}: {} modules",
            krate.modules.len()
        );
        if let Err(e) = cycles_in(&krate) {
            panic!("{main}: {e}");
        }
    }
}

/// The checks themselves: each one fails on a crate that breaks its rule.
#[test]
fn a_cycle_and_a_back_import_are_found() {
    let krate = |modules: &[(&str, &str)]| Crate {
        modules: modules
            .iter()
            .map(|(m, c)| (m.to_string(), strip(c)))
            .collect(),
    };
    let ok = krate(&[
        ("", "pub mod plan;\npub mod controller;\n"),
        ("plan", "use crate::schema::Key;\n"),
        ("schema", ""),
        (
            "controller",
            "use crate::plan::{self, Plan};\nfn f() { plan::go() }\n",
        ),
    ]);
    assert_eq!(cycles_in(&ok), Ok(()));
    assert!(back_imports(&ok).is_empty());
    let back = krate(&[
        (
            "plan",
            "// use crate::controller::Ctx; in a comment is no import\nfn f() -> crate::controller::Ctx { todo() }\n",
        ),
        ("controller", ""),
    ]);
    assert_eq!(
        back_imports(&back),
        ["plan imports controller, a later layer"]
    );
    let circle = krate(&[
        (
            "controller",
            "mod exec;\nmod retry;\nfn f() { exec::run() }\n",
        ),
        ("controller::exec", "use super::retry::retried;\n"),
        ("controller::retry", "use super::Error;\n"),
    ]);
    let found = cycles_in(&circle).unwrap_err();
    assert!(
        found.starts_with(
            "import cycles:\ncontroller → controller::exec → controller::retry → controller"
        ),
        "{found}"
    );
    let reexported = krate(&[
        (
            "plan",
            "mod actions;\nmod stage;\npub use actions::Plan;\nfn f() { stage::step() }\n",
        ),
        ("plan::actions", ""),
        ("plan::stage", "use crate::plan::Plan;\n"),
    ]);
    assert_eq!(
        cycles_in(&reexported),
        Ok(()),
        "a re-exported item leads to its module"
    );
    let through_a_sibling = krate(&[
        (
            "app",
            "mod kube;
mod lens;
mod meta;
",
        ),
        (
            "app::meta",
            "pub struct Meta;
",
        ),
        (
            "app::kube",
            "pub use super::meta::Meta;
fn f() { super::lens::patch() }
",
        ),
        (
            "app::lens",
            "use super::kube::Meta;
pub fn patch() {}
",
        ),
    ]);
    let found = cycles_in(&through_a_sibling).unwrap_err();
    assert!(
        found.contains("app::kube → app::lens → app::kube"),
        "a sibling's re-export is an import of that sibling: {found}"
    );
}
