//! The join of a dump with a golden's capture list through a name map: every tensor is mapped,
//! skipped on purpose, or listed as unmapped; every golden capture the dump has no tensor for
//! is listed as missing; a tensor that does not fit its capture (shape, dtype, kind, position)
//! is an error naming the file, the tensor, the capture and both shapes.

use super::error::ImportError;
use super::map::{fill, Layout, MaskForm, NameMap, Rule};
use super::tensor::{checked_count, DType, DumpTensor, TensorValues};
use crate::golden::names::{capture_kind, parse_capture_name, CaptureKind};
use crate::golden::Golden;
use crate::model::{Capture, CaptureDtype, CaptureValues};
use std::collections::HashMap;
use std::path::PathBuf;

/// What the join needs to know of one golden capture.
#[derive(Debug, Clone)]
pub struct CaptureSpec {
    pub name: String,
    pub shape: Vec<usize>,
    pub is_int: bool,
    /// The golden's whole tensor, for integer captures it holds in full (set alignment).
    pub full_int: Option<Vec<i64>>,
}

/// One regime of the golden: its name, token range and captures in golden order.
#[derive(Debug, Clone)]
pub struct RegimeSpec {
    pub name: String,
    pub start_pos: usize,
    pub n_tokens: usize,
    pub captures: Vec<CaptureSpec>,
}

/// The regimes of a golden as the join sees them (positions from the `input_ids` lengths).
pub fn regimes_of(golden: &Golden) -> Vec<RegimeSpec> {
    let mut pos = 0usize;
    golden
        .regimes
        .iter()
        .map(|r| {
            let n_tokens = r.get("input_ids").map(|c| c.n).unwrap_or(0);
            let spec = RegimeSpec {
                name: r.name.clone(),
                start_pos: pos,
                n_tokens,
                captures: r
                    .captures
                    .iter()
                    .map(|c| CaptureSpec {
                        name: c.name.clone(),
                        shape: c.shape.clone(),
                        is_int: c.is_int(),
                        full_int: if c.is_int() { c.full_i64() } else { None },
                    })
                    .collect(),
            };
            pos = pos.saturating_add(n_tokens);
            spec
        })
        .collect()
}

/// One capture rebuilt from a dump.
#[derive(Debug, Clone)]
pub struct ImportedCapture {
    pub capture: Capture,
    /// The tensors it came from (several for per-position files, in position order).
    pub tensors: Vec<String>,
    pub file: PathBuf,
    /// The stored element type (after any dtype override).
    pub source_dtype: DType,
    /// Rows put into the golden's order because the rule compares them as sets.
    pub rows_reordered: usize,
}

/// One regime of the joined dump.
#[derive(Debug, Clone)]
pub struct JoinedRegime {
    pub name: String,
    pub start_pos: usize,
    pub n_tokens: usize,
    /// In the golden's order.
    pub captures: Vec<ImportedCapture>,
}

impl JoinedRegime {
    pub fn get(&self, name: &str) -> Option<&ImportedCapture> {
        self.captures.iter().find(|c| c.capture.name == name)
    }
}

/// A dump joined with a golden: what was mapped, and everything that was not.
#[derive(Debug, Clone)]
pub struct Joined {
    pub dump: PathBuf,
    pub map: String,
    pub regimes: Vec<JoinedRegime>,
    /// Tensors no rule matched.
    pub unmapped: Vec<String>,
    /// Tensors a rule skips on purpose, with its reason.
    pub skipped: Vec<(String, String)>,
    /// Tensors mapped to a capture but not to any regime of the golden, with the reason.
    pub unplaced: Vec<(String, String)>,
    /// Tensors mapped to a (regime, capture) the golden does not hold.
    pub unknown: Vec<(String, String, String)>,
    /// Golden captures (regime, capture) with no tensor.
    pub missing: Vec<(String, String)>,
}

impl Joined {
    /// Number of captures rebuilt.
    pub fn mapped(&self) -> usize {
        self.regimes.iter().map(|r| r.captures.len()).sum()
    }
}

/// Dims with the 1s removed.
fn squeezed(d: &[usize]) -> Vec<usize> {
    d.iter().copied().filter(|&x| x != 1).collect()
}

