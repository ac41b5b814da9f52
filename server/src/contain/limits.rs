//! The server's resource-limit flags (defaults and maxima) and what a
//! spawn request's `limits` become: its own values, the defaults for those
//! it leaves out, each checked against its maximum and its floor.

use tether_protocol::Limits;

/// Why a request's limits are refused (mapped to HTTP in `error.rs`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LimitError {
    /// A value no cgroup can take (below its floor, not a number): 400
    /// `invalid_request`.
    #[error("{0}")]
    Invalid(String),
    /// Above the server's `--max-*`: 400 `limit_above_maximum`.
    #[error("{0}")]
    AboveMaximum(String),
}

/// Smallest memory limit (`memory_bytes`, `memory_high_bytes`): below it a
/// program cannot even be loaded, and the OOM killer fires at the exec.
pub const MIN_MEMORY_BYTES: u64 = 1 << 20;

/// Smallest `cpus`: the kernel's smallest `cpu.max` quota, 1 ms per 100 ms.
pub const MIN_CPUS: f64 = 0.01;

/// Largest memory limit: what a cgroup's page counter can hold (a signed
/// 64-bit count of bytes). Above it the kernel would silently mean "none".
pub const MAX_MEMORY_BYTES: u64 = i64::MAX as u64;

/// Largest `pids`: the kernel's own ceiling on pids (`PID_MAX_LIMIT`, 4 Mi);
/// `pids.max` takes nothing above it.
pub const MAX_PIDS: u64 = 4 << 20;

/// Largest `cpus`: the CPUs this server may use (as `docker --cpus`
/// refuses more than the machine has).
pub fn max_cpus_here() -> f64 {
    std::thread::available_parallelism().map_or(1, |n| n.get()) as f64
}

/// `tetherd`'s resource-limit flags. A default applies to every process
/// that does not give its own; a maximum refuses a request above it
/// (400 `limit_above_maximum`) and caps nothing silently.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct LimitFlags {
    /// Memory limit of a process that gives none, in bytes (memory.max,
    /// swap off). Default: none.
    #[arg(long)]
    pub default_memory_bytes: Option<u64>,
    /// CPU limit of a process that gives none, in CPUs as `docker --cpus`
    /// (cpu.max). Default: none.
    #[arg(long)]
    pub default_cpus: Option<f64>,
    /// Task (process and thread) limit of a process that gives none
    /// (pids.max). Default: none.
    #[arg(long)]
    pub default_pids: Option<u64>,
    /// Soft memory limit of a process that gives none, in bytes
    /// (memory.high, cgroup v2 only). Default: none.
    #[arg(long)]
    pub default_memory_high_bytes: Option<u64>,
    /// Largest `limits.memory_bytes` a request may ask for, and the limit
    /// of one that gives none when there is no --default-memory-bytes (a
    /// ceiling whatever a request leaves out). Default: any.
    #[arg(long)]
    pub max_memory_bytes: Option<u64>,
    /// Largest `limits.cpus` a request may ask for, and the limit of one
    /// that gives none when there is no --default-cpus (at most the CPUs
    /// this server may use). Default: any.
    #[arg(long)]
    pub max_cpus: Option<f64>,
    /// Largest `limits.pids` a request may ask for, and the limit of one
    /// that gives none when there is no --default-pids. Default: any.
    #[arg(long)]
    pub max_pids: Option<u64>,
    /// Largest `limits.memory_high_bytes` a request may ask for, and the
    /// limit of one that gives none when there is no
    /// --default-memory-high-bytes. Default: any.
    #[arg(long)]
    pub max_memory_high_bytes: Option<u64>,
}

impl LimitFlags {
    /// The defaults as limits.
    pub fn defaults(&self) -> Limits {
        Limits {
            memory_bytes: self.default_memory_bytes,
            cpus: self.default_cpus,
            pids: self.default_pids,
            memory_high_bytes: self.default_memory_high_bytes,
        }
    }

