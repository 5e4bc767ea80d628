//! Weighted logistic regression by Newton's method, the one fitting routine behind both L1
//! (Platt scaling: one feature, the backend's logit) and L2 (a head over the backend's features).

// Matrix arithmetic reads best with indices.
#![allow(clippy::needless_range_loop)]

/// σ(x), without overflow for large |x|.
pub fn sigmoid(x: f64) -> f64 {
    if x >= 0.0 {
        1.0 / (1.0 + (-x).exp())
    } else {
        let e = x.exp();
        e / (1.0 + e)
    }
}

/// p = σ(w · [x, 1]); `w` has one weight per feature and the bias last.
pub fn predict(w: &[f64], x: &[f64]) -> f64 {
    let z: f64 = x.iter().zip(w).map(|(a, b)| a * b).sum::<f64>() + w[w.len() - 1];
    sigmoid(z)
}

/// Fits `w` (features then bias) minimising the weighted log loss plus `ridge`·|w|² (the bias
/// is not penalised). Rows are feature vectors of one length; `y` is 0 or 1.
pub fn fit(
    x: &[Vec<f64>],
    y: &[f64],
    weight: &[f64],
    ridge: f64,
    start: Option<Vec<f64>>,
) -> Vec<f64> {
    let d = x.first().map(Vec::len).unwrap_or(0) + 1;
    let mut w = start
        .filter(|s| s.len() == d)
        .unwrap_or_else(|| vec![0.0; d]);
    let row = |i: usize, j: usize| if j + 1 == d { 1.0 } else { x[i][j] };
    for _ in 0..100 {
        // Gradient and Hessian of the penalised loss.
        let mut g = vec![0.0; d];
        let mut h = vec![vec![0.0; d]; d];
        for i in 0..x.len() {
            let p = predict(&w, &x[i]);
            let r = weight[i] * (p - y[i]);
            let s = weight[i] * (p * (1.0 - p)).max(1e-12);
            for j in 0..d {
                g[j] += r * row(i, j);
                for k in 0..d {
                    h[j][k] += s * row(i, j) * row(i, k);
                }
            }
        }
        for j in 0..d - 1 {
            g[j] += 2.0 * ridge * w[j];
            h[j][j] += 2.0 * ridge;
        }
        for (j, hj) in h.iter_mut().enumerate() {
            hj[j] += 1e-9;
        }
        let Some(step) = solve(h, g) else { break };
        // Damped: a step never more than 5 in any coordinate, so separable data cannot run off;
        // and halved until the loss goes down (from a start far off, as when the backend is
        // confident and wrong, a full Newton step overshoots and the iteration wanders).
        let largest = step.iter().fold(0.0f64, |m, s| m.max(s.abs()));
        let mut scale = if largest > 5.0 { 5.0 / largest } else { 1.0 };
        let before = loss(x, y, weight, ridge, &w);
        let mut next = w.clone();
        for _ in 0..40 {
            for j in 0..d {
                next[j] = w[j] - scale * step[j];
            }
            if loss(x, y, weight, ridge, &next) <= before {
                break;
            }
            scale /= 2.0;
        }
        w = next;
        if largest * scale < 1e-10 {
            break;
        }
    }
    w
}

/// The weighted log loss of `w` plus `ridge`·|w|² (the bias not penalised).
fn loss(x: &[Vec<f64>], y: &[f64], weight: &[f64], ridge: f64, w: &[f64]) -> f64 {
    let data: f64 = x
        .iter()
        .zip(y)
        .zip(weight)
        .map(|((x, y), wt)| {
            let p = predict(w, x).clamp(1e-15, 1.0 - 1e-15);
            -wt * (y * p.ln() + (1.0 - y) * (1.0 - p).ln())
        })
        .sum();
    data + ridge * w[..w.len() - 1].iter().map(|v| v * v).sum::<f64>()
}

/// Solves `a · s = b` by Gaussian elimination with partial pivoting.
fn solve(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for c in 0..n {
        let pivot = (c..n).max_by(|i, j| a[*i][c].abs().total_cmp(&a[*j][c].abs()))?;
        if a[pivot][c].abs() < 1e-15 {
            return None;
        }
        a.swap(c, pivot);
        b.swap(c, pivot);
        for r in c + 1..n {
            let f = a[r][c] / a[c][c];
            for k in c..n {
                a[r][k] -= f * a[c][k];
            }
            b[r] -= f * b[c];
        }
    }
    let mut s = vec![0.0; n];
    for r in (0..n).rev() {
        let rest: f64 = (r + 1..n).map(|k| a[r][k] * s[k]).sum();
        s[r] = (b[r] - rest) / a[r][r];
    }
    Some(s)
}

/// A small deterministic generator (xorshift64*), so synthetic draws are the same on every
/// run (the tests' sets; the ECE a calibrated p would show, `winner::ece_floor`).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.max(1))
    }
    pub fn uniform(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545F4914F6CDD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn recovers_a_known_logistic() {
        // y ~ Bernoulli(σ(2z − 0.5)), z uniform on [−3, 3]: Platt scaling must find a≈2, b≈−0.5.
        let mut rng = Rng::new(7);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..8000 {
            let z = rng.uniform() * 6.0 - 3.0;
            x.push(vec![z]);
            y.push(if rng.uniform() < sigmoid(2.0 * z - 0.5) {
                1.0
            } else {
                0.0
            });
        }
        let w = fit(&x, &y, &vec![1.0; x.len()], 0.0, None);
        assert!((w[0] - 2.0).abs() < 0.15, "{w:?}");
        assert!((w[1] + 0.5).abs() < 0.12, "{w:?}");

        // Two features, one of them useless.
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..8000 {
            let (a, b) = (rng.uniform() * 4.0 - 2.0, rng.uniform() * 4.0 - 2.0);
            x.push(vec![a, b]);
            y.push(if rng.uniform() < sigmoid(1.5 * a + 0.3) {
                1.0
            } else {
                0.0
            });
        }
        let w = fit(&x, &y, &vec![1.0; x.len()], 0.0, None);
        assert!(
            (w[0] - 1.5).abs() < 0.15 && w[1].abs() < 0.12 && (w[2] - 0.3).abs() < 0.12,
            "{w:?}"
        );
    }

    #[test]
    fn separable_data_stays_finite() {
        let x = vec![vec![-1.0], vec![-0.5], vec![0.5], vec![1.0]];
        let y = vec![0.0, 0.0, 1.0, 1.0];
        let w = fit(&x, &y, &[1.0; 4], 1e-3, None);
        assert!(w.iter().all(|v| v.is_finite()), "{w:?}");
        assert!(predict(&w, &[1.0]) > 0.9 && predict(&w, &[-1.0]) < 0.1);
    }
}
