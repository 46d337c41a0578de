//! `golden write`: run the oracle over a fixture and write a golden in the exact Atlas schema
//! (spec §3): key order, the stride rule and its caps, FULL_CAPTURES, Python's float `repr`,
//! `ck` over the whole tensor, compact separators and ASCII-only strings as `json.dump` writes.

use super::SessionError;
use crate::golden::weights::{checksum, regenerate};
use crate::golden::{Golden, WeightMeta};
use crate::model::{Backend, Capture, CaptureValues};
use crate::num::fixed_int;
use serde_json::{Map, Value};
use std::fmt::Write as _;

mod gguf;
pub use gguf::{
    config_difference, config_fixture_entries, engram_tables_hash, write_gguf_golden, GgufIdentity,
    GgufRecording, GGUF_FIXTURE_KEY,
};

/// Captures per float/int capture before striding kicks in (generator constants).
pub const FLOAT_SAMPLE_CAP: usize = 12;
pub const INT_SAMPLE_CAP: usize = 64;

/// Which captures are written whole (stride 1) regardless of size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FullCaptures {
    /// None (v1 behaviour).
    None,
    /// v3's set: the engram inputs and every L0 input the block scaffold needs.
    V3,
    /// Every capture (a `-full` golden for isolated checks).
    All,
    /// What an isolated replay reseeds each step from (the tensors [`crate::model::seed`]
    /// reads: ids and hashes, every block's stream and pre-mix inputs, the last block's
    /// outputs, attention inputs, window rings, compressed-KV and index-key rows, the shared
    /// selection slots) and the MoE routing the near-tie hints hand on; the rest sampled.
    /// `last_block` is the run's last block, whose `h_out` reseeds `Final` (every other
    /// block's `h_out` is the next one's `h_in`).
    Seeds { last_block: usize },
    /// These captures by name.
    Names(Vec<String>),
}

impl FullCaptures {
    fn contains(&self, name: &str) -> bool {
        const V3: [&str; 8] = [
            "L1.engram_in",
            "L4.engram_in",
            "L0.h_in",
            "L0.pre_mix_in",
            "L0.attn_in",
            "L0.attn_out",
            "L0.ffn_in",
            "L0.ffn_out",
        ];
        match self {
            FullCaptures::None => false,
            FullCaptures::V3 => V3.contains(&name),
            FullCaptures::All => true,
            FullCaptures::Seeds { last_block } => is_seed_capture(name, *last_block),
            FullCaptures::Names(names) => names.iter().any(|n| n == name),
        }
    }
}

/// Does an isolated replay reseed from capture `name` (or hand it on as a near-tie hint), in a
/// run whose last block is `last_block`?
pub fn is_seed_capture(name: &str, last_block: usize) -> bool {
    let n = crate::golden::names::parse_capture_name(name);
    matches!(
        n.base.as_str(),
        "input_ids"
            | "engram_hashes"
            | "engram_hash_ids"
            | "engram_in"
            | "h_in"
            | "pre_mix_in"
            | "pre_mix_out"
            | "attn_in"
            | "sa_kv"
            | "compress_kv"
            | "index_k"
            | "moe_indices"
    ) || (n.shared && matches!(n.base.as_str(), "topk_idxs" | "candidates"))
        || (n.base == "h_out" && n.layer == Some(last_block))
}

/// Smallest prime >= max(2, k).
pub fn next_prime(k: usize) -> usize {
    let mut c = k.max(2);
    loop {
        if (2..).take_while(|d| d * d <= c).all(|d| c % d != 0) {
            return c;
        }
        c += 1;
    }
}

/// The generator's stride for a capture of `n` elements.
pub fn stride_for(n: usize, is_int: bool, full: bool) -> usize {
    let cap = if is_int {
        INT_SAMPLE_CAP
    } else {
        FLOAT_SAMPLE_CAP
    };
    if full || n <= cap {
        1
    } else {
        next_prime(n.div_ceil(cap))
    }
}

/// How a golden's captures are strided: the generator's rule (tiny goldens, byte for byte as
/// Atlas writes them) or the rule for goldens recorded on a GGUF at real dims.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sampling {
    /// [`stride_for`]: 12 float / 64 integer samples per capture.
    Atlas,
    /// [`gguf_stride_for`]: at least one sample per element of the last axis.
    PerLastAxis,
}

