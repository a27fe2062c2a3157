//! The rule that keeps the crate's top-level modules a one-way graph (a
//! DAG): a test reads `host/src`, collects every `crate::X` and `super::`
//! path that leaves a top-level module, and fails naming the cycle when the
//! modules import each other round. The compiler accepts cycles between
//! modules of one crate, so nothing else would stop a new one.
//!
//! Test modules (`#[cfg(test)] mod tests` at the end of a file) and comments
//! are not read: a test may reach anywhere.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Edges known to close a cycle and not cut yet, each with its reason. The
/// check ignores exactly these; any other cycle fails it.
const ALLOWED: &[(&str, &str, &str)] = &[(
    "bus",
    "durable",
    "MessageBus::durable accepts into durable::Inbox, which stores bus messages (issue 19); \
     to cut: the bus takes an `Accept` trait that durable implements",
)];

/// Top-level module → the modules it imports → the files that do.
type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<PathBuf>>>;

/// The top-level modules `lib.rs` declares.
fn top_modules(src: &Path) -> BTreeSet<String> {
    let lib = std::fs::read_to_string(src.join("lib.rs")).expect("read lib.rs");
    lib.lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod ").or_else(|| l.trim().strip_prefix("mod ")))
        .filter_map(|rest| rest.strip_suffix(';'))
        .map(str::to_string)
        .collect()
}

/// The `.rs` files under `path` (or `path.rs`).
fn files_of(src: &Path, module: &str) -> Vec<PathBuf> {
    let file = src.join(format!("{module}.rs"));
    if file.is_file() {
        return vec![file];
    }
    let mut out = Vec::new();
    let mut dirs = vec![src.join(module)];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("read {}: {e}", dir.display())) {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The module path of a file: `agent/runner/mod.rs` → `[agent, runner]`.
fn module_path(src: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let last = parts.pop().expect("a file name");
    if last != "mod.rs" {
        parts.push(last.trim_end_matches(".rs").to_string());
    }
    parts
}

/// The code of a file without its test module and comments.
fn code_of(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(at) => &text[..at],
        None => text,
    };
    text.lines().map(|l| l.split("//").next().unwrap_or("")).collect::<Vec<_>>().join("\n")
}

fn ident_at(s: &str) -> &str {
    let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(s.len());
    &s[..end]
}

/// The first segments of the paths a `crate::` or resolved `super::` path
/// names: `X` of `X::…`, or each `X` of `{X, Y::…}`.
fn heads(rest: &str) -> Vec<String> {
    if let Some(group) = rest.strip_prefix('{') {
        let body = &group[..group.find('}').unwrap_or(group.len())];
        // Top-level items of the group only: skip nested braces.
        let mut depth = 0;
        let mut out = Vec::new();
        let mut start = true;
        for (i, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ',' if depth == 0 => start = true,
                c if start && depth == 0 && !c.is_whitespace() => {
                    out.push(ident_at(&body[i..]).to_string());
                    start = false;
                }
                _ => {}
            }
        }
        out
    } else {
        vec![ident_at(rest).to_string()]
    }
}

/// The edges of every top-level module to the others.
fn graph(src: &Path) -> Graph {
    let modules = top_modules(src);
    let mut graph = Graph::new();
    for module in &modules {
        for file in files_of(src, module) {
            let code = code_of(&std::fs::read_to_string(&file).expect("read source"));
            let path = module_path(src, &file);
            let mut targets = Vec::new();
            for (at, _) in code.match_indices("crate::") {
                // `$crate::` is a macro's own crate, the same one.
                targets.extend(heads(&code[at + "crate::".len()..]));
            }
            let mut rest = code.as_str();
            while let Some(at) = rest.find("super::") {
                let before_ok = at == 0 || !rest[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':');
                let mut tail = &rest[at..];
                let mut ups = 0;
                while let Some(t) = tail.strip_prefix("super::") {
                    ups += 1;
                    tail = t;
                }
                // `super::super::x` from `a/b/c.rs` is `a::x`: a top-level
                // module only when it climbs to the crate root.
                if before_ok && ups >= path.len() {
                    targets.extend(heads(tail));
                }
                rest = tail;
            }
            for target in targets {
                if &target != module && modules.contains(&target) {
                    graph.entry(module.clone()).or_default().entry(target).or_default().insert(file.strip_prefix(src).unwrap().to_path_buf());
                }
            }
        }
    }
    graph
}

