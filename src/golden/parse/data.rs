//! A capture's `data` list, streamed: values of one kind stored up to the expected length,
//! the rest only counted, each element checked where it stands.

use super::*;

/// A capture's data list as read: every value of one kind, and the list's full length.
pub(super) struct Data {
    pub(super) values: Values,
    pub(super) len: usize,
}

pub(super) enum Values {
    Empty,
    Int(Vec<i64>),
    Float(Vec<f64>),
}

pub(super) struct DataSeed<'a> {
    pub(super) failure: &'a Failure,
    pub(super) ctx: &'a str,
    /// `ceil(n / stride)` when known: values past it are counted, not stored.
    pub(super) expected: Option<usize>,
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
