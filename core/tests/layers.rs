//! The engine's layers, checked from its source. The folders of `core/src` are the layers:
//! files at the top are the foundation, then `store/`, `catalog/` (with `catalog/rules.rs`, the
//! cross-object rules, a layer of its own above the records), `services/`, `sql/`, `ai/` and
//! `engine/`. A module may use modules of its own layer or of the layers below, never above,
//! and no two modules may need each other (directly or round a longer circle). A module is a
//! file or a folder inside a layer (`catalog/models/`, `ai/models/`, `sql/planning/`); `sql/`'s
//! parts are a layer below its root, which alone knows the runner and the features.
//! `docs/architecture.md` explains the layers.
//!
//! Uses are read from the source as paths: `crate::…`, and `super::…` and `self::…` resolved
//! from the file they are in, so a folder's `mod.rs` that re-exports a child's items uses that
//! child. Test code may use anything: a file's `mod tests` and the files only tests compile
//! (`#[cfg(test)] mod fuzz;`) are not read. Below the modules, no two files may need each
//! other either (a circle of files anywhere in `core/src`, inside one module's folder too).
//!
//! A new module must be given a layer here. [`KNOWN`] lists uses that break the rules and
//! [`KNOWN_CIRCLES`] the circles of files, each still to be taken apart; the tests fail when
//! one of them is gone or changed (bring the list up to date) as they do when a new one
//! appears.

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
            "sandbox",
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
            "catalog::jobs",
            "catalog::minds",
            "catalog::ml_engines",
            "catalog::variables",
            "catalog::settings",
            "catalog::queries",
            "catalog::models",
            "catalog::callbacks",
            "catalog::users",
            "catalog::auth",
            "catalog::challenge",
            "catalog::quotas",
            "catalog::storage",
        ],
    ),
    ("rules", &["catalog::rules"]),
    ("setup", &["catalog::setup"]),
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
            "services::parquet_pages",
            "services::files",
            "services::handlers",
            "services::delivery",
            "services::settings",
        ],
    ),
    // The relational engine's parts, which know neither its root (the runner) nor the
    // features: what is asked and answered, the parser, DataFusion's catalog, planning and
    // the write path.
    (
        "sql parts",
        &[
            "sql::request",
            "sql::encode",
            "sql::parse",
            "sql::catalog",
            "sql::planning",
            "sql::write",
        ],
    ),
    // Its root: the runner (its `impl` blocks by concern) and the extension trait the
    // features implement.
    (
        "sql",
        &[
            "sql",
            "sql::run",
            "sql::execute",
            "sql::ddl",
            "sql::client",
            "sql::transaction",
            "sql::load",
            "sql::uploads",
            "sql::variables",
        ],
    ),
    (
        "ai",
        &[
            "ai",
            "ai::models",
            "ai::knowledge_bases",
            "ai::agents",
            "ai::minds",
            "ai::jobs",
        ],
    ),
    (
        "engine",
        &[
            "engine",
            "engine::access",
            "engine::agent_api",
            "engine::database_api",
            "engine::file_api",
            "engine::jobs",
            "engine::model_api",
            "engine::project_api",
            "engine::query_api",
            "engine::hosted",
            "engine::knowledge_bases",
            "engine::reader",
            "engine::settings",
            "engine::status",
            "engine::sweeper",
        ],
    ),
];

/// Uses that break the rules today, as (from, to): each is a piece of work still to do.
const KNOWN: &[(&str, &str)] = &[
    // None today: a use that breaks the rules is either fixed or listed here with its reason.
];

