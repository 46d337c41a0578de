//! The JSON tree the golden loader builds for the small parts of a golden (the fixture, one
//! `weights_meta` entry, a capture's `shape`), and typed field access on it with messages that
//! name the context and the field. Capture data never goes through this tree (see `parse`).

// A JSON tree that keeps every object member (so duplicate keys can be reported, which
// `serde_json::Value` would silently merge) and tells integer literals from float literals.

pub(super) enum Json {
    Null,
    Bool(bool),
    Int(i128),
    Float(f64),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl<'de> serde::Deserialize<'de> for Json {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

pub(super) struct JsonVisitor;

impl<'de> serde::de::Visitor<'de> for JsonVisitor {
    type Value = Json;
    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Int(v.into()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(Json::Float(v))
    }
    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::Str(v.to_string()))
    }
    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::Str(v))
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element::<Json>()? {
            items.push(item);
        }
        Ok(Json::Arr(items))
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut members = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            members.push((key, value));
        }
        Ok(Json::Obj(members))
    }
}

impl Json {
    /// A short description for messages: the value for scalars, the type for containers.
    pub(super) fn describe(&self) -> String {
        match self {
            Json::Null => "null".to_string(),
            Json::Bool(b) => format!("bool {b}"),
            Json::Int(i) => format!("integer {i}"),
            Json::Float(x) => format!("float {x:?}"),
            Json::Str(s) if s.chars().count() > 40 => {
                format!("string \"{}…\"", s.chars().take(40).collect::<String>())
            }
            Json::Str(s) => format!("string \"{s}\""),
            Json::Arr(a) => format!("a list of {} values", a.len()),
            Json::Obj(o) => format!("an object with {} keys", o.len()),
        }
    }

    pub(super) fn to_serde(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Json::Null => Value::Null,
            Json::Bool(b) => Value::Bool(*b),
            Json::Int(i) => {
                if let Ok(v) = i64::try_from(*i) {
                    Value::from(v)
                } else if let Ok(v) = u64::try_from(*i) {
                    Value::from(v)
                } else {
                    // Unreachable from serde_json input (ints fit i64 or u64); keep it lossless-ish.
                    serde_json::Number::from_f64(*i as f64).map_or(Value::Null, Value::Number)
                }
            }
            Json::Float(x) => serde_json::Number::from_f64(*x).map_or(Value::Null, Value::Number),
            Json::Str(s) => Value::String(s.clone()),
            Json::Arr(a) => Value::Array(a.iter().map(Json::to_serde).collect()),
            Json::Obj(o) => {
                Value::Object(o.iter().map(|(k, v)| (k.clone(), v.to_serde())).collect())
            }
        }
    }
}

// Typed field access with messages that name the context and the field.

pub(super) type Msg<T> = Result<T, String>;

/// An object's members with the context used in messages (`fixture`, `regime `prefill12`,
/// capture `L0.h_in``, ...). Duplicate keys are rejected when it is built.
pub(super) struct Fields<'a> {
    pub(super) ctx: String,
    pub(super) members: &'a [(String, Json)],
    index: std::collections::HashMap<&'a str, usize>,
}

impl<'a> Fields<'a> {
    pub(super) fn new(value: &'a Json, ctx: String, key_word: &str) -> Msg<Fields<'a>> {
        let Json::Obj(members) = value else {
            return Err(format!(
                "{ctx}: expected an object, got {}",
                value.describe()
            ));
        };
        let mut index = std::collections::HashMap::with_capacity(members.len());
        for (i, (key, _)) in members.iter().enumerate() {
            if index.insert(key.as_str(), i).is_some() {
                return Err(format!("{ctx}: duplicate {key_word} `{key}`"));
            }
        }
        Ok(Fields {
            ctx,
            members,
            index,
        })
    }

    /// The member `key` (a hash lookup: an object with many keys costs no quadratic scan).
    pub(super) fn get(&self, key: &str) -> Option<&'a Json> {
        self.index.get(key).map(|&i| &self.members[i].1)
    }

