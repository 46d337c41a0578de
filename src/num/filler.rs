//! The deterministic filler streams of the fixture (spec §4.1).
//!
//! Every weight and every input id of the tiny fixture comes from these u64 streams, so the
//! oracle can rebuild the model from names alone. All arithmetic wraps mod 2^64.

/// The golden-ratio increment of splitmix64, also the per-index salt multiplier.
pub const GOLD: u64 = 0x9E37_79B9_7F4A_7C15;
/// FNV-1a 64-bit offset basis.
const FNV_OFFSET_BASIS: u64 = 0xCBF2_9CE4_8422_2325;
/// FNV-1a 64-bit prime.
const FNV_PRIME: u64 = 0x0000_0100_0000_01B3;
/// 2^24: the number of distinct uniforms the top 24 bits of a raw draw give.
const UNIFORM_STEPS: f64 = 16_777_216.0;

/// FNV-1a 64 over the UTF-8 bytes of `s`: the per-name salt of the streams.
pub fn fnv1a64(s: &str) -> u64 {
    s.bytes().fold(FNV_OFFSET_BASIS, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(FNV_PRIME)
    })
}

/// One splitmix64 output for state `z` (the increment is applied first, as in the reference).
pub fn splitmix64(z: u64) -> u64 {
    let mut z = z.wrapping_add(GOLD);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// `splitmix64(fnv1a64(name) ^ i.wrapping_mul(GOLD))`.
pub fn fixed_raw(name: &str, i: u64) -> u64 {
    splitmix64(fnv1a64(name) ^ i.wrapping_mul(GOLD))
}

/// `f32(((2u-1)*scale + offset) in f64)` with `u = (raw >> 40) / 2^24`.
pub fn fixed_value(name: &str, i: u64, scale: f64, offset: f64) -> f32 {
    let u = (fixed_raw(name, i) >> 40) as f64 / UNIFORM_STEPS;
    // `as f32` from f64 rounds to nearest, ties to even, as torch's cast does.
    ((2.0 * u - 1.0) * scale + offset) as f32
}

/// `fixed_raw(name, i) % m`.
///
/// `m == 0` returns 0 instead of dividing by zero.
pub fn fixed_int(name: &str, i: u64, m: u64) -> u64 {
    fixed_raw(name, i).checked_rem(m).unwrap_or(0)
}

/// `fixed_raw("probe", i)`.
pub fn lcg_probe(i: u64) -> u64 {
    fixed_raw("probe", i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_known_values() {
        // The empty string hashes to the offset basis; "a" is the standard FNV-1a 64 test vector.
        assert_eq!(fnv1a64(""), FNV_OFFSET_BASIS);
        assert_eq!(fnv1a64("a"), 0xAF63_DC4C_8601_EC8C);
    }

    #[test]
    fn splitmix64_known_value() {
        // splitmix64 seeded with 0: first output of the reference generator.
        assert_eq!(splitmix64(0), 0xE220_A839_7B1D_CDAF);
    }

    #[test]
    fn fixed_value_stays_in_range() {
        for i in 0..1000 {
            let v = fixed_value("embed.weight", i, 0.5, 0.0);
            assert!((-0.5..0.5).contains(&v), "index {i}: {v}");
        }
        assert_eq!(fixed_int("x", 3, 0), 0);
    }
}