/// The source of `file` without its `#[cfg(test)]` module (tests may use anything) and its
/// comments (a doc link to a module is no use of it).
fn source_without_tests(file: &Path) -> String {
    let text = std::fs::read_to_string(file).unwrap();
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => &text,
    };
    code.lines()
        .map(|line| match line.find("//") {
            // Not a `//` inside a string literal: an even number of quotes before it.
            Some(at) if line[..at].matches('"').count() % 2 == 0 => &line[..at],
            _ => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The folders whose files and subfolders are modules of their own; below any other folder
/// (`store/`), a file belongs to its folder's module.
const LAYER_FOLDERS: &[&str] = &["catalog", "services", "sql", "ai", "engine"];

/// The module a file belongs to, by the file's module path: `error` for `error`, `store` for
/// `store::schema`, `sql::planning` for `sql::planning::session`, `ai::models` for
/// `ai::models::predict`,
/// `catalog` for `catalog`.
fn module_of(file: &str) -> String {
    let parts: Vec<&str> = file.split("::").collect();
    if parts.len() > 1 && LAYER_FOLDERS.contains(&parts[0]) {
        format!("{}::{}", parts[0], parts[1])
    } else {
        parts[0].to_string()
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

/// The module graph of `core/src`: module → modules it uses (itself left out), from the
/// files' uses (see [`file_graph`]).
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let modules: BTreeSet<&str> = LAYERS.iter().flat_map(|(_, m)| m.iter().copied()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (file, uses) in file_graph() {
        let module = module_of(&file);
        assert!(
            modules.contains(module.as_str()),
            "module {module} of core/src has no layer: add it to LAYERS in core/tests/layers.rs"
        );
        let used: Vec<String> = uses
            .iter()
            .map(|u| module_of(u))
            .filter(|u| *u != module)
            .collect();
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

/// The uses in `graph` that break the layers, other than the `known` ones: up a layer, or
/// round a circle.
fn breaks(
    graph: &BTreeMap<String, BTreeSet<String>>,
    known: &BTreeSet<(String, String)>,
) -> Vec<String> {
    // Without the known breaks, what is left must go down the layers without a circle.
    let mut rest = graph.clone();
    for (from, to) in known {
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
    broken
}

fn known_breaks() -> BTreeSet<(String, String)> {
    KNOWN
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn modules_use_only_their_layer_and_below_and_never_each_other_round_a_circle() {
    let graph = graph();
    let known = known_breaks();
    let broken = breaks(&graph, &known);
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

/// Circles of files that use each other (directly or round a longer circle) today, each as
/// its files' module paths, sorted (a folder's `mod.rs` is named by the folder). Each is a
/// piece of work still to do: the test fails when a circle appears that is not here, and when
/// one here is gone or has changed (then this list is brought up to date). Two files that are
/// one concept may be merged instead.
const KNOWN_CIRCLES: &[&[&str]] = &[
    // None today: a circle of files is either taken apart or listed here with its reason.
];

/// A file's module path below `core/src` (`sql::write::dml` for `sql/write/dml.rs`, `sql` for
/// `sql/mod.rs`).
fn file_module(src: &Path, file: &Path) -> Vec<String> {
    let relative = file.strip_prefix(src).unwrap();
    let mut parts: Vec<String> = relative
        .components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_string()
        })
        .collect();
    if parts.last().is_some_and(|p| p == "mod") {
        parts.pop();
    }
    parts
}

/// Whether `path` (below `core/src`) is a file module: `path.rs` or `path/mod.rs`.
fn is_file_module(src: &Path, path: &[&str]) -> bool {
    if path.is_empty() {
        return false;
    }
    let joined = path.join("/");
    src.join(format!("{joined}.rs")).exists() || src.join(&joined).join("mod.rs").exists()
}

/// The text of `source` with the `super::` inside its inline modules (`mod observe { … }`)
/// turned into `self::`: there it names the file itself.
fn inline_supers_as_self(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(at) = rest.find("mod ") {
        let header = &rest[at + 4..];
        let name = ident(header);
        let after = header[name.len()..].trim_start();
        if name.is_empty() || !after.starts_with('{') || (at > 0 && is_ident_char(rest, at - 1)) {
            out.push_str(&rest[..at + 4]);
            rest = &rest[at + 4..];
            continue;
        }
        let open = at + 4 + name.len() + (header[name.len()..].len() - after.len());
        let mut depth = 0usize;
        let mut end = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.push_str(&rest[..open]);
        out.push_str(&rest[open..end].replace("super::", "self::"));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

fn is_ident_char(text: &str, at: usize) -> bool {
    text.as_bytes()[at].is_ascii_alphanumeric() || text.as_bytes()[at] == b'_'
}

/// The paths a piece of source names from `start` (`crate::`, `super::` or `self::`), each
/// with its groups (`{a, b::{c, d}}`) spread out, as segments after `start`.
fn paths_after<'a>(source: &'a str, start: &str) -> Vec<Vec<&'a str>> {
    let mut paths = Vec::new();
    for (at, _) in source.match_indices(start) {
        if at > 0 && is_ident_char(source, at - 1) {
            continue; // `Self::`, `myself::`
        }
        if source[..at].ends_with("::") {
            // Inside a longer path: `crate::catalog::knowledge_bases::init` names no child
            // `knowledge_bases` of the file, and the second `super::` of `super::super::x`
            // was read with the first.
            continue;
        }
        let mut rest = &source[at + start.len()..];
        let mut prefix = Vec::new();
        // `super::super::x`
        while let Some(after) = rest.strip_prefix(start).filter(|_| start == "super::") {
            prefix.push("super");
            rest = after;
        }
        paths.extend(tree(prefix, rest));
    }
    paths
}

/// The paths of a use tree at the start of `text` (`a::b`, `a::{b, c::{d, e}}`), each after
/// `prefix`; `self` in a group names the group's own path.
fn tree<'a>(mut prefix: Vec<&'a str>, mut text: &'a str) -> Vec<Vec<&'a str>> {
    loop {
        let name = ident(text);
        if name.is_empty() {
            break;
        }
        if name != "self" {
            prefix.push(name);
        }
        text = &text[name.len()..];
        match text.strip_prefix("::") {
            Some(after) => text = after,
            None => return vec![prefix],
        }
    }
    let Some(group) = text.strip_prefix('{') else {
        return vec![prefix];
    };
    // The group's items, split at its top-level commas, up to its closing brace.
    let mut items = Vec::new();
    let (mut depth, mut from) = (0usize, 0);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[from..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    items
        .into_iter()
        .map(str::trim_start)
        .filter(|item| !item.is_empty())
        .flat_map(|item| tree(prefix.clone(), item))
        .collect()
}

/// The modules a file declares as files of their own (`mod columns;`).
fn children(source: &str) -> Vec<String> {
    source
        .lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line
                .strip_prefix("pub(crate) ")
                .or_else(|| line.strip_prefix("pub "))
                .unwrap_or(line);
            let name = line.strip_prefix("mod ")?.strip_suffix(';')?;
            Some(name.to_string())
        })
        .collect()
}

/// The files only tests compile (`#[cfg(test)] mod fuzz;`), by module path: they may use
/// anything, as test modules may.
fn test_only_files(src: &Path, files: &[std::path::PathBuf]) -> BTreeSet<String> {
    let mut test_only = BTreeSet::new();
    for file in files {
        let here = file_module(src, file);
        let text = std::fs::read_to_string(file).unwrap();
        for (at, _) in text.match_indices("#[cfg(test)]\n") {
            let declared = text[at + "#[cfg(test)]\n".len()..]
                .trim_start_matches("pub(crate) ")
                .strip_prefix("mod ")
                .map(ident)
                .filter(|name| text[at..].contains(&format!("mod {name};")));
            if let Some(name) = declared {
                let mut child = if here == ["lib"] {
                    Vec::new()
                } else {
                    here.clone()
                };
                child.push(name.to_string());
                test_only.insert(child.join("::"));
            }
        }
    }
    test_only
}

/// The file graph of `core/src`: each file (by module path) → the files it uses, through
/// `crate::`, `super::` and `self::` paths alike (a `mod.rs` that re-exports a child's items
/// uses that child). The crate root (`lib.rs`) is left out: it only declares and re-exports.
fn file_graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_only = test_only_files(&src, &files);
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let here = file_module(&src, &file);
        let name = here.join("::");
        if here == ["lib"]
            || test_only
                .iter()
                .any(|t| name == *t || name.starts_with(&format!("{t}::")))
        {
            continue;
        }
        let is_folder = file.ends_with("mod.rs");
        let source = inline_supers_as_self(&source_without_tests(&file));
        let mut targets = BTreeSet::new();
        let mut resolve = |mut base: Vec<String>, path: &[&str]| {
            let mut path = path;
            while path.first() == Some(&"super") {
                base.pop();
                path = &path[1..];
            }
            let mut full: Vec<&str> = base.iter().map(String::as_str).collect();
            full.extend_from_slice(path);
            // The longest prefix that is a file; items of a folder are its mod.rs's.
            let found = (1..=full.len())
                .rev()
                .find(|&n| is_file_module(&src, &full[..n]))
                .map(|n| full[..n].join("::"));
            if let Some(target) = found {
                targets.insert(target);
            }
        };
        // `self::` names this file's own children when it is a folder's mod.rs, else itself.
        let own = here.clone();
        let parent = here[..here.len() - 1].to_vec();
        for path in paths_after(&source, "crate::") {
            resolve(Vec::new(), &path);
        }
        for path in paths_after(&source, "self::") {
            if is_folder {
                resolve(own.clone(), &path);
            }
        }
        // A folder's mod.rs names its children without `self::` too (`use columns::Table`).
        if is_folder {
            for child in children(&source) {
                for path in paths_after(&source, &format!("{child}::")) {
                    let mut named = vec![child.as_str()];
                    named.extend_from_slice(&path);
                    resolve(own.clone(), &named);
                }
            }
        }
        for path in paths_after(&source, "super::") {
            // `super` of a folder's mod.rs is the folder's parent; of a file, its folder.
            let base = if is_folder {
                parent.clone()
            } else {
                own.clone()
            };
            let mut with_super = vec!["super"];
            with_super.extend_from_slice(&path);
            resolve(base, &with_super);
        }
        targets.remove(&name);
        targets.remove("lib");
        graph.entry(name).or_default().extend(targets);
    }
    graph
}

/// The strongly connected components of `graph` with more than one node (Tarjan's algorithm),
/// each sorted, in order.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g str) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flatten() {
                let next = next.as_str();
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut component = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    component.push(top.to_string());
                    if top == node {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node.as_str()) {
            walk.visit(node);
        }
    }
    walk.found.sort();
    walk.found
}

#[test]
fn no_files_use_each_other_round_a_circle_but_the_known_ones() {
    let found = circles(&file_graph());
    let known: Vec<Vec<String>> = KNOWN_CIRCLES
        .iter()
        .map(|files| files.iter().map(|f| f.to_string()).collect())
        .collect();
    let new: Vec<_> = found.iter().filter(|c| !known.contains(c)).collect();
    let gone: Vec<_> = known.iter().filter(|c| !found.contains(c)).collect();
    assert!(
        new.is_empty() && gone.is_empty(),
        "files that use each other round a circle, not as KNOWN_CIRCLES in \
         core/tests/layers.rs lists them:\nnew or changed: {new:#?}\ngone or changed: {gone:#?}"
    );
}

/// The relational engine names no feature: a use of `crate::ai` planted in a file of `sql/`
/// is refused as a use up the layers (and round a circle, since the features use `sql`).
#[test]
fn a_use_of_ai_planted_in_sql_is_refused() {
    let mut graph = graph();
    assert!(
        breaks(&graph, &known_breaks()).is_empty(),
        "the tree breaks the layers already"
    );
    // What `use crate::ai::models::Models;` in `sql/planning/order.rs` would add.
    let planted = "use crate::ai::models::Models;";
    let path = paths_after(planted, "crate::");
    assert_eq!(path, vec![vec!["ai", "models", "Models"]]);
    graph
        .entry(module_of("sql::planning::order"))
        .or_default()
        .insert(module_of("ai::models::mod"));
    let broken = breaks(&graph, &known_breaks());
    assert!(
        broken.contains(&"sql::planning → ai::models (up from sql parts to ai)".to_string()),
        "{broken:#?}"
    );
}

/// Only the root of `sql/` knows the runner and the extensions: a use of the root planted in
/// one of its sub-folders is refused as a use up the layers.
#[test]
fn a_use_of_the_sql_root_planted_in_a_sub_folder_is_refused() {
    let mut graph = graph();
    // What `use super::super::SqlRunner;` in `sql/write/dml.rs` would add.
    let planted = inline_supers_as_self("use super::super::SqlRunner;");
    assert_eq!(
        paths_after(&planted, "super::"),
        vec![vec!["super", "SqlRunner"]]
    );
    graph
        .entry(module_of("sql::write::dml"))
        .or_default()
        .insert(module_of("sql"));
    let broken = breaks(&graph, &known_breaks());
    assert!(
        broken.contains(&"sql::write → sql (up from sql parts to sql)".to_string()),
        "{broken:#?}"
    );
}

#[test]
fn a_circle_through_super_and_a_mod_rs_re_export_is_seen() {
    let mut graph = BTreeMap::new();
    let edge = |graph: &mut BTreeMap<String, BTreeSet<String>>, a: &str, b: &str| {
        graph
            .entry(a.to_string())
            .or_default()
            .insert(b.to_string());
    };
    edge(&mut graph, "a", "b");
    edge(&mut graph, "b", "c");
    edge(&mut graph, "c", "a");
    edge(&mut graph, "c", "d");
    edge(&mut graph, "d", "e");
    assert_eq!(circles(&graph), vec![vec!["a", "b", "c"]]);
    let source = "use super::{dml::{self, Claim}, names};\nuse crate::store::Store;\n\
                  mod observe { use super::Part; }\nlet x = Self::new();";
    let source = inline_supers_as_self(source);
    assert_eq!(
        paths_after(&source, "super::"),
        vec![vec!["dml"], vec!["dml", "Claim"], vec!["names"]]
    );
    assert_eq!(paths_after(&source, "self::"), vec![vec!["Part"]]);
    assert_eq!(
        paths_after(&source, "crate::"),
        vec![vec!["store", "Store"]]
    );
}

/// Only `store/` and `catalog/` know the store's tables: everything else reads and writes
/// records through the catalog's functions, which take a transaction and open their own
/// tables (`store::Reads` serves a read snapshot and a write transaction alike). Test code may
/// open any table.
#[test]
fn only_the_store_and_the_catalog_name_the_stores_tables() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let test_only = test_only_files(&src, &files);
    let mut naming = Vec::new();
    for file in &files {
        let module = file_module(&src, file);
        let name = module.join("::");
        if matches!(module[0].as_str(), "store" | "catalog")
            || test_only
                .iter()
                .any(|t| name == *t || name.starts_with(&format!("{t}::")))
        {
            continue;
        }
        let source = source_without_tests(file);
        for needle in ["store::schema", "open_table("] {
            if source.contains(needle) {
                naming.push(format!("{name} names {needle}"));
            }
        }
    }
    assert!(naming.is_empty(), "{naming:#?}");
}
