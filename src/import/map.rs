//! Name maps as data: a TOML file of `[[rule]]`s that turns an engine's tensor names into
//! golden-lens capture names, with what the engine's convention needs on the way (ggml dim
//! order, dtype overrides, top-k rows compared as sets, additive masks, the regime by name,
//! position or occurrence). The first rule whose `match` matches a tensor's name decides it.
//! The shipped maps are embedded with `include_str!`; users pass their own file.

use super::error::ImportError;
use super::tensor::DType;
use regex::Regex;
use std::path::Path;

/// How a tensor's stored dims relate to the capture's row-major shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Dims slowest-first, as the capture's (the default).
    RowMajor,
    /// ggml `ne` order (ne0 contiguous first): the stored dims are reversed. The data need no
    /// move, since ne0 is the row-major last dim.
    Ggml,
}

/// How mask values are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaskForm {
    /// 0/1 (or false/true), as the golden's `candidates`.
    Boolean,
    /// Additive: 0 where kept, -inf where masked; turned into 1/0.
    Additive,
}

/// One rule of a map, compiled.
#[derive(Debug, Clone)]
pub struct Rule {
    pub pattern: Regex,
    /// Capture-name template with `{group}` fields from `pattern`'s named groups; `None` for a
    /// rule that skips tensors on purpose.
    pub capture: Option<String>,
    pub layout: Layout,
    /// Reinterpret the stored elements as this dtype (same element size).
    pub dtype: Option<DType>,
    /// Rows (last dim) are unordered top-k sets.
    pub set: bool,
    pub mask: MaskForm,
    /// A fixed regime for every tensor the rule matches.
    pub regime: Option<String>,
    /// Why a skipping rule skips (shown in `captures info`).
    pub why: Option<String>,
}

