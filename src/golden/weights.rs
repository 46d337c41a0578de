//! Regenerate the fixture's parameters from `weights_meta` (spec §3.5, §4): the filler value of
//! each element, rounded to the parameter's storage dtype, and the checksum the golden records.

use super::schema::{Golden, StorageDtype, WeightMeta};
use crate::num::{bf16_round, e4m3_decode, e4m3_encode, e8m0_decode, e8m0_encode, fixed_value};

/// Most elements `regenerate` builds for one parameter: 2^28 f32 = 1 GiB. The tiny fixture's
/// largest parameter has 20,160 elements; `weights_meta` carries no data, so `n` is only a claim
/// and a hostile or mistaken file must not make us allocate whatever it says.
pub const MAX_REGENERATED_ELEMENTS: usize = 1 << 28;

/// Relative checksum bar for regenerated weights (Atlas): the filler is exact, so only the
/// summation order of the f64 checksum (torch's vs our sequential sum) may differ.
pub const WEIGHT_CK_REL: f64 = 1e-9;

/// Why a parameter could not be regenerated.
#[derive(Debug, thiserror::Error)]
pub enum WeightError {
    /// `n` is above [`MAX_REGENERATED_ELEMENTS`].
    #[error(
        "weights_meta `{name}`: n = {n} exceeds the regeneration cap of {cap} elements \
         (the cap keeps a claimed size from allocating unbounded memory)"
    )]
    TooLarge { name: String, n: usize, cap: usize },
}

/// One value as the parameter stores it: the filler's f32 rounded to `dtype` and read back.
/// `float8_e4m3fn` is encoded and decoded: torch turns values beyond ±448 into NaN rather than
/// saturating, but the filler values of fp8 parameters lie within ±0.5, so no clamping is
/// involved. `float8_e8m0fnu` keeps the power of two torch's cast gives (spec §13.5).
pub fn store_as(value: f32, dtype: StorageDtype) -> f32 {
    match dtype {
        StorageDtype::Bf16 => bf16_round(value),
        StorageDtype::F32 => value,
        StorageDtype::F8E4m3 => e4m3_decode(e4m3_encode(value)),
        StorageDtype::F8E8m0 => e8m0_decode(e8m0_encode(value)),
    }
}

/// The parameter's values as stored (C order), from `fixed_value(name, i, scale, offset)`.
pub fn regenerate(meta: &WeightMeta) -> Result<Vec<f32>, WeightError> {
    if meta.n > MAX_REGENERATED_ELEMENTS {
        return Err(WeightError::TooLarge {
            name: meta.name.clone(),
            n: meta.n,
            cap: MAX_REGENERATED_ELEMENTS,
        });
    }
    Ok((0..meta.n as u64)
        .map(|i| {
            store_as(
                fixed_value(&meta.name, i, meta.scale, meta.offset),
                meta.dtype,
            )
        })
        .collect())
}

/// `Σ f64(v_i)·(i+1)`, summed sequentially in f64 (the golden's `ck`, up to summation order).
pub fn checksum(values: &[f32]) -> f64 {
    values
        .iter()
        .enumerate()
        .fold(0.0f64, |acc, (i, &v)| acc + f64::from(v) * (i as f64 + 1.0))
}

/// The outcome of regenerating one parameter and checking its checksum.
#[derive(Debug, Clone, PartialEq)]
pub struct WeightCheck {
    /// Parameter name as in `weights_meta`.
    pub name: String,
    /// `rel_err <= WEIGHT_CK_REL` (false also when the parameter could not be regenerated).
    pub ok: bool,
    /// `|ck − meta.ck| / max(|meta.ck|, 1)`; infinite when regeneration failed.
    pub rel_err: f64,
    /// Checksum of the regenerated values (NaN when regeneration failed).
    pub ck: f64,
    /// Why regeneration failed, if it did.
    pub error: Option<String>,
}

/// Regenerate one parameter and compare its checksum with `meta.ck`.
pub fn verify(meta: &WeightMeta) -> WeightCheck {
    match regenerate(meta) {
        Ok(values) => {
            let ck = checksum(&values);
            let rel_err = (ck - meta.ck).abs() / meta.ck.abs().max(1.0);
            WeightCheck {
                name: meta.name.clone(),
                ok: rel_err <= WEIGHT_CK_REL,
                rel_err,
                ck,
                error: None,
            }
        }
        Err(err) => WeightCheck {
            name: meta.name.clone(),
            ok: false,
            rel_err: f64::INFINITY,
            ck: f64::NAN,
            error: Some(err.to_string()),
        },
    }
}

/// Verify every `weights_meta` entry in file order.
pub fn verify_all(golden: &Golden) -> Vec<WeightCheck> {
    golden.weights_meta.iter().map(verify).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::schema::WeightKind;

    #[test]
    fn absurd_n_is_refused_without_allocating() {
        let meta = WeightMeta {
            name: "huge".to_string(),
            shape: vec![1_000_000_000_000_000],
            n: 1_000_000_000_000_000,
            scale: 1.0,
            offset: 0.0,
            kind: WeightKind::F32,
            dtype: StorageDtype::F32,
            ck: 0.0,
        };
        let err = regenerate(&meta).unwrap_err().to_string();
        assert!(err.contains("huge") && err.contains("cap"), "{err}");
        let check = verify(&meta);
        assert!(!check.ok && check.error.is_some());
    }

    #[test]
    fn checksum_weights_by_position() {
        assert_eq!(checksum(&[1.0, 2.0, -0.5]), 1.0 + 4.0 - 1.5);
        assert_eq!(checksum(&[]), 0.0);
    }
}
