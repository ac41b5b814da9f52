//! The layering docs/ARCHITECTURE.md states, held against the code of
//! every crate (server, client, CLI, protocol, benchmark harness): each
//! path a file names is an arrow from it to the file that defines what the
//! path names (re-exports followed to that file), and the test fails on
//! an arrow that goes up a crate's layers or closes a loop between files,
//! and on a `pub use` anywhere but a crate root or a folder's `mod.rs`.
//! Files are read whole, test modules included; comments and strings are
//! not code. `planted.rs` plants each kind of hole in a copy of a real
//! crate and shows that it is caught.

mod crates;
mod planted;
mod rules;
mod source;

use std::path::{Path, PathBuf};

use crates::Crate;
use rules::Layers;

/// `tether-server`'s top-level modules, top layer first.
const SERVER: Layers = Layers {
    layers: &[
        &["server"],
        &["handover"],
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
    ],
    only: &[
        // The framings know messages, not sockets, processes or rights.
        ("wire", &["error"]),
        // Retention owns output; the emulator is the only thing it feeds.
        ("retained", &["screen", "sync"]),
        // The emulator is a pure function of the bytes it is fed.
        ("screen", &[]),
        // Containment signals and waits, nothing more (its locks recover
        // from poison as every lock does, through `sync`).
        ("contain", &["sync"]),
    ],
};

/// `tether-client`'s.
const CLIENT: Layers = Layers {
    layers: &[
        &["admin", "exec", "utf8", "recording", "tokens"],
        &["attach"],
        &["client"],
        &["local_token", "retry", "tls", "spec", "base_url", "answer"],
        &["error"],
    ],
    only: &[],
};

/// `tether-cli`'s (the `tether` binary).
const CLI: Layers = Layers {
    layers: &[
        &["run_attach", "copy", "logs"],
        &["args", "relay", "resolve", "listing", "archive"],
        &[
            "detach", "replies", "modes", "tail", "term", "units", "exit", "stdout",
        ],
    ],
    only: &[],
};

/// `tether-protocol`'s: it knows nothing of IO.
const PROTOCOL: Layers = Layers {
    layers: &[
        &["decode"],
        &["in_place"],
        &["frame", "api"],
        &["process"],
        &["resources", "signal"],
    ],
    only: &[],
};

/// `tether-bench`'s: sections on top, what they share below.
const BENCH: Layers = Layers {
    layers: &[
        &[
            "ttyd",
            "waits",
            "retention",
            "fanout",
            "command",
            "fairness",
            "storm",
            "screen",
            "svg",
            "handover",
            "recording",
        ],
        &["scale", "peers", "throughput", "tokio_echo", "echo_report"],
        &["latency", "ttyd_protocol"],
        &["floors"],
        &["ctx"],
        &["tetherd", "report", "limits", "client"],
        &["stats"],
    ],
    only: &[],
};

/// Every crate checked: its name as ARCHITECTURE.md heads its layers,
/// its source folder, its layers.
const CRATES: &[(&str, &str, &Layers)] = &[
    ("tether-server", "server/src", &SERVER),
    ("tether-client", "client/src", &CLIENT),
    ("tether-cli", "cli/src", &CLI),
    ("tether-protocol", "protocol/src", &PROTOCOL),
    ("tether-bench", "bench/src", &BENCH),
];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn read(name: &str, dir: &str) -> Crate {
    Crate::read(name, &repo().join(dir))
}

#[test]
fn no_crate_has_an_arrow_up_its_layers_a_loop_or_a_hidden_reexport() {
    let mut broken = Vec::new();
    for (name, dir, layers) in CRATES {
        broken.extend(rules::everything_wrong(&read(name, dir), layers));
    }
    assert!(
        broken.is_empty(),
        "against the layering:\n{}",
        broken.join("\n")
    );
}

/// The lines of the list under ARCHITECTURE.md's heading `Layers of
/// `NAME``, as written.
fn documented_layers(doc: &str, name: &str) -> Vec<String> {
    let heading = format!("Layers of `{name}`");
    let Some(at) = doc
        .lines()
        .position(|l| l.starts_with('#') && l.contains(&heading))
    else {
        panic!("docs/ARCHITECTURE.md has no heading with {heading}");
    };
    doc.lines()
        .skip(at + 1)
        .skip_while(|l| !l.starts_with("- "))
        .take_while(|l| l.starts_with("- "))
        .map(str::to_string)
        .collect()
}

#[test]
fn every_crates_layers_are_the_ones_architecture_md_states() {
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    for (name, _, layers) in CRATES {
        let stated: Vec<String> = layers
            .layers
            .iter()
            .map(|modules| {
                let names: Vec<String> = modules.iter().map(|m| format!("`{m}`")).collect();
                format!("- {}", names.join(", "))
            })
            .collect();
        assert_eq!(
            documented_layers(&doc, name),
            stated,
            "docs/ARCHITECTURE.md's layers of {name} differ from the test's"
        );
    }
}

#[test]
fn every_file_architecture_md_names_exists() {
    // A path in backticks with a `/` and a known extension is a claim
    // that the file is there.
    let doc = std::fs::read_to_string(repo().join("docs/ARCHITECTURE.md")).unwrap();
    let mut missing = Vec::new();
    for quoted in doc.split('`').skip(1).step_by(2) {
        let looks_like_file = quoted.contains('/')
            && !quoted.contains(' ')
            && [
                ".rs", ".md", ".ts", ".py", ".sh", ".mjs", ".json", ".html", ".css",
            ]
            .iter()
            .any(|ext| quoted.ends_with(ext));
        if looks_like_file && !repo().join(quoted).exists() {
            missing.push(quoted.to_string());
        }
    }
    assert!(
        missing.is_empty(),
        "docs/ARCHITECTURE.md names files that do not exist: {missing:?}"
    );
}

#[test]
fn the_client_library_pulls_in_no_cli_code() {
    // A program that only wants the client must not compile clap or the
    // terminal code: the CLI is a crate of its own (tether-cli).
    let mut cargo = std::process::Command::new(env!("CARGO"));
    for (key, _) in std::env::vars_os() {
        if key
            .to_str()
            .is_some_and(tether_tests::set_by_cargo_for_a_crate)
        {
            cargo.env_remove(key);
        }
    }
    let tree = cargo
        .args([
            "tree",
            "-p",
            "tether-client",
            "-e",
            "normal",
            "--prefix",
            "none",
        ])
        .current_dir(repo())
        .output()
        .expect("run cargo tree");
    assert!(
        tree.status.success(),
        "{}",
        String::from_utf8_lossy(&tree.stderr)
    );
    let tree = String::from_utf8_lossy(&tree.stdout);
    assert!(tree.contains("tether-client"), "{tree}");
    for cli_only in ["clap ", "humantime "] {
        assert!(
            !tree.lines().any(|l| l.starts_with(cli_only)),
            "tether-client depends on {cli_only}:\n{tree}"
        );
    }
}