/// A compiled map.
#[derive(Debug, Clone)]
pub struct NameMap {
    /// `canonical`, `ggml`, ... or the file it came from.
    pub name: String,
    pub description: String,
    pub rules: Vec<Rule>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct MapFile {
    #[serde(default)]
    description: String,
    #[serde(default)]
    rule: Vec<RuleFile>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleFile {
    #[serde(rename = "match")]
    pattern: String,
    #[serde(default)]
    capture: Option<String>,
    #[serde(default)]
    layout: Option<String>,
    #[serde(default)]
    dtype: Option<String>,
    #[serde(default)]
    set: bool,
    #[serde(default)]
    mask: Option<String>,
    #[serde(default)]
    regime: Option<String>,
    #[serde(default)]
    skip: bool,
    #[serde(default)]
    why: Option<String>,
}

/// The named groups with a meaning of their own: they place a tensor in a regime.
pub const PLACEMENT_GROUPS: [&str; 3] = ["regime", "pos", "occurrence"];

/// The maps shipped with golden-lens: name, TOML text.
pub const SHIPPED: [(&str, &str); 4] = [
    ("canonical", include_str!("maps/canonical.toml")),
    ("ggml", include_str!("maps/ggml.toml")),
    ("ds4", include_str!("maps/ds4.toml")),
    ("deepseek-ref", include_str!("maps/deepseek-ref.toml")),
];

/// Fields `{name}` of a template.
fn template_fields(t: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut rest = t;
    while let Some(open) = rest.find('{') {
        let after = &rest[open + 1..];
        let close = after
            .find('}')
            .ok_or_else(|| format!("template `{t}` has an unclosed `{{`"))?;
        out.push(after[..close].to_string());
        rest = &after[close + 1..];
    }
    if rest.contains('}') {
        return Err(format!("template `{t}` has a stray `}}`"));
    }
    Ok(out)
}

impl NameMap {
    /// Parse a map from TOML text; `name` labels errors.
    pub fn parse(name: &str, text: &str) -> Result<NameMap, ImportError> {
        let err = |msg: String| ImportError::Map {
            map: name.to_string(),
            msg,
        };
        let file: MapFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
        if file.rule.is_empty() {
            return Err(err("no [[rule]] entries".into()));
        }
        let mut rules = Vec::with_capacity(file.rule.len());
        for (i, r) in file.rule.into_iter().enumerate() {
            let at = format!("rule {} (match = '{}')", i + 1, r.pattern);
            // Anchor the whole name: a rule never matches a piece of a longer name by accident.
            let pattern = Regex::new(&format!("^(?:{})$", r.pattern))
                .map_err(|e| err(format!("{at}: bad regex: {e}")))?;
            let groups: Vec<&str> = pattern.capture_names().flatten().collect();
            match (&r.capture, r.skip) {
                (Some(_), true) => return Err(err(format!("{at}: `skip` and `capture` together"))),
                (None, false) => {
                    return Err(err(format!("{at}: needs `capture` (or `skip = true`)")))
                }
                _ => {}
            }
            if let Some(t) = &r.capture {
                for f in template_fields(t).map_err(|m| err(format!("{at}: {m}")))? {
                    if !groups.contains(&f.as_str()) {
                        return Err(err(format!(
                            "{at}: capture template uses `{{{f}}}` but the regex has no group `{f}`"
                        )));
                    }
                }
            }
            let placed = groups
                .iter()
                .filter(|g| PLACEMENT_GROUPS.contains(g))
                .count();
            if placed > 1 || (placed == 1 && r.regime.is_some()) {
                return Err(err(format!(
                    "{at}: at most one of the groups regime/pos/occurrence or the `regime` key"
                )));
            }
            let layout = match r.layout.as_deref() {
                None | Some("row-major") => Layout::RowMajor,
                Some("ggml") => Layout::Ggml,
                Some(o) => {
                    return Err(err(format!(
                        "{at}: layout `{o}`, expected row-major or ggml"
                    )))
                }
            };
            let dtype = match r.dtype.as_deref() {
                None => None,
                Some(d) => Some(DType::parse(d).ok_or_else(|| {
                    err(format!(
                        "{at}: dtype `{d}`, expected one of {}",
                        super::tensor::DTYPE_NAMES
                    ))
                })?),
            };
            let mask = match r.mask.as_deref() {
                None | Some("boolean") => MaskForm::Boolean,
                Some("additive") => MaskForm::Additive,
                Some(o) => {
                    return Err(err(format!(
                        "{at}: mask `{o}`, expected boolean or additive"
                    )))
                }
            };
            rules.push(Rule {
                pattern,
                capture: r.capture,
                layout,
                dtype,
                set: r.set,
                mask,
                regime: r.regime,
                why: r.why,
            });
        }
        Ok(NameMap {
            name: name.to_string(),
            description: file.description,
            rules,
        })
    }

    /// A shipped map by name, or a map file by path.
    pub fn load(spec: &str) -> Result<NameMap, ImportError> {
        if let Some((name, text)) = SHIPPED.iter().find(|(n, _)| *n == spec) {
            return NameMap::parse(name, text);
        }
        let path = Path::new(spec);
        if !path.exists() {
            let names: Vec<&str> = SHIPPED.iter().map(|(n, _)| *n).collect();
            return Err(ImportError::Map {
                map: spec.to_string(),
                msg: format!(
                    "neither a shipped map ({}) nor an existing file",
                    names.join(", ")
                ),
            });
        }
        let meta = std::fs::metadata(path).map_err(|e| ImportError::io(path, "stat", e))?;
        if meta.len() > 1 << 20 {
            return Err(ImportError::Map {
                map: spec.to_string(),
                msg: format!("{} bytes, more than a map needs (1 MiB limit)", meta.len()),
            });
        }
        let text = std::fs::read_to_string(path).map_err(|e| ImportError::io(path, "read", e))?;
        NameMap::parse(spec, &text)
    }

    /// The canonical map (`{regime}/{capture}`), which needs no map file.
    pub fn canonical() -> NameMap {
        // The embedded text is tested to parse (`shipped_maps_parse`).
        NameMap::parse(SHIPPED[0].0, SHIPPED[0].1).unwrap_or(NameMap {
            name: "canonical".into(),
            description: String::new(),
            rules: Vec::new(),
        })
    }

    /// The rule deciding `tensor` and its named-group values, if any rule matches.
    pub fn decide(&self, tensor: &str) -> Option<(&Rule, Vec<(String, String)>)> {
        self.rules.iter().find_map(|r| {
            let c = r.pattern.captures(tensor)?;
            let groups = r
                .pattern
                .capture_names()
                .flatten()
                .filter_map(|g| c.name(g).map(|m| (g.to_string(), m.as_str().to_string())))
                .collect();
            Some((r, groups))
        })
    }
}

/// Fill a template's `{group}` fields.
pub fn fill(template: &str, groups: &[(String, String)]) -> String {
    let mut out = template.to_string();
    for (g, v) in groups {
        out = out.replace(&format!("{{{g}}}"), v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_maps_parse() {
        for (name, text) in SHIPPED {
            let m = NameMap::parse(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert!(!m.rules.is_empty(), "{name}");
        }
    }

    #[test]
    fn bad_rules_are_named() {
        let e = NameMap::parse(
            "t",
            "[[rule]]\nmatch = 'a(?P<x>\\d)'\ncapture = 'L{y}.h_in'\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("rule 1") && e.contains("{y}"), "{e}");
        let e = NameMap::parse(
            "t",
            "[[rule]]\nmatch = 'a'\ncapture = 'b'\nlayout = 'colmajor'\n",
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("layout"), "{e}");
        let e = NameMap::parse("t", "[[rule]]\nmatch = 'a'\ncapture = 'b'\nbogus = 1\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("bogus"), "{e}");
    }

    #[test]
    fn matches_are_anchored_and_first_rule_wins() {
        let m = NameMap::parse(
            "t",
            "[[rule]]\nmatch = 'attn_norm-(?P<l>\\d+)'\ncapture = 'L{l}.attn_in'\n\
             [[rule]]\nmatch = '.*'\nskip = true\n",
        )
        .unwrap();
        let (r, g) = m.decide("attn_norm-3").unwrap();
        assert_eq!(fill(r.capture.as_deref().unwrap(), &g), "L3.attn_in");
        let (r, _) = m.decide("hc_attn_norm-3").unwrap();
        assert!(r.capture.is_none());
    }
}
