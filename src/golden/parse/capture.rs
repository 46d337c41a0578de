//! A regime's captures, each checked as it closes (shape, `n`, stride, checksum, data
//! length) so an error names the capture.

use super::data::{Data, DataSeed, Values};
use super::*;

pub(super) struct RegimeSeed<'a> {
    pub(super) failure: &'a Failure,
    pub(super) name: &'a str,
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
    let kind = crate::golden::names::capture_kind(name);
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
