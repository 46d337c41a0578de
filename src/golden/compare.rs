//! The comparator: a backend's full tensor against a golden capture (which holds a strided
//! sample plus a whole-tensor checksum), or two full tensors against each other (GPU vs
//! oracle). It reports the error metrics, the Atlas pass verdict under a [`Policy`], a stricter
//! bit-exact verdict, and for index captures the per-row set agreement.

use super::policy::{Policy, BIT_EXACT_CK_REL};
use super::schema::{CaptureData, GoldenCapture};
use crate::num::bf16_ulp_distance;

/// Magnitudes below this are treated as this in `max_rel_err`, so a near-zero reference value
/// (common in bf16 streams) does not turn a tiny absolute error into an enormous relative one.
pub const REL_ERR_FLOOR: f64 = 1e-6;

/// A tensor's values as a backend holds them: floats (bf16 values carried as f32) or integers.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// Float values (bf16 captures hold bf16-representable f32 values).
    F32(&'a [f32]),
    /// Integer values (indices, masks, hashes, ids).
    I64(&'a [i64]),
}

impl Values<'_> {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Values::F32(v) => v.len(),
            Values::I64(v) => v.len(),
        }
    }
    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    fn f64_at(&self, i: usize) -> f64 {
        match self {
            Values::F32(v) => v.get(i).map_or(f64::NAN, |&x| f64::from(x)),
            Values::I64(v) => v.get(i).map_or(f64::NAN, |&x| x as f64),
        }
    }
}

/// Per-row set agreement of an index capture (rows = the last dimension; negative entries,
/// i.e. -1, are absent). Only computed where whole rows are available (stride 1 or full-vs-full).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexAgreement {
    /// Rows compared.
    pub rows: usize,
    /// Rows whose index sets differ.
    pub rows_differing: usize,
    /// Smallest per-row Jaccard index |A∩B| / |A∪B| (two empty rows count as 1).
    pub min_jaccard: f64,
    /// Mean per-row Jaccard index.
    pub mean_jaccard: f64,
}

/// Everything one comparison found. A wrong length is a failed comparison (with `reason`),
/// never a panic.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// The policy applied (`exact`, `index`, `bf16`, `f32`).
    pub policy_name: &'static str,
    /// The backend's shape equals the reference shape.
    pub shape_ok: bool,
    /// The backend's element count equals the reference's (and its own shape's).
    pub len_ok: bool,
    /// Elements the backend gave.
    pub got_len: usize,
    /// Elements the reference has (`n`).
    pub expected_len: usize,
    /// Sampling stride of the reference (1 for full tensors).
    pub stride: usize,
    /// Elements compared one by one (the sampled positions).
    pub n_compared: usize,
    /// Compared elements whose error exceeds `tol` (non-finite values count as outside).
    pub n_outside_tol: usize,
    /// Compared elements exactly equal to the reference.
    pub n_equal: usize,
    /// Element tolerance used.
    pub tol: f64,
    /// Relative checksum bar used.
    pub ck_rel: f64,
    /// Largest |got − expected| over the compared elements (infinite if a value is non-finite).
    pub max_abs_err: f64,
    /// Flat index of the largest error, if any element was compared.
    pub max_abs_err_index: Option<usize>,
    /// The same position as a multi-index into the reference shape.
    pub max_abs_err_multi_index: Vec<usize>,
    /// Backend value at the largest error.
    pub worst_got: f64,
    /// Reference value at the largest error.
    pub worst_expected: f64,
    /// Largest |got − expected| / max(|expected|, `REL_ERR_FLOOR`).
    pub max_rel_err: f64,
    /// Largest distance in bf16 ulps over the compared finite float elements (0 for ints).
    pub max_bf16_ulp: u64,
    /// Σ(got − expected)² / Σ expected² over the compared finite elements.
    pub nmse: f64,
    /// Σ got_i·(i+1) over the whole backend tensor (f64, sequential).
    pub ck_got: f64,
    /// The reference checksum (the golden's `ck`, or the reference tensor's).
    pub ck_expected: f64,
    /// |ck_got − ck_expected| / max(Σ|got_i|·(i+1), 1): passes when ≤ `ck_rel`.
    pub ck_rel_diff: f64,
    /// The Atlas checksum bar holds.
    pub ck_ok: bool,
    /// NaN values in the backend tensor.
    pub nan_count: usize,
    /// ±inf values in the backend tensor.
    pub inf_count: usize,
    /// `max_abs_err / tol`: ≤ 1 passes the element bar; used for plots.
    pub worst_ratio: f64,
    /// Every compared element equal and the checksum within `BIT_EXACT_CK_REL` (not a pass
    /// criterion, a stricter report).
    pub bit_exact: bool,
    /// Per-row index-set agreement (index captures with whole rows only).
    pub index_agreement: Option<IndexAgreement>,
    /// The Atlas verdict: lengths and shapes agree, every compared element within `tol`, no
    /// non-finite value, checksum within bar.
    pub pass: bool,
    /// One line saying why it passed or failed.
    pub reason: String,
}

