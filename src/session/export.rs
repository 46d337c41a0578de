//! Exports of what the app found: "export failing captures" writes one JSON in the golden schema
//! (so `golden-lens` loads it back as a golden and `check` reproduces the failures), carrying the
//! metrics, tolerances, every backend's full tensor and the provenance under the top-level
//! `golden_lens` object the loader ignores; one capture also exports as a NumPy `.npy` file.
//! Every write goes through a temporary file and a rename, so a reader never sees half a file.

use super::results::CaptureResult;
use super::Mode;
use crate::golden::compare::Comparison;
use crate::golden::TOP_GOLDEN_LENS;
use crate::golden::{CaptureData, Golden};
use crate::model::CaptureValues;
use serde_json::{json, Map, Value};
use std::path::Path;

/// Why an export failed.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: String, msg: String },
}

/// Where the results came from, written with every export.
#[derive(Debug, Clone, PartialEq)]
pub struct Provenance {
    /// The golden's path (or `<embedded …>` label).
    pub golden_path: String,
    /// fnv1a64 of the golden file's bytes, as 16 hex digits.
    pub golden_hash: String,
    /// The backends, in order (the first is the cross-comparison reference).
    pub backends: Vec<String>,
    /// The GPU adapter's name, when a GPU backend ran.
    pub adapter: Option<String>,
    pub mode: Mode,
    /// The strict (bf16 bit-exact) policies were used.
    pub strict: bool,
    /// The GGUF whose weights the backends ran on; None: the golden's filler weights.
    pub weights: Option<String>,
}

/// fnv1a64 of arbitrary bytes as 16 hex digits (the golden's identity in provenance).
pub fn content_hash_hex(bytes: &[u8]) -> String {
    const OFFSET_BASIS: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let h = bytes
        .iter()
        .fold(OFFSET_BASIS, |h, &b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    format!("{h:016x}")
}

fn finite_or_null(v: f64) -> Value {
    if v.is_finite() {
        json!(v)
    } else {
        Value::Null
    }
}

/// The metrics of one comparison as JSON (non-finite numbers become `null`).
pub fn comparison_json(c: &Comparison) -> Value {
    json!({
        "policy": c.policy_name,
        "pass": c.pass,
        "bit_exact": c.bit_exact,
        "reason": c.reason,
        "tol": c.tol,
        "ck_rel": c.ck_rel,
        "max_abs_err": finite_or_null(c.max_abs_err),
        "max_abs_err_index": c.max_abs_err_multi_index,
        "max_rel_err": finite_or_null(c.max_rel_err),
        "max_bf16_ulp": c.max_bf16_ulp,
        "nmse": finite_or_null(c.nmse),
        "worst_ratio": finite_or_null(c.worst_ratio),
        "ck_got": finite_or_null(c.ck_got),
        "ck_expected": finite_or_null(c.ck_expected),
        "n_compared": c.n_compared,
        "n_outside_tol": c.n_outside_tol,
        "nan_count": c.nan_count,
        "inf_count": c.inf_count,
    })
}

fn values_json(v: &CaptureValues) -> Value {
    match v {
        CaptureValues::F32(v) => {
            Value::Array(v.iter().map(|&x| finite_or_null(f64::from(x))).collect())
        }
        CaptureValues::I64(v) => Value::Array(v.iter().map(|&x| json!(x)).collect()),
    }
}

fn weights_meta_json(golden: &Golden) -> Value {
    let mut m = Map::new();
    for w in &golden.weights_meta {
        let (kind, dtype) = (w.kind.label(), w.dtype.label());
        m.insert(
            w.name.clone(),
            json!({"shape": w.shape, "n": w.n, "scale": w.scale, "offset": w.offset,
                   "kind": kind, "dtype": dtype, "ck": w.ck}),
        );
    }
    Value::Object(m)
}

fn golden_capture_json(c: &crate::golden::GoldenCapture) -> Value {
    let data = match &c.data {
        CaptureData::Float(v) => Value::Array(v.iter().map(|&x| finite_or_null(x)).collect()),
        CaptureData::Int(v) => Value::Array(v.iter().map(|&x| json!(x)).collect()),
    };
    json!({"shape": c.shape, "n": c.n, "stride": c.stride, "ck": c.ck, "data": data})
}

/// The failing-captures document: the golden's fixture and `weights_meta`, each regime with
/// its `input_ids` and the reference captures of every failing result (as the golden holds
/// them), and under `golden_lens` the provenance plus, per failing capture, each backend's
/// full tensor and metrics.
pub fn failing_captures_json(
    golden: &Golden,
    results: &[CaptureResult],
    provenance: &Provenance,
) -> Value {
    let failing: Vec<&CaptureResult> = results.iter().filter(|r| !r.pass()).collect();
    let mut root = Map::new();
    root.insert("fixture".into(), Value::Object(golden.fixture.raw.clone()));
    root.insert("weights_meta".into(), weights_meta_json(golden));
    for regime in &golden.regimes {
        let mut caps = Map::new();
        // `input_ids` always goes along: a check needs it to run the regime.
        if let Some(ids) = regime.get("input_ids") {
            caps.insert(ids.name.clone(), golden_capture_json(ids));
        }
        for r in failing.iter().filter(|r| r.regime == regime.name) {
            if let Some(g) = regime.get(&r.name) {
                caps.insert(g.name.clone(), golden_capture_json(g));
            }
        }
        root.insert(regime.name.clone(), Value::Object(caps));
    }
    let captures: Vec<Value> = failing
        .iter()
        .map(|r| {
            let sides: Vec<Value> = r
                .per_backend
                .iter()
                .map(|b| {
                    json!({
                        "backend": b.backend,
                        "vs_golden": b.vs_golden.as_ref().map(comparison_json),
                        "data": values_json(&b.values),
                    })
                })
                .collect();
            let cross: Vec<Value> = r
                .cross
                .iter()
                .map(|x| json!({"test": x.test, "reference": x.reference, "metrics": comparison_json(&x.cmp)}))
                .collect();
            json!({
                "regime": r.regime,
                "capture": r.name,
                "step": r.step.to_string(),
                "kind": r.kind.label(),
                "shape": r.shape,
                "backends": sides,
                "cross": cross,
            })
        })
        .collect();
    root.insert(
        TOP_GOLDEN_LENS.into(),
        json!({
            "format": "golden-lens failing captures v1",
            "version": env!("CARGO_PKG_VERSION"),
            "provenance": {
                "golden_path": provenance.golden_path,
                "golden_fnv1a64": provenance.golden_hash,
                "backends": provenance.backends,
                "adapter": provenance.adapter,
                "mode": provenance.mode.label(),
                "strict": provenance.strict,
                "weights": provenance.weights.as_deref().unwrap_or("golden filler"),
            },
            "failing": captures,
        }),
    );
    Value::Object(root)
}

/// Write `bytes` to `path` through a temporary file in the same directory and a rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), ExportError> {
    let label = path.display().to_string();
    let io = |source| ExportError::Io {
        path: label.clone(),
        source,
    };
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| ExportError::Invalid {
        path: label.clone(),
        msg: "the path has no file name".into(),
    })?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    std::fs::write(&tmp, bytes).map_err(io)?;
    if let Err(e) = std::fs::rename(&tmp, path) {
        let _ = std::fs::remove_file(&tmp);
        return Err(io(e));
    }
    Ok(())
}