/// True when `a` and `b` hold the same row-major data: equal counts, and one is the other with
/// adjacent dims merged (after dropping 1s). `[s,192]` fits `[1,s,6,32]`; `[64,s]` does not fit
/// `[1,s,64]` (a transposed layout is never accepted).
pub fn shape_fits(a: &[usize], b: &[usize]) -> bool {
    let (a, b) = (squeezed(a), squeezed(b));
    let bounds = |d: &[usize]| -> Option<Vec<usize>> {
        let mut acc = 1usize;
        d.iter()
            .map(|&x| {
                acc = acc.checked_mul(x)?;
                Some(acc)
            })
            .collect()
    };
    let (Some(ba), Some(bb)) = (bounds(&a), bounds(&b)) else {
        return false;
    };
    if ba.last() != bb.last() {
        return false;
    }
    let subset = |x: &[usize], y: &[usize]| x.iter().all(|v| y.contains(v));
    subset(&ba, &bb) || subset(&bb, &ba)
}

/// The axis a per-position file's rows stack along: 1 for `[1, s, ...]`, else 0.
fn token_axis(shape: &[usize]) -> usize {
    usize::from(shape.len() > 1 && shape[0] == 1)
}

/// Put a row's elements into the reference row's order when both hold the same multiset (a
/// different set keeps its order, and the comparison reports it). Without a reference row, the
/// columns from `canonical_from` go into the reference's canonical order (non-negative
/// ascending, then the -1s); `None` where the reference has no order derivable from the set
/// alone (`moe_indices` are in score order). Returns the permutation (new[j] = old[perm[j]]) if
/// it changed anything.
fn align_row(
    row: &[i64],
    reference: Option<&[i64]>,
    canonical_from: Option<usize>,
) -> Option<Vec<usize>> {
    let n = row.len();
    let mut perm: Vec<usize> = (0..n).collect();
    let reference = reference.filter(|r| r.len() == n);
    if let Some(r) = reference {
        let mut used = vec![false; n];
        let mut out = Vec::with_capacity(n);
        for &want in r {
            match (0..n).find(|&i| !used[i] && row[i] == want) {
                Some(i) => {
                    used[i] = true;
                    out.push(i);
                }
                None => break,
            }
        }
        if out.len() == n {
            perm = out;
        }
    } else if let Some(from) = canonical_from.filter(|&f| f < n) {
        perm[from..].sort_by_key(|&i| (row[i] < 0, row[i]));
    }
    (perm.iter().enumerate().any(|(j, &i)| i != j)).then_some(perm)
}

fn permute_rows<T: Copy>(v: &mut [T], width: usize, perms: &[(usize, Vec<usize>)]) {
    for (r, perm) in perms {
        let row: Vec<T> = v[r * width..(r + 1) * width].to_vec();
        for (j, &i) in perm.iter().enumerate() {
            v[r * width + j] = row[i];
        }
    }
}

struct Piece<'a> {
    tensor: &'a DumpTensor,
    rule: &'a Rule,
}

/// Options of a join beyond the map.
#[derive(Debug, Clone, Copy, Default)]
pub struct JoinOptions {
    /// Window width of `sa_topk_idxs`: set alignment without a full golden row sorts only the
    /// columns after it (the compressed picks; the window part is not a top-k).
    pub window_size: Option<usize>,
}

