//! The layering docs/ARCHITECTURE.md states, held against the code: every
//! `crate::`, `super::` and `self::` path in `server/src` and `client/src`
//! is read as an arrow from its file to the file of the module it names,
//! and the test fails on an arrow that breaks a stated rule or closes a
//! loop (between files, or between the server's top-level modules), so the
//! picture cannot drift from the code again.
//!
//! It reads source as text: paths inside comments are skipped, and so is
//! each file's `#[cfg(test)] mod tests` block (a test module's `super` is
//! its own file).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The server's top-level modules, top layer first. A module imports only
/// modules of layers below its own: never one of its own layer, never one
/// above. docs/ARCHITECTURE.md ("Layers") states the same list.
const SERVER_LAYERS: &[&[&str]] = &[
    &["server"],
    &["http"],
    &["kube"],
    &["access"],
    &["attach"],
    &["grant"],
    &["table"],
    &["process", "listen"],
    &["launch", "datadir", "wire"],
    &["retained", "options", "limits", "transport"],
    &[
        "config", "screen", "pty", "slots", "budget", "metrics", "error", "secret", "token",
    ],
    &["contain"],
    &["sync"],
];

/// Modules that may import only the few named here, whatever their layer.
const SERVER_ONLY: &[(&str, &[&str])] = &[
    // The framings know messages, not sockets, processes or rights.
    ("wire", &["error"]),
    // Retention owns output; the emulator is the only thing it feeds.
    ("retained", &["screen", "sync"]),
    // The emulator is a pure function of the bytes it is fed.
    ("screen", &[]),
    // Containment is the bottom: it signals and waits, nothing more.
    ("contain", &["sync"]),
];

/// One crate's source: its files and the module path of each.
struct Crate {
    name: &'static str,
    /// Module path (`["wire", "kube", "channel"]`) -> file.
    modules: BTreeMap<Vec<String>, PathBuf>,
    /// File -> module path.
    paths: BTreeMap<PathBuf, Vec<String>>,
}

impl Crate {
    /// The crate whose root file is `root/root_file` (`lib.rs`, `main.rs`).
    /// Files under `skip` (another crate's) are left out.
    fn read(name: &'static str, root: &Path, skip: Option<&Path>) -> Crate {
        let mut modules = BTreeMap::new();
        let mut paths = BTreeMap::new();
        for file in rust_files(root) {
            if skip.is_some_and(|skip| file.starts_with(skip)) {
                continue;
            }
            let rel = file.strip_prefix(root).unwrap();
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().unwrap();
            match last.as_str() {
                "lib.rs" | "main.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                // Test modules in files of their own (`mod tests;`).
                "tests.rs" => continue,
                other => parts.push(other.trim_end_matches(".rs").to_string()),
            }
            modules.insert(parts.clone(), file.clone());
            paths.insert(file, parts);
        }
        Crate {
            name,
            modules,
            paths,
        }
    }

    /// The file that holds the longest module prefix of `path`.
    fn resolve(&self, path: &[String]) -> Option<&PathBuf> {
        (1..=path.len())
            .rev()
            .find_map(|n| self.modules.get(&path[..n]))
    }

    /// Every arrow file -> file, with the line it comes from.
    fn arrows(&self) -> Vec<Arrow> {
        let mut arrows = Vec::new();
        for (file, module) in &self.paths {
            let source = std::fs::read_to_string(file).unwrap();
            for (line_no, path) in paths_in(&source) {
                let absolute = match path.first().map(String::as_str) {
                    Some("crate") => path[1..].to_vec(),
                    Some("self") => {
                        let mut base = module.clone();
                        base.extend_from_slice(&path[1..]);
                        base
                    }
                    Some("super") => {
                        // A file's module is its folder's for a mod.rs,
                        // else its own name's: `super` is one up from it.
                        let mut base = module.clone();
                        let mut rest = &path[..];
                        while rest.first().map(String::as_str) == Some("super") {
                            base.pop();
                            rest = &rest[1..];
                        }
                        base.extend_from_slice(rest);
                        base
                    }
                    // `use reader::SocketReader;` in a mod.rs: a child
                    // module, named relative to this one.
                    Some(first) if self.modules.contains_key(&child(module, first)) => {
                        let mut base = module.clone();
                        base.extend_from_slice(&path);
                        base
                    }
                    _ => continue,
                };
                if let Some(target) = self.resolve(&absolute) {
                    if target != file {
                        arrows.push(Arrow {
                            from: file.clone(),
                            to: target.clone(),
                            line: line_no,
                        });
                    }
                }
            }
        }
        arrows
    }
}

fn child(module: &[String], name: &str) -> Vec<String> {
    let mut path = module.to_vec();
    path.push(name.to_string());
    path
}

