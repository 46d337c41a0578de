//! The golden loader proper: one streaming pass over the JSON (serde's visitor API) that builds
//! the typed [`Golden`] as it reads. Capture data go straight from the text into `Vec<f64>` /
//! `Vec<i64>` (8 bytes a value, never a tree node per element); only the small parts (the
//! fixture, one `weights_meta` entry, a capture's scalar fields) pass through the [`Json`] tree.
//! Every lookup is a hash lookup, so validation is linear in the file whatever its regime,
//! capture or parameter counts.
//!
//! A validation failure is recorded in a [`Failure`] slot and serde is unwound with a
//! placeholder error, so messages are exactly ours (no serde position appended); a syntax error
//! keeps serde's position, which `json_error` turns into line, column, byte and JSON path.

use super::fixture::build_fixture;
use super::json::{as_f64, as_i64, as_list, as_usize, element_count, Fields, Json};
use super::schema::{
    CaptureData, Fixture, Golden, GoldenCapture, Regime, StorageDtype, WeightKind, WeightMeta,
};
use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::path::Path;

pub(super) const TOP_FIXTURE: &str = "fixture";
pub(super) const TOP_WEIGHTS: &str = "weights_meta";
/// Optional top-level object golden-lens exports carry (metrics, test tensors, provenance);
/// the loader ignores its contents so an export loads back as a golden.
pub const TOP_GOLDEN_LENS: &str = "golden_lens";

/// Why a parse stopped: our own validation (the message is complete) or serde's (syntax,
/// truncation, a number out of range; the error carries the position).
pub(super) enum ParseFailure {
    Invalid(String),
    Syntax(serde_json::Error),
}

/// Parses and validates a whole golden from a serde_json deserializer (a string or a reader).
pub(super) fn parse_golden<'de, R: serde_json::de::Read<'de>>(
    de: &mut serde_json::Deserializer<R>,
    source: &Path,
) -> Result<Golden, ParseFailure> {
    let failure = Failure::default();
    let parts = TopSeed { failure: &failure }.deserialize(&mut *de);
    let parts = match parts {
        Ok(parts) => parts,
        Err(e) => {
            return Err(match failure.take() {
                Some(msg) => ParseFailure::Invalid(msg),
                None => ParseFailure::Syntax(e),
            })
        }
    };
    de.end().map_err(ParseFailure::Syntax)?;
    assemble(parts, source).map_err(ParseFailure::Invalid)
}

/// The first validation message of a pass.
#[derive(Default)]
struct Failure(RefCell<Option<String>>);

impl Failure {
    /// Record `msg` (the first one wins) and return the error that unwinds serde.
    fn fail<E: de::Error>(&self, msg: String) -> E {
        let mut slot = self.0.borrow_mut();
        if slot.is_none() {
            *slot = Some(msg);
        }
        E::custom("golden validation failed")
    }
    fn check<T, E: de::Error>(&self, result: Result<T, String>) -> Result<T, E> {
        result.map_err(|msg| self.fail(msg))
    }
    fn take(&self) -> Option<String> {
        self.0.borrow_mut().take()
    }
}

/// What the top-level pass collects; `assemble` cross-checks it.
struct Parts {
    fixture: Option<Fixture>,
    weights_meta: Option<Vec<WeightMeta>>,
    /// Regimes by name, and their keys in file order.
    regimes: HashMap<String, Regime>,
    order: Vec<String>,
}

fn assemble(mut parts: Parts, source: &Path) -> Result<Golden, String> {
    let fixture = parts.fixture.ok_or("top level: missing key `fixture`")?;
    let weights_meta = parts
        .weights_meta
        .ok_or("top level: missing key `weights_meta`")?;
    // Regimes read before the fixture could not be checked against its list then.
    let listed: HashSet<&str> = fixture.regimes.iter().map(String::as_str).collect();
    if let Some(key) = parts.order.iter().find(|k| !listed.contains(k.as_str())) {
        return Err(unknown_top_key(key, &fixture));
    }
    let mut regimes = Vec::with_capacity(fixture.regimes.len());
    for name in &fixture.regimes {
        let regime = parts.regimes.remove(name).ok_or_else(|| {
            format!("regime `{name}` is listed in fixture.regimes but missing from the file")
        })?;
        regimes.push(regime);
    }
    Ok(Golden {
        source: source.to_path_buf(),
        fixture,
        weights_meta,
        regimes,
    })
}