/// A cycle through the graph, as `a -> b -> … -> a` with the files that
/// carry each edge, if there is one.
fn find_cycle(graph: &Graph) -> Option<Vec<(String, String, Vec<PathBuf>)>> {
    fn visit<'a>(node: &'a str, graph: &'a Graph, stack: &mut Vec<&'a str>, done: &mut BTreeSet<&'a str>) -> Option<Vec<&'a str>> {
        if let Some(at) = stack.iter().position(|n| *n == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node);
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node);
        for next in graph.get(node).into_iter().flat_map(|m| m.keys()) {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node);
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle.windows(2).map(|w| (w[0].to_string(), w[1].to_string(), graph[w[0]][w[1]].iter().cloned().collect())).collect());
        }
    }
    None
}

fn without_allowed(mut graph: Graph) -> Graph {
    for (from, to, _) in ALLOWED {
        if let Some(edges) = graph.get_mut(*from) {
            edges.remove(*to);
        }
    }
    graph
}

#[test]
fn the_top_level_modules_form_no_cycle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.len() > 5, "the graph was read: {graph:?}");
    for (from, to, why) in ALLOWED {
        assert!(graph.get(*from).is_some_and(|m| m.contains_key(*to)), "the allowed edge {from} -> {to} ({why}) is gone: delete it from ALLOWED");
    }
    if let Some(cycle) = find_cycle(&without_allowed(graph)) {
        let shown: Vec<String> = cycle.iter().map(|(a, b, files)| format!("  {a} -> {b} (in {})", files.iter().map(|f| f.display().to_string()).collect::<Vec<_>>().join(", "))).collect();
        panic!("the top-level modules of host/src import each other round; cut one of these edges:\n{}", shown.join("\n"));
    }
}

/// The engine and its features are one-way: `features` builds on `agent`,
/// and `agent` names no feature (the engine declares a trait in
/// `agent::hooks`; a feature implements it). The cycle check alone would
/// let `agent -> features` in as long as `features` stopped importing
/// `agent`; this says which way the edge goes.
#[test]
fn the_engine_does_not_import_its_features() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let graph = graph(&src);
    assert!(graph.get("features").is_some_and(|m| m.contains_key("agent")), "features build on the engine: {:?}", graph.get("features"));
    if let Some(files) = graph.get("agent").and_then(|m| m.get("features")) {
        panic!("the engine (agent) imports crate::features in {files:?}: declare a trait in agent/hooks.rs and let the feature implement it");
    }
}

#[test]
fn the_check_finds_a_cycle_and_reads_super_and_groups() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path();
    std::fs::write(src.join("lib.rs"), "pub mod a;\npub mod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::{b::X, std_thing};\n").unwrap();
    std::fs::create_dir(src.join("b")).unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\n// use crate::a; a comment is not an edge\n").unwrap();
    std::fs::write(src.join("b/inner.rs"), "fn f() { super::super::c::g() }\n").unwrap();
    std::fs::write(src.join("c.rs"), "pub fn g() {}\n#[cfg(test)]\nmod tests {\n    use crate::a;\n}\n").unwrap();
    let g = graph(src);
    assert_eq!(g.get("a").map(|m| m.keys().cloned().collect::<Vec<_>>()), Some(vec!["b".to_string()]));
    assert_eq!(g.get("b").map(|m| m.keys().cloned().collect::<Vec<_>>()), Some(vec!["c".to_string()]));
    assert!(!g.contains_key("c"), "the test module is not read: {g:?}");
    assert!(find_cycle(&g).is_none());
    // Close the loop: c -> a.
    std::fs::write(src.join("c.rs"), "pub fn g() { crate::a::h() }\n").unwrap();
    let cycle = find_cycle(&graph(src)).expect("a cycle");
    let names: Vec<&str> = cycle.iter().map(|(a, _, _)| a.as_str()).collect();
    assert_eq!(names, ["a", "b", "c"]);
    assert_eq!(cycle[1].2, [PathBuf::from("b/inner.rs")]);
}
