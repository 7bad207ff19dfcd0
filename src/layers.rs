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

/// The source without comments and without its `#[cfg(test)]` items (tests may import upward):
/// each such item is cut from its attribute to its `;` or its closing brace, and the code after
/// it is kept (a test module in the middle of a file hides nothing that follows it).
fn code_of(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut out = String::new();
    let mut rest = &code[..];
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        rest = &rest[i + "#[cfg(test)]".len()..];
        rest = &rest[item_end(rest)..];
    }
    out.push_str(rest);
    out
}

/// Where the item at the start of `code` ends: after its first `;` outside braces, or after the
/// brace that closes its first `{`. String and character literals are skipped, so a `'{'` or a
/// `"}"` in them does not count.
fn item_end(code: &str) -> usize {
    let bytes = code.as_bytes();
    let (mut i, mut depth) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            // A character literal ('{', '\'', '\\'); a lifetime ('a) has no closing quote.
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < bytes.len() && bytes[i] != b'\'' {
                    i += 1;
                }
            }
            b'{' => depth += 1,
            b'}' => {
                depth = depth.saturating_sub(1);
                if depth == 0 {
                    return i + 1;
                }
            }
            b';' if depth == 0 => return i + 1,
            _ => {}
        }
        i += 1;
    }
    code.len()
}

/// `crate::a::b…` paths named in `code`, as segments; groups (`crate::a::{b::{self, C}, d}`)
/// are expanded, so each named module is seen. `super::` and `self::` paths are resolved from
/// `module`, the file's own module (`mod.rs` files are their folder's module).
fn crate_paths_from(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    for (at, _) in code.match_indices("crate::") {
        if !code[..at].ends_with(ident) {
            expand(&[], &code[at + "crate::".len()..], &mut out);
        }
    }
    for start in ["super::", "self::"] {
        for (at, _) in code.match_indices(start) {
            if code[..at].ends_with(ident) {
                continue;
            }
            let mut base = module.to_vec();
            let mut rest = &code[at..];
            if let Some(r) = rest.strip_prefix("self::") {
                rest = r;
            }
            while let Some(r) = rest.strip_prefix("super::") {
                if base.pop().is_none() {
                    break;
                }
                rest = r;
            }
            expand(&base, rest, &mut out);
        }
    }
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// `crate::` paths only (what the scanner's own test checks).
#[cfg(test)]
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    crate_paths_from(code, &[])
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
    files_by_module(src, "rs", "mod")
}

