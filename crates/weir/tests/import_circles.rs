//! The modules of each crate can be read from the bottom up: no two modules of a crate import
//! each other, directly or through others (read from the `crate::` paths of each file, test
//! modules left out).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Circles allowed, by crate (none: the last one, a builder and its product, was untied).
const ALLOWED: &[(&str, &[&str])] = &[];

/// Module path (`a::b`) → its file, for every `.rs` file under `src`.
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(src).unwrap().with_extension("");
                let mut parts: Vec<String> = relative
                    .iter()
                    .map(|p| p.to_string_lossy().into_owned())
                    .collect();
                if matches!(
                    parts.last().map(String::as_str),
                    Some("mod" | "lib" | "main")
                ) {
                    parts.pop();
                }
                out.insert(parts.join("::"), path);
            }
        }
    }
    out
}

/// Module → the modules it names through `crate::` (not its own ancestors or descendants).
fn imports(modules: &BTreeMap<String, PathBuf>) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut graph = BTreeMap::new();
    for (module, path) in modules {
        let text = std::fs::read_to_string(path).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or_default();
        let mut named = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            let end = rest
                .find(|c: char| {
                    !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_' || c == ':')
                })
                .unwrap_or(rest.len());
            let segments: Vec<&str> = rest[..end].split("::").filter(|s| !s.is_empty()).collect();
            // The longest prefix that is a module of the crate.
            let target = (1..=segments.len())
                .rev()
                .map(|k| segments[..k].join("::"))
                .find_map(|t| modules.get_key_value(&t).map(|(k, _)| k.as_str()));
            if let Some(target) = target {
                let related = target == module
                    || module.starts_with(&format!("{target}::"))
                    || target.starts_with(&format!("{module}::"));
                if !related {
                    named.insert(target);
                }
            }
        }
        graph.insert(module.as_str(), named);
    }
    graph
}

fn reachable<'a>(graph: &BTreeMap<&'a str, BTreeSet<&'a str>>, from: &'a str) -> BTreeSet<&'a str> {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from];
    while let Some(m) = stack.pop() {
        for &next in &graph[m] {
            if seen.insert(next) {
                stack.push(next);
            }
        }
    }
    seen
}

#[test]
fn no_modules_of_a_crate_import_each_other() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut circles = Vec::new();
    for entry in std::fs::read_dir(&crates).unwrap() {
        let dir = entry.unwrap().path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let modules = modules(&src);
        let graph = imports(&modules);
        let reach: BTreeMap<&str, BTreeSet<&str>> =
            graph.keys().map(|&m| (m, reachable(&graph, m))).collect();
        let mut seen = BTreeSet::new();
        for (&m, from_m) in &reach {
            if seen.contains(m) || !from_m.contains(m) {
                continue;
            }
            let circle: Vec<&str> = from_m
                .iter()
                .copied()
                .filter(|other| reach[other].contains(m))
                .collect();
            seen.extend(circle.iter().copied());
            let allowed = ALLOWED
                .iter()
                .any(|(c, pair)| *c == name && circle.as_slice() == *pair);
            if !allowed {
                circles.push(format!("{name}: {}", circle.join(", ")));
            }
        }
    }
    assert!(
        circles.is_empty(),
        "modules that import each other:\n{}",
        circles.join("\n")
    );
}