/// Reference values, by where they come from.
#[derive(Clone, Copy)]
enum Reference<'a> {
    /// Golden floats (exact f32 values in v2+, 9 significant digits in v1).
    GoldenFloat(&'a [f64]),
    Full(Values<'a>),
    GoldenInt(&'a [i64]),
}

impl Reference<'_> {
    fn len(&self) -> usize {
        match self {
            Reference::GoldenFloat(v) => v.len(),
            Reference::GoldenInt(v) => v.len(),
            Reference::Full(v) => v.len(),
        }
    }
    fn f64_at(&self, j: usize) -> f64 {
        match self {
            Reference::GoldenFloat(v) => v.get(j).copied().unwrap_or(f64::NAN),
            Reference::GoldenInt(v) => v.get(j).map_or(f64::NAN, |&x| x as f64),
            Reference::Full(v) => v.f64_at(j),
        }
    }
    fn i64_at(&self, j: usize) -> Option<i64> {
        match self {
            Reference::GoldenInt(v) | Reference::Full(Values::I64(v)) => v.get(j).copied(),
            _ => None,
        }
    }
    /// The reference value `j` as the f32 it stands for (a v1 9-digit float rounds back to it).
    fn f32_at(&self, j: usize) -> f32 {
        match self {
            Reference::Full(Values::F32(v)) => v.get(j).copied().unwrap_or(f32::NAN),
            _ => self.f64_at(j) as f32,
        }
    }
}

fn got_i64_at(got: &Values<'_>, i: usize) -> Option<i64> {
    match got {
        Values::I64(v) => v.get(i).copied(),
        Values::F32(_) => None,
    }
}

/// Is backend value `i` exactly equal to reference value `j`?
fn equal_at(got: &Values<'_>, i: usize, reference: &Reference<'_>, j: usize) -> bool {
    match (got_i64_at(got, i), reference.i64_at(j)) {
        (Some(a), Some(b)) => a == b,
        _ => match got {
            Values::F32(v) => v.get(i).is_some_and(|&x| x == reference.f32_at(j)),
            Values::I64(_) => got.f64_at(i) == reference.f64_at(j),
        },
    }
}

/// Compare a backend's full tensor `got` (of `shape`) with a golden capture, which holds
/// `data[j] = flat[j·stride]` and the checksum of the whole tensor.
pub fn compare_with_golden(
    got: Values<'_>,
    shape: &[usize],
    golden: &GoldenCapture,
    policy: &Policy,
) -> Comparison {
    let reference = match &golden.data {
        CaptureData::Float(v) => Reference::GoldenFloat(v),
        CaptureData::Int(v) => Reference::GoldenInt(v),
    };
    let consistent =
        golden.stride >= 1 && reference.len() == golden.n.div_ceil(golden.stride.max(1));
    let samples = golden.samples_f64();
    let tol = policy.element_tol_for(&samples);
    compare_core(Inputs {
        got,
        got_shape: shape,
        expected_shape: &golden.shape,
        expected_len: golden.n,
        stride: golden.stride.max(1),
        reference,
        ck_expected: golden.ck,
        tol,
        policy,
        reference_problem: (!consistent).then(|| {
            format!(
                "golden capture `{}` is inconsistent: {} samples for n = {} at stride {}",
                golden.name,
                reference.len(),
                golden.n,
                golden.stride
            )
        }),
    })
}

/// Compare two full tensors of the same `shape` (e.g. GPU against the CPU oracle). The
/// reference's own checksum stands in for the golden's `ck`, and every element is compared.
pub fn compare_full(
    got: Values<'_>,
    reference: Values<'_>,
    shape: &[usize],
    policy: &Policy,
) -> Comparison {
    let ref_f64: Vec<f64> = (0..reference.len()).map(|i| reference.f64_at(i)).collect();
    let tol = policy.element_tol_for(&ref_f64);
    let ck_expected = checksum_f64(&ref_f64).0;
    let shape_len = element_count(shape);
    compare_core(Inputs {
        got,
        got_shape: shape,
        expected_shape: shape,
        expected_len: reference.len(),
        stride: 1,
        reference: Reference::Full(reference),
        ck_expected,
        tol,
        policy,
        reference_problem: (shape_len != Some(reference.len())).then(|| {
            format!(
                "reference has {} values but shape {shape:?} needs {shape_len:?}",
                reference.len()
            )
        }),
    })
}

/// `(Σ v_i·(i+1), Σ |v_i|·(i+1))`, sequential in f64.
fn checksum_f64(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .enumerate()
        .fold((0.0, 0.0), |(ck, abs), (i, &v)| {
            let w = i as f64 + 1.0;
            (ck + v * w, abs + v.abs() * w)
        })
}

fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// C-order multi-index of `flat` in `shape` (empty if the shape is empty or has a zero dim).
pub fn unravel_index(mut flat: usize, shape: &[usize]) -> Vec<usize> {
    if shape.is_empty() || shape.contains(&0) {
        return Vec::new();
    }
    let mut out = vec![0; shape.len()];
    for (slot, &dim) in out.iter_mut().zip(shape).rev() {
        *slot = flat % dim;
        flat /= dim;
    }
    out
}

struct Inputs<'a> {
    got: Values<'a>,
    got_shape: &'a [usize],
    expected_shape: &'a [usize],
    expected_len: usize,
    stride: usize,
    reference: Reference<'a>,
    ck_expected: f64,
    tol: f64,
    policy: &'a Policy,
    reference_problem: Option<String>,
}