    /// Checks the flags at startup: each default a valid limit within its
    /// maximum.
    pub fn check(&self) -> Result<(), String> {
        self.resolve(None)
            .map(|_| ())
            .map_err(|e| format!("--default-*: {e}"))?;
        for (flag, value) in [
            ("--max-cpus", self.max_cpus),
            ("--default-cpus", self.default_cpus),
        ] {
            if value.is_some_and(|v| !v.is_finite() || v < MIN_CPUS) {
                return Err(format!("{flag} must be a number of at least {MIN_CPUS}"));
            }
        }
        Ok(())
    }

    /// The limits a request gets: its own, else the defaults, else the
    /// maxima (a `--max-*` is a ceiling whatever a request leaves out),
    /// each checked.
    pub fn resolve(&self, requested: Option<&Limits>) -> Result<Limits, LimitError> {
        let requested = requested.copied().unwrap_or_default();
        let defaults = self.defaults();
        let limits = Limits {
            memory_bytes: requested
                .memory_bytes
                .or(defaults.memory_bytes)
                .or(self.max_memory_bytes),
            // A maximum above this machine's CPUs caps at what it has.
            cpus: requested
                .cpus
                .or(defaults.cpus)
                .or(self.max_cpus.map(|max| max.min(max_cpus_here()))),
            pids: requested.pids.or(defaults.pids).or(self.max_pids),
            memory_high_bytes: requested
                .memory_high_bytes
                .or(defaults.memory_high_bytes)
                .or(self.max_memory_high_bytes),
        };
        let bad = |m: String| Err(LimitError::Invalid(m));
        for (name, value) in [
            ("memory_bytes", limits.memory_bytes),
            ("memory_high_bytes", limits.memory_high_bytes),
        ] {
            if value.is_some_and(|v| v < MIN_MEMORY_BYTES) {
                return bad(format!(
                    "limits.{name} must be at least {MIN_MEMORY_BYTES} bytes (1 MiB)"
                ));
            }
        }
        for (name, value) in [
            ("memory_bytes", limits.memory_bytes),
            ("memory_high_bytes", limits.memory_high_bytes),
        ] {
            if value.is_some_and(|v| v > MAX_MEMORY_BYTES) {
                return bad(format!(
                    "limits.{name} must be at most {MAX_MEMORY_BYTES} bytes (what a cgroup can hold)"
                ));
            }
        }
        if let Some(cpus) = limits.cpus {
            if !cpus.is_finite() || cpus < MIN_CPUS {
                return bad(format!(
                    "limits.cpus must be a number of at least {MIN_CPUS}"
                ));
            }
        }
        if limits.pids == Some(0) {
            return bad("limits.pids must be at least 1".into());
        }
        if limits.pids.is_some_and(|p| p > MAX_PIDS) {
            return bad(format!(
                "limits.pids must be at most {MAX_PIDS} (the kernel's ceiling on pids)"
            ));
        }
        let above = |name: &str, value: String, max: String, flag: &str| {
            Err(LimitError::AboveMaximum(format!(
                "limits.{name} {value} is above this server's maximum {max} ({flag})"
            )))
        };
        let over = |value: Option<u64>, max: Option<u64>| match (value, max) {
            (Some(v), Some(m)) if v > m => Some((v, m)),
            _ => None,
        };
        if let Some((v, m)) = over(limits.memory_bytes, self.max_memory_bytes) {
            return above(
                "memory_bytes",
                v.to_string(),
                m.to_string(),
                "--max-memory-bytes",
            );
        }
        if let Some((v, m)) = over(limits.memory_high_bytes, self.max_memory_high_bytes) {
            return above(
                "memory_high_bytes",
                v.to_string(),
                m.to_string(),
                "--max-memory-high-bytes",
            );
        }
        if let Some((v, m)) = over(limits.pids, self.max_pids) {
            return above("pids", v.to_string(), m.to_string(), "--max-pids");
        }
        if let (Some(v), Some(m)) = (limits.cpus, self.max_cpus) {
            if v > m {
                return above("cpus", v.to_string(), m.to_string(), "--max-cpus");
            }
        }
        let here = max_cpus_here();
        if let Some(cpus) = limits.cpus.filter(|&cpus| cpus > here) {
            return bad(format!(
                "limits.cpus {cpus} is more than the {here} CPUs this server may use"
            ));
        }
        Ok(limits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> LimitFlags {
        LimitFlags {
            default_pids: Some(100),
            max_memory_bytes: Some(1 << 30),
            max_cpus: Some(2.0),
            max_pids: Some(1000),
            ..LimitFlags::default()
        }
    }

    #[test]
    fn a_request_gets_the_defaults_for_what_it_leaves_out() {
        let limits = flags()
            .resolve(Some(&Limits {
                cpus: Some(0.5),
                ..Limits::default()
            }))
            .expect("valid");
        assert_eq!(limits.cpus, Some(0.5));
        assert_eq!(limits.pids, Some(100));
        // No default: the maximum is the ceiling.
        assert_eq!(limits.memory_bytes, Some(1 << 30));
    }

    #[test]
    fn a_limit_above_its_maximum_is_refused_by_name() {
        let refused = |limits: Limits| match flags().resolve(Some(&limits)) {
            Err(LimitError::AboveMaximum(m)) => m,
            other => panic!("expected limit_above_maximum, got {other:?}"),
        };
        let m = refused(Limits {
            memory_bytes: Some(2 << 30),
            ..Limits::default()
        });
        assert!(
            m.contains("memory_bytes") && m.contains("--max-memory-bytes"),
            "{m}"
        );
        let m = refused(Limits {
            cpus: Some(2.5),
            ..Limits::default()
        });
        assert!(m.contains("cpus") && m.contains("--max-cpus"), "{m}");
        let m = refused(Limits {
            pids: Some(1001),
            ..Limits::default()
        });
        assert!(m.contains("--max-pids"), "{m}");
    }

    #[test]
    fn a_maximum_is_a_ceiling_for_what_a_request_leaves_out() {
        let flags = LimitFlags {
            max_memory_bytes: Some(64 << 20),
            max_pids: Some(50),
            max_cpus: Some(1e6),
            ..LimitFlags::default()
        };
        for requested in [None, Some(Limits::default())] {
            let limits = flags.resolve(requested.as_ref()).expect("valid");
            assert_eq!(limits.memory_bytes, Some(64 << 20));
            assert_eq!(limits.pids, Some(50));
            assert_eq!(limits.cpus, Some(max_cpus_here()));
        }
    }

    #[test]
    fn limits_no_kernel_can_apply_are_invalid_and_named() {
        let invalid = |limits: Limits| match LimitFlags::default().resolve(Some(&limits)) {
            Err(LimitError::Invalid(m)) => m,
            other => panic!("expected invalid_request, got {other:?}"),
        };
        let m = invalid(Limits {
            cpus: Some(1e308),
            ..Limits::default()
        });
        assert!(m.contains("limits.cpus") && m.contains("CPUs"), "{m}");
        for pids in [1u64 << 32, u64::MAX] {
            let m = invalid(Limits {
                pids: Some(pids),
                ..Limits::default()
            });
            assert!(m.contains("limits.pids"), "{m}");
        }
        let m = invalid(Limits {
            memory_bytes: Some(u64::MAX),
            ..Limits::default()
        });
        assert!(m.contains("limits.memory_bytes"), "{m}");
    }

    #[test]
    fn nonsense_limits_are_invalid() {
        for limits in [
            Limits {
                memory_bytes: Some(1),
                ..Limits::default()
            },
            Limits {
                cpus: Some(0.0),
                ..Limits::default()
            },
            Limits {
                cpus: Some(f64::INFINITY),
                ..Limits::default()
            },
            Limits {
                pids: Some(0),
                ..Limits::default()
            },
        ] {
            assert!(matches!(
                LimitFlags::default().resolve(Some(&limits)),
                Err(LimitError::Invalid(_))
            ));
        }
    }
}