/// Longest list of regime names quoted in an unknown-key message.
const MAX_LISTED_REGIMES: usize = 8;

fn unknown_top_key(key: &str, fixture: &Fixture) -> String {
    let shown: Vec<&String> = fixture.regimes.iter().take(MAX_LISTED_REGIMES).collect();
    let more = fixture.regimes.len().saturating_sub(shown.len());
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(
        "top level: unknown key `{key}` (not `fixture`, `weights_meta` or a regime listed in \
         fixture.regimes {shown:?}{tail})"
    )
}

/// Visitor methods for every JSON value that is not an object: they fail with "`ctx`: expected
/// an object, got …" (a list is only counted, never kept).
macro_rules! refuse_non_objects {
    () => {
        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Bool(v).describe()))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Int(v.into()).describe()))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Int(v.into()).describe()))
        }
        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Float(v).describe()))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Str(v.to_string()).describe()))
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Err(self.refuse(Json::Null.describe()))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let n = count_elements(&mut seq)?;
            Err(self.refuse(format!("a list of {n} values")))
        }
    };
}

/// Consumes the rest of a list without keeping it, and counts its elements.
fn count_elements<'de, A: SeqAccess<'de>>(seq: &mut A) -> Result<usize, A::Error> {
    let mut n = 0usize;
    while seq.next_element::<IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// Consumes the rest of an object without keeping it, and counts its keys.
fn count_entries<'de, A: MapAccess<'de>>(map: &mut A) -> Result<usize, A::Error> {
    let mut n = 0usize;
    while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {
        n += 1;
    }
    Ok(n)
}

/// What the non-object visitor methods need from each visitor.
trait ObjectContext {
    fn failure(&self) -> &Failure;
    fn ctx(&self) -> String;
    /// `an object` (or `a JSON object` at the top level).
    fn noun(&self) -> &'static str {
        "an object"
    }
    fn refuse<E: de::Error>(&self, found: String) -> E {
        self.failure().fail(format!(
            "{}: expected {}, got {found}",
            self.ctx(),
            self.noun()
        ))
    }
}

// ---------------------------------------------------------------------------------------------
// Top level

struct TopSeed<'f> {
    failure: &'f Failure,
}

impl<'de> DeserializeSeed<'de> for TopSeed<'_> {
    type Value = Parts;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Parts, D::Error> {
        d.deserialize_any(TopVisitor {
            failure: self.failure,
        })
    }
}

struct TopVisitor<'f> {
    failure: &'f Failure,
}

impl ObjectContext for TopVisitor<'_> {
    fn failure(&self) -> &Failure {
        self.failure
    }
    fn ctx(&self) -> String {
        "top level".into()
    }
    fn noun(&self) -> &'static str {
        "a JSON object"
    }
}

