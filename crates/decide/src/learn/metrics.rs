//! How good probabilities are: accuracy, expected calibration error, Brier score, and the
//! share of answers one can give while keeping the error under a risk.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Metrics {
    pub n: usize,
    pub accuracy: f64,
    /// Expected calibration error over 10 equal-width bins of confidence.
    pub ece: f64,
    pub brier: f64,
    /// The largest share of examples, most confident first, answered with at most 5% errors.
    pub coverage_at_5: f64,
    pub coverage_at_10: f64,
}

/// Metrics of p(yes) against outcomes (1 yes, 0 no).
pub fn metrics(p: &[f64], y: &[f64]) -> Metrics {
    let n = p.len();
    if n == 0 {
        return Metrics {
            n,
            accuracy: 0.0,
            ece: 0.0,
            brier: 0.0,
            coverage_at_5: 0.0,
            coverage_at_10: 0.0,
        };
    }
    let correct: Vec<bool> = p
        .iter()
        .zip(y)
        .map(|(p, y)| (*p >= 0.5) == (*y >= 0.5))
        .collect();
    let confidence: Vec<f64> = p.iter().map(|p| p.max(1.0 - p)).collect();
    let accuracy = correct.iter().filter(|c| **c).count() as f64 / n as f64;
    let brier = p.iter().zip(y).map(|(p, y)| (p - y).powi(2)).sum::<f64>() / n as f64;
    let mut bins = [(0usize, 0.0f64, 0.0f64); 10];
    for i in 0..n {
        let b = ((confidence[i] - 0.5) * 2.0 * 10.0).floor().clamp(0.0, 9.0) as usize;
        bins[b].0 += 1;
        bins[b].1 += confidence[i];
        bins[b].2 += if correct[i] { 1.0 } else { 0.0 };
    }
    let ece = bins
        .iter()
        .filter(|b| b.0 > 0)
        .map(|(k, conf, acc)| (*k as f64 / n as f64) * ((conf - acc) / *k as f64).abs())
        .sum();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|a, b| confidence[*b].total_cmp(&confidence[*a]));
    let coverage = |risk: f64| {
        let mut errors = 0usize;
        let mut best = 0usize;
        for (k, i) in order.iter().enumerate() {
            if !correct[*i] {
                errors += 1;
            }
            if errors as f64 <= risk * (k + 1) as f64 {
                best = k + 1;
            }
        }
        best as f64 / n as f64
    };
    Metrics {
        n,
        accuracy,
        ece,
        brier,
        coverage_at_5: coverage(0.05),
        coverage_at_10: coverage(0.10),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perfect_and_useless_forecasts() {
        let m = metrics(&[1.0, 0.0, 1.0, 0.0], &[1.0, 0.0, 1.0, 0.0]);
        assert_eq!(
            (m.accuracy, m.brier, m.ece, m.coverage_at_5),
            (1.0, 0.0, 0.0, 1.0)
        );
        let m = metrics(&[0.5; 4], &[1.0, 0.0, 1.0, 0.0]);
        assert_eq!(m.brier, 0.25);
        // Half right at confidence 0.5: calibrated.
        assert!(m.ece.abs() < 1e-12);
        // Confident and wrong half the time: badly calibrated, little coverage.
        let m = metrics(&[0.9, 0.9, 0.9, 0.9], &[1.0, 0.0, 1.0, 0.0]);
        assert!(
            (m.ece - 0.4).abs() < 1e-9 && m.coverage_at_10 <= 0.25,
            "{m:?}"
        );
    }
}