#[derive(Debug, Clone)]
struct Arrow {
    from: PathBuf,
    to: PathBuf,
    line: usize,
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// Every `crate::`/`super::`/`self::` path in the code (not in comments,
/// not in the `#[cfg(test)] mod tests` block), with its line number; a
/// `use` with braces gives one path per item.
fn paths_in(source: &str) -> Vec<(usize, Vec<String>)> {
    let code = match source.find("#[cfg(test)]\nmod tests {") {
        Some(at) => &source[..at],
        None => source,
    };
    let mut found = Vec::new();
    let mut statement = String::new();
    let mut statement_line = 0;
    let mut reexport = false;
    for (index, raw) in code.lines().enumerate() {
        let line = match raw.find("//") {
            Some(at) => &raw[..at],
            None => raw,
        };
        let trimmed = line.trim_start();
        // A re-export (`pub use child::Thing;` in a mod.rs) is the
        // folder's face, not a use of the child: it is no arrow.
        if statement.is_empty() && trimmed.starts_with("pub") && trimmed.contains(" use ") {
            statement_line = index + 1;
            reexport = true;
        } else if statement.is_empty() && trimmed.starts_with("use ") {
            statement_line = index + 1;
        }
        if !statement.is_empty() || statement_line == index + 1 {
            statement.push_str(line);
            if line.contains(';') {
                let body = statement.trim().trim_end_matches(';');
                let body = body.split_once("use ").map_or(body, |(_, rest)| rest);
                if !reexport {
                    for path in expand_use(body.trim()) {
                        found.push((statement_line, path));
                    }
                }
                statement.clear();
                statement_line = 0;
                reexport = false;
            }
            continue;
        }
        for path in inline_paths(line).into_iter().filter(|p| is_anchored(p)) {
            found.push((index + 1, path));
        }
    }
    found
}

/// `crate::a::{b, c::{d, e}}` -> `crate::a::b`, `crate::a::c::d`, ...
fn expand_use(body: &str) -> Vec<Vec<String>> {
    // Renames (`x as y`) go; what is left has no white space.
    let mut cleaned = String::new();
    let mut words = body.split_whitespace();
    while let Some(word) = words.next() {
        if word == "as" {
            let renamed = words.next().unwrap_or("");
            cleaned.push_str(renamed.trim_start_matches(|c: char| c.is_alphanumeric() || c == '_'));
        } else {
            cleaned.push_str(word);
        }
    }
    let body = cleaned;
    let mut out = Vec::new();
    expand_into(&[], &body, &mut out);
    out
}

fn expand_into(prefix: &[String], text: &str, out: &mut Vec<Vec<String>>) {
    for item in split_top_level(text) {
        let (head, group) = match item.find('{') {
            Some(open) => (&item[..open], Some(&item[open + 1..item.len() - 1])),
            None => (item, None),
        };
        let mut path = prefix.to_vec();
        path.extend(head.split("::").filter(|s| !s.is_empty()).map(String::from));
        match group {
            Some(group) => expand_into(&path, group, out),
            None => out.push(path),
        }
    }
}

fn split_top_level(text: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&text[start..]);
    items.into_iter().filter(|s| !s.is_empty()).collect()
}

fn is_anchored(path: &[String]) -> bool {
    matches!(
        path.first().map(String::as_str),
        Some("crate" | "super" | "self")
    )
}

/// `crate::x::y` written inline in code (a path in an expression or type).
fn inline_paths(line: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    for start in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = line[from..].find(start) {
            let begin = from + at;
            from = begin + start.len();
            let before = line[..begin].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: Vec<String> = line[begin..]
                .split("::")
                .map(|s| {
                    s.chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_')
                        .collect::<String>()
                })
                .take_while(|s| !s.is_empty())
                .collect();
            paths.push(path);
        }
    }
    paths
}