impl<'de> Visitor<'de> for TopVisitor<'_> {
    type Value = Parts;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a golden (a JSON object)")
    }
    refuse_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Parts, A::Error> {
        let failure = self.failure;
        let mut seen: HashSet<String> = HashSet::new();
        let mut listed: Option<HashSet<String>> = None;
        let mut parts = Parts {
            fixture: None,
            weights_meta: None,
            regimes: HashMap::new(),
            order: Vec::new(),
        };
        while let Some(key) = map.next_key::<String>()? {
            if !seen.insert(key.clone()) {
                return Err(failure.fail(format!("top level: duplicate top-level key `{key}`")));
            }
            match key.as_str() {
                TOP_FIXTURE => {
                    let tree: Json = map.next_value()?;
                    let fixture = failure.check(build_fixture(&tree))?;
                    listed = Some(fixture.regimes.iter().cloned().collect());
                    parts.fixture = Some(fixture);
                }
                TOP_WEIGHTS => {
                    parts.weights_meta = Some(map.next_value_seed(WeightsSeed { failure })?);
                }
                TOP_GOLDEN_LENS => {
                    map.next_value::<IgnoredAny>()?;
                }
                _ => {
                    // An unknown key after the fixture is skipped unread (and reported once the
                    // required keys are known to be there); one before it is parsed as a regime
                    // and checked in `assemble`.
                    if listed.as_ref().is_some_and(|l| !l.contains(&key)) {
                        map.next_value::<IgnoredAny>()?;
                        parts.order.push(key);
                        continue;
                    }
                    let regime = map.next_value_seed(RegimeSeed {
                        failure,
                        name: &key,
                    })?;
                    parts.regimes.insert(key.clone(), regime);
                    parts.order.push(key);
                }
            }
        }
        Ok(parts)
    }
}

// ---------------------------------------------------------------------------------------------
// weights_meta

struct WeightsSeed<'f> {
    failure: &'f Failure,
}

impl<'de> DeserializeSeed<'de> for WeightsSeed<'_> {
    type Value = Vec<WeightMeta>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl ObjectContext for WeightsSeed<'_> {
    fn failure(&self) -> &Failure {
        self.failure
    }
    fn ctx(&self) -> String {
        TOP_WEIGHTS.into()
    }
}

impl<'de> Visitor<'de> for WeightsSeed<'_> {
    type Value = Vec<WeightMeta>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("the weights_meta object")
    }
    refuse_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut seen: HashSet<String> = HashSet::new();
        let mut out = Vec::new();
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                return Err(self
                    .failure
                    .fail(format!("weights_meta: duplicate parameter `{name}`")));
            }
            // One entry is a handful of scalars: the tree is small and short-lived.
            let body: Json = map.next_value()?;
            out.push(self.failure.check(build_weight_meta(&name, &body))?);
        }
        Ok(out)
    }
}

fn build_weight_meta(name: &str, body: &Json) -> Result<WeightMeta, String> {
    let f = Fields::new(body, format!("weights_meta `{name}`"), "field")?;
    f.only(&["shape", "n", "scale", "offset", "kind", "dtype", "ck"])?;
    let shape = f.list_of("shape", as_usize)?;
    let n = f.usize("n")?;
    let count = element_count(&shape).ok_or_else(|| {
        f.bad(
            "shape",
            &format!("element count of {shape:?} overflows usize"),
        )
    })?;
    if count != n {
        return Err(f.bad(
            "n",
            &format!("is {n} but shape {shape:?} has {count} elements"),
        ));
    }
    let kind = match f.string("kind")?.as_str() {
        "f32" => WeightKind::F32,
        "fp8" => WeightKind::Fp8,
        "e8m0" => WeightKind::E8m0,
        other => return Err(f.bad("kind", &format!("`{other}` is not one of f32, fp8, e8m0"))),
    };
    let dtype = match f.string("dtype")?.as_str() {
        "bfloat16" => StorageDtype::Bf16,
        "float32" => StorageDtype::F32,
        "float8_e4m3fn" => StorageDtype::F8E4m3,
        "float8_e8m0fnu" => StorageDtype::F8E8m0,
        other => {
            return Err(f.bad(
                "dtype",
                &format!(
                    "`{other}` is not one of bfloat16, float32, float8_e4m3fn, float8_e8m0fnu"
                ),
            ))
        }
    };
    let consistent = matches!(
        (kind, dtype),
        (WeightKind::F32, StorageDtype::Bf16 | StorageDtype::F32)
            | (WeightKind::Fp8, StorageDtype::F8E4m3)
            | (WeightKind::E8m0, StorageDtype::F8E8m0)
    );
    if !consistent {
        return Err(f.bad(
            "dtype",
            &format!("{dtype:?} does not go with kind {kind:?}"),
        ));
    }
    Ok(WeightMeta {
        name: name.to_string(),
        shape,
        n,
        scale: f.f64("scale")?,
        offset: f.f64("offset")?,
        kind,
        dtype,
        ck: f.f64("ck")?,
    })
}