fn compare_core(x: Inputs<'_>) -> Comparison {
    let got_len = x.got.len();
    let mut c = Comparison {
        policy_name: x.policy.name,
        shape_ok: x.got_shape == x.expected_shape,
        len_ok: false,
        got_len,
        expected_len: x.expected_len,
        stride: x.stride,
        n_compared: 0,
        n_outside_tol: 0,
        n_equal: 0,
        tol: x.tol,
        ck_rel: x.policy.ck_rel,
        max_abs_err: 0.0,
        max_abs_err_index: None,
        max_abs_err_multi_index: Vec::new(),
        worst_got: f64::NAN,
        worst_expected: f64::NAN,
        max_rel_err: 0.0,
        max_bf16_ulp: 0,
        nmse: 0.0,
        ck_got: f64::NAN,
        ck_expected: x.ck_expected,
        ck_rel_diff: f64::NAN,
        ck_ok: false,
        nan_count: 0,
        inf_count: 0,
        worst_ratio: 0.0,
        bit_exact: false,
        index_agreement: None,
        pass: false,
        reason: String::new(),
    };
    if let Some(problem) = x.reference_problem {
        c.reason = format!("fail: {problem}");
        return c;
    }
    if let Values::F32(v) = x.got {
        c.nan_count = v.iter().filter(|x| x.is_nan()).count();
        c.inf_count = v.iter().filter(|x| x.is_infinite()).count();
    }
    let own_len = element_count(x.got_shape);
    if own_len != Some(got_len) {
        c.reason = format!(
            "fail: backend tensor has {got_len} values but its shape {:?} has {own_len:?}",
            x.got_shape
        );
        return c;
    }
    if got_len != x.expected_len {
        c.reason = format!(
            "fail: length {got_len} (shape {:?}), expected {} (shape {:?})",
            x.got_shape, x.expected_len, x.expected_shape
        );
        return c;
    }
    c.len_ok = true;

    // Element-wise over the sampled positions: reference j <-> flat index j·stride.
    let float_metrics = !x.policy.exact;
    let (mut sum_sq_err, mut sum_sq_ref) = (0.0f64, 0.0f64);
    let mut worst: Option<(usize, f64)> = None;
    for j in 0..x.reference.len() {
        let i = j * x.stride;
        let (g, r) = (x.got.f64_at(i), x.reference.f64_at(j));
        c.n_compared += 1;
        if equal_at(&x.got, i, &x.reference, j) {
            c.n_equal += 1;
        }
        let err = if g.is_finite() && r.is_finite() {
            (g - r).abs()
        } else if g.to_bits() == r.to_bits() {
            0.0
        } else {
            f64::INFINITY
        };
        if err > x.tol {
            c.n_outside_tol += 1;
        }
        if worst.is_none_or(|(_, e)| err > e) {
            worst = Some((i, err));
            c.worst_got = g;
            c.worst_expected = r;
        }
        if g.is_finite() && r.is_finite() {
            c.max_rel_err = c.max_rel_err.max(err / r.abs().max(REL_ERR_FLOOR));
            sum_sq_err += err * err;
            sum_sq_ref += r * r;
            if float_metrics {
                c.max_bf16_ulp = c.max_bf16_ulp.max(bf16_ulp_distance(g as f32, r as f32));
            }
        } else if err > 0.0 {
            c.max_rel_err = f64::INFINITY;
        }
    }
    if let Some((i, err)) = worst {
        c.max_abs_err = err;
        c.max_abs_err_index = Some(i);
        c.max_abs_err_multi_index = unravel_index(i, x.expected_shape);
    }
    c.nmse = if sum_sq_ref > 0.0 {
        sum_sq_err / sum_sq_ref
    } else if sum_sq_err == 0.0 {
        0.0
    } else {
        f64::INFINITY
    };
    c.worst_ratio = if x.tol > 0.0 {
        c.max_abs_err / x.tol
    } else {
        f64::INFINITY
    };

    // Checksum over the whole backend tensor (the Atlas bar).
    let got_f64: Vec<f64> = (0..got_len).map(|i| x.got.f64_at(i)).collect();
    let (ck_got, abs_weighted) = checksum_f64(&got_f64);
    let scale = abs_weighted.max(1.0);
    let ck_diff = (ck_got - x.ck_expected).abs();
    c.ck_got = ck_got;
    c.ck_rel_diff = ck_diff / scale;
    c.ck_ok = ck_diff <= x.policy.ck_rel * scale;
    c.bit_exact = c.shape_ok && c.n_equal == c.n_compared && ck_diff <= BIT_EXACT_CK_REL * scale;

    if x.policy.row_sets && x.stride == 1 {
        c.index_agreement = row_set_agreement(&x.got, &x.reference, x.expected_shape);
    }

    let non_finite = c.nan_count + c.inf_count;
    c.pass = c.shape_ok && c.n_outside_tol == 0 && c.ck_ok && non_finite == 0;
    c.reason = reason(&c);
    c
}

