//! Engram hash constants per engram layer: token map, multipliers, primes and column offsets
//! (spec §3.2, §8). Read from `fixture.engram` (v2, v3) or derived with the reference rules when a
//! fixture has none (v1): primes by the restart-at-vocab search, multipliers from numpy's
//! `default_rng(10007 * layer).integers(0, bound, 4)` (PCG64 seeded through SeedSequence, Lemire
//! bounded draw), re-implemented here.

use crate::golden::EngramFixture;
use crate::model::config::EngramConfig;
use crate::model::{BackendError, ModelConfig, Step, WeightSource};

/// Hash constants for every engram layer.
#[derive(Debug, Clone, PartialEq)]
pub struct EngramTables {
    /// `token_map[raw id] = compressed id`.
    pub token_map: Vec<i64>,
    /// `token_map[pad_id]`.
    pub pad_id_compressed: i64,
    /// `[engram layer][lookback]`, odd.
    pub multipliers: Vec<Vec<i64>>,
    /// `[engram layer][ngram - 2][head]`.
    pub primes: Vec<Vec<Vec<i64>>>,
    /// `[engram layer][column]`: exclusive prefix sums of the flattened primes.
    pub offsets: Vec<Vec<i64>>,
}

/// One forward's n-gram hashes with their capture shape `[1, s, n_engram_layers, n_hash_cols]`.
#[derive(Debug, Clone, PartialEq)]
pub struct EngramHashes {
    pub shape: Vec<usize>,
    pub hashes: Vec<i64>,
}

/// The `EngramHash` step as every backend runs it (spec §8): `None` when the config has no
/// engram layers, else [`EngramTables::hash_chunk`] of `ids` at `start_pos` (recording them in
/// the backend's persistent `cache`). A config with engram layers but no tables, or a token
/// outside the token map, is an invalid step.
pub fn engram_hash_step(
    cfg: &ModelConfig,
    tables: Option<&EngramTables>,
    cache: &mut Vec<i64>,
    ids: &[i64],
    start_pos: usize,
    step: Step,
) -> Result<Option<EngramHashes>, BackendError> {
    let Some(ecfg) = cfg.engram.as_ref() else {
        return Ok(None);
    };
    let invalid = |msg: String| BackendError::Invalid { step, msg };
    let tables = tables.ok_or_else(|| {
        invalid("the config has engram layers but no engram tables were given".to_string())
    })?;
    let hashes = tables
        .hash_chunk(ecfg, cache, ids, start_pos)
        .map_err(|e| invalid(e.0))?;
    let shape = vec![1, ids.len(), ecfg.layer_ids.len(), ecfg.n_hash_cols()];
    Ok(Some(EngramHashes { shape, hashes }))
}

/// Tables that contradict the config.
#[derive(Debug, thiserror::Error)]
#[error("engram tables: {0}")]
pub struct EngramError(pub String);

impl EngramTables {
    /// Take the tables a fixture ships, checking them against the config.
    pub fn from_fixture(
        cfg: &EngramConfig,
        e: &EngramFixture,
    ) -> Result<EngramTables, EngramError> {
        let t = EngramTables {
            token_map: e.token_map.clone(),
            pad_id_compressed: e.pad_id_compressed,
            multipliers: e.multipliers.clone(),
            primes: e.primes.clone(),
            offsets: e.offsets.clone(),
        };
        t.validate(cfg)?;
        Ok(t)
    }

