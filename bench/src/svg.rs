//! Charts as plain SVG strings: throughput bars against the floors, latency
//! distributions (box plots and CDFs) and RSS during the output storm.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::report::{fmt_value, Report};
use crate::stats::Dist;

const FONT: &str = "font-family=\"-apple-system,Segoe UI,Helvetica,Arial,sans-serif\"";
const PALETTE: [&str; 6] = [
    "#2b6cb0", "#dd6b20", "#38a169", "#805ad5", "#c53030", "#718096",
];

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('`', "")
}

struct Svg {
    w: f64,
    h: f64,
    body: String,
}

impl Svg {
    fn new(w: f64, h: f64, title: &str) -> Svg {
        let mut s = Svg {
            w,
            h,
            body: String::new(),
        };
        s.rect(0.0, 0.0, w, h, "#ffffff");
        s.text(16.0, 26.0, title, 16.0, "start", "#1a202c", true);
        s
    }

    fn rect(&mut self, x: f64, y: f64, w: f64, h: f64, fill: &str) {
        let _ = writeln!(
            self.body,
            r#"<rect x="{x:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{fill}"/>"#,
            w.max(0.0),
            h.max(0.0)
        );
    }

    fn line(&mut self, x1: f64, y1: f64, x2: f64, y2: f64, stroke: &str, width: f64) {
        let _ = writeln!(
            self.body,
            r#"<line x1="{x1:.1}" y1="{y1:.1}" x2="{x2:.1}" y2="{y2:.1}" stroke="{stroke}" stroke-width="{width}"/>"#
        );
    }

    #[allow(clippy::too_many_arguments)]
    fn text(&mut self, x: f64, y: f64, s: &str, size: f64, anchor: &str, fill: &str, bold: bool) {
        let weight = if bold { " font-weight=\"600\"" } else { "" };
        let _ = writeln!(
            self.body,
            r#"<text x="{x:.1}" y="{y:.1}" font-size="{size}" text-anchor="{anchor}" fill="{fill}"{weight} {FONT}>{}</text>"#,
            esc(s)
        );
    }

    fn polyline(&mut self, points: &[(f64, f64)], stroke: &str) {
        let pts: Vec<String> = points
            .iter()
            .map(|(x, y)| format!("{x:.1},{y:.1}"))
            .collect();
        let _ = writeln!(
            self.body,
            r#"<polyline points="{}" fill="none" stroke="{stroke}" stroke-width="2"/>"#,
            pts.join(" ")
        );
    }

    fn finish(self) -> String {
        format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\">\n{}</svg>\n",
            self.body,
            w = self.w,
            h = self.h
        )
    }
}

/// A log10 axis between decades covering `lo..hi`.
struct LogAxis {
    lo: f64,
    hi: f64,
    x0: f64,
    x1: f64,
}

impl LogAxis {
    fn new(min: f64, max: f64, x0: f64, x1: f64) -> LogAxis {
        let lo = min.max(1e-4).log10().floor();
        let hi = max.max(min * 10.0).log10().ceil();
        LogAxis { lo, hi, x0, x1 }
    }

    fn x(&self, v: f64) -> f64 {
        let l = v.max(10f64.powf(self.lo)).log10();
        self.x0 + (l - self.lo) / (self.hi - self.lo) * (self.x1 - self.x0)
    }

    fn draw(&self, svg: &mut Svg, top: f64, bottom: f64, unit: &str) {
        let mut d = self.lo;
        while d <= self.hi + 1e-9 {
            for m in [1.0, 2.0, 5.0] {
                let v = 10f64.powf(d) * m;
                if v > 10f64.powf(self.hi) * 1.0001 {
                    break;
                }
                let x = self.x(v);
                let major = m == 1.0;
                svg.line(
                    x,
                    top,
                    x,
                    bottom,
                    if major { "#cbd5e0" } else { "#edf2f7" },
                    1.0,
                );
                let label = if v >= 1.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v}")
                };
                svg.text(x, bottom + 14.0, &label, 10.0, "middle", "#4a5568", false);
            }
            d += 1.0;
        }
        svg.text(
            (self.x0 + self.x1) / 2.0,
            bottom + 30.0,
            unit,
            11.0,
            "middle",
            "#4a5568",
            false,
        );
    }
}