/// Write the failing-captures document to `path` (atomically). Returns how many captures it
/// holds.
pub fn write_failing_captures(
    path: &Path,
    golden: &Golden,
    results: &[CaptureResult],
    provenance: &Provenance,
) -> Result<usize, ExportError> {
    let doc = failing_captures_json(golden, results, provenance);
    let bytes = serde_json::to_vec(&doc).map_err(|e| ExportError::Invalid {
        path: path.display().to_string(),
        msg: format!("cannot serialise: {e}"),
    })?;
    write_atomic(path, &bytes)?;
    Ok(results.iter().filter(|r| !r.pass()).count())
}

/// A NumPy `.npy` (format 1.0) file of `values` with `shape`: little-endian `<f4` or `<i8`,
/// C order.
pub fn npy_bytes(shape: &[usize], values: &CaptureValues) -> Vec<u8> {
    let descr = match values {
        CaptureValues::F32(_) => "<f4",
        CaptureValues::I64(_) => "<i8",
    };
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_text = match dims.len() {
        1 => format!("({},)", dims[0]),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header =
        format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape_text}, }}");
    // Magic (6) + version (2) + header length (2) + header + '\n' is a multiple of 64.
    let unpadded = 10 + header.len() + 1;
    header.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    header.push('\n');
    let mut out = Vec::with_capacity(10 + header.len() + values.len() * 8);
    out.extend_from_slice(b"\x93NUMPY\x01\x00");
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    match values {
        CaptureValues::F32(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
        CaptureValues::I64(v) => v
            .iter()
            .for_each(|x| out.extend_from_slice(&x.to_le_bytes())),
    }
    out
}

