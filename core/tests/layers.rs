//! The engine's layers, checked from its source. The folders of `core/src` are the layers:
//! files at the top are the foundation, then `store/`, `catalog/` (with `catalog/rules.rs`, the
//! cross-object rules, a layer of its own above the records), `services/` and `engine/`. A
//! module may use modules of its own layer or of the layers below, never above, and no two
//! modules may need each other (directly or round a longer circle). A module is a file or a
//! folder inside a layer (`catalog/models/`, `services/sql/`); circles inside one module's
//! folder are that module's business. `docs/architecture.md` explains the layers.
//!
//! A new module must be given a layer here. [`KNOWN`] lists uses that break the rules and are
//! still to be taken apart; the test fails when one of them is gone (strike it out) as it does
//! when a new one appears.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Every module of `core/src`, by layer, lowest first, named by its path below `core/src`.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "tenant",
            "time",
            "config",
            "egress",
            "memory",
            "capacity",
            "compute",
            "admission",
            "cancel",
            "spool",
            "spill",
            "wire",
            "bm25",
            "progress",
            "running",
        ],
    ),
    ("store", &["store"]),
    (
        "catalog",
        &[
            "catalog",
            "catalog::namespace",
            "catalog::projects",
            "catalog::constraints",
            "catalog::landing",
            "catalog::indexes",
            "catalog::tables",
            "catalog::views",
            "catalog::kb_index",
            "catalog::knowledge_bases",
            "catalog::agents",
            "catalog::datasources",
            "catalog::minds",
            "catalog::models",
            "catalog::callbacks",
            "catalog::users",
            "catalog::auth",
            "catalog::quotas",
            "catalog::storage",
        ],
    ),
    ("rules", &["catalog::rules"]),
    (
        "services",
        &[
            "services",
            "services::llm",
            "services::embeddings",
            "services::chunking",
            "services::reranker",
            "services::sentence_models",
            "services::connectors",
            "services::ml",
            "services::agent_loop",
            "services::sql",
            "services::chat",
            "services::parquet_pages",
            "services::files",
            "services::delivery",
        ],
    ),
    (
        "engine",
        &[
            "engine",
            "engine::hosted",
            "engine::knowledge_bases",
            "engine::reader",
            "engine::status",
            "engine::sweeper",
        ],
    ),
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

/// The folders whose files and subfolders are modules of their own; below any other folder
/// (`store/`), a file belongs to its folder's module.
const LAYER_FOLDERS: &[&str] = &["catalog", "services", "engine"];

/// The module `file` belongs to: `error` for `error.rs`, `store` for `store/schema.rs`,
/// `services::sql` for `services/sql/plan_cache.rs`, `catalog` for `catalog/mod.rs`.
fn module_of(src: &Path, file: &Path) -> String {
    let relative = file.strip_prefix(src).unwrap();
    let parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.len() > 1 && LAYER_FOLDERS.contains(&parts[0].as_str()) && parts[1] != "mod" {
        format!("{}::{}", parts[0], parts[1])
    } else {
        parts[0].clone()
    }
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

/// An identifier at the start of `text`.
fn ident(text: &str) -> &str {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    &text[..end]
}

/// The module a path below `crate::` names: its longest known prefix (`catalog::projects` for
/// `catalog::projects::Project`).
fn module_named(path: &[&str], modules: &BTreeSet<&str>) -> Option<String> {
    (1..=path.len().min(2))
        .rev()
        .map(|n| path[..n].join("::"))
        .find(|name| modules.contains(name.as_str()))
}

/// The modules a piece of source names as `crate::…`, groups (`crate::catalog::{a, b}`) included.
fn uses_of(source: &str, modules: &BTreeSet<&str>) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    for (at, _) in source.match_indices("crate::") {
        let mut rest = &source[at + "crate::".len()..];
        let mut path = Vec::new();
        loop {
            let name = ident(rest);
            if name.is_empty() {
                break;
            }
            path.push(name);
            rest = &rest[name.len()..];
            match rest.strip_prefix("::") {
                Some(after) => rest = after,
                None => break,
            }
        }
        if let Some(group) = rest.strip_prefix('{') {
            for item in group[..group.find('}').unwrap_or(group.len())].split(',') {
                let mut inner = path.clone();
                inner.extend(item.trim().split("::").map(ident));
                used.extend(module_named(&inner, modules));
            }
        } else {
            used.extend(module_named(&path, modules));
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
            "module {module} of core/src has no layer: add it to LAYERS in core/tests/layers.rs"
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