impl Sampling {
    /// The stride of capture `c` (whole when `full`).
    pub fn stride(self, c: &Capture, full: bool) -> usize {
        let n: usize = c.shape.iter().product();
        let is_int = matches!(c.values, CaptureValues::I64(_));
        match self {
            Sampling::Atlas => stride_for(n, is_int, full),
            Sampling::PerLastAxis => gguf_stride_for(&c.shape, is_int, full),
        }
    }
}

/// The stride of a capture of `shape` in a golden recorded on a GGUF: the largest prime at most
/// `n / max(cap, last)` that does not divide the last axis' length `last` (1, the whole tensor,
/// when there is none).
///
/// Why: with the generator's 12 float samples, a real-dims capture (`sa_q` holds 8 × 64 × 512
/// values) is judged on 12 values and its checksum, and a defect confined to part of every row
/// (RoPE's last 64 of each head's 512 dims, one head, one expert's channels) lands on none of
/// them: only the checksum sees it, and its bar (two bf16 ulps of the checksum's scale) is weak
/// by design. A stride coprime with the last axis visits its residues in turn, and at most
/// `n / last` it leaves at least `last` samples, so every element of that axis is sampled (each
/// at some token and head).
pub fn gguf_stride_for(shape: &[usize], is_int: bool, full: bool) -> usize {
    let n: usize = shape.iter().product();
    let cap = if is_int {
        INT_SAMPLE_CAP
    } else {
        FLOAT_SAMPLE_CAP
    };
    let last = shape.last().copied().unwrap_or(1).max(1);
    if full {
        return 1;
    }
    let is_prime = |c: usize| c >= 2 && (2..).take_while(|d| d * d <= c).all(|d| c % d != 0);
    (2..=n / cap.max(last))
        .rev()
        .find(|&p| is_prime(p) && last % p != 0)
        .unwrap_or(1)
}

/// Python's `repr(float)`: the shortest round-trip digits, fixed notation for decimal
/// exponents in [-4, 16), scientific (`1e-05`, `1.5e+16`) otherwise, always a `.0` or exponent.
pub fn py_float_repr(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    if x == 0.0 {
        return if x.is_sign_negative() {
            "-0.0".into()
        } else {
            "0.0".into()
        };
    }
    let sci = format!("{x:e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mant.starts_with('-');
    let digits: String = mant.chars().filter(|c| c.is_ascii_digit()).collect();
    let sign = if neg { "-" } else { "" };
    if (-4..16).contains(&exp) {
        let decpt = exp + 1;
        let body = if decpt <= 0 {
            format!("0.{}{}", "0".repeat((-decpt) as usize), digits)
        } else if decpt as usize >= digits.len() {
            format!("{}{}.0", digits, "0".repeat(decpt as usize - digits.len()))
        } else {
            format!(
                "{}.{}",
                &digits[..decpt as usize],
                &digits[decpt as usize..]
            )
        };
        format!("{sign}{body}")
    } else {
        let m = if digits.len() > 1 {
            format!("{}.{}", &digits[..1], &digits[1..])
        } else {
            digits
        };
        let es = if exp < 0 { "-" } else { "+" };
        format!("{sign}{m}e{es}{:02}", exp.abs())
    }
}

/// Append `v` as `json.dumps(v, separators=(",", ":"))` would (ASCII-only strings).
pub fn write_py_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&py_float_repr(n.as_f64().unwrap_or(f64::NAN)));
            } else {
                let _ = write!(out, "{n}");
            }
        }
        Value::String(s) => write_py_str(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_py_json(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => write_py_object(out, m.iter()),
    }
}

fn write_py_object<'a>(out: &mut String, entries: impl Iterator<Item = (&'a String, &'a Value)>) {
    out.push('{');
    for (i, (k, x)) in entries.enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_py_str(out, k);
        out.push(':');
        write_py_json(out, x);
    }
    out.push('}');
}