/// A loop in `edges`, as the nodes it passes through, if any.
fn find_loop<N: Ord + Clone>(edges: &BTreeMap<N, BTreeSet<N>>) -> Option<Vec<N>> {
    fn visit<N: Ord + Clone>(
        node: &N,
        edges: &BTreeMap<N, BTreeSet<N>>,
        done: &mut BTreeSet<N>,
        stack: &mut Vec<N>,
    ) -> Option<Vec<N>> {
        if let Some(at) = stack.iter().position(|n| n == node) {
            let mut found = stack[at..].to_vec();
            found.push(node.clone());
            return Some(found);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in edges.get(node).into_iter().flatten() {
            if let Some(found) = visit(next, edges, done, stack) {
                return Some(found);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    edges
        .keys()
        .find_map(|node| visit(node, edges, &mut done, &mut Vec::new()))
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn crates() -> Vec<Crate> {
    let repo = repo();
    let cli = repo.join("client/src/bin");
    vec![
        Crate::read("tether-server (lib)", &repo.join("server/src"), None),
        Crate::read("tether-client (lib)", &repo.join("client/src"), Some(&cli)),
        Crate::read("tether (CLI)", &cli.join("tether"), None),
    ]
}

fn show(path: &Path) -> String {
    path.strip_prefix(repo())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The server's top-level module of a file (`http`, `retained`, ...).
fn top_module(krate: &Crate, file: &Path) -> String {
    let module = &krate.paths[file];
    match module.first() {
        Some(first) => first.clone(),
        None => "lib".to_string(),
    }
}

#[test]
fn no_file_imports_a_file_that_imports_it_back_in_any_crate() {
    for krate in crates() {
        let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
        for arrow in krate.arrows() {
            // A folder's mod.rs declares its files: arrows from it down
            // to them are the folder's own business; one back up from a
            // file to its mod.rs is the loop this looks for.
            edges.entry(arrow.from).or_default().insert(arrow.to);
        }
        if let Some(found) = find_loop(&edges) {
            let names: Vec<String> = found.iter().map(|p| show(p)).collect();
            panic!(
                "{}: import loop between files: {}",
                krate.name,
                names.join(" -> ")
            );
        }
    }
}

#[test]
fn the_server_modules_import_only_the_layers_below_them() {
    let server = &crates()[0];
    let rank: BTreeMap<&str, usize> = SERVER_LAYERS
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |m| (*m, layer)))
        .collect();
    let mut broken = Vec::new();
    let mut unlisted = BTreeSet::new();
    for arrow in server.arrows() {
        let from = top_module(server, &arrow.from);
        let to = top_module(server, &arrow.to);
        if from == to || from == "lib" {
            continue;
        }
        let (Some(&from_rank), Some(&to_rank)) = (rank.get(from.as_str()), rank.get(to.as_str()))
        else {
            for module in [&from, &to] {
                if !rank.contains_key(module.as_str()) {
                    unlisted.insert(module.clone());
                }
            }
            continue;
        };
        if to_rank <= from_rank {
            broken.push(format!(
                "{}:{} ({from}, layer {from_rank}) imports {to} (layer {to_rank})",
                show(&arrow.from),
                arrow.line
            ));
        }
        if let Some((_, allowed)) = SERVER_ONLY.iter().find(|(m, _)| *m == from) {
            if !allowed.contains(&to.as_str()) {
                broken.push(format!(
                    "{}:{} ({from}) imports {to}; {from} may import only {allowed:?}",
                    show(&arrow.from),
                    arrow.line
                ));
            }
        }
    }
    assert!(
        unlisted.is_empty(),
        "server modules missing from SERVER_LAYERS (and docs/ARCHITECTURE.md): {unlisted:?}"
    );
    assert!(
        broken.is_empty(),
        "imports against the layering:\n{}",
        broken.join("\n")
    );
}

#[test]
fn the_server_layers_listed_here_are_the_ones_architecture_md_states() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    for modules in SERVER_LAYERS {
        let line = modules
            .iter()
            .map(|m| format!("`{m}`"))
            .collect::<Vec<_>>()
            .join(", ");
        assert!(
            doc.contains(&format!("- {line}")),
            "docs/ARCHITECTURE.md does not list the layer `- {line}`"
        );
    }
}

#[test]
fn the_reader_of_the_arrows_sees_what_it_must() {
    // The reader above is text-based: prove it finds the arrows it must,
    // so that a passing layering test means something.
    let server = &crates()[0];
    let arrows = server.arrows();
    let has = |from: &str, to: &str| {
        arrows
            .iter()
            .any(|a| show(&a.from).ends_with(from) && show(&a.to).ends_with(to))
    };
    // `use crate::wire::framing::{Decoder, Framing};`
    assert!(has(
        "server/src/attach/mod.rs",
        "server/src/wire/framing.rs"
    ));
    // `use super::kube::channel::WireMessage;` inside wire/framing.rs
    assert!(has(
        "server/src/wire/framing.rs",
        "server/src/wire/kube/channel.rs"
    ));
    // A child named relative to its mod.rs: `use reader::SocketReader;`.
    assert!(has(
        "server/src/attach/mod.rs",
        "server/src/attach/reader.rs"
    ));
    // An inline path in code: `crate::contain::current()` in spawn.rs.
    assert!(has(
        "server/src/process/spawn.rs",
        "server/src/contain/mod.rs"
    ));
    let paths = expand_use("crate::a::{b, c::{d, e as f}}");
    assert_eq!(
        paths,
        vec![
            vec!["crate", "a", "b"],
            vec!["crate", "a", "c", "d"],
            vec!["crate", "a", "c", "e"],
        ]
    );
}