// ---------------------------------------------------------------------------------------------
// Regimes and captures

struct RegimeSeed<'a> {
    failure: &'a Failure,
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for RegimeSeed<'_> {
    type Value = Regime;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Regime, D::Error> {
        d.deserialize_any(self)
    }
}

impl ObjectContext for RegimeSeed<'_> {
    fn failure(&self) -> &Failure {
        self.failure
    }
    fn ctx(&self) -> String {
        format!("regime `{}`", self.name)
    }
}

impl<'de> Visitor<'de> for RegimeSeed<'_> {
    type Value = Regime;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a regime (an object of captures)")
    }
    refuse_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Regime, A::Error> {
        let mut captures = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        while let Some(capture) = map.next_key::<String>()? {
            if index.contains_key(&capture) {
                return Err(self.failure.fail(format!(
                    "regime `{}`: duplicate capture name `{capture}`",
                    self.name
                )));
            }
            let body = map.next_value_seed(CaptureSeed {
                failure: self.failure,
                regime: self.name,
                name: &capture,
            })?;
            index.insert(capture, captures.len());
            captures.push(body);
        }
        Ok(Regime::with_index(self.name.to_string(), captures, index))
    }
}

struct CaptureSeed<'a> {
    failure: &'a Failure,
    regime: &'a str,
    name: &'a str,
}

impl<'de> DeserializeSeed<'de> for CaptureSeed<'_> {
    type Value = GoldenCapture;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<GoldenCapture, D::Error> {
        d.deserialize_any(self)
    }
}

impl ObjectContext for CaptureSeed<'_> {
    fn failure(&self) -> &Failure {
        self.failure
    }
    fn ctx(&self) -> String {
        format!("regime `{}`, capture `{}`", self.regime, self.name)
    }
}

/// The fields of a capture object.
const CAPTURE_FIELDS: [&str; 5] = ["shape", "n", "stride", "ck", "data"];

impl<'de> Visitor<'de> for CaptureSeed<'_> {
    type Value = GoldenCapture;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a capture object")
    }
    refuse_non_objects!();
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<GoldenCapture, A::Error> {
        let ctx = self.ctx();
        let fail = |msg: String| -> A::Error { self.failure.fail(msg) };
        let mut scalars: [Option<Json>; 4] = [None, None, None, None];
        let mut data: Option<Data> = None;
        while let Some(key) = map.next_key::<String>()? {
            let Some(slot) = CAPTURE_FIELDS.iter().position(|&f| f == key) else {
                return Err(fail(format!(
                    "{ctx}: unknown field `{key}` (expected {})",
                    CAPTURE_FIELDS.join(", ")
                )));
            };
            let taken = if slot == 4 {
                data.is_some()
            } else {
                scalars[slot].is_some()
            };
            if taken {
                return Err(fail(format!("{ctx}: duplicate field `{key}`")));
            }
            if slot == 4 {
                // The expected length, when `n` and `stride` came first (as they do in every
                // generator's output), stops storing at the first value too many.
                let expected = expected_len(scalars[1].as_ref(), scalars[2].as_ref());
                data = Some(map.next_value_seed(DataSeed {
                    failure: self.failure,
                    ctx: &ctx,
                    expected,
                })?);
            } else {
                scalars[slot] = Some(map.next_value()?);
            }
        }
        let [shape, n, stride, ck] = scalars;
        self.failure
            .check(finish_capture(self.name, &ctx, shape, n, stride, ck, data))
    }
}