fn write_py_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for u in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{u:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// The token ids of each regime by the fixture's rule: `fixed_int("input_ids", t, vocab)`;
/// regime 0 is the prefill, each later regime decodes the next single token.
pub fn fixture_inputs(golden: &Golden) -> Result<Vec<(String, Vec<i64>, usize)>, SessionError> {
    let f = &golden.fixture;
    let err = |msg: String| SessionError::Fixture {
        source_path: golden.source.display().to_string(),
        field: "fixture".into(),
        msg,
    };
    if f.batch != 1 {
        return Err(err(format!(
            "fixture.batch = {}: only batch 1 is supported",
            f.batch
        )));
    }
    let per_row = f.prefill_len + 2;
    let id = |t: usize| fixed_int("input_ids", t as u64, f.vocab_size as u64) as i64;
    let mut out = Vec::new();
    for (i, name) in f.regimes.iter().enumerate() {
        if i == 0 {
            out.push((name.clone(), (0..f.prefill_len).map(id).collect(), 0));
        } else {
            let pos = f.prefill_len + i - 1;
            if pos >= per_row {
                return Err(err(format!("fixture.regimes: regime {name} needs token {pos}, the input rule has {per_row}")));
            }
            out.push((name.clone(), vec![id(pos)], pos));
        }
    }
    Ok(out)
}

fn capture_json(c: &Capture, full: &FullCaptures, sampling: Sampling) -> Value {
    let n: usize = c.shape.iter().product();
    // `input_ids` is always whole: a replay takes each regime's tokens from it.
    let stride = sampling.stride(c, c.name == "input_ids" || full.contains(&c.name));
    let (ck, data): (f64, Vec<Value>) = match &c.values {
        CaptureValues::F32(v) => (
            v.iter()
                .enumerate()
                .map(|(i, &x)| x as f64 * (i as f64 + 1.0))
                .sum(),
            v.iter()
                .step_by(stride)
                .map(|&x| Value::from(x as f64))
                .collect(),
        ),
        CaptureValues::I64(v) => (
            v.iter()
                .enumerate()
                .map(|(i, &x)| x as f64 * (i as f64 + 1.0))
                .sum(),
            v.iter().step_by(stride).map(|&x| Value::from(x)).collect(),
        ),
    };
    let mut m = Map::new();
    m.insert("shape".into(), Value::from(c.shape.clone()));
    m.insert("n".into(), Value::from(n));
    m.insert("stride".into(), Value::from(stride));
    m.insert("ck".into(), Value::from(ck));
    m.insert("data".into(), Value::Array(data));
    Value::Object(m)
}

fn weight_meta_json(w: &WeightMeta) -> Result<Value, SessionError> {
    let values = regenerate(w).map_err(|e| SessionError::Fixture {
        source_path: "weights_meta".into(),
        field: w.name.clone(),
        msg: e.to_string(),
    })?;
    let mut m = Map::new();
    m.insert("shape".into(), Value::from(w.shape.clone()));
    m.insert("n".into(), Value::from(w.n));
    m.insert("scale".into(), Value::from(w.scale));
    m.insert("offset".into(), Value::from(w.offset));
    m.insert("kind".into(), Value::from(w.kind.label()));
    m.insert("dtype".into(), Value::from(w.dtype.label()));
    m.insert("ck".into(), Value::from(checksum(&values)));
    Ok(Value::Object(m))
}

/// The fixture's provenance keys for a golden this writer produced (`reference` ends with
/// `weights`, e.g. " on a GGUF's weights").
fn stamp_writer(fixture: &mut Map<String, Value>, weights: &str) {
    fixture.insert(
        "reference".into(),
        Value::from(format!(
            "golden-lens {} CPU oracle (Rust, spec ds41-reference.md){weights}",
            env!("CARGO_PKG_VERSION")
        )),
    );
    fixture.insert(
        "kernels".into(),
        Value::from("golden-lens oracle kernels (shim semantics)"),
    );
    fixture.insert("torch".into(), Value::from("none"));
}

/// Run `backend` through the fixture's regimes and return the golden text.
pub fn write_golden(
    golden: &Golden,
    backend: &mut dyn Backend,
    full: &FullCaptures,
) -> Result<String, SessionError> {
    let mut fixture = golden.fixture.raw.clone();
    stamp_writer(&mut fixture, "");
    let mut out = String::new();
    out.push_str("{\"fixture\":");
    write_py_json(&mut out, &Value::Object(fixture));
    out.push_str(",\"weights_meta\":{");
    for (i, w) in golden.weights_meta.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_py_str(&mut out, &w.name);
        out.push(':');
        write_py_json(&mut out, &weight_meta_json(w)?);
    }
    out.push('}');
    // The fixture's regimes and tokens, the backend itself the (live) reference: the stepper
    // runs it and every capture it yields is written.
    let config = super::model_of(golden)?.0;
    let reference = super::reference::TokensReference {
        label: golden.source.display().to_string(),
        config,
        regimes: fixture_inputs(golden)?
            .into_iter()
            .map(|(name, ids, _)| (name, super::reference::RegimeTokens::Given(ids)))
            .collect(),
    };
    write_regimes(
        &mut out,
        reference,
        backend,
        full,
        Sampling::Atlas,
        &mut |_| {},
    )?;
    out.push('}');
    Ok(out)
}