    /// The n-gram hash of one forward (spec §8): record the compressed ids of `ids` at
    /// `start_pos..` in the persistent `cache` (grown as needed), then hash every position's
    /// lookback window for every engram layer. Returns `[s, n_engram_layers, n_hash_cols]`; a token
    /// outside the token map is an error naming it.
    pub fn hash_chunk(
        &self,
        cfg: &EngramConfig,
        cache: &mut Vec<i64>,
        ids: &[i64],
        start_pos: usize,
    ) -> Result<Vec<i64>, EngramError> {
        // Positions that take no part in n-grams (image spans); text-only input never has one.
        const DEAD: i64 = -1;
        let s = ids.len();
        if cache.len() < start_pos + s {
            cache.resize(start_pos + s, 0);
        }
        for (t, &id) in ids.iter().enumerate() {
            cache[start_pos + t] = usize::try_from(id)
                .ok()
                .and_then(|i| self.token_map.get(i).copied())
                .ok_or_else(|| {
                    EngramError(format!("token id {id} outside the engram token map"))
                })?;
        }
        let n_eng = cfg.layer_ids.len();
        let ngram = cfg.max_ngram_size;
        let mut hashes = Vec::with_capacity(s * n_eng * cfg.n_hash_cols());
        let mut tok = vec![0i64; ngram];
        for t in 0..s {
            let p = start_pos + t;
            let mut blocked = false;
            for (shift, slot) in tok.iter_mut().enumerate() {
                let src = cache[p.saturating_sub(shift)];
                blocked |= p < shift || src == DEAD;
                *slot = if blocked { self.pad_id_compressed } else { src };
            }
            for li in 0..n_eng {
                let mult = &self.multipliers[li];
                let mut rolling = tok[0].wrapping_mul(mult[0]);
                for i in 1..ngram {
                    rolling ^= tok[i].wrapping_mul(mult[i]);
                    for hh in 0..cfg.n_heads {
                        let col = (i - 1) * cfg.n_heads + hh;
                        hashes.push(
                            rolling.rem_euclid(self.primes[li][i - 1][hh]) + self.offsets[li][col],
                        );
                    }
                }
            }
        }
        Ok(hashes)
    }

    /// Isolated mode: write an earlier regime's token ids at `start` into the hash history
    /// `cache` (compressed; an id outside the token map becomes the pad id, which the reference
    /// tokenizer would never produce but keeps the history well defined).
    pub fn seed_history(&self, cache: &mut Vec<i64>, start: usize, ids: &[i64]) {
        if cache.len() < start + ids.len() {
            cache.resize(start + ids.len(), 0);
        }
        for (i, &id) in ids.iter().enumerate() {
            cache[start + i] = usize::try_from(id)
                .ok()
                .and_then(|x| self.token_map.get(x).copied())
                .unwrap_or(self.pad_id_compressed);
        }
    }

    /// Derive the tables with the reference's rules (identity token map, as the fixture has no
    /// tokenizer).
    pub fn derive(cfg: &EngramConfig) -> Result<EngramTables, EngramError> {
        check_derivable(cfg)?;
        let token_map: Vec<i64> = (0..cfg.compressed_vocab_size as i64).collect();
        let pad = usize::try_from(cfg.pad_id)
            .ok()
            .and_then(|p| token_map.get(p).copied())
            .ok_or_else(|| EngramError(format!("pad id {} outside the token map", cfg.pad_id)))?;
        let primes = derive_primes(cfg)?;
        let offsets = primes
            .iter()
            .map(|layer| {
                let mut acc = 0i64;
                layer
                    .iter()
                    .flatten()
                    .map(|&p| {
                        let o = acc;
                        acc += p;
                        o
                    })
                    .collect()
            })
            .collect();
        let bound = ((i64::MAX as u64) / (cfg.compressed_vocab_size.max(1) as u64) / 2).max(1);
        if bound - 1 <= u32::MAX as u64 {
            return Err(EngramError(format!(
                "compressed vocab {} too large to derive multipliers (numpy's 32-bit draw path)",
                cfg.compressed_vocab_size
            )));
        }
        let multipliers = cfg
            .layer_ids
            .iter()
            .map(|&l| {
                let mut rng = Pcg64::from_seed_sequence(10007u64 * l as u64);
                (0..cfg.max_ngram_size)
                    .map(|_| (2 * rng.bounded(bound) + 1) as i64)
                    .collect()
            })
            .collect();
        let t = EngramTables {
            token_map,
            pad_id_compressed: pad,
            multipliers,
            primes,
            offsets,
        };
        t.validate(cfg)?;
        Ok(t)
    }