/// `ceil(n / stride)` from the raw fields, when both are valid.
fn expected_len(n: Option<&Json>, stride: Option<&Json>) -> Option<usize> {
    let n = as_usize(n?).ok()?;
    let stride = as_usize(stride?).ok().filter(|&s| s > 0)?;
    Some(n.div_ceil(stride))
}

/// The capture's cross-checks, in the order of the fields in the file: shape, n (against the
/// shape), stride, ck, data (length, then element kinds against the capture's kind).
fn finish_capture(
    name: &str,
    ctx: &str,
    shape: Option<Json>,
    n: Option<Json>,
    stride: Option<Json>,
    ck: Option<Json>,
    data: Option<Data>,
) -> Result<GoldenCapture, String> {
    let bad = |key: &str, what: &str| format!("{ctx}: field `{key}`: {what}");
    let missing = |key: &str| format!("{ctx}: missing field `{key}`");
    let shape = shape.ok_or_else(|| missing("shape"))?;
    let shape = as_list(&shape)
        .and_then(|items| {
            items
                .iter()
                .enumerate()
                .map(|(i, v)| as_usize(v).map_err(|what| format!("element {i}: {what}")))
                .collect::<Result<Vec<_>, _>>()
        })
        .map_err(|what| bad("shape", &what))?;
    let n = as_usize(&n.ok_or_else(|| missing("n"))?).map_err(|what| bad("n", &what))?;
    let count = element_count(&shape).ok_or_else(|| {
        bad(
            "shape",
            &format!("element count of {shape:?} overflows usize"),
        )
    })?;
    if count != n {
        return Err(bad(
            "n",
            &format!("is {n} but shape {shape:?} has {count} elements"),
        ));
    }
    let stride =
        as_usize(&stride.ok_or_else(|| missing("stride"))?).map_err(|what| bad("stride", &what))?;
    if stride == 0 {
        return Err(bad("stride", "must be >= 1, got 0"));
    }
    let ck = as_f64(&ck.ok_or_else(|| missing("ck"))?).map_err(|what| bad("ck", &what))?;
    let data = data.ok_or_else(|| missing("data"))?;
    let expected_len = n.div_ceil(stride);
    if data.len != expected_len {
        return Err(bad(
            "data",
            &format!(
                "has {} values but ceil(n / stride) = ceil({n} / {stride}) = {expected_len}",
                data.len
            ),
        ));
    }
    let kind = super::names::capture_kind(name);
    let values = match data.values {
        Values::Empty if kind.is_int() => CaptureData::Int(Vec::new()),
        Values::Empty => CaptureData::Float(Vec::new()),
        Values::Int(v) => CaptureData::Int(v),
        Values::Float(v) => CaptureData::Float(v),
    };
    let is_int = matches!(values, CaptureData::Int(_));
    if data.len > 0 && ((kind.is_int() && !is_int) || (kind.is_float() && is_int)) {
        return Err(bad(
            "data",
            &format!(
                "a `{}` capture must hold {}, but its data are {}",
                kind.label(),
                if kind.is_int() { "integers" } else { "floats" },
                if is_int { "integers" } else { "floats" },
            ),
        ));
    }
    Ok(GoldenCapture {
        name: name.to_string(),
        shape,
        n,
        stride,
        ck,
        data: values,
    })
}

// ---------------------------------------------------------------------------------------------
// Capture data, streamed

/// A capture's data list as read: every value of one kind, and the list's full length.
struct Data {
    values: Values,
    len: usize,
}

enum Values {
    Empty,
    Int(Vec<i64>),
    Float(Vec<f64>),
}

struct DataSeed<'a> {
    failure: &'a Failure,
    ctx: &'a str,
    /// `ceil(n / stride)` when known: values past it are counted, not stored.
    expected: Option<usize>,
}

impl<'de> DeserializeSeed<'de> for DataSeed<'_> {
    type Value = Data;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Data, D::Error> {
        d.deserialize_any(self)
    }
}