fn reason(c: &Comparison) -> String {
    if c.pass {
        return if c.bit_exact {
            format!(
                "pass: bit-exact ({} values compared, {})",
                c.n_compared, c.policy_name
            )
        } else {
            format!(
                "pass: max_abs_err {:.3e} within tol {:.3e} (ratio {:.3}), checksum rel diff {:.3e} \
                 within {:.3e}",
                c.max_abs_err, c.tol, c.worst_ratio, c.ck_rel_diff, c.ck_rel
            )
        };
    }
    let mut problems = Vec::new();
    if !c.shape_ok {
        problems.push("shape differs from the reference".to_string());
    }
    if c.nan_count + c.inf_count > 0 {
        problems.push(format!(
            "{} NaN and {} inf values in the tensor",
            c.nan_count, c.inf_count
        ));
    }
    if c.n_outside_tol > 0 {
        problems.push(format!(
            "{} of {} compared values outside tol {:.3e} (worst {:.3e} at {:?}: got {}, expected {})",
            c.n_outside_tol,
            c.n_compared,
            c.tol,
            c.max_abs_err,
            c.max_abs_err_multi_index,
            c.worst_got,
            c.worst_expected
        ));
    }
    if !c.ck_ok {
        problems.push(format!(
            "checksum off: got {}, expected {} (rel diff {:.3e} > {:.3e})",
            c.ck_got, c.ck_expected, c.ck_rel_diff, c.ck_rel
        ));
    }
    if let Some(agreement) = &c.index_agreement {
        if agreement.rows_differing > 0 {
            problems.push(format!(
                "{} of {} index rows differ as sets (min Jaccard {:.3})",
                agreement.rows_differing, agreement.rows, agreement.min_jaccard
            ));
        }
    }
    format!("fail: {}", problems.join("; "))
}

