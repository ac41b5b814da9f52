//! Figures, the printed table and the JSON document.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::stats::{Dist, Summary};

/// One row of the table: a measured figure with its floor and target.
#[derive(Debug, Clone, Serialize)]
pub struct Figure {
    /// Stable identifier, such as `spawn.exit_frame`.
    pub id: String,
    /// Section of issue 6 (1 to 6).
    pub section: u8,
    pub name: String,
    pub unit: String,
    /// Repeated runs (processes, sessions or whole transfers).
    pub runs: usize,
    /// Samples the median and tail are taken over.
    pub samples: usize,
    pub median: f64,
    /// The bad tail: p99 for latencies and sizes, p1 (the slow runs) for
    /// throughputs.
    pub p99: f64,
    pub higher_is_better: bool,
    /// Median of the local floor measured in the same run, when there is one.
    pub floor: Option<f64>,
    /// The target of issue 6 in words.
    pub target: Option<String>,
    pub pass: Option<bool>,
    pub note: Option<String>,
    pub dist: Option<Summary>,
}

impl Figure {
    /// A figure from samples (lower is better).
    pub fn from_dist(
        id: &str,
        section: u8,
        name: &str,
        unit: &str,
        dist: &Dist,
        runs: usize,
    ) -> Figure {
        Figure {
            id: id.into(),
            section,
            name: name.into(),
            unit: unit.into(),
            runs,
            samples: dist.len(),
            median: dist.median(),
            p99: dist.p99(),
            higher_is_better: false,
            floor: None,
            target: None,
            pass: None,
            note: None,
            dist: Some(dist.summary()),
        }
    }

    /// A throughput figure (higher is better; the tail is p1).
    pub fn rate(id: &str, section: u8, name: &str, dist: &Dist, runs: usize) -> Figure {
        let mut f = Figure::from_dist(id, section, name, "MB/s", dist, runs);
        f.higher_is_better = true;
        f.p99 = dist.pct(0.01);
        f
    }

    /// A single measured value (one run).
    pub fn single(id: &str, section: u8, name: &str, unit: &str, value: f64) -> Figure {
        let mut f = Figure::from_dist(id, section, name, unit, &Dist::new(vec![value]), 1);
        f.dist = None;
        f
    }

    pub fn floor(mut self, floor: f64) -> Figure {
        self.floor = Some(floor);
        self
    }

    pub fn target(mut self, text: &str, pass: bool) -> Figure {
        self.target = Some(text.into());
        self.pass = Some(pass);
        self
    }

    pub fn note(mut self, note: impl Into<String>) -> Figure {
        self.note = Some(note.into());
        self
    }
}

/// Everything one invocation measured.
#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub mode: String,
    pub machine: Machine,
    pub tetherd: String,
    pub started_at_unix: u64,
    pub elapsed_s: f64,
    pub figures: Vec<Figure>,
    /// Raw latency samples by series name, for the charts (not in JSON).
    #[serde(skip)]
    pub series: BTreeMap<String, Dist>,
    /// Sampled RSS curves (seconds, MiB) by name, for the charts.
    #[serde(skip)]
    pub curves: BTreeMap<String, Vec<(f64, f64)>>,
}

/// The machine the figures were taken on.
#[derive(Debug, Default, Clone, Serialize)]
pub struct Machine {
    pub nproc: usize,
    pub cpu_model: String,
    pub mem_total_mib: u64,
    pub kernel: String,
    /// `rustc` processes running when the harness started (others'
    /// compiles share the CPU).
    pub rustc_running_at_start: usize,
    pub loadavg_at_start: String,
}

impl Machine {
    pub fn probe() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_else(|| "unknown".into());
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let mem_total_mib = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .map(|kib| kib / 1024)
            .unwrap_or(0);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string();
        let loadavg = std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ");
        Machine {
            nproc: std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(1),
            cpu_model,
            mem_total_mib,
            kernel,
            rustc_running_at_start: count_processes("rustc"),
            loadavg_at_start: loadavg,
        }
    }
}

/// Processes whose command name is exactly `name`.
pub fn count_processes(name: &str) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm"))
                .map(|c| c.trim() == name)
                .unwrap_or(false)
        })
        .count()
}

/// A value with sensible precision for its unit.
pub fn fmt_value(v: f64, unit: &str) -> String {
    if v.is_nan() {
        return "-".into();
    }
    match unit {
        "ms" if v < 1.0 => format!("{v:.3} ms"),
        "ms" if v < 100.0 => format!("{v:.2} ms"),
        "ms" => format!("{v:.0} ms"),
        "MB/s" => format!("{v:.0} MB/s"),
        "KiB" => format!("{v:.1} KiB"),
        "MiB" => format!("{v:.1} MiB"),
        "%" => format!("{v:.1} %"),
        "" => format!("{v:.0}"),
        other => format!("{v:.1} {other}"),
    }
}

impl Figure {
    /// Median, p99 ("-" for a single sample), floor and target, formatted
    /// in the figure's unit: the cells both tables share.
    fn value_cells(&self) -> [String; 4] {
        [
            fmt_value(self.median, &self.unit),
            if self.samples > 1 {
                fmt_value(self.p99, &self.unit)
            } else {
                "-".into()
            },
            self.floor
                .map(|x| fmt_value(x, &self.unit))
                .unwrap_or_default(),
            self.target.clone().unwrap_or_default(),
        ]
    }
}

impl Report {
    pub fn push(&mut self, figure: Figure) {
        self.figures.push(figure);
    }

    /// The plain-text table printed at the end of a run.
    pub fn table(&self) -> String {
        let mut rows = vec![[
            "#".to_string(),
            "measure".into(),
            "n".into(),
            "median".into(),
            "p99".into(),
            "floor".into(),
            "target".into(),
            "result".into(),
        ]];
        for f in &self.figures {
            let [median, p99, floor, target] = f.value_cells();
            rows.push([
                f.section.to_string(),
                f.name.clone(),
                if f.runs == f.samples {
                    format!("{}", f.samples)
                } else {
                    format!("{}/{}r", f.samples, f.runs)
                },
                median,
                p99,
                floor,
                target,
                match f.pass {
                    Some(true) => "pass".into(),
                    Some(false) => "MISS".into(),
                    None => String::new(),
                },
            ]);
        }
        let mut widths = [0usize; 8];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        for (i, row) in rows.iter().enumerate() {
            let line: Vec<String> = row
                .iter()
                .zip(widths)
                .enumerate()
                .map(|(c, (cell, w))| {
                    if (2..=5).contains(&c) {
                        format!("{cell:>w$}")
                    } else {
                        format!("{cell:<w$}")
                    }
                })
                .collect();
            out.push_str(line.join("  ").trim_end());
            out.push('\n');
            if i == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * 7;
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        out
    }

    /// The table as Markdown, for docs/BENCHMARKS.md.
    pub fn markdown(&self) -> String {
        let mut out = String::from(
            "| # | measure | n | median | p99 | floor (median) | target | result |\n|---|---|---:|---:|---:|---:|---|---|\n",
        );
        for f in &self.figures {
            let n = if f.runs == f.samples {
                format!("{}", f.samples)
            } else {
                format!("{} ({} runs)", f.samples, f.runs)
            };
            let [median, p99, floor, target] = f.value_cells();
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} |\n",
                f.section,
                f.name,
                n,
                median,
                p99,
                floor,
                target,
                match f.pass {
                    Some(true) => "pass",
                    Some(false) => "**miss**",
                    None => "",
                },
            ));
        }
        out
    }

    pub fn write_json(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text).with_context(|| format!("write {}", path.display()))
    }
}