/// Join `tensors` (from `dump`) with `regimes` through `map`.
pub fn join(
    dump: &std::path::Path,
    tensors: &[DumpTensor],
    map: &NameMap,
    regimes: &[RegimeSpec],
    opts: JoinOptions,
) -> Result<Joined, ImportError> {
    let mut out = Joined {
        dump: dump.to_path_buf(),
        map: map.name.clone(),
        regimes: Vec::new(),
        unmapped: Vec::new(),
        skipped: Vec::new(),
        unplaced: Vec::new(),
        unknown: Vec::new(),
        missing: Vec::new(),
    };
    let by_pos = |p: usize| {
        regimes
            .iter()
            .position(|r| p >= r.start_pos && p - r.start_pos < r.n_tokens.max(1))
    };
    let mut pending: HashMap<(usize, String), Vec<Piece>> = HashMap::new();
    for t in tensors {
        let Some((rule, groups)) = map.decide(&t.name) else {
            out.unmapped.push(t.name.clone());
            continue;
        };
        let Some(template) = &rule.capture else {
            out.skipped
                .push((t.name.clone(), rule.why.clone().unwrap_or_default()));
            continue;
        };
        let filled = fill(template, &groups);
        // A template may name the regime itself: `{regime}/L{layer}.{rest}`.
        let (named_regime, capture) = match filled.split_once('/') {
            Some((r, c)) => (Some(r.to_string()), c.to_string()),
            None => (None, filled),
        };
        let group = |g: &str| groups.iter().find(|(k, _)| k == g).map(|(_, v)| v.as_str());
        let placed: Result<usize, String> = if let Some(name) = &named_regime {
            regimes
                .iter()
                .position(|r| &r.name == name)
                .ok_or_else(|| format!("regime `{name}` is not in the golden"))
        } else if let Some(name) = &rule.regime {
            regimes
                .iter()
                .position(|r| &r.name == name)
                .ok_or_else(|| format!("the rule's regime `{name}` is not in the golden"))
        } else if let Some(name) = group("regime") {
            regimes
                .iter()
                .position(|r| r.name == name)
                .ok_or_else(|| format!("regime `{name}` is not in the golden"))
        } else if let Some(k) = group("occurrence") {
            k.parse::<usize>()
                .ok()
                .filter(|&k| k < regimes.len())
                .ok_or_else(|| {
                    format!(
                        "occurrence {k}, but the golden has {} regimes",
                        regimes.len()
                    )
                })
        } else if let Some(p) = group("pos")
            .map(|p| p.parse::<usize>().ok())
            .or(t.pos.map(Some))
        {
            p.and_then(by_pos)
                .ok_or_else(|| format!("position {p:?} lies in no regime of the golden"))
        } else if regimes.len() == 1 {
            Ok(0)
        } else {
            Err(format!(
                "nothing places it in one of the golden's {} regimes (no regime/pos/occurrence group, no `regime` key)",
                regimes.len()
            ))
        };
        let ri = match placed {
            Ok(ri) => ri,
            Err(why) => {
                out.unplaced.push((t.name.clone(), why));
                continue;
            }
        };
        if !regimes[ri].captures.iter().any(|c| c.name == capture) {
            out.unknown
                .push((t.name.clone(), regimes[ri].name.clone(), capture));
            continue;
        }
        pending
            .entry((ri, capture))
            .or_default()
            .push(Piece { tensor: t, rule });
    }
    for (ri, spec) in regimes.iter().enumerate() {
        let mut caps = Vec::new();
        let mut perms: HashMap<String, Vec<(usize, Vec<usize>)>> = HashMap::new();
        for c in &spec.captures {
            let Some(pieces) = pending.get_mut(&(ri, c.name.clone())) else {
                out.missing.push((spec.name.clone(), c.name.clone()));
                continue;
            };
            let (cap, p) = build(dump, spec, c, pieces, opts)?;
            if let Some(p) = p {
                perms.insert(c.name.clone(), p);
            }
            caps.push(cap);
        }
        // A set-compared `moe_indices` row moves its routing weights with it.
        for cap in caps.iter_mut() {
            let parsed = parse_capture_name(&cap.capture.name);
            if parsed.base != "moe_weights" {
                continue;
            }
            let Some(l) = parsed.layer else { continue };
            if let Some(p) = perms.get(&format!("L{l}.moe_indices")) {
                let width = cap.capture.shape.last().copied().unwrap_or(1).max(1);
                if let CaptureValues::F32(v) = &mut cap.capture.values {
                    if v.len() % width == 0 && p.iter().all(|(r, _)| (r + 1) * width <= v.len()) {
                        permute_rows(v, width, p);
                        cap.rows_reordered = p.len();
                    }
                }
            }
        }
        out.regimes.push(JoinedRegime {
            name: spec.name.clone(),
            start_pos: spec.start_pos,
            n_tokens: spec.n_tokens,
            captures: caps,
        });
    }
    Ok(out)
}

type RowPerms = Vec<(usize, Vec<usize>)>;

