//! Regenerate the fixture's parameters from `weights_meta` (spec §3.5, §4): the filler value of
//! each element, rounded to the parameter's storage dtype, and the checksum the golden records.

use super::schema::{Golden, StorageDtype, WeightMeta};
use crate::num::{bf16_round, e4m3_decode, e4m3_encode, e8m0_decode, e8m0_encode, fixed_value};

/// Most elements `regenerate` builds for one parameter: 2^28 f32 = 1 GiB. The tiny fixture's
/// largest parameter has 20,160 elements; `weights_meta` carries no data, so `n` is only a claim
/// and a hostile or mistaken file must not make us allocate whatever it says.
pub const MAX_REGENERATED_ELEMENTS: usize = 1 << 28;

/// Most elements [`verify_all`] regenerates for one golden, over all its entries (about 16.8 M,
/// a fraction of a second). The tiny fixture's 226 parameters hold far fewer; `weights_meta`
/// carries no data, so a few bytes of JSON could otherwise claim hours of work. Entries past the
/// budget are reported as not verified, with the reason.
pub const MAX_VERIFIED_ELEMENTS: u64 = 1 << 24;

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

/// The checksum of the parameter's stored values, computed as they are generated (constant
/// memory: nothing of size `n` is allocated), in the same order as [`checksum`].
pub fn streamed_checksum(meta: &WeightMeta) -> f64 {
    (0..meta.n as u64).fold(0.0f64, |acc, i| {
        let v = store_as(
            fixed_value(&meta.name, i, meta.scale, meta.offset),
            meta.dtype,
        );
        acc + f64::from(v) * (i as f64 + 1.0)
    })
}

fn not_verified(meta: &WeightMeta, why: String) -> WeightCheck {
    WeightCheck {
        name: meta.name.clone(),
        ok: false,
        rel_err: f64::INFINITY,
        ck: f64::NAN,
        error: Some(why),
    }
}

/// Regenerate one parameter (streamed, constant memory) and compare its checksum with
/// `meta.ck`. Entries above [`MAX_REGENERATED_ELEMENTS`] are not regenerated.
pub fn verify(meta: &WeightMeta) -> WeightCheck {
    if meta.n > MAX_REGENERATED_ELEMENTS {
        let err = WeightError::TooLarge {
            name: meta.name.clone(),
            n: meta.n,
            cap: MAX_REGENERATED_ELEMENTS,
        };
        return not_verified(meta, err.to_string());
    }
    let ck = streamed_checksum(meta);
    let rel_err = (ck - meta.ck).abs() / meta.ck.abs().max(1.0);
    WeightCheck {
        name: meta.name.clone(),
        ok: rel_err <= WEIGHT_CK_REL,
        rel_err,
        ck,
        error: None,
    }
}

/// Verify every `weights_meta` entry in file order, regenerating at most
/// [`MAX_VERIFIED_ELEMENTS`] elements in all: the entries past that budget are reported as
/// not verified (with the reason) instead of costing work no data in the file backs.
pub fn verify_all(golden: &Golden) -> Vec<WeightCheck> {
    let mut budget = MAX_VERIFIED_ELEMENTS;
    golden
        .weights_meta
        .iter()
        .map(|meta| match budget.checked_sub(meta.n as u64) {
            Some(left) => {
                budget = left;
                verify(meta)
            }
            None => not_verified(
                meta,
                format!(
                    "not regenerated: n = {} would pass the verification budget of \
                     {MAX_VERIFIED_ELEMENTS} elements per golden ({budget} left)",
                    meta.n
                ),
            ),
        })
        .collect()
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
    fn the_streamed_checksum_equals_the_checksum_of_the_regenerated_values() {
        let meta = WeightMeta {
            name: "layers.0.attn.wq_a.weight".to_string(),
            shape: vec![16, 64],
            n: 1024,
            scale: 0.125,
            offset: 0.0,
            kind: WeightKind::F32,
            dtype: StorageDtype::Bf16,
            ck: 0.0,
        };
        let values = regenerate(&meta).expect("small");
        assert_eq!(
            streamed_checksum(&meta).to_bits(),
            checksum(&values).to_bits()
        );
    }

    #[test]
    fn checksum_weights_by_position() {
        assert_eq!(checksum(&[1.0, 2.0, -0.5]), 1.0 + 4.0 - 1.5);
        assert_eq!(checksum(&[]), 0.0);
    }
}
