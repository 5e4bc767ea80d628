//! How good probabilities are: accuracy, expected calibration error, Brier score, the share
//! of answers one can give while keeping the error under a risk, and how well they tell
//! right from wrong whatever the threshold.

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

/// The chance that a right one's p is above a wrong one's (ties count half): the area under
/// the ROC curve, whatever threshold keeps them; `None` without both, or with a p that is no
/// number.
pub fn separation(p: &[f64], y: &[f64]) -> Option<f64> {
    if p.iter().any(|p| p.is_nan()) {
        return None;
    }
    let mut order: Vec<(f64, bool)> = p.iter().zip(y).map(|(p, y)| (*p, *y >= 0.5)).collect();
    order.sort_by(|a, b| a.0.total_cmp(&b.0));
    let right = order.iter().filter(|o| o.1).count();
    let wrong = order.len() - right;
    if right == 0 || wrong == 0 {
        return None;
    }
    // Mann-Whitney: the right ones' ranks, tied p sharing their mean rank.
    let mut ranks = 0.0;
    let mut i = 0;
    while i < order.len() {
        let j = (i + 1..order.len())
            .find(|j| order[*j].0 != order[i].0)
            .unwrap_or(order.len());
        let mean_rank = (i + 1 + j) as f64 / 2.0;
        ranks += mean_rank * order[i..j].iter().filter(|o| o.1).count() as f64;
        i = j;
    }
    let r = right as f64;
    Some((ranks - r * (r + 1.0) / 2.0) / (r * wrong as f64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn separation_counts_right_above_wrong() {
        assert_eq!(
            separation(&[0.9, 0.8, 0.2, 0.1], &[1.0, 1.0, 0.0, 0.0]),
            Some(1.0)
        );
        assert_eq!(
            separation(&[0.1, 0.2, 0.8, 0.9], &[1.0, 1.0, 0.0, 0.0]),
            Some(0.0)
        );
        // One right above both wrong, one between: 3 of 4 pairs.
        assert_eq!(
            separation(&[0.9, 0.5, 0.7, 0.1], &[1.0, 1.0, 0.0, 0.0]),
            Some(0.75)
        );
        // A tie counts half.
        assert_eq!(separation(&[0.5, 0.5], &[1.0, 0.0]), Some(0.5));
        assert_eq!(separation(&[0.5, 0.7], &[1.0, 1.0]), None);
        assert_eq!(
            separation(&[f64::NAN, 0.5], &[1.0, 0.0]),
            None,
            "no number, no figure"
        );
    }

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