/// Throughput bars (median, with the min..max range of runs), floors grey.
fn throughput(report: &Report) -> Option<String> {
    let rows: Vec<_> = report.figures.iter().filter(|f| f.unit == "MB/s").collect();
    if rows.is_empty() {
        return None;
    }
    let max = rows
        .iter()
        .map(|f| f.dist.as_ref().map(|d| d.max).unwrap_or(f.median))
        .fold(1.0, f64::max);
    let (left, right, top, row) = (360.0, 960.0, 50.0, 30.0);
    let h = top + row * rows.len() as f64 + 50.0;
    let mut svg = Svg::new(
        1040.0,
        h,
        "Output throughput to one client (MB/s, median; whisker: slowest..fastest run)",
    );
    let scale = |v: f64| left + v / (max * 1.05) * (right - left);
    let step = nice_step(max * 1.05 / 6.0);
    let mut t = 0.0;
    while t <= max * 1.05 {
        let x = scale(t);
        svg.line(x, top - 6.0, x, h - 44.0, "#edf2f7", 1.0);
        svg.text(
            x,
            h - 30.0,
            &format!("{t:.0}"),
            10.0,
            "middle",
            "#4a5568",
            false,
        );
        t += step;
    }
    svg.text(
        (left + right) / 2.0,
        h - 12.0,
        "MB/s",
        11.0,
        "middle",
        "#4a5568",
        false,
    );
    for (i, f) in rows.iter().enumerate() {
        let y = top + row * i as f64;
        let color = if f.id.ends_with(".floor") {
            "#a0aec0"
        } else if f.id.ends_with(".drop") {
            "#dd6b20"
        } else {
            "#2b6cb0"
        };
        svg.text(left - 8.0, y + 17.0, &f.name, 11.0, "end", "#1a202c", false);
        svg.rect(left, y + 4.0, scale(f.median) - left, row - 10.0, color);
        if let Some(d) = &f.dist {
            let yc = y + row / 2.0 - 1.0;
            svg.line(scale(d.min), yc, scale(d.max), yc, "#1a202c", 1.5);
        }
        let share = f
            .floor
            .map(|fl| format!("  ({:.0}% of floor)", f.median / fl * 100.0))
            .unwrap_or_default();
        svg.text(
            scale(f.median) + 6.0,
            y + 17.0,
            &format!("{}{share}", fmt_value(f.median, "MB/s")),
            10.0,
            "start",
            "#1a202c",
            false,
        );
    }
    Some(svg.finish())
}

fn nice_step(raw: f64) -> f64 {
    let mag = 10f64.powf(raw.max(1e-9).log10().floor());
    [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag)
}

/// Box plots on a log axis: box p25..p75, whisker p1..p99, tick at the
/// median, dot at the maximum.
fn latency(report: &Report) -> Option<String> {
    let rows: Vec<(&String, &Dist)> = report
        .series
        .iter()
        .filter(|(_, d)| !d.is_empty())
        .collect();
    if rows.is_empty() {
        return None;
    }
    let min = rows.iter().map(|(_, d)| d.min()).fold(f64::MAX, f64::min);
    let max = rows.iter().map(|(_, d)| d.max()).fold(0.0, f64::max);
    let (left, right, top, row) = (330.0, 980.0, 50.0, 34.0);
    let h = top + row * rows.len() as f64 + 50.0;
    let mut svg = Svg::new(
        1060.0,
        h,
        "Latency distributions (ms, log scale; box p25–p75, whisker p1–p99, | median, • max)",
    );
    let axis = LogAxis::new(min, max, left, right);
    axis.draw(&mut svg, top - 6.0, h - 44.0, "milliseconds");
    for (i, (name, d)) in rows.iter().enumerate() {
        let y = top + row * i as f64;
        let yc = y + row / 2.0 - 2.0;
        let color = PALETTE[i % PALETTE.len()];
        svg.text(left - 8.0, yc - 2.0, name, 11.0, "end", "#1a202c", false);
        svg.text(
            left - 8.0,
            yc + 11.0,
            &format!(
                "median {}  p99 {}  n={}",
                fmt_value(d.median(), "ms"),
                fmt_value(d.p99(), "ms"),
                d.len()
            ),
            9.5,
            "end",
            "#4a5568",
            false,
        );
        svg.line(axis.x(d.pct(0.01)), yc, axis.x(d.p99()), yc, color, 1.5);
        let (b0, b1) = (axis.x(d.pct(0.25)), axis.x(d.pct(0.75)));
        svg.rect(b0, yc - 8.0, (b1 - b0).max(1.5), 16.0, color);
        let xm = axis.x(d.median());
        svg.line(xm, yc - 11.0, xm, yc + 11.0, "#1a202c", 2.0);
        let _ = writeln!(
            svg.body,
            r##"<circle cx="{:.1}" cy="{yc:.1}" r="3" fill="{color}" stroke="#1a202c"/>"##,
            axis.x(d.max())
        );
    }
    Some(svg.finish())
}