/// Jaccard agreement of each row (last dim) of two whole integer tensors.
fn row_set_agreement(
    got: &Values<'_>,
    reference: &Reference<'_>,
    shape: &[usize],
) -> Option<IndexAgreement> {
    let width = *shape.last()?;
    if width == 0 || got.len() != reference.len() || got.len() % width != 0 {
        return None;
    }
    let rows = got.len() / width;
    let row_set = |value: &dyn Fn(usize) -> f64, r: usize| -> Vec<i64> {
        let mut set: Vec<i64> = (r * width..(r + 1) * width)
            .map(value)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .map(|v| v as i64)
            .collect();
        set.sort_unstable();
        set.dedup();
        set
    };
    let (mut min_jaccard, mut sum_jaccard, mut rows_differing) = (1.0f64, 0.0f64, 0usize);
    for r in 0..rows {
        let a = row_set(&|i| got.f64_at(i), r);
        let b = row_set(&|i| reference.f64_at(i), r);
        let common = a.iter().filter(|v| b.binary_search(v).is_ok()).count();
        let union = a.len() + b.len() - common;
        let jaccard = if union == 0 {
            1.0
        } else {
            common as f64 / union as f64
        };
        if a != b {
            rows_differing += 1;
        }
        min_jaccard = min_jaccard.min(jaccard);
        sum_jaccard += jaccard;
    }
    Some(IndexAgreement {
        rows,
        rows_differing,
        min_jaccard,
        mean_jaccard: if rows == 0 {
            1.0
        } else {
            sum_jaccard / rows as f64
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::policy::{POLICY_EXACT, POLICY_INDEX};

    #[test]
    fn unravel_is_c_order() {
        assert_eq!(unravel_index(0, &[1, 12, 64]), vec![0, 0, 0]);
        assert_eq!(unravel_index(67, &[1, 12, 64]), vec![0, 1, 3]);
        assert_eq!(unravel_index(3, &[]), Vec::<usize>::new());
    }

    #[test]
    fn index_rows_agree_as_sets_when_reordered() {
        let got = [3, 1, -1, 0, 2, 5];
        let reference = [1, 3, -1, 0, 2, 4];
        let c = compare_full(
            Values::I64(&got),
            Values::I64(&reference),
            &[2, 3],
            &POLICY_INDEX,
        );
        assert!(!c.pass);
        let a = c.index_agreement.expect("rows available");
        assert_eq!((a.rows, a.rows_differing), (2, 1));
        assert_eq!(a.min_jaccard, 0.5);
        assert_eq!(a.mean_jaccard, 0.75);
    }

    #[test]
    fn ints_equal_pass_bit_exact() {
        let v = [1i64, 2, 3, 4];
        let c = compare_full(Values::I64(&v), Values::I64(&v), &[4], &POLICY_EXACT);
        assert!(c.pass && c.bit_exact, "{}", c.reason);
        assert_eq!(c.index_agreement, None);
    }
}