/// Write one capture as `.npy` (atomically). Fails when the shape does not match the values.
pub fn write_npy(path: &Path, shape: &[usize], values: &CaptureValues) -> Result<(), ExportError> {
    let count = shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    if count != Some(values.len()) {
        return Err(ExportError::Invalid {
            path: path.display().to_string(),
            msg: format!("shape {shape:?} does not hold {} values", values.len()),
        });
    }
    write_atomic(path, &npy_bytes(shape, values))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden::embedded::default_golden;
    use crate::golden::policy::policy_for_capture;
    use crate::golden::{compare_with_golden, Values};
    use crate::model::Step;
    use crate::session::controller::BackendCapture;
    use std::sync::Arc;

    fn failing_result(golden: &Golden) -> CaptureResult {
        let g = golden.regimes[0].get("logits_full").expect("capture");
        let mut full = vec![0.0f32; g.n];
        for (j, v) in g.samples_f64().iter().enumerate() {
            full[j * g.stride] = *v as f32 + 1.0;
        }
        let cmp = compare_with_golden(
            Values::F32(&full),
            &g.shape,
            g,
            &policy_for_capture(&g.name, false),
        );
        assert!(!cmp.pass);
        CaptureResult {
            order: 0,
            regime_index: 0,
            regime: golden.regimes[0].name.clone(),
            step: Step::Final,
            name: g.name.clone(),
            kind: g.kind(),
            shape: g.shape.clone(),
            per_backend: vec![BackendCapture {
                backend: "cpu".into(),
                values: Arc::new(CaptureValues::F32(full)),
                vs_golden: Some(cmp),
                triage: None,
                budget: None,
                violations: Vec::new(),
            }],
            cross: Vec::new(),
        }
    }

    fn provenance() -> Provenance {
        Provenance {
            golden_path: "<embedded>".into(),
            golden_hash: content_hash_hex(b"x"),
            backends: vec!["cpu".into()],
            adapter: None,
            mode: Mode::Isolated,
            strict: false,
            weights: None,
        }
    }

    #[test]
    fn failing_export_loads_back_as_a_golden() {
        let golden = default_golden().expect("golden");
        let r = failing_result(&golden);
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("fail.json");
        let n = write_failing_captures(&path, &golden, std::slice::from_ref(&r), &provenance())
            .expect("write");
        assert_eq!(n, 1);
        let back = Golden::load(&path).expect("loads");
        assert_eq!(back.regimes.len(), golden.regimes.len());
        let cap = back.regimes[0].get("logits_full").expect("kept");
        let orig = golden.regimes[0].get("logits_full").expect("orig");
        assert_eq!(cap.samples_f64(), orig.samples_f64());
        assert_eq!(cap.ck, orig.ck);
        assert!(back.regimes[1].get("input_ids").is_some());
        assert!(back.regimes[1].get("logits_full").is_none());
        assert_eq!(back.weights_meta.len(), golden.weights_meta.len());
        let raw: Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("json");
        assert_eq!(raw["golden_lens"]["provenance"]["mode"], "isolated");
        assert_eq!(
            raw["golden_lens"]["failing"][0]["backends"][0]["vs_golden"]["pass"],
            false
        );
        // No temp file is left behind.
        let names: Vec<_> = std::fs::read_dir(dir.path())
            .expect("ls")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name())
            .collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn an_unknown_top_level_key_is_still_rejected() {
        let golden = default_golden().expect("golden");
        let mut doc = failing_captures_json(&golden, &[], &provenance());
        doc.as_object_mut()
            .expect("object")
            .insert("surprise".into(), json!(1));
        let err = Golden::parse(&doc.to_string(), Path::new("x.json")).expect_err("rejected");
        assert!(err.to_string().contains("unknown key `surprise`"), "{err}");
    }

    #[test]
    fn npy_header_is_aligned_and_describes_the_data() {
        let bytes = npy_bytes(&[2, 3], &CaptureValues::F32(vec![1.0; 6]));
        assert_eq!(&bytes[..8], b"\x93NUMPY\x01\x00");
        let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
        assert_eq!((10 + header_len) % 64, 0);
        let header = std::str::from_utf8(&bytes[10..10 + header_len]).expect("ascii");
        assert!(header.contains("'descr': '<f4'"));
        assert!(header.contains("'shape': (2, 3)"));
        assert!(header.ends_with('\n'));
        assert_eq!(bytes.len(), 10 + header_len + 6 * 4);
        let ints = npy_bytes(&[3], &CaptureValues::I64(vec![1, -1, 7]));
        assert!(std::str::from_utf8(&ints[10..74])
            .expect("ascii")
            .contains("(3,)"));
        assert_eq!(&ints[ints.len() - 8..], &7i64.to_le_bytes());
    }

    #[test]
    fn npy_rejects_a_shape_that_does_not_fit() {
        let dir = tempfile::tempdir().expect("dir");
        let err = write_npy(
            &dir.path().join("x.npy"),
            &[4],
            &CaptureValues::F32(vec![0.0; 3]),
        )
        .expect_err("mismatch");
        assert!(err.to_string().contains("does not hold 3 values"));
    }
}