/// Run `backend` as the live reference of `reference`'s regimes and append every capture it
/// yields to `out` as `,"regime":{"capture":{...},...}` (Atlas key order); `each` sees every
/// step as it ends (progress, timing).
fn write_regimes(
    out: &mut String,
    reference: super::reference::TokensReference,
    backend: &mut dyn Backend,
    full: &FullCaptures,
    sampling: Sampling,
    each: &mut dyn FnMut(&super::StepOutcome),
) -> Result<(), SessionError> {
    let mut stepper = super::Stepper::new(
        std::sync::Arc::new(reference),
        vec![Box::new(backend)],
        super::CheckOptions::default(),
    )?;
    let mut regime: Option<usize> = None;
    let mut first = true;
    while let Some(o) = stepper.next_step()? {
        if regime != Some(o.regime_index) {
            if regime.is_some() {
                out.push('}');
            }
            regime = Some(o.regime_index);
            first = true;
            out.push(',');
            write_py_str(out, &o.regime);
            out.push_str(":{");
        }
        for r in &o.results {
            let Some(c) = r.capture_of(0) else {
                continue;
            };
            if !first {
                out.push(',');
            }
            first = false;
            write_py_str(out, &c.name);
            out.push(':');
            write_py_json(out, &capture_json(&c, full, sampling));
        }
        each(&o);
    }
    if regime.is_some() {
        out.push('}');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_float_repr_cases() {
        for (x, want) in [
            (1.0, "1.0"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (1.5e-7, "1.5e-07"),
            (1e16, "1e+16"),
            (1234567890123456.0, "1234567890123456.0"),
            (-0.307547390460968, "-0.307547390460968"),
            (0.1767766952966369, "0.1767766952966369"),
            (10000.0, "10000.0"),
            (1e-20, "1e-20"),
            (-0.0, "-0.0"),
            (123.5, "123.5"),
        ] {
            assert_eq!(py_float_repr(x), want, "{x}");
        }
    }

    #[test]
    fn strides_follow_the_generator_rule() {
        assert_eq!(stride_for(3072, false, false), 257);
        assert_eq!(stride_for(768, false, false), 67);
        assert_eq!(stride_for(144, true, false), 3);
        assert_eq!(stride_for(12, false, false), 1);
        assert_eq!(stride_for(3072, false, true), 1);
    }

    #[test]
    fn gguf_strides_sample_every_element_of_the_last_axis() {
        // sa_q at real dims, prefill 8: 8 x 64 heads x 512 dims.
        let shape = [1, 8, 64, 512];
        let stride = gguf_stride_for(&shape, false, false);
        assert_eq!(stride, 509);
        let n: usize = shape.iter().product();
        let dims: std::collections::HashSet<usize> =
            (0..n).step_by(stride).map(|i| i % 512).collect();
        assert_eq!(dims.len(), 512, "every head dim, RoPE's last 64 included");
        // The generator's rule reaches none of the RoPE dims (448..512) of this capture.
        let atlas = stride_for(n, false, false);
        assert!((0..n).step_by(atlas).all(|i| i % 512 < 448));
        // The stream (hc 4 x dim 5120 per token): every channel.
        assert_eq!(gguf_stride_for(&[1, 8, 4, 5120], false, false), 31);
        // A prime that divides the last axis is skipped (2 would sample only even elements):
        // 39 values in rows of 3 keep every other row; rows of 6 with no coprime prime stay whole.
        assert_eq!(gguf_stride_for(&[13, 3], false, false), 2);
        assert_eq!(gguf_stride_for(&[8, 6], false, false), 1);
        // Small captures and full ones are whole; integers keep their larger cap.
        assert_eq!(gguf_stride_for(&[64], true, false), 1);
        assert_eq!(gguf_stride_for(&[1, 8, 4], false, false), 1);
        assert_eq!(gguf_stride_for(&shape, false, true), 1);
    }

    #[test]
    fn strings_are_ascii_escaped() {
        let mut s = String::new();
        write_py_str(&mut s, "a\"b\\c\u{e9}\u{1f600}");
        assert_eq!(s, "\"a\\\"b\\\\c\\u00e9\\ud83d\\ude00\"");
    }
}