/// One capture from its pieces: shape and position checks, concatenation, kind conversion and
/// set alignment.
fn build(
    dump: &std::path::Path,
    spec: &RegimeSpec,
    c: &CaptureSpec,
    pieces: &mut [Piece],
    opts: JoinOptions,
) -> Result<(ImportedCapture, Option<RowPerms>), ImportError> {
    let first = pieces[0].tensor;
    let misfit = |t: &DumpTensor, msg: String| ImportError::Misfit {
        path: t.file.clone(),
        tensor: t.name.clone(),
        regime: spec.name.clone(),
        capture: c.name.clone(),
        msg,
    };
    if pieces.len() > 1 && pieces.iter().any(|p| p.tensor.pos.is_none()) {
        return Err(ImportError::Collision {
            path: dump.to_path_buf(),
            first: pieces[0].tensor.name.clone(),
            second: pieces[1].tensor.name.clone(),
            regime: spec.name.clone(),
            capture: c.name.clone(),
        });
    }
    pieces.sort_by_key(|p| p.tensor.pos);
    let total = checked_count(&c.shape)
        .ok_or_else(|| misfit(first, format!("golden shape {:?} overflows", c.shape)))?;
    let axis = token_axis(&c.shape);
    let row_elems = match c.shape.get(axis) {
        Some(&rows) if rows > 0 && total % rows == 0 => total / rows,
        _ => total.max(1),
    };
    let mut next_pos = spec.start_pos;
    let mut values: Option<TensorValues> = None;
    let mut names = Vec::new();
    let mut dtype = first.dtype;
    for p in pieces.iter() {
        let t = p.tensor;
        let stored: Option<Vec<usize>> = t.shape.as_ref().map(|s| match p.rule.layout {
            Layout::RowMajor => s.clone(),
            Layout::Ggml => s.iter().rev().copied().collect(),
        });
        let count = t.element_count();
        if pieces.len() == 1 {
            let fits = match &stored {
                Some(s) => shape_fits(s, &c.shape),
                None => count == total,
            };
            if !fits {
                let had =
                    stored.map_or(format!("{count} elements (no shape)"), |s| format!("{s:?}"));
                return Err(misfit(
                    t,
                    format!("shape {had} does not fit the golden's {:?}", c.shape),
                ));
            }
            if let Some(pos) = t.pos {
                if pos != spec.start_pos {
                    return Err(misfit(
                        t,
                        format!(
                            "written at position {pos}, but the regime starts at {}",
                            spec.start_pos
                        ),
                    ));
                }
            }
        } else {
            if c.shape.get(axis) != Some(&spec.n_tokens) {
                return Err(misfit(
                    t,
                    format!(
                        "{} per-position pieces, but the golden's {:?} has no token axis of {} to stack them on",
                        pieces.len(),
                        c.shape,
                        spec.n_tokens
                    ),
                ));
            }
            let pos = t.pos.unwrap_or(usize::MAX);
            if pos != next_pos || count % row_elems != 0 || count == 0 {
                return Err(misfit(
                    t,
                    format!(
                        "piece at position {pos} with {count} elements does not continue the rows (expected position {next_pos} and a multiple of {row_elems} elements for {:?})",
                        c.shape
                    ),
                ));
            }
            next_pos = next_pos.saturating_add(count / row_elems);
        }
        let v = t.values(p.rule.dtype)?;
        dtype = p.rule.dtype.unwrap_or(t.dtype);
        names.push(t.name.clone());
        values = Some(match (values, v) {
            (None, v) => v,
            (Some(TensorValues::F32(mut a)), TensorValues::F32(b)) => {
                a.extend(b);
                TensorValues::F32(a)
            }
            (Some(TensorValues::I64(mut a)), TensorValues::I64(b)) => {
                a.extend(b);
                TensorValues::I64(a)
            }
            _ => return Err(misfit(t, "pieces of different element types".into())),
        });
    }
    if pieces.len() > 1 && next_pos != spec.start_pos + spec.n_tokens {
        return Err(misfit(
            first,
            format!(
                "the pieces cover positions {}..{next_pos}, the regime {}..{}",
                spec.start_pos,
                spec.start_pos,
                spec.start_pos + spec.n_tokens
            ),
        ));
    }
    let values = values.unwrap_or(TensorValues::F32(Vec::new()));
    let rule = pieces[0].rule;
    let kind = capture_kind(&c.name);
    let values = to_capture_values(values, c.is_int, rule.mask, kind, dtype)
        .map_err(|msg| misfit(first, msg))?;
    let capture_dtype = match kind {
        _ if c.is_int => CaptureDtype::Int,
        CaptureKind::F32 => CaptureDtype::F32,
        _ => CaptureDtype::Bf16,
    };
    let mut capture = Capture {
        name: c.name.clone(),
        shape: c.shape.clone(),
        dtype: capture_dtype,
        values,
    };
    let mut perms = None;
    let mut rows_reordered = 0;
    if rule.set {
        let width = c.shape.last().copied().unwrap_or(0);
        if let (CaptureValues::I64(v), true) = (&mut capture.values, width > 0) {
            let from = match parse_capture_name(&c.name).base.as_str() {
                "sa_topk_idxs" => opts.window_size.map(|w| w.min(width)),
                "topk_idxs" => Some(0),
                _ => None,
            };
            let mut p = Vec::new();
            for r in 0..v.len() / width {
                let reference = c
                    .full_int
                    .as_ref()
                    .and_then(|f| f.get(r * width..(r + 1) * width));
                if let Some(perm) = align_row(&v[r * width..(r + 1) * width], reference, from) {
                    p.push((r, perm));
                }
            }
            permute_rows(v, width, &p);
            rows_reordered = p.len();
            perms = Some(p);
        }
    }
    Ok((
        ImportedCapture {
            capture,
            tensors: names,
            file: first.file.clone(),
            source_dtype: dtype,
            rows_reordered,
        },
        perms,
    ))
}