    fn validate(&self, cfg: &EngramConfig) -> Result<(), EngramError> {
        let n = cfg.layer_ids.len();
        let cols = cfg.n_hash_cols();
        if self.multipliers.len() != n || self.primes.len() != n || self.offsets.len() != n {
            return Err(EngramError(format!(
                "expected {n} engram layers in multipliers/primes/offsets"
            )));
        }
        for li in 0..n {
            if self.multipliers[li].len() != cfg.max_ngram_size {
                return Err(EngramError(format!(
                    "layer {li}: expected {} multipliers",
                    cfg.max_ngram_size
                )));
            }
            if self.multipliers[li].iter().any(|m| m % 2 == 0) {
                return Err(EngramError(format!("layer {li}: multipliers must be odd")));
            }
            if self.primes[li].len() != cfg.max_ngram_size - 1
                || self.primes[li].iter().any(|h| h.len() != cfg.n_heads)
            {
                return Err(EngramError(format!(
                    "layer {li}: primes must be [ngram-1][heads]"
                )));
            }
            if self.offsets[li].len() != cols {
                return Err(EngramError(format!("layer {li}: expected {cols} offsets")));
            }
            let flat: Vec<i64> = self.primes[li].iter().flatten().copied().collect();
            let mut acc = 0i64;
            for (c, &p) in flat.iter().enumerate() {
                if p <= 1 {
                    return Err(EngramError(format!("layer {li}: prime {p} must be > 1")));
                }
                if self.offsets[li][c] != acc {
                    return Err(EngramError(format!("layer {li}: offset {c} must be {acc}")));
                }
                acc += p;
            }
            if cfg.num_embeddings.get(li).map(|&r| r as i64) != Some(acc) {
                return Err(EngramError(format!(
                    "layer {li}: rows {:?} != sum of primes {acc}",
                    cfg.num_embeddings.get(li)
                )));
            }
        }
        let vocab = cfg.compressed_vocab_size as i64;
        if self.token_map.iter().any(|&t| t < 0 || t >= vocab) {
            return Err(EngramError(
                "token_map entry outside the compressed vocab".into(),
            ));
        }
        Ok(())
    }
}

/// The fp8 table rows and their e8m0 scales that engram layer `l` (index `li` among the engram
/// layers) looks up for hash `ids`, fetched row by row (never the whole table) after checking the
/// ids against the table and the parameters' shapes: `([ids, head_dim], [ids, head_dim/32])`.
pub fn engram_table_rows(
    weights: &dyn WeightSource,
    step: Step,
    cfg: &EngramConfig,
    l: usize,
    li: usize,
    ids: &[i64],
) -> Result<(Vec<f32>, Vec<f32>), BackendError> {
    let invalid = |msg: String| BackendError::Invalid { step, msg };
    let (hd, rows_n) = (cfg.head_dim, cfg.num_embeddings[li]);
    let rows: Vec<usize> = ids
        .iter()
        .map(|&i| {
            usize::try_from(i)
                .ok()
                .filter(|&r| r < rows_n)
                .ok_or_else(|| invalid(format!("hash id {i} outside the table ({rows_n} rows)")))
        })
        .collect::<Result<_, _>>()?;
    let pre = format!("layers.{l}.engram");
    let (table_name, scale_name) = (format!("{pre}.embed.weight"), format!("{pre}.embed.scale"));
    for (name, shape) in [
        (&table_name, vec![rows_n, hd]),
        (&scale_name, vec![rows_n, hd / 32]),
    ] {
        let found = weights.shape(name);
        if found.as_deref() != Some(&shape[..]) {
            return Err(invalid(format!(
                "{name}: expected {shape:?}, found {found:?}"
            )));
        }
    }
    let werr = |source| BackendError::Weight { step, source };
    Ok((
        weights.rows(&table_name, &rows).map_err(werr)?,
        weights.rows(&scale_name, &rows).map_err(werr)?,
    ))
}

