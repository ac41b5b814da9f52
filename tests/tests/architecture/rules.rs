//! The rules every crate is held to, as functions that return what breaks
//! them (empty when the crate keeps them), so that the self-test can plant
//! each kind of hole in a copy of a crate and see it caught.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use super::crates::Crate;

/// A crate's layers, top first: a top-level module imports only modules
/// of layers below its own. The crate root (`lib.rs`, `main.rs`) is above
/// every layer: it declares the modules, and nothing imports it back.
pub struct Layers {
    pub layers: &'static [&'static [&'static str]],
    /// Modules that may import only the few named, whatever their layer.
    pub only: &'static [(&'static str, &'static [&'static str])],
}

/// Every `pub use` outside a crate root or a folder's `mod.rs`: a
/// re-export anywhere else hides an arrow behind a second name.
pub fn reexports_outside_faces(krate: &Crate) -> Vec<String> {
    let mut broken = Vec::new();
    for (file, scan) in &krate.scans {
        if krate.may_reexport(file) {
            continue;
        }
        for line in &scan.reexport_lines {
            broken.push(format!(
                "{}:{line}: `pub use` outside lib.rs/main.rs/mod.rs",
                krate.show(file)
            ));
        }
    }
    broken
}

/// A loop between files, if any, as the files it passes through.
pub fn file_loop(krate: &Crate) -> Option<String> {
    let mut edges: BTreeMap<PathBuf, BTreeSet<PathBuf>> = BTreeMap::new();
    for arrow in krate.arrows() {
        edges.entry(arrow.from).or_default().insert(arrow.to);
    }
    find_loop(&edges).map(|found| {
        let names: Vec<String> = found.iter().map(|p| krate.show(p)).collect();
        format!(
            "{}: import loop between files: {}",
            krate.name,
            names.join(" -> ")
        )
    })
}

/// Every arrow against the crate's layers, and every top-level module
/// the layers do not list.
pub fn against_layers(krate: &Crate, layers: &Layers) -> Vec<String> {
    let rank: BTreeMap<&str, usize> = layers
        .layers
        .iter()
        .enumerate()
        .flat_map(|(layer, modules)| modules.iter().map(move |m| (*m, layer + 1)))
        .chain([("", 0)])
        .collect();
    let mut broken = Vec::new();
    let mut unlisted = BTreeSet::new();
    for file in krate.paths.keys() {
        let module = krate.top_module(file);
        if !rank.contains_key(module.as_str()) {
            unlisted.insert(module);
        }
    }
    for module in unlisted {
        broken.push(format!("{}: module `{module}` is in no layer", krate.name));
    }
    for arrow in krate.arrows() {
        let from = krate.top_module(&arrow.from);
        let to = krate.top_module(&arrow.to);
        if from == to {
            continue;
        }
        let (Some(&from_rank), Some(&to_rank)) = (rank.get(from.as_str()), rank.get(to.as_str()))
        else {
            continue;
        };
        let shown = |m: &str| {
            if m.is_empty() {
                "the crate root".to_string()
            } else {
                format!("`{m}`")
            }
        };
        if to_rank <= from_rank {
            broken.push(format!(
                "{}:{}: {} (layer {from_rank}) imports {} (layer {to_rank})",
                krate.show(&arrow.from),
                arrow.line,
                shown(&from),
                shown(&to)
            ));
        }
        if let Some((_, allowed)) = layers.only.iter().find(|(m, _)| *m == from) {
            if !allowed.contains(&to.as_str()) {
                broken.push(format!(
                    "{}:{}: `{from}` imports `{to}`; `{from}` may import only {allowed:?}",
                    krate.show(&arrow.from),
                    arrow.line
                ));
            }
        }
    }
    broken
}

/// Everything wrong with a crate: re-exports, loops, layers.
pub fn everything_wrong(krate: &Crate, layers: &Layers) -> Vec<String> {
    let mut broken = reexports_outside_faces(krate);
    broken.extend(file_loop(krate));
    broken.extend(against_layers(krate, layers));
    broken
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
