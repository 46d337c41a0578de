//! A linear layer's weight as the oracle multiplies it: the file's own blocks when the weight
//! source can lend them (a GGUF: decoded chunk by chunk inside the GEMM, so an expert costs its
//! file bytes once and never a whole f32 slab), else the f32 tensor. Both give the same bits.

use super::gemm::{gemm, gemm_range, WeightRows};
use crate::model::stored::StoredMatrix;
use crate::model::{BackendError, Step, WeightError, WeightSource};
use std::ops::Range;
use std::sync::Arc;

/// A `[n, k]` linear weight.
pub enum Linear<'w> {
    Dense(Arc<Vec<f32>>),
    Stored(StoredMatrix<'w>),
}

impl Linear<'_> {
    /// The GEMM operand.
    pub fn rows(&self) -> WeightRows<'_> {
        match self {
            Linear::Dense(t) => WeightRows::F32(t),
            Linear::Stored(s) => WeightRows::Stored(s),
        }
    }

    /// GEMM-bf16 `bf16(x[m, k] · w^T)` over all `n` rows.
    pub fn bf16(&self, x: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        gemm(x, m, k, self.rows(), n, true)
    }

    /// GEMM-f32 `x[m, k] · w^T` over all `n` rows.
    pub fn f32(&self, x: &[f32], m: usize, k: usize, n: usize) -> Vec<f32> {
        gemm(x, m, k, self.rows(), n, false)
    }

    /// GEMM-bf16 against weight rows `rows` only (a group of a grouped projection).
    pub fn bf16_rows(&self, x: &[f32], m: usize, k: usize, rows: Range<usize>) -> Vec<f32> {
        gemm_range(x, m, k, self.rows(), rows, true)
    }
}

/// Fetches the `[shape[0], shape[1]]` linear weight `name` for `step`: the stored blocks when
/// the source lends them (shape checked), else the f32 tensor (shape checked by `expect`).
pub fn linear<'w>(
    weights: &'w dyn WeightSource,
    step: Step,
    name: &str,
    shape: [usize; 2],
) -> Result<Linear<'w>, BackendError> {
    let wrap = |source: WeightError| BackendError::Weight { step, source };
    match weights.stored_matrix(name) {
        Some(Ok(s)) if [s.rows(), s.cols()] == shape => Ok(Linear::Stored(s)),
        Some(Ok(s)) => Err(wrap(WeightError::Shape {
            name: name.to_string(),
            expected: shape.to_vec(),
            found: vec![s.rows(), s.cols()],
            source_desc: weights.describe(),
        })),
        Some(Err(e)) => Err(wrap(e)),
        None => weights
            .expect(name, &shape)
            .map(Linear::Dense)
            .map_err(wrap),
    }
}