fn is_prime(n: i64) -> bool {
    if n < 2 {
        return false;
    }
    let mut d = 2i64;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// Table rows per engram layer under the reference's prime rule (the sum of its primes): what
/// `engram_num_embeddings` must be for a config whose tables are derived.
pub fn derived_rows(cfg: &EngramConfig) -> Result<Vec<usize>, EngramError> {
    Ok(derive_primes(cfg)?
        .iter()
        .map(|l| l.iter().flatten().sum::<i64>() as usize)
        .collect())
}

/// Largest vocabulary (raw or compressed) whose engram tables are derived rather than read:
/// the real model's 16,000,000 raw ids fit with room to spare. The derivation allocates the
/// compressed token map and tests primes by trial division from the raw vocabulary up, so a
/// size a fixture merely states must not reach it unbounded.
pub const MAX_DERIVED_VOCAB: usize = 1 << 25;

/// Most hash primes a derivation searches for (layers x n-gram orders x heads); the real model
/// has 2 x 3 x 8 = 48.
pub const MAX_DERIVED_PRIMES: usize = 1 << 16;

/// Whether the tables of `cfg` can be derived within the bounds above.
fn check_derivable(cfg: &EngramConfig) -> Result<(), EngramError> {
    if cfg.vocab_size > MAX_DERIVED_VOCAB || cfg.compressed_vocab_size > MAX_DERIVED_VOCAB {
        return Err(EngramError(format!(
            "engram vocab {} / compressed vocab {} exceed {MAX_DERIVED_VOCAB}: tables that large \
             must be read from the file, not derived",
            cfg.vocab_size, cfg.compressed_vocab_size
        )));
    }
    let primes = cfg
        .layer_ids
        .len()
        .checked_mul(cfg.max_ngram_size.saturating_sub(1))
        .and_then(|x| x.checked_mul(cfg.n_heads));
    if primes.is_none_or(|p| p > MAX_DERIVED_PRIMES) {
        return Err(EngramError(format!(
            "{} layers x {} n-gram orders x {} heads need more than {MAX_DERIVED_PRIMES} primes",
            cfg.layer_ids.len(),
            cfg.max_ngram_size.saturating_sub(1),
            cfg.n_heads
        )));
    }
    Ok(())
}

/// Per layer, per n-gram size the search restarts at `vocab_size - 1`; each head takes the next
/// prime above the current value that no earlier (layer, size, head) has used.
fn derive_primes(cfg: &EngramConfig) -> Result<Vec<Vec<Vec<i64>>>, EngramError> {
    check_derivable(cfg)?;
    let mut used = std::collections::HashSet::new();
    Ok(cfg
        .layer_ids
        .iter()
        .map(|_| {
            (2..=cfg.max_ngram_size)
                .map(|_| {
                    let mut current = cfg.vocab_size as i64 - 1;
                    (0..cfg.n_heads)
                        .map(|_| {
                            let mut c = current + 1;
                            while !is_prime(c) || used.contains(&c) {
                                c += 1;
                            }
                            used.insert(c);
                            current = c;
                            c
                        })
                        .collect()
                })
                .collect()
        })
        .collect())
}

/// numpy's PCG64 (XSL-RR 128/64) seeded from a SeedSequence of one integer entropy value.
struct Pcg64 {
    state: u128,
    inc: u128,
}

const PCG_MULT: u128 = (2549297995355413924u128 << 64) | 4865540595714422341u128;

impl Pcg64 {
    fn from_seed_sequence(entropy: u64) -> Pcg64 {
        let words = seed_sequence_state(entropy, 8);
        let w64 = |i: usize| (words[2 * i] as u64) | ((words[2 * i + 1] as u64) << 32);
        let seed = ((w64(0) as u128) << 64) | w64(1) as u128;
        let inc = ((w64(2) as u128) << 64) | w64(3) as u128;
        let mut rng = Pcg64 {
            state: 0,
            inc: (inc << 1) | 1,
        };
        rng.step();
        rng.state = rng.state.wrapping_add(seed);
        rng.step();
        rng
    }
    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }
    fn next_u64(&mut self) -> u64 {
        self.step();
        let rot = (self.state >> 122) as u32;
        (((self.state >> 64) as u64) ^ (self.state as u64)).rotate_right(rot)
    }
    /// `integers(0, high)` for one int64 draw: Lemire's multiply-shift with rejection.
    fn bounded(&mut self, high: u64) -> u64 {
        let rng = high - 1;
        if rng == 0 {
            return 0;
        }
        // numpy switches to buffered 32-bit draws when rng < 2^32; the engram bound is
        // (2^63-1)/vocab/2, above 2^32 for any vocab below 2^30, so only the 64-bit path exists here.
        let excl = rng + 1;
        let mut m = (self.next_u64() as u128) * excl as u128;
        let mut left = m as u64;
        if left < excl {
            let threshold = excl.wrapping_neg() % excl;
            while left < threshold {
                m = (self.next_u64() as u128) * excl as u128;
                left = m as u64;
            }
        }
        (m >> 64) as u64
    }
}

