//! The deterministic filler streams of the fixture (spec §4.1).
//! SIGNATURES FIXED; bodies to be implemented.

pub const GOLD: u64 = 0x9E37_79B9_7F4A_7C15;
pub fn fnv1a64(s: &str) -> u64 { todo!() }
pub fn splitmix64(z: u64) -> u64 { todo!() }
/// `splitmix64(fnv1a64(name) ^ i.wrapping_mul(GOLD))`.
pub fn fixed_raw(name: &str, i: u64) -> u64 { todo!() }
/// `f32(((2u-1)*scale + offset) in f64)` with `u = (raw >> 40) / 2^24`.
pub fn fixed_value(name: &str, i: u64, scale: f64, offset: f64) -> f32 { todo!() }
/// `fixed_raw(name, i) % m`.
pub fn fixed_int(name: &str, i: u64, m: u64) -> u64 { todo!() }
/// `fixed_raw("probe", i)`.
pub fn lcg_probe(i: u64) -> u64 { todo!() }