/// Every file ending in `.EXT` under `root`, by module path: the path's components without the
/// extension, a folder's own file (`mod.rs`, `__init__.py`: `index`) being the folder.
fn files_by_module(root: &Path, ext: &str, index: &str) -> BTreeMap<Vec<String>, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == ext) {
                let rel = path.strip_prefix(root).unwrap().with_extension("");
                let mut segs: Vec<String> = rel
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                if segs.last().is_some_and(|s| s == index) {
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
        for named in crate_paths_from(&code_of(path), module) {
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

#[test]
fn super_and_self_paths_are_resolved_and_test_items_cut_only() {
    let module: Vec<String> = ["report", "export", "svg"].map(String::from).to_vec();
    let code = "use super::html::escape;\nuse self::inner::X;\nuse super::super::fiche;\n\
                #[cfg(test)]\nmod tests { fn f() { let c = '{'; let s = \"}\"; } }\n\
                use crate::units::GIB;";
    let paths = crate_paths_from(code, &module);
    let joined: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
    for want in [
        "report::export::html::escape",
        "report::export::svg::inner",
        "report::fiche",
        "units",
    ] {
        assert!(joined.iter().any(|j| j == want), "{want}: {joined:?}");
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("x.rs");
    std::fs::write(
        &file,
        "use a;\n#[cfg(test)]\nmod tests { use crate::up; const C: char = '}'; }\nuse crate::after;\n#[cfg(test)]\nuse crate::up2;\nfn g() {}",
    )
    .unwrap();
    let code = code_of(&file);
    assert!(
        code.contains("crate::after") && code.contains("fn g()"),
        "{code}"
    );
    assert!(!code.contains("crate::up"), "{code}");
}

/// The modules of the package one Python file imports, wherever the statement stands (an import
/// inside a function closes a circle as surely as one at the top): `from . import a`,
/// `from .x import y`, `from ..x import y`, `import iteragpu.x`, `from iteragpu.x import y`.
fn python_imports(
    code: &str,
    module: &[String],
    is_package: bool,
    known: &BTreeMap<Vec<String>, PathBuf>,
) -> Vec<Vec<String>> {
    // The package a relative import starts from: the module's own for `__init__.py`.
    let package: Vec<String> = if is_package {
        module.to_vec()
    } else {
        module[..module.len().saturating_sub(1)].to_vec()
    };
    let mut out = Vec::new();
    for line in code.lines().map(str::trim) {
        let (from, names) = if let Some(rest) = line.strip_prefix("from ") {
            let Some((from, names)) = rest.split_once(" import ") else {
                continue;
            };
            (from.trim(), names)
        } else if let Some(rest) = line.strip_prefix("import ") {
            (rest.split([' ', ',']).next().unwrap_or(""), "")
        } else {
            continue;
        };
        let base = if let Some(rel) = from.strip_prefix('.') {
            let ups = rel.chars().take_while(|c| *c == '.').count();
            let mut base = package.clone();
            for _ in 0..ups {
                base.pop();
            }
            base.extend(
                rel[ups..]
                    .split('.')
                    .filter(|s| !s.is_empty())
                    .map(String::from),
            );
            base
        } else if let Some(abs) = from
            .strip_prefix("iteragpu")
            .filter(|r| r.is_empty() || r.starts_with('.'))
        {
            abs.split('.')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        } else {
            continue;
        };
        // `from . import a, b as c`: each name is a module when one has that name.
        let mut named = false;
        for name in names.trim_matches(['(', ')', ' ']).split(',') {
            let name = name.split_whitespace().next().unwrap_or("");
            let mut m = base.clone();
            m.push(name.to_string());
            if known.contains_key(&m) {
                out.push(m);
                named = true;
            }
        }
        if !named {
            out.push(base);
        }
    }
    out
}

#[test]
fn python_modules_import_each_other_round_no_circle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("python/iteragpu");
    let known = files_by_module(&root, "py", "__init__");
    assert!(known.len() > 20, "{} modules", known.len());
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for (module, path) in &known {
        let code = std::fs::read_to_string(path).unwrap();
        let is_package = path.file_name().is_some_and(|n| n == "__init__.py");
        for target in python_imports(&code, module, is_package, &known) {
            if known.contains_key(&target)
                && !target.starts_with(module)
                && !module.starts_with(&target)
            {
                edges.entry(module.clone()).or_default().insert(target);
            }
        }
    }
    let found = circles(&edges);
    assert!(
        found.is_empty(),
        "Python modules that import each other (round a circle):\n{}",
        found
            .iter()
            .map(|c| c
                .iter()
                .map(|m| m.join("."))
                .collect::<Vec<_>>()
                .join(" → "))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn python_relative_imports_are_resolved() {
    let known: BTreeMap<Vec<String>, PathBuf> = [
        vec!["channel"],
        vec!["ranks"],
        vec!["predict"],
        vec!["predict", "tracker"],
        vec!["names"],
    ]
    .into_iter()
    .map(|m| (m.into_iter().map(String::from).collect(), PathBuf::new()))
    .collect();
    let module: Vec<String> = vec!["predict".into(), "tracker".into()];
    let code = "from .. import names\n    from ..ranks import connect\nfrom iteragpu import channel\nimport torch\n";
    let got: Vec<String> = python_imports(code, &module, false, &known)
        .iter()
        .map(|m| m.join("."))
        .collect();
    assert_eq!(got, ["names", "ranks", "channel"]);
}