/// numpy SeedSequence(entropy).generate_state(n_words, uint32) with pool size 4.
fn seed_sequence_state(entropy: u64, n_words: usize) -> Vec<u32> {
    const INIT_A: u32 = 0x43b0_d7e5;
    const MULT_A: u32 = 0x931e_8875;
    const INIT_B: u32 = 0x8b51_f9dd;
    const MULT_B: u32 = 0x58f3_8ded;
    const MIX_MULT_L: u32 = 0xca01_f9dd;
    const MIX_MULT_R: u32 = 0x4973_f715;
    const XSHIFT: u32 = 16;
    let mut ent: Vec<u32> = Vec::new();
    let mut e = entropy;
    loop {
        ent.push(e as u32);
        e >>= 32;
        if e == 0 {
            break;
        }
    }
    let mut hash_const = INIT_A;
    let hashmix = |mut value: u32, hc: &mut u32| {
        value ^= *hc;
        *hc = hc.wrapping_mul(MULT_A);
        value = value.wrapping_mul(*hc);
        value ^ (value >> XSHIFT)
    };
    let mix = |x: u32, y: u32| {
        let r = x
            .wrapping_mul(MIX_MULT_L)
            .wrapping_sub(y.wrapping_mul(MIX_MULT_R));
        r ^ (r >> XSHIFT)
    };
    let mut pool = [0u32; 4];
    for (i, p) in pool.iter_mut().enumerate() {
        let v = ent.get(i).copied().unwrap_or(0);
        *p = hashmix(v, &mut hash_const);
    }
    for src in 0..4 {
        for dst in 0..4 {
            if src != dst {
                let h = hashmix(pool[src], &mut hash_const);
                pool[dst] = mix(pool[dst], h);
            }
        }
    }
    for &v in ent.iter().skip(4) {
        for p in pool.iter_mut() {
            let h = hashmix(v, &mut hash_const);
            *p = mix(*p, h);
        }
    }
    let mut hc = INIT_B;
    (0..n_words)
        .map(|i| {
            let mut v = pool[i % 4];
            v ^= hc;
            hc = hc.wrapping_mul(MULT_B);
            v = v.wrapping_mul(hc);
            v ^ (v >> XSHIFT)
        })
        .collect()
}

/// Isolated mode: write one engram layer's `[s, cols]` hash ids (engram layer index `li` of
/// `n_eng`) into the forward's `[s, n_eng, cols]` hash tensor. Returns false (and writes
/// nothing) when the sizes disagree.
pub fn splice_layer_hash_ids(
    hashes: &mut [i64],
    s: usize,
    n_eng: usize,
    cols: usize,
    li: usize,
    ids: &[i64],
) -> bool {
    if hashes.len() != s * n_eng * cols || ids.len() != s * cols || li >= n_eng {
        return false;
    }
    for t in 0..s {
        hashes[(t * n_eng + li) * cols..(t * n_eng + li + 1) * cols]
            .copy_from_slice(&ids[t * cols..(t + 1) * cols]);
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> EngramConfig {
        EngramConfig {
            layer_ids: vec![1, 4],
            max_ngram_size: 4,
            n_heads: 2,
            head_dim: 32,
            vocab_size: 64,
            compressed_vocab_size: 64,
            pad_id: 2,
            num_embeddings: vec![462, 630],
        }
    }

    #[test]
    fn derived_tables_match_the_fixture_values() {
        let t = EngramTables::derive(&tiny()).expect("derive");
        assert_eq!(
            t.primes,
            vec![
                vec![vec![67, 71], vec![73, 79], vec![83, 89]],
                vec![vec![97, 101], vec![103, 107], vec![109, 113]]
            ]
        );
        assert_eq!(t.offsets[1], vec![0, 97, 198, 301, 408, 517]);
        assert_eq!(
            t.multipliers,
            vec![
                vec![
                    118650432209603643,
                    7493640653728489,
                    55676810147952557,
                    114555519428547269
                ],
                vec![
                    127364524771245009,
                    7800076361716407,
                    114038564133282483,
                    29348051253447937
                ]
            ]
        );
        assert_eq!(t.pad_id_compressed, 2);
    }
}
