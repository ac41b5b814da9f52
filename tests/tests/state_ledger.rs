//! docs/STATE.md, the ledger of every kind of state tetherd holds, held to
//! the code: each row answers every question (where, who makes it, its
//! bound, its budget, crash, restart, handover), each file it names
//! exists, and each file where the server makes a bounded kind of state
//! (a `Quota`, `Slots`, a share of the retention budget) is named by a
//! row, so a new kind of state cannot arrive without its row.

use std::path::{Path, PathBuf};

const COLUMNS: usize = 8;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The ledger's rows, each split into its cells.
fn rows() -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("docs/STATE.md")).expect("docs/STATE.md");
    let ledger = text
        .split("## The ledger")
        .nth(1)
        .expect("a section named 'The ledger'");
    let ledger = ledger.split("\n## ").next().unwrap_or(ledger);
    ledger
        .lines()
        .filter(|line| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|line| {
            line.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_string())
                .collect()
        })
        .collect()
}

/// Paths in backquotes under `server/src/`.
fn named_files(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| s.starts_with("server/src/") && s.ends_with(".rs"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_row_answers_every_question_and_names_files_that_exist() {
    let rows = rows();
    assert!(rows.len() >= 20, "only {} rows", rows.len());
    for row in &rows {
        assert_eq!(row.len(), COLUMNS, "a row without every column: {row:?}");
        for cell in row {
            assert!(!cell.is_empty(), "an empty cell in {row:?}");
        }
        let files = named_files(&row[1]);
        assert!(!files.is_empty(), "{:?} names no file", row[0]);
        for file in files {
            assert!(
                root().join(&file).is_file(),
                "{file}, named for {:?}, is missing",
                row[0]
            );
        }
    }
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_file_that_makes_bounded_state_is_named_by_a_row() {
    let named: Vec<String> = rows().iter().flat_map(|row| named_files(&row[1])).collect();
    let mut files = Vec::new();
    sources(&root().join("server/src"), &mut files);
    let makers = ["Quota::new(", "Slots::new(", "budget.share("];
    let mut unnamed = Vec::new();
    for file in files {
        let relative = file
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .replace("/../", "/");
        if relative.ends_with("tests.rs") || relative == "server/src/budget.rs" {
            continue; // tests, and the budget's own definitions
        }
        let text = std::fs::read_to_string(&file).unwrap();
        // The code, not its unit tests.
        let code = text.split("#[cfg(test)]").next().unwrap_or(&text);
        if makers.iter().any(|m| code.contains(m)) && !named.contains(&relative) {
            unnamed.push(relative);
        }
    }
    assert!(
        unnamed.is_empty(),
        "these files make bounded state but no row of docs/STATE.md names them: {unnamed:?}"
    );
}

/// The table rows of the section of docs/STATE.md titled `title`, each
/// split into its cells.
fn section_rows(title: &str) -> Vec<Vec<String>> {
    let text = std::fs::read_to_string(root().join("docs/STATE.md")).expect("docs/STATE.md");
    let section = text
        .split(&format!("## {title}"))
        .nth(1)
        .unwrap_or_else(|| panic!("a section '{title}'"));
    let section = section.split("\n## ").next().unwrap_or(section);
    section
        .lines()
        .filter(|l| l.starts_with('|'))
        .skip(2)
        .map(|l| {
            l.trim()
                .trim_matches('|')
                .split(" | ")
                .map(|c| c.trim().to_string())
                .collect()
        })
        .collect()
}

/// The fields of `struct NAME` in `code`: each line of its body that
/// declares one (`name: Type`, `pub name: Type`), comments and attributes
/// skipped.
fn fields_of(code: &str, name: &str) -> Option<Vec<String>> {
    let start = code
        .find(&format!("pub struct {name} {{"))
        .or_else(|| code.find(&format!("\nstruct {name} {{")))?;
    let body = &code[start..];
    let body = &body[body.find('{')? + 1..body.find("\n}")?];
    Some(
        body.lines()
            .map(str::trim)
            .filter(|l| !l.starts_with("//") && !l.starts_with('#') && l.contains(':'))
            .filter_map(|l| {
                let l = l
                    .strip_prefix("pub(crate) ")
                    .or_else(|| l.strip_prefix("pub "))
                    .unwrap_or(l);
                let (field, rest) = l.split_once(':')?;
                // `name: Type`, not a path (`tokio::sync::...`).
                if !rest.starts_with(' ') {
                    return None;
                }
                let field = field.trim();
                field
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
                    .then(|| field.to_string())
            })
            .collect(),
    )
}

/// A row's type (first cell), its file (second) and the type's fields as
/// the file declares them.
fn struct_of_row(row: &[String]) -> (String, String, Option<Vec<String>>) {
    let (name, file) = (
        backquoted(&row[0])[0].clone(),
        backquoted(&row[1])[0].clone(),
    );
    let code = std::fs::read_to_string(root().join(&file)).unwrap_or_default();
    let fields = fields_of(&code, &name);
    (name, file, fields)
}

/// The names in backquotes of a cell, each field once.
fn backquoted(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

#[test]
fn every_field_of_a_carried_type_is_carried_by_a_handover_or_said_why_not() {
    let rows = section_rows("What a handover carries, field by field");
    assert!(rows.len() >= 10, "{} types", rows.len());
    let mut wrong = Vec::new();
    for row in rows {
        let (name, file, fields) = struct_of_row(&row);
        let Some(fields) = fields else {
            wrong.push(format!("{name}: no such struct in {file}"));
            continue;
        };
        let said: Vec<String> = backquoted(&row[2])
            .into_iter()
            .chain(backquoted(row.get(3).map_or("", String::as_str)))
            .collect();
        for field in &fields {
            if !said.contains(field) {
                wrong.push(format!(
                    "{name}.{field} ({file}): neither carried nor said why not"
                ));
            }
        }
        for field in backquoted(&row[2]) {
            if !fields.contains(&field) {
                wrong.push(format!(
                    "{name}.{field}: carried, but {name} has no such field"
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/STATE.md, the handover's fields:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_handover_format_names_every_field_it_carries_and_is_the_one_the_server_writes() {
    let text = std::fs::read_to_string(root().join("docs/STATE.md")).expect("docs/STATE.md");
    let section = text
        .split("## The handover's format")
        .nth(1)
        .expect("a section on the handover's format");
    let section = section.split("\n## ").next().unwrap_or(section);
    let code =
        std::fs::read_to_string(root().join("server/src/handover/mod.rs")).unwrap_or_default();
    let format = code
        .lines()
        .find_map(|l| l.trim().strip_prefix("pub const FORMAT: u32 = "))
        .map(|n| n.trim_end_matches(';').to_string())
        .expect("FORMAT in server/src/handover/mod.rs");
    assert!(
        section.contains(&format!("**format {format}**")),
        "docs/STATE.md names another format than FORMAT = {format}"
    );
    let rows = section_rows("The handover's format");
    assert!(rows.len() >= 15, "{} types", rows.len());
    let mut wrong = Vec::new();
    for row in rows {
        let (name, file, fields) = struct_of_row(&row);
        match fields {
            Some(fields) if fields == backquoted(&row[2]) => {}
            Some(fields) => wrong.push(format!(
                "{name} ({file}) has {fields:?}: raise FORMAT and list the new format's fields"
            )),
            None => wrong.push(format!("{name}: no such struct in {file}")),
        }
    }
    assert!(
        wrong.is_empty(),
        "docs/STATE.md, the handover's format:\n{}",
        wrong.join("\n")
    );
}
