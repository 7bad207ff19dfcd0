//! The layers, checked: every top-level module imports only modules of lower layers, and no two
//! source files import each other, directly or round a circle. One package keeps one build and
//! one `cargo test`; this test gives the layering a workspace of crates would give, and fails
//! with the offending file and import. ARCHITECTURE.md explains each layer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Lowest first. A module may import modules of strictly lower layers only.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "units",
            "dtype",
            "output",
            "signals",
            "python_side",
            "progress",
        ],
    ),
    (
        "inputs and PyTorch's formats",
        &["model", "environment", "explain", "cards"],
    ),
    ("arithmetic", &["estimate"]),
    ("documents", &["schema"]),
    (
        "analysis of documents, the workload plan",
        &["ledger", "workload"],
    ),
    ("runners", &["measure", "prediction"]),
    ("runner of runners", &["sweep"]),
    ("presentation", &["report"]),
    ("arguments and exit statuses", &["cli", "exit"]),
    ("commands", &["commands"]),
    ("the crate root", &["lib", "main", "layers"]),
];

/// Imports the layering does not allow yet, each with the reason; empty is the goal.
const KNOWN_EXCEPTIONS: &[(&str, &str, &str)] = &[];

/// Circles of files not yet broken, each as its sorted members; empty is the goal.
const KNOWN_CIRCLES: &[&[&str]] = &[];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
}

/// The source without comments and without its `#[cfg(test)]` part (tests may import upward).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => &text[..],
    };
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// `crate::a::b…` paths named in `code`, as segments; groups (`crate::a::{b::{self, C}, d}`)
/// are expanded, so each named module is seen.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        rest = &rest[i + "crate::".len()..];
        expand(&[], rest, &mut out);
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Reads one path (or group) at the start of `text`, prefixed by `prefix`, into `out`.
fn expand(prefix: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    let mut segs = prefix.to_vec();
    let mut rest = text;
    loop {
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        expand(&segs, group[start..i].trim(), out);
                        return;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        expand(&segs, group[start..i].trim(), out);
                        start = i + 1;
                    }
                    _ => {}
                }
            }
            return;
        }
        let end = rest
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        segs.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out.push(segs);
}

/// Every `.rs` file under `src/`, as its module path (`measure::trial`, `schema`, `lib`).
fn modules(src: &Path) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut segs: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if segs.last().is_some_and(|s| s == "mod") {
                    segs.pop();
                }
                out.insert(segs, path);
            }
        }
    }
    out
}

/// The longest known module that `path` names (a path may end in an item, not a module).
fn module_named(known: &BTreeMap<Vec<String>, PathBuf>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|m| known.contains_key(m))
}

#[test]
fn modules_import_only_lower_layers_and_no_file_imports_back() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let known = modules(&src);
    let mut upward = Vec::new();
    let mut excuses_used = BTreeSet::new();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &known {
        let top = &module[0];
        let Some(mine) = layer_of(top) else {
            panic!(
                "{}: module `{top}` is in no layer of src/layers.rs",
                path.display()
            );
        };
        for named in crate_paths(&code_of(path)) {
            let Some(target) = module_named(&known, &named) else {
                continue;
            };
            if target[0] != *top {
                let theirs = layer_of(&target[0]).unwrap_or(usize::MAX);
                let excused = KNOWN_EXCEPTIONS
                    .iter()
                    .position(|(from, to, _)| *from == module.join("::") && *to == target[0]);
                excuses_used.extend(excused);
                let excused = excused.is_some();
                if theirs >= mine && !excused {
                    upward.push(format!(
                        "{} imports crate::{} ({} is in layer `{}`, not below `{}`)",
                        path.display(),
                        named.join("::"),
                        target[0],
                        LAYERS.get(theirs).map_or("none", |l| l.0),
                        LAYERS[mine].0
                    ));
                }
            }
            if target != *module && !target.starts_with(module) && !module.starts_with(&target) {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    assert!(
        upward.is_empty(),
        "imports against the layers:\n{}",
        upward.join("\n")
    );
    let circles: Vec<_> = circles(&edges)
        .into_iter()
        .filter(|c| {
            let mut names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            names.sort();
            !KNOWN_CIRCLES.contains(
                &names
                    .iter()
                    .map(String::as_str)
                    .collect::<Vec<_>>()
                    .as_slice(),
            )
        })
        .collect();
    assert!(
        circles.is_empty(),
        "files that import each other (round a circle):\n{}",
        circles
            .iter()
            .map(|c| c
                .iter()
                .map(|m| m.join("::"))
                .collect::<Vec<_>>()
                .join(" → "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Strongly connected groups of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>) -> Vec<Vec<Vec<String>>> {
    struct State<'a> {
        edges: &'a BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
        index: BTreeMap<Vec<String>, usize>,
        low: BTreeMap<Vec<String>, usize>,
        stack: Vec<Vec<String>>,
        groups: Vec<Vec<Vec<String>>>,
    }
    fn visit(s: &mut State, v: &Vec<String>) {
        let n = s.index.len();
        s.index.insert(v.clone(), n);
        s.low.insert(v.clone(), n);
        s.stack.push(v.clone());
        for w in s.edges.get(v).into_iter().flatten() {
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut group = Vec::new();
            while let Some(w) = s.stack.pop() {
                let done = w == *v;
                group.push(w);
                if done {
                    break;
                }
            }
            if group.len() > 1 {
                s.groups.push(group);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        groups: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            visit(&mut s, v);
        }
    }
    s.groups
}

#[test]
fn the_import_scanner_sees_groups_and_nested_paths() {
    let paths = crate_paths(
        "use crate::schema::{load::{self, X}, measure::Y};\nlet x = crate::units::GIB;",
    );
    let has = |p: &[&str]| {
        paths
            .iter()
            .any(|q| q.starts_with(&p.iter().map(|s| s.to_string()).collect::<Vec<_>>()))
    };
    assert!(has(&["schema", "load"]), "{paths:?}");
    assert!(has(&["schema", "measure"]), "{paths:?}");
    assert!(has(&["units"]), "{paths:?}");
    assert!(!has(&["schema", "X"]), "{paths:?}");
}