    pub(super) fn req(&self, key: &str) -> Msg<&'a Json> {
        self.get(key)
            .ok_or_else(|| format!("{}: missing field `{key}`", self.ctx))
    }

    pub(super) fn bad(&self, key: &str, what: &str) -> String {
        format!("{}: field `{key}`: {what}", self.ctx)
    }

    /// Reject any member not in `allowed` (typed records: captures and weight entries).
    pub(super) fn only(&self, allowed: &[&str]) -> Msg<()> {
        match self
            .members
            .iter()
            .find(|(k, _)| !allowed.contains(&k.as_str()))
        {
            Some((key, _)) => Err(format!(
                "{}: unknown field `{key}` (expected {})",
                self.ctx,
                allowed.join(", ")
            )),
            None => Ok(()),
        }
    }

    pub(super) fn usize(&self, key: &str) -> Msg<usize> {
        as_usize(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    pub(super) fn i64(&self, key: &str) -> Msg<i64> {
        as_i64(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    pub(super) fn f64(&self, key: &str) -> Msg<f64> {
        as_f64(self.req(key)?).map_err(|what| self.bad(key, &what))
    }
    pub(super) fn bool(&self, key: &str) -> Msg<bool> {
        match self.req(key)? {
            Json::Bool(b) => Ok(*b),
            other => Err(self.bad(key, &format!("expected a bool, got {}", other.describe()))),
        }
    }
    pub(super) fn string(&self, key: &str) -> Msg<String> {
        match self.req(key)? {
            Json::Str(s) => Ok(s.clone()),
            other => Err(self.bad(key, &format!("expected a string, got {}", other.describe()))),
        }
    }
    pub(super) fn list_of<T>(&self, key: &str, item: impl Fn(&Json) -> Msg<T>) -> Msg<Vec<T>> {
        list_of(self.req(key)?, &item).map_err(|what| self.bad(key, &what))
    }
}

pub(super) fn as_list(value: &Json) -> Msg<&[Json]> {
    match value {
        Json::Arr(items) => Ok(items),
        other => Err(format!("expected a list, got {}", other.describe())),
    }
}

/// Convert every element of a list; messages name the failing element (`element 3: …`).
pub(super) fn list_of<T>(value: &Json, item: &impl Fn(&Json) -> Msg<T>) -> Msg<Vec<T>> {
    let items = as_list(value)?;
    let mut out = Vec::with_capacity(items.len());
    for (i, v) in items.iter().enumerate() {
        out.push(item(v).map_err(|what| format!("element {i}: {what}"))?);
    }
    Ok(out)
}

pub(super) fn as_usize(value: &Json) -> Msg<usize> {
    match value {
        Json::Int(i) => usize::try_from(*i)
            .map_err(|_| format!("expected a non-negative integer that fits usize, got {i}")),
        other => Err(format!(
            "expected a non-negative integer, got {}",
            other.describe()
        )),
    }
}

pub(super) fn as_i64(value: &Json) -> Msg<i64> {
    match value {
        Json::Int(i) => i64::try_from(*i).map_err(|_| format!("integer {i} does not fit i64")),
        other => Err(format!("expected an integer, got {}", other.describe())),
    }
}

pub(super) fn as_u64(value: &Json) -> Msg<u64> {
    match value {
        Json::Int(i) => u64::try_from(*i).map_err(|_| format!("integer {i} does not fit u64")),
        other => Err(format!(
            "expected an unsigned integer, got {}",
            other.describe()
        )),
    }
}

/// Any finite number (an integer literal is accepted where a float is meant).
pub(super) fn as_f64(value: &Json) -> Msg<f64> {
    let x = match value {
        Json::Float(x) => *x,
        Json::Int(i) => *i as f64,
        other => return Err(format!("expected a number, got {}", other.describe())),
    };
    if x.is_finite() {
        Ok(x)
    } else {
        Err(format!("expected a finite number, got {x}"))
    }
}

pub(super) fn as_string(value: &Json) -> Msg<String> {
    match value {
        Json::Str(s) => Ok(s.clone()),
        other => Err(format!("expected a string, got {}", other.describe())),
    }
}

/// `Π shape` with overflow reported instead of wrapped.
pub(super) fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}
