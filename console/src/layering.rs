//! The layers of this crate point one way: a check over the `crate::<module>` paths of every
//! source file, run as a unit test.
//!
//! `service` (operations, access, error codes) sits below `http` (what a request carries),
//! which sits below `api` and `web`; `startup` wires them, `cli` and `testing` use it. No
//! top-level module may reach, directly or through others, a module that reaches it back.

#![cfg(test)]
#![allow(clippy::expect_used, clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Top-level module → the top-level modules its files name as `crate::<module>`.
fn imports() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read src") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path.strip_prefix(&root).expect("under src");
            let first = rel.components().next().expect("a component");
            let top = first
                .as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned();
            if matches!(top.as_str(), "lib" | "main" | "layering") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("read a source file");
            let deps = graph.entry(top.clone()).or_default();
            for line in text.lines() {
                let code = line.split("//").next().unwrap_or_default();
                for (i, _) in code.match_indices("crate::") {
                    let rest = &code[i + "crate::".len()..];
                    let names: Vec<&str> = match rest.strip_prefix('{') {
                        Some(group) => group.split(',').collect(),
                        None => vec![rest],
                    };
                    for name in names {
                        let name: String = name
                            .trim()
                            .chars()
                            .take_while(|c| c.is_alphanumeric() || *c == '_')
                            .collect();
                        // `$crate::page_ctx!` and friends are macros, not modules.
                        let module =
                            root.join(format!("{name}.rs")).exists() || root.join(&name).is_dir();
                        if !name.is_empty() && name != top && module {
                            deps.insert(name);
                        }
                    }
                }
            }
        }
    }
    graph
}

/// Whether `to` can be reached from `from`.
fn reaches(graph: &BTreeMap<String, BTreeSet<String>>, from: &str, to: &str) -> bool {
    let mut seen = BTreeSet::new();
    let mut stack = vec![from.to_owned()];
    while let Some(m) = stack.pop() {
        for next in graph.get(&m).into_iter().flatten() {
            if next == to {
                return true;
            }
            if seen.insert(next.clone()) {
                stack.push(next.clone());
            }
        }
    }
    false
}

#[test]
fn no_top_level_module_imports_one_that_imports_it_back() {
    let graph = imports();
    let mut cycles = Vec::new();
    for (module, deps) in &graph {
        for dep in deps {
            if reaches(&graph, dep, module) {
                cycles.push(format!("{module} -> {dep}"));
            }
        }
    }
    assert!(cycles.is_empty(), "import cycles: {cycles:?}\n{graph:#?}");
}

#[test]
fn services_know_neither_the_api_nor_the_pages() {
    let graph = imports();
    for upper in ["api", "web", "http", "startup", "cli", "testing"] {
        assert!(
            !reaches(&graph, "service", upper),
            "service reaches {upper}: {graph:#?}"
        );
    }
    assert!(!reaches(&graph, "api", "web"), "{graph:#?}");
    assert!(!reaches(&graph, "web", "api"), "{graph:#?}");
}

#[test]
fn handlers_and_pages_reach_data_only_through_services() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![root.join("http.rs")];
    for dir in ["api", "web"] {
        for entry in std::fs::read_dir(root.join(dir)).expect("read a layer") {
            files.push(entry.expect("dir entry").path());
        }
    }
    let store_access = [
        ".read().await",
        ".write().await",
        ".store.",
        ".begin(",
        ".begin_read(",
    ];
    for file in files
        .iter()
        .filter(|f| f.extension().is_some_and(|e| e == "rs"))
    {
        let text = std::fs::read_to_string(file).expect("read a source file");
        for needle in store_access {
            assert!(
                !text.contains(needle),
                "{} opens a store transaction ({needle}); call a service",
                file.display()
            );
        }
    }
}
