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

// Declared after `refuse_non_objects!`, which they use.
mod capture;
mod data;

use capture::RegimeSeed;
