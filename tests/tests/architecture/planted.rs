//! The architecture test's own test: each kind of hole it must catch is
//! planted in a copy of a real crate, and the rules must report it (and
//! the unchanged copy must pass, so the report is the plant's doing). A
//! reader that passes what it should fail would make the layering test
//! mean nothing.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use super::crates::Crate;
use super::rules::{self, Layers};
use super::source::{expand_use, scan};
use super::{repo, CLI, CLIENT, PROTOCOL, SERVER};

/// A copy of a crate's source in a scratch folder, removed on drop.
struct Copy {
    scratch: PathBuf,
    /// The copy's source folder (`<scratch>/<crate>/src`).
    src: PathBuf,
}

impl Copy {
    fn of(dir: &str) -> Copy {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let scratch = std::env::temp_dir().join(format!(
            "tether-architecture-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let src = scratch.join(dir);
        copy_tree(&repo().join(dir), &src);
        Copy { scratch, src }
    }

    /// Appends `code` to the file at `rel` (relative to the source folder).
    fn append(&self, rel: &str, code: &str) -> &Copy {
        let path = self.src.join(rel);
        let mut source = std::fs::read_to_string(&path).unwrap();
        source.push('\n');
        source.push_str(code);
        source.push('\n');
        std::fs::write(&path, source).unwrap();
        self
    }

    fn read(&self) -> Crate {
        Crate::read("planted", &self.src)
    }
}

impl Drop for Copy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.scratch);
    }
}

fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// What the rules report for a copy of `dir` with `plant` applied; the
/// unchanged copy must report nothing.
fn reported(dir: &str, layers: &Layers, plant: impl Fn(&Copy)) -> String {
    let copy = Copy::of(dir);
    let clean = rules::everything_wrong(&copy.read(), layers);
    assert!(
        clean.is_empty(),
        "the unchanged copy of {dir} fails: {clean:?}"
    );
    plant(&copy);
    rules::everything_wrong(&copy.read(), layers).join("\n")
}

#[test]
fn a_pub_use_in_a_file_that_is_not_a_mod_rs_fails() {
    let report = reported("server/src", &SERVER, |copy| {
        copy.append(
            "attach/writer.rs",
            "pub use crate::error::ApiError as Planted;",
        );
    });
    assert!(report.contains("attach/writer.rs"), "{report}");
    assert!(report.contains("`pub use` outside"), "{report}");
}

#[test]
fn an_import_through_a_crate_root_reexport_is_followed_to_its_file() {
    // lib.rs has `pub use client::{Client, MintedToken};`: `crate::Client`
    // in error.rs is an arrow from the bottom layer up to client.rs.
    let report = reported("client/src", &CLIENT, |copy| {
        copy.append("error.rs", "use crate::Client;");
    });
    assert!(report.contains("client/src/error.rs"), "{report}");
    assert!(report.contains("imports `client`"), "{report}");
    let client = Crate::read("client", &repo().join("client/src"));
    assert_eq!(
        client.resolve(&["Client".to_string()]),
        Some(repo().join("client/src/client.rs"))
    );
}

#[test]
fn an_upward_import_after_a_test_module_fails() {
    let report = reported("server/src", &SERVER, |copy| {
        // pidfd.rs ends with its `#[cfg(test)] mod tests { .. }`.
        copy.append("contain/pidfd.rs", "use crate::http::Planted;");
    });
    assert!(report.contains("contain/pidfd.rs"), "{report}");
    assert!(report.contains("imports `http`"), "{report}");
}

#[test]
fn an_upward_import_inside_a_test_module_fails() {
    let report = reported("server/src", &SERVER, |copy| {
        copy.append(
            "contain/pidfd.rs",
            "#[cfg(test)]\nmod planted {\n    use super::*;\n    use crate::table::Planted;\n}",
        );
    });
    assert!(report.contains("imports `table`"), "{report}");
}

#[test]
fn a_loop_in_the_protocol_crate_fails() {
    let report = reported("protocol/src", &PROTOCOL, |copy| {
        copy.append("frame.rs", "use crate::decode::Planted;");
    });
    assert!(report.contains("import loop"), "{report}");
    assert!(report.contains("protocol/src/frame.rs"), "{report}");
}

#[test]
fn an_upward_import_in_the_client_fails() {
    let report = reported("client/src", &CLIENT, |copy| {
        copy.append(
            "retry.rs",
            "fn planted() { let _ = crate::attach::Planted::new(); }",
        );
    });
    assert!(report.contains("client/src/retry.rs"), "{report}");
    assert!(report.contains("imports `attach`"), "{report}");
}

#[test]
fn an_upward_import_in_the_cli_and_one_to_its_root_fail() {
    let report = reported("cli/src", &CLI, |copy| {
        copy.append("term.rs", "use crate::run_attach::Planted;");
        copy.append("units.rs", "use crate::Planted;");
    });
    assert!(report.contains("cli/src/term.rs"), "{report}");
    assert!(report.contains("imports `run_attach`"), "{report}");
    assert!(report.contains("cli/src/units.rs"), "{report}");
    assert!(report.contains("imports the crate root"), "{report}");
}

#[test]
fn paths_in_comments_and_strings_are_no_arrows() {
    let report = reported("server/src", &SERVER, |copy| {
        copy.append(
            "contain/pidfd.rs",
            concat!(
                "// use crate::http::Planted;\n",
                "/* crate::http::Planted /* nested */ crate::http::Planted */\n",
                "const PLANTED: &str = \"crate::http::Planted\";\n",
                "const RAW: &str = r#\"use crate::http::Planted;\"#;\n",
                "const QUOTE: char = '\"';\n",
                "fn planted<'a>(s: &'a str) -> &'a str { s }",
            ),
        );
    });
    assert_eq!(report, "");
}

#[test]
fn the_reader_finds_every_shape_of_path() {
    let found = scan(concat!(
        "use crate::a::{b, c::{d, e as f}, self};\n",
        "pub(crate) use super::g::H;\n",
        "fn x() { let _ = crate::i::J::new(); let _ = std::crate_like::K; }\n",
        "#[cfg(test)]\nmod tests {\n    use super::*;\n}\n",
        "use crate::after::L;\n",
    ));
    let paths: Vec<(usize, Vec<String>, Vec<String>)> = found
        .named
        .iter()
        .map(|n| (n.line, n.inline.clone(), n.path.clone()))
        .collect();
    let p = |s: &str| s.split("::").map(String::from).collect::<Vec<_>>();
    let none: Vec<String> = Vec::new();
    assert_eq!(
        paths,
        vec![
            (1, none.clone(), p("crate::a::b")),
            (1, none.clone(), p("crate::a::c::d")),
            (1, none.clone(), p("crate::a::c::e")),
            (1, none.clone(), p("crate::a")),
            (2, none.clone(), p("super::g::H")),
            (3, none.clone(), p("crate::i::J::new")),
            (6, vec!["tests".to_string()], p("super::*")),
            (8, none, p("crate::after::L")),
        ]
    );
    assert_eq!(found.reexport_lines, vec![2]);
    assert_eq!(
        expand_use("crate :: a :: { b as c }"),
        vec![(p("crate::a::b"), "c".to_string())]
    );
}