/// Empirical CDFs of the echo round trips, on a log axis.
fn echo_cdf(report: &Report) -> Option<String> {
    let rows: Vec<(&String, &Dist)> = report
        .series
        .iter()
        .filter(|(k, d)| k.contains("echo") && !d.is_empty())
        .collect();
    if rows.is_empty() {
        return None;
    }
    let min = rows.iter().map(|(_, d)| d.min()).fold(f64::MAX, f64::min);
    let max = rows.iter().map(|(_, d)| d.max()).fold(0.0, f64::max);
    let (left, right, top, bottom) = (70.0, 900.0, 50.0, 400.0);
    let mut svg = Svg::new(
        1180.0,
        bottom + 50.0,
        "Keystroke echo round trip: cumulative distribution (ms, log scale)",
    );
    let axis = LogAxis::new(min, max, left, right);
    axis.draw(&mut svg, top, bottom, "milliseconds");
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 0.99, 1.0] {
        let y = bottom - q * (bottom - top);
        svg.line(left, y, right, y, "#edf2f7", 1.0);
        svg.text(
            left - 6.0,
            y + 4.0,
            &format!("{}", q * 100.0),
            10.0,
            "end",
            "#4a5568",
            false,
        );
    }
    svg.text(
        20.0,
        (top + bottom) / 2.0,
        "%",
        11.0,
        "middle",
        "#4a5568",
        false,
    );
    for (i, (name, d)) in rows.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let n = d.len();
        // At most ~600 points per curve.
        let stride = (n / 600).max(1);
        let pts: Vec<(f64, f64)> = d
            .values()
            .iter()
            .enumerate()
            .filter(|(j, _)| j % stride == 0 || *j == n - 1)
            .map(|(j, v)| {
                (
                    axis.x(*v),
                    bottom - (j + 1) as f64 / n as f64 * (bottom - top),
                )
            })
            .collect();
        svg.polyline(&pts, color);
        let ly = top + 10.0 + 34.0 * i as f64;
        svg.rect(right + 14.0, ly - 8.0, 14.0, 4.0, color);
        svg.text(
            right + 34.0,
            ly - 2.0,
            name,
            11.0,
            "start",
            "#1a202c",
            false,
        );
        svg.text(
            right + 34.0,
            ly + 12.0,
            &format!(
                "median {}, p99 {}",
                fmt_value(d.median(), "ms"),
                fmt_value(d.p99(), "ms")
            ),
            9.5,
            "start",
            "#4a5568",
            false,
        );
    }
    Some(svg.finish())
}

/// Server RSS over time during the output storms.
fn storm(report: &Report) -> Option<String> {
    let curves: Vec<_> = report
        .curves
        .iter()
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if curves.is_empty() {
        return None;
    }
    let tmax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.0))
        .fold(0.1, f64::max);
    let ymax = curves
        .iter()
        .flat_map(|(_, c)| c.iter().map(|p| p.1))
        .fold(1.0, f64::max)
        * 1.15;
    let (left, right, top, bottom) = (70.0, 760.0, 50.0, 330.0);
    let mut svg = Svg::new(
        1040.0,
        bottom + 50.0,
        "Server RSS during an output storm (`yes`, MiB over time)",
    );
    let ystep = nice_step(ymax / 6.0);
    let mut v = 0.0;
    while v <= ymax {
        let y = bottom - v / ymax * (bottom - top);
        svg.line(left, y, right, y, "#edf2f7", 1.0);
        svg.text(
            left - 6.0,
            y + 4.0,
            &format!("{v:.0}"),
            10.0,
            "end",
            "#4a5568",
            false,
        );
        v += ystep;
    }
    let tstep = nice_step(tmax / 8.0);
    let mut t = 0.0;
    while t <= tmax {
        let x = left + t / tmax * (right - left);
        svg.line(x, top, x, bottom, "#edf2f7", 1.0);
        svg.text(
            x,
            bottom + 14.0,
            &format!("{t:.0}"),
            10.0,
            "middle",
            "#4a5568",
            false,
        );
        t += tstep;
    }
    svg.text(
        (left + right) / 2.0,
        bottom + 32.0,
        "seconds",
        11.0,
        "middle",
        "#4a5568",
        false,
    );
    svg.text(
        24.0,
        (top + bottom) / 2.0,
        "MiB",
        11.0,
        "middle",
        "#4a5568",
        false,
    );
    for (i, (name, c)) in curves.iter().enumerate() {
        let color = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f64, f64)> = c
            .iter()
            .map(|(t, m)| {
                (
                    left + t / tmax * (right - left),
                    bottom - m / ymax * (bottom - top),
                )
            })
            .collect();
        svg.polyline(&pts, color);
        let ly = top + 10.0 + 22.0 * i as f64;
        svg.rect(right + 14.0, ly - 6.0, 14.0, 4.0, color);
        svg.text(right + 34.0, ly, name, 11.0, "start", "#1a202c", false);
    }
    Some(svg.finish())
}

/// Writes every chart that has data; returns the paths written.
pub fn write_all(report: &Report, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    let mut written = Vec::new();
    for (name, chart) in [
        ("throughput.svg", throughput(report)),
        ("latency.svg", latency(report)),
        ("echo-cdf.svg", echo_cdf(report)),
        ("storm-rss.svg", storm(report)),
    ] {
        if let Some(text) = chart {
            let path = dir.join(name);
            std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))?;
            written.push(path);
        }
    }
    Ok(written)
}