impl DataSeed<'_> {
    fn not_a_list<E: de::Error>(&self, found: String) -> E {
        self.failure.fail(format!(
            "{}: field `data`: expected a list, got {found}",
            self.ctx
        ))
    }
    fn element<E: de::Error>(&self, i: usize, what: String) -> E {
        self.failure
            .fail(format!("{}: field `data`: element {i}: {what}", self.ctx))
    }
}

impl<'de> Visitor<'de> for DataSeed<'_> {
    type Value = Data;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a list of numbers")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Data, E> {
        Err(self.not_a_list(Json::Bool(v).describe()))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Data, E> {
        Err(self.not_a_list(Json::Int(v.into()).describe()))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Data, E> {
        Err(self.not_a_list(Json::Int(v.into()).describe()))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Data, E> {
        Err(self.not_a_list(Json::Float(v).describe()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Data, E> {
        Err(self.not_a_list(Json::Str(v.to_string()).describe()))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Data, E> {
        Err(self.not_a_list(Json::Null.describe()))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Data, A::Error> {
        let n = count_entries(&mut map)?;
        Err(self.not_a_list(format!("an object with {n} keys")))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Data, A::Error> {
        let mut values = Values::Empty;
        let mut len = 0usize;
        let keep = self.expected.unwrap_or(usize::MAX);
        while let Some(item) = seq.next_element_seed(NumberSeed)? {
            let i = len;
            len += 1;
            let number = item.map_err(|found| {
                self.element::<A::Error>(i, format!("expected a number, got {found}"))
            })?;
            if i >= keep {
                continue; // counted for the length message, not stored
            }
            match (&mut values, number) {
                (Values::Empty, Number::Int(v)) => {
                    values = Values::Int(vec![int_value(v).map_err(|w| self.element(i, w))?])
                }
                (Values::Empty, Number::Float(v)) => {
                    values = Values::Float(vec![float_value(v).map_err(|w| self.element(i, w))?])
                }
                (Values::Int(out), Number::Int(v)) => {
                    out.push(int_value(v).map_err(|w| self.element(i, w))?)
                }
                (Values::Float(out), Number::Float(v)) => {
                    out.push(float_value(v).map_err(|w| self.element(i, w))?)
                }
                (Values::Int(_), Number::Float(_)) => {
                    return Err(self.failure.fail(format!(
                        "{}: field `data`: mixes integers (first at element 0) and floats \
                         (first at element {i})",
                        self.ctx
                    )))
                }
                (Values::Float(_), Number::Int(_)) => {
                    return Err(self.failure.fail(format!(
                        "{}: field `data`: mixes integers (first at element {i}) and floats \
                         (first at element 0)",
                        self.ctx
                    )))
                }
            }
        }
        match &mut values {
            Values::Int(v) => v.shrink_to_fit(),
            Values::Float(v) => v.shrink_to_fit(),
            Values::Empty => {}
        }
        Ok(Data { values, len })
    }
}

fn int_value(v: i128) -> Result<i64, String> {
    as_i64(&Json::Int(v))
}

fn float_value(v: f64) -> Result<f64, String> {
    as_f64(&Json::Float(v))
}

/// One element of a data list: a number, or the description of what stood there instead.
enum Number {
    Int(i128),
    Float(f64),
}

struct NumberSeed;

impl<'de> DeserializeSeed<'de> for NumberSeed {
    type Value = Result<Number, String>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NumberSeed {
    type Value = Result<Number, String>;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a number")
    }
    fn visit_i64<E>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Ok(Number::Int(v.into())))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Ok(Number::Int(v.into())))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Ok(Number::Float(v)))
    }
    fn visit_bool<E>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Err(Json::Bool(v).describe()))
    }
    fn visit_str<E>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Err(Json::Str(v.to_string()).describe()))
    }
    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Err(Json::Null.describe()))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let n = count_elements(&mut seq)?;
        Ok(Err(format!("a list of {n} values")))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let n = count_entries(&mut map)?;
        Ok(Err(format!("an object with {n} keys")))
    }
}
