//! docs/CONFIGURATION.md's flags table agrees with `tetherd --help`: every
//! flag of one is in the other, every environment variable `--help` names
//! is in the flag's row, and each default `--help` states is the row's
//! default (issue 30: the README's table had drifted from `--help`).

use std::collections::BTreeMap;
use std::process::Command;

use tether_tests::tetherd_binary;

/// What `--help` says of one flag.
#[derive(Debug, Default)]
struct HelpFlag {
    env: Option<String>,
    default: Option<String>,
}

/// The flags of `tetherd --help`, with their environment variable and default.
fn help_flags() -> BTreeMap<String, HelpFlag> {
    let out = Command::new(tetherd_binary())
        .arg("--help")
        .output()
        .expect("run tetherd --help");
    assert!(out.status.success(), "tetherd --help failed");
    let text = String::from_utf8(out.stdout).expect("--help is UTF-8");
    let mut flags: BTreeMap<String, HelpFlag> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        let trimmed = line.trim_start();
        let option = trimmed
            .strip_prefix("-h, ")
            .or_else(|| trimmed.strip_prefix("-V, "));
        let option = option.unwrap_or(trimmed);
        if line.starts_with("  ") && option.starts_with("--") && line.len() - trimmed.len() <= 6 {
            let name = option.split_whitespace().next().unwrap().to_string();
            flags.insert(name.clone(), HelpFlag::default());
            current = Some(name);
            continue;
        }
        let Some(name) = &current else { continue };
        let flag = flags.get_mut(name).unwrap();
        if let Some(env) = trimmed.strip_prefix("[env: ") {
            flag.env = Some(env.trim_end_matches(']').trim_end_matches('=').to_string());
        } else if let Some(default) = trimmed.strip_prefix("[default: ") {
            flag.default = Some(default.trim_end_matches(']').to_string());
        }
    }
    flags.remove("--help");
    flags.remove("--version");
    assert!(
        flags.len() > 30,
        "--help parsed into too few flags: {flags:?}"
    );
    flags
}

/// The table's rows: (flags and variables cell, default cell, line).
fn doc_rows() -> Vec<(String, String, usize)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/CONFIGURATION.md");
    let text = std::fs::read_to_string(path).expect("read docs/CONFIGURATION.md");
    let mut rows = Vec::new();
    let mut in_table = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with("| flag | default |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            break;
        }
        let cells: Vec<&str> = line.split(" | ").collect();
        assert!(cells.len() >= 3, "line {}: not a table row: {line}", i + 1);
        rows.push((
            cells[0].trim_start_matches('|').trim().to_string(),
            cells[1].trim().to_string(),
            i + 1,
        ));
    }
    assert!(
        rows.len() > 30,
        "the flags table has too few rows: {rows:?}"
    );
    rows
}

/// The `--flags` named in a row's first cell.
fn flags_of(cell: &str) -> Vec<String> {
    cell.split('`')
        .filter(|part| part.starts_with("--"))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_flag_of_help_is_documented_with_its_default_and_variable_and_none_other() {
    let help = help_flags();
    let rows = doc_rows();
    let mut problems = Vec::new();
    let mut documented = BTreeMap::new();
    for (cell, default, line) in &rows {
        for flag in flags_of(cell) {
            documented.insert(flag.clone(), (cell.clone(), default.clone(), *line));
        }
    }
    for (flag, (_, _, line)) in &documented {
        if !help.contains_key(flag) {
            problems.push(format!(
                "line {line}: {flag} is documented but not in --help"
            ));
        }
    }
    for (flag, what) in &help {
        let Some((cell, default, line)) = documented.get(flag) else {
            problems.push(format!("{flag} is in --help but not documented"));
            continue;
        };
        if let Some(env) = &what.env {
            if !cell.contains(&format!("`{env}`")) {
                problems.push(format!(
                    "line {line}: {flag} reads {env} (--help) but its row does not say so"
                ));
            }
        }
        if let Some(want) = &what.default {
            // Shared rows (`--user` / `--group`) have no default in --help.
            if !default.starts_with(&format!("`{want}`")) {
                problems.push(format!(
                    "line {line}: {flag} defaults to {want} (--help), the row says {default}"
                ));
            }
        }
    }
    assert!(
        problems.is_empty(),
        "docs/CONFIGURATION.md and tetherd --help disagree:\n{}",
        problems.join("\n")
    );
}
