//! One crate's source as files and arrows: which module each file holds,
//! and for every path a file names, the file that defines what it names,
//! re-exports followed to the file that holds the item (`use crate::run`
//! through `lib.rs`'s `pub use exec::run` is an arrow to `exec.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::source::{scan, FileScan};

/// One crate's source.
pub struct Crate {
    pub name: String,
    pub root: PathBuf,
    /// Module path (`["wire", "kube", "channel"]`) -> file.
    pub modules: BTreeMap<Vec<String>, PathBuf>,
    /// File -> module path.
    pub paths: BTreeMap<PathBuf, Vec<String>>,
    /// File -> what it names.
    pub scans: BTreeMap<PathBuf, FileScan>,
}

/// An arrow from one file to another, with the line it comes from.
#[derive(Debug, Clone)]
pub struct Arrow {
    pub from: PathBuf,
    pub to: PathBuf,
    pub line: usize,
}

/// How many re-exports deep a path is followed before giving up (a
/// re-export loop would not compile; this only bounds the walk).
const MAX_REEXPORT_HOPS: usize = 16;

impl Crate {
    /// Every `.rs` file under `root`, whose crate root is `lib.rs` or,
    /// without one, `main.rs` (a `main.rs` beside a `lib.rs` is a binary
    /// crate of its own that uses the library by name, not `crate::`).
    pub fn read(name: &str, root: &Path) -> Crate {
        let has_lib = root.join("lib.rs").exists();
        let mut modules = BTreeMap::new();
        let mut paths = BTreeMap::new();
        let mut scans = BTreeMap::new();
        for file in rust_files(root) {
            let rel = file.strip_prefix(root).expect("file under its root");
            let mut parts: Vec<String> = rel
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect();
            let last = parts.pop().expect("a file name");
            match last.as_str() {
                "lib.rs" if parts.is_empty() => {}
                "main.rs" if parts.is_empty() && has_lib => continue,
                "main.rs" if parts.is_empty() => {}
                "mod.rs" => {}
                other => parts.push(other.trim_end_matches(".rs").to_string()),
            }
            let source = std::fs::read_to_string(&file).expect("read a source file");
            scans.insert(file.clone(), scan(&source));
            modules.insert(parts.clone(), file.clone());
            paths.insert(file, parts);
        }
        Crate {
            name: name.to_string(),
            root: root.to_path_buf(),
            modules,
            paths,
            scans,
        }
    }

    /// True for the files allowed to re-export: the crate root and each
    /// folder's `mod.rs` (a folder's face).
    pub fn may_reexport(&self, file: &Path) -> bool {
        self.paths.get(file).is_some_and(|m| m.is_empty())
            || file.file_name().is_some_and(|n| n == "mod.rs")
    }

    /// The absolute module path of `named.path` as seen from `file`, or
    /// `None` for a path outside this crate (`std::`, another crate's).
    fn absolute(&self, file: &Path, inline: &[String], path: &[String]) -> Option<Vec<String>> {
        let mut base = self.paths[file].clone();
        base.extend_from_slice(inline);
        match path.first().map(String::as_str) {
            Some("crate") => Some(path[1..].to_vec()),
            Some("self") => {
                base.extend_from_slice(&path[1..]);
                Some(base)
            }
            Some("super") => {
                let mut rest = path;
                while rest.first().map(String::as_str) == Some("super") {
                    base.pop();
                    rest = &rest[1..];
                }
                base.extend_from_slice(rest);
                Some(base)
            }
            // `use reader::SocketReader;` beside `mod reader;`: a child
            // module, named relative to this one.
            Some(first) => {
                let mut child = base.clone();
                child.push(first.to_string());
                if self.modules.contains_key(&child) {
                    base.extend_from_slice(path);
                    Some(base)
                } else {
                    None
                }
            }
            None => None,
        }
    }

    /// The file that defines what the absolute `path` names: the file of
    /// its longest module prefix, unless that file re-exports the next
    /// name, which is then followed. `None` when it leads out of the crate.
    pub fn resolve(&self, path: &[String]) -> Option<PathBuf> {
        let mut path = path.to_vec();
        for _ in 0..MAX_REEXPORT_HOPS {
            let n = (0..=path.len())
                .rev()
                .find(|&n| self.modules.contains_key(&path[..n]))?;
            let file = &self.modules[&path[..n]];
            let Some(next) = path.get(n) else {
                return Some(file.clone());
            };
            let reexport = self.scans[file].named.iter().find(|named| {
                named.exported_as.as_deref() == Some(next.as_str()) && named.inline.is_empty()
            });
            match reexport {
                Some(named) => {
                    let mut target = self.absolute(file, &[], &named.path)?;
                    target.extend_from_slice(&path[n + 1..]);
                    path = target;
                }
                None => return Some(file.clone()),
            }
        }
        None
    }

    /// Every arrow file -> file. A re-export is the face of its folder,
    /// not a use of the child: no arrow (the paths that go through it are
    /// followed to the child instead).
    pub fn arrows(&self) -> Vec<Arrow> {
        let mut arrows = Vec::new();
        for (file, scan) in &self.scans {
            for named in &scan.named {
                if named.exported_as.is_some() {
                    continue;
                }
                let Some(absolute) = self.absolute(file, &named.inline, &named.path) else {
                    continue;
                };
                if let Some(target) = self.resolve(&absolute) {
                    if &target != file {
                        arrows.push(Arrow {
                            from: file.clone(),
                            to: target,
                            line: named.line,
                        });
                    }
                }
            }
        }
        arrows
    }

    /// The top-level module of a file (`http`, `retained`), or `""` for
    /// the crate root.
    pub fn top_module(&self, file: &Path) -> String {
        self.paths[file].first().cloned().unwrap_or_default()
    }

    /// `file` relative to the repository, for messages.
    pub fn show(&self, file: &Path) -> String {
        let repo = self.root.ancestors().nth(2).unwrap_or(&self.root);
        file.strip_prefix(repo)
            .unwrap_or(file)
            .display()
            .to_string()
    }
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("read a source folder") {
            let path = entry.expect("a folder entry").path();
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
