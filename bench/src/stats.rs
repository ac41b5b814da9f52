//! Order statistics over samples: median, p99 and the rest, by nearest rank.

use serde::Serialize;

/// A sorted set of samples.
#[derive(Debug, Clone, Default)]
pub struct Dist {
    sorted: Vec<f64>,
}

/// The percentiles written to JSON and drawn in the charts.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub n: usize,
    pub min: f64,
    pub p1: f64,
    pub p10: f64,
    pub p25: f64,
    pub p50: f64,
    pub p75: f64,
    pub p90: f64,
    pub p99: f64,
    pub p999: f64,
    pub max: f64,
    pub mean: f64,
}

impl Dist {
    /// Samples in any order; NaNs are discarded.
    pub fn new(mut samples: Vec<f64>) -> Dist {
        samples.retain(|x| !x.is_nan());
        samples.sort_by(f64::total_cmp);
        Dist { sorted: samples }
    }

    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// Nearest-rank percentile, `p` in 0..=1. NaN when empty.
    pub fn pct(&self, p: f64) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        let n = self.sorted.len();
        let rank = (p * n as f64).ceil() as usize;
        self.sorted[rank.clamp(1, n) - 1]
    }

    pub fn median(&self) -> f64 {
        self.pct(0.5)
    }

    pub fn p99(&self) -> f64 {
        self.pct(0.99)
    }

    pub fn min(&self) -> f64 {
        self.sorted.first().copied().unwrap_or(f64::NAN)
    }

    pub fn max(&self) -> f64 {
        self.sorted.last().copied().unwrap_or(f64::NAN)
    }

    pub fn mean(&self) -> f64 {
        if self.sorted.is_empty() {
            return f64::NAN;
        }
        self.sorted.iter().sum::<f64>() / self.sorted.len() as f64
    }

    /// The sorted samples.
    pub fn values(&self) -> &[f64] {
        &self.sorted
    }

    pub fn summary(&self) -> Summary {
        Summary {
            n: self.len(),
            min: self.min(),
            p1: self.pct(0.01),
            p10: self.pct(0.10),
            p25: self.pct(0.25),
            p50: self.pct(0.50),
            p75: self.pct(0.75),
            p90: self.pct(0.90),
            p99: self.pct(0.99),
            p999: self.pct(0.999),
            max: self.max(),
            mean: self.mean(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let d = Dist::new((1..=100).map(f64::from).rev().collect());
        assert_eq!(d.median(), 50.0);
        assert_eq!(d.p99(), 99.0);
        assert_eq!(d.pct(1.0), 100.0);
        assert_eq!(d.pct(0.0), 1.0);
        assert!(Dist::new(vec![]).median().is_nan());
    }
}
