//! The engine's layers, checked from its source: a module may use modules of its own layer or
//! of the layers below, never above, and no two modules may need each other (directly or round
//! a longer circle). Circles inside one module's folder (`sql/`, `models/`) are that module's
//! business. `docs/architecture.md` explains the layers.
//!
//! A new module must be given a layer here. [`KNOWN`] lists uses that break the rules and are
//! still to be taken apart; the test fails when one of them is gone (strike it out) as it does
//! when a new one appears.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every top-level module of `core/src` (a file or a folder), by layer, lowest first.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "tenant",
            "time",
            "config",
            "egress",
            "cancel",
            "admission",
            "spool",
        ],
    ),
    ("store", &["store"]),
    (
        "catalog",
        &[
            "namespace",
            "projects",
            "tables",
            "agents",
            "datasources",
            "minds",
            "models",
            "callbacks",
            "users",
            "auth",
            "quotas",
        ],
    ),
    ("rules", &["rules"]),
    (
        "services",
        &[
            "llm",
            "connectors",
            "ml",
            "agent_loop",
            "sql",
            "chat",
            "files",
        ],
    ),
    ("engine", &["engine", "hosted", "reader", "status"]),
];

/// Uses that break the rules today, as (from, to): each is a piece of work still to do.
/// None today; the mechanism stays for a break that must land before its fix.
const KNOWN: &[(&str, &str)] = &[];

/// The source of `file` without its `#[cfg(test)]` module (tests may use anything).
fn source_without_tests(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// The top-level module `file` belongs to (`sql` for `sql/plan_cache.rs`).
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let first = relative.components().next().unwrap();
    first
        .as_os_str()
        .to_string_lossy()
        .trim_end_matches(".rs")
        .to_string()
}

/// Every `.rs` file below `dir`.
fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a piece of source names as `crate::<module>`.
fn uses_of(source: &str, modules: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in source.match_indices("crate::") {
        let rest = &source[at + "crate::".len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        if modules.contains(name.as_str()) {
            used.insert(name);
        }
        // `use crate::{a, b::c}` names several.
        if rest.starts_with('{') {
            let group = &rest[1..rest.find('}').unwrap_or(rest.len())];
            for item in group.split(',') {
                let head = item.trim().split("::").next().unwrap_or("");
                if modules.contains(head) {
                    used.insert(head.to_string());
                }
            }
        }
    }
    used
}

/// The module graph of `core/src`: module → modules it uses (itself left out).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let modules: BTreeSet<&str> = LAYERS.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let module = module_of(&src, &file);
        if module == "lib" {
            continue;
        }
        assert!(
            modules.contains(module.as_str()),
            "core/src/{module} has no layer: add it to LAYERS in core/tests/layers.rs"
        );
        let mut used = uses_of(&source_without_tests(&file), &modules);
        used.remove(&module);
        graph.entry(module).or_default().extend(used);
    }
    graph
}

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
        .unwrap()
}

/// Whether `to` reaches `from` through `graph`, so `from` → `to` closes a circle.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, to: &str, from: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![to.to_string()];
    while let Some(module) = stack.pop() {
        if module == from {
            return true;
        }
        if seen.insert(module.clone()) {
            stack.extend(graph.get(&module).into_iter().flatten().cloned());
        }
    }
    false
}

#[test]
fn modules_use_only_their_layer_and_below_and_never_each_other_round_a_circle() {
    let graph = graph();
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    // Without the known breaks, what is left must go down the layers without a circle.
    let mut rest = graph.clone();
    for (from, to) in &known {
        if let Some(uses) = rest.get_mut(from) {
            uses.remove(to);
        }
    }
    let mut broken = Vec::new();
    for (from, uses) in &rest {
        for to in uses {
            if layer_of(to) > layer_of(from) {
                broken.push(format!(
                    "{from} → {to} (up from {} to {})",
                    LAYERS[layer_of(from)].0,
                    LAYERS[layer_of(to)].0
                ));
            } else if reaches(&rest, to, from) {
                broken.push(format!(
                    "{from} → {to} (a circle: {to} uses {from}, maybe through others)"
                ));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "modules that break the layers: {broken:#?}"
    );
    // Each known break must still be one, or it is done and comes off the list.
    let gone: Vec<_> = known
        .iter()
        .filter(|(from, to)| {
            let used = graph.get(from).is_some_and(|uses| uses.contains(to));
            !(used && (layer_of(to) > layer_of(from) || reaches(&graph, to, from)))
        })
        .collect();
    assert!(
        gone.is_empty(),
        "these known breaks are gone: strike them out of KNOWN in core/tests/layers.rs: {gone:?}"
    );
}