/// Values as the capture's kind holds them. Integer captures take integer or bool data, or
/// floats that are whole numbers (a fraction is an error naming the element); additive masks
/// turn 0 into 1 and -inf into 0. Float captures take any float data (a wider float for a bf16
/// capture is fine) and refuse integer data.
fn to_capture_values(
    v: TensorValues,
    is_int: bool,
    mask: MaskForm,
    kind: CaptureKind,
    dtype: DType,
) -> Result<CaptureValues, String> {
    match (v, is_int) {
        (TensorValues::I64(v), true) => {
            if mask == MaskForm::Additive {
                return Err(format!(
                    "the rule says an additive mask but the data are {} integers",
                    dtype.name()
                ));
            }
            Ok(CaptureValues::I64(v))
        }
        (TensorValues::F32(v), true) if mask == MaskForm::Additive => v
            .iter()
            .enumerate()
            .map(|(i, &x)| match x {
                0.0 => Ok(1),
                f32::NEG_INFINITY => Ok(0),
                _ => Err(format!(
                    "additive mask element {i} is {x}, expected 0 or -inf"
                )),
            })
            .collect::<Result<Vec<i64>, String>>()
            .map(CaptureValues::I64),
        (TensorValues::F32(v), true) => v
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                if x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15 {
                    Ok(x as i64)
                } else {
                    Err(format!(
                        "{} data for {} capture: element {i} is {x}, not a whole number",
                        dtype.name(),
                        kind.label()
                    ))
                }
            })
            .collect::<Result<Vec<i64>, String>>()
            .map(CaptureValues::I64),
        (TensorValues::F32(v), false) => Ok(CaptureValues::F32(v)),
        (TensorValues::I64(_), false) => Err(format!(
            "{} integer data for a {} capture (floats expected; a raw bf16 or fp8 payload needs a dtype override)",
            dtype.name(),
            kind.label()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_fit_only_as_the_same_row_major_data() {
        assert!(shape_fits(&[12, 192], &[1, 12, 6, 32]));
        assert!(shape_fits(&[1, 12, 64], &[12, 64]));
        assert!(shape_fits(&[12, 2, 1], &[12, 2]));
        assert!(!shape_fits(&[64, 12], &[1, 12, 64]));
        assert!(!shape_fits(&[2, 12], &[12, 2]));
        assert!(!shape_fits(&[12, 65], &[12, 64]));
        assert!(!shape_fits(&[usize::MAX, 3], &[3]));
    }

    #[test]
    fn set_rows_take_the_reference_order_or_the_canonical_one() {
        assert_eq!(align_row(&[3, 1], Some(&[1, 3]), Some(0)), Some(vec![1, 0]));
        assert_eq!(align_row(&[1, 3], Some(&[1, 3]), Some(0)), None);
        // A different set keeps its own order (the comparison reports it).
        assert_eq!(align_row(&[2, 1], Some(&[1, 3]), Some(0)), None);
        // No reference and no canonical order: unchanged.
        assert_eq!(align_row(&[2, 1], None, None), None);
        // Canonical: window part kept, the rest ascending with -1 last.
        assert_eq!(
            align_row(&[5, 4, 9, -1, 7], None, Some(2)),
            Some(vec![0, 1, 4, 2, 3])
        );
    }

    #[test]
    fn kinds_convert_or_say_why_not() {
        let f = |v: Vec<f32>| TensorValues::F32(v);
        assert_eq!(
            to_capture_values(
                f(vec![2.0, 5.0]),
                true,
                MaskForm::Boolean,
                CaptureKind::Index,
                DType::F32
            ),
            Ok(CaptureValues::I64(vec![2, 5]))
        );
        let e = to_capture_values(
            f(vec![2.5]),
            true,
            MaskForm::Boolean,
            CaptureKind::Index,
            DType::F32,
        )
        .unwrap_err();
        assert!(e.contains("not a whole number"), "{e}");
        assert_eq!(
            to_capture_values(
                f(vec![0.0, f32::NEG_INFINITY]),
                true,
                MaskForm::Additive,
                CaptureKind::Mask,
                DType::F32
            ),
            Ok(CaptureValues::I64(vec![1, 0]))
        );
        assert!(to_capture_values(
            TensorValues::I64(vec![1]),
            false,
            MaskForm::Boolean,
            CaptureKind::Bf16,
            DType::I32
        )
        .is_err());
    }
}
