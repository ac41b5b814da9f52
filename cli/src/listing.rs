//! `tether ps` as a person reads it: 80 columns, short ids, times relative
//! to now (as `docker ps`); and with `--no-trunc` every column whole.

use std::fmt::Write as _;
use std::time::SystemTime;

use tether_client::ProcessInfo;

use crate::stdout::visible;
use crate::units::format_size;

/// Width the compact table fits.
const WIDTH: usize = 80;
/// Characters of an id shown (of its 32 hex digits), as `docker ps`.
const SHORT_ID: usize = 12;
const NAME_WIDTH: usize = 14;
const STATUS_WIDTH: usize = 22;

/// The compact table: ID, NAME, STATUS, COMMAND in 80 columns.
pub fn compact(list: &[ProcessInfo], now: SystemTime) -> String {
    let command_width = WIDTH - (SHORT_ID + 2) - (NAME_WIDTH + 2) - (STATUS_WIDTH + 2);
    let mut table = format!(
        "{:<id$}  {:<name$}  {:<status$}  COMMAND",
        "ID",
        "NAME",
        "STATUS",
        id = SHORT_ID,
        name = NAME_WIDTH,
        status = STATUS_WIDTH
    );
    for p in list {
        let _ = write!(
            table,
            "\n{:<id$}  {:<name$}  {:<status$}  {}",
            visible(&short_id(&p.id)),
            cut(&visible(p.name.as_deref().unwrap_or("")), NAME_WIDTH),
            cut(&visible(&status(p, now)), STATUS_WIDTH),
            cut(&visible(&p.argv.join(" ")), command_width),
            id = SHORT_ID,
            name = NAME_WIDTH,
            status = STATUS_WIDTH
        );
    }
    table
}

/// Every column whole: full ids, PID, exit, reason, TTY, the start time,
/// CPU and peak memory where accounted, the whole command.
pub fn whole(list: &[ProcessInfo]) -> String {
    let mut table = format!(
        "{:<32} {:<16} {:>8} {:<8} {:>5} {:<10} {:<3} {:<24} {:>8} {:>10} COMMAND",
        "ID", "NAME", "PID", "STATUS", "EXIT", "REASON", "TTY", "STARTED", "CPU", "MEM"
    );
    for p in list {
        let status = if p.is_exited() { "exited" } else { "running" };
        let exit = p.exit_code.map(|c| c.to_string()).unwrap_or_default();
        let (cpu, mem) = p.usage.map_or((String::new(), String::new()), |u| {
            (
                format!("{:.2}s", u.cpu_user_s + u.cpu_system_s),
                format_size(u.memory_peak_bytes),
            )
        });
        let _ = write!(
            table,
            "\n{:<32} {:<16} {:>8} {:<8} {:>5} {:<10} {:<3} {:<24} {:>8} {:>10} {}",
            visible(&p.id),
            visible(p.name.as_deref().unwrap_or("")),
            p.pid,
            status,
            exit,
            visible(&reason(p)),
            if p.tty { "yes" } else { "no" },
            visible(&p.started_at),
            cpu,
            mem,
            visible(&p.argv.join(" "))
        );
    }
    table
}

/// The first [`SHORT_ID`] hex digits (after the node's name and its dot,
/// which stay): enough to name it (`tether` takes any unique prefix).
pub fn short_id(id: &str) -> String {
    match id.rsplit_once('.') {
        Some((node, hex)) => format!("{node}.{}", &hex[..hex.len().min(SHORT_ID)]),
        None => id.chars().take(SHORT_ID).collect(),
    }
}

fn reason(p: &ProcessInfo) -> String {
    p.reason
        .and_then(|r| serde_json::to_value(r).ok())
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default()
}

/// `up 5 min (tty)`, `exited 0, 2 h ago`, `timeout 124, 3 s ago`.
fn status(p: &ProcessInfo, now: SystemTime) -> String {
    if !p.is_exited() {
        let since = ago(&p.started_at, now);
        let tty = if p.tty { " (tty)" } else { "" };
        return format!("up {since}{tty}");
    }
    let code = p
        .exit_code
        .map(|c| c.to_string())
        .unwrap_or_else(|| "?".into());
    let reason = match reason(p).as_str() {
        "" | "exit" => "exited".to_string(),
        other => other.to_string(),
    };
    match p.finished_at.as_deref() {
        Some(at) => format!("{reason} {code}, {} ago", ago(at, now)),
        None => format!("{reason} {code}"),
    }
}

/// How long before `now` an RFC 3339 time was, in one unit (`42 s`,
/// `5 min`, `3 h`, `2 d`).
fn ago(rfc3339: &str, now: SystemTime) -> String {
    let Ok(then) = humantime::parse_rfc3339(rfc3339) else {
        return "?".to_string();
    };
    let secs = now.duration_since(then).map_or(0, |d| d.as_secs());
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{} min", secs / 60),
        3600..=86_399 => format!("{} h", secs / 3600),
        _ => format!("{} d", secs / 86_400),
    }
}

/// `text` in at most `width` characters, its end replaced by `…` if cut.
fn cut(text: &str, width: usize) -> String {
    if text.chars().count() <= width {
        return text.to_string();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_ids_keep_the_node_and_twelve_digits() {
        assert_eq!(short_id("0123456789abcdef0123456789abcdef"), "0123456789ab");
        assert_eq!(
            short_id("host-a.0123456789abcdef0123456789abcdef"),
            "host-a.0123456789ab"
        );
    }

    #[test]
    fn cut_text_ends_with_an_ellipsis_and_fits() {
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abc", 4), "abc");
        assert_eq!(cut("ééééé", 3).chars().count(), 3);
    }
}
