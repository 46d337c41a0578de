//! `--types`: which GGML type each exported tensor gets (see the parent module's docs).

use super::ExportError;
use crate::gguf::ggml_type::GgmlType;

/// A type a rule asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TypeChoice {
    /// The reference's own precision (lossless).
    Auto,
    /// This GGML type.
    Ggml(GgmlType),
}

/// What a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Selector {
    Default,
    Class(&'static str),
    Pattern(String),
}

const CLASSES: &[&str] = &[
    "experts",
    "shared",
    "attn",
    "compressor",
    "indexer",
    "router",
    "hc",
    "embed",
    "head",
    "engram_kv",
    "engram_qk",
    "vectors",
    "engram",
];

/// The parsed `--types` rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypePlan {
    rules: Vec<(Selector, TypeChoice)>,
}

impl Default for TypePlan {
    fn default() -> Self {
        TypePlan {
            rules: vec![(Selector::Default, TypeChoice::Auto)],
        }
    }
}

fn parse_type(s: &str) -> Option<TypeChoice> {
    let t = match s.to_ascii_lowercase().as_str() {
        "auto" => return Some(TypeChoice::Auto),
        "f32" => GgmlType::F32,
        "f16" => GgmlType::F16,
        "bf16" => GgmlType::Bf16,
        "q8_0" => GgmlType::Q8_0,
        "q4_0" => GgmlType::Q4_0,
        "q2_k" => GgmlType::Q2K,
        "q3_k" => GgmlType::Q3K,
        "q4_k" => GgmlType::Q4K,
        "q5_k" => GgmlType::Q5K,
        "q6_k" => GgmlType::Q6K,
        "iq2_xxs" => GgmlType::Iq2Xxs,
        _ => return None,
    };
    Some(TypeChoice::Ggml(t))
}

/// `*` glob over a tensor name.
fn glob(pattern: &str, name: &str) -> bool {
    let parts: Vec<&str> = pattern.split('*').collect();
    if parts.len() == 1 {
        return pattern == name;
    }
    let mut rest = name;
    for (i, part) in parts.iter().enumerate() {
        if i == 0 {
            match rest.strip_prefix(part) {
                Some(r) => rest = r,
                None => return false,
            }
        } else if i == parts.len() - 1 {
            return rest.ends_with(part);
        } else {
            match rest.find(part) {
                Some(at) => rest = &rest[at + part.len()..],
                None => return false,
            }
        }
    }
    true
}

/// The class of a GGUF tensor name (see the module docs).
fn class_of(name: &str, rank: usize) -> Option<&'static str> {
    let has = |s: &str| name.contains(s);
    Some(if name.ends_with("engram_embd.weight") {
        "engram"
    } else if rank == 1 {
        "vectors"
    } else if has("_exps") {
        "experts"
    } else if has("_shexp") {
        "shared"
    } else if has("attn_compressor") {
        "compressor"
    } else if has("indexer.") {
        "indexer"
    } else if has("ffn_gate_inp") {
        "router"
    } else if has("hc_") {
        "hc"
    } else if name == "token_embd.weight" {
        "embed"
    } else if name == "output.weight" {
        "head"
    } else if has("engram_kv") || has("engram_wkv") {
        "engram_kv"
    } else if has("engram_q") || has("engram_k") {
        "engram_qk"
    } else if has("attn_") {
        "attn"
    } else {
        return None;
    })
}

impl TypePlan {
    /// Parses `SELECTOR=TYPE[,SELECTOR=TYPE...]`; a bare `TYPE` means `default=TYPE`.
    pub fn parse(spec: &str) -> Result<TypePlan, ExportError> {
        let mut plan = TypePlan::default();
        for item in spec.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (sel, ty) = item.split_once('=').unwrap_or(("default", item));
            let choice = parse_type(ty.trim()).ok_or_else(|| {
                ExportError::Types(format!(
                    "{ty:?} is not a type (auto, f32, f16, bf16, q8_0, q4_0, q2_k, q3_k, q4_k, \
                     q5_k, q6_k, iq2_xxs)"
                ))
            })?;
            let sel = sel.trim();
            let selector = if sel == "default" {
                Selector::Default
            } else if let Some(c) = CLASSES.iter().find(|c| **c == sel) {
                Selector::Class(c)
            } else if sel.starts_with("blk.") || sel.contains('*') || sel.ends_with(".weight") {
                Selector::Pattern(sel.to_string())
            } else {
                return Err(ExportError::Types(format!(
                    "{sel:?} is neither `default`, a class ({}) nor a tensor name pattern",
                    CLASSES.join(", ")
                )));
            };
            plan.rules.push((selector, choice));
        }
        Ok(plan)
    }

    /// The choice for GGUF tensor `name` of rank `rank` (last matching rule).
    pub fn choice(&self, name: &str, rank: usize) -> TypeChoice {
        self.matching(name, rank, true)
    }

    /// Like [`choice`](Self::choice) but ignoring `default` rules: what a rule naming this
    /// tensor (by class or pattern) asks for.
    pub fn explicit_choice(&self, name: &str, rank: usize) -> TypeChoice {
        self.matching(name, rank, false)
    }

    fn matching(&self, name: &str, rank: usize, with_default: bool) -> TypeChoice {
        let class = class_of(name, rank);
        self.rules
            .iter()
            .rev()
            .find(|(sel, _)| match sel {
                Selector::Default => with_default,
                Selector::Class(c) => class == Some(*c),
                Selector::Pattern(p) => glob(p, name),
            })
            .map_or(TypeChoice::Auto, |(_, c)| *c)
    }

    /// The type tensor `name` with ggml dims `dims` is written as: the plan's choice, or
    /// `auto` (the lossless type) when that is asked for or when the chosen type's block does
    /// not divide the row, with the reason.
    pub fn resolve(&self, name: &str, dims: &[u64], auto: GgmlType) -> (GgmlType, Option<String>) {
        match self.choice(name, dims.len()) {
            TypeChoice::Auto => (auto, None),
            TypeChoice::Ggml(t) => {
                let block = t.block_layout().map_or(1, |b| b.0) as u64;
                if dims.first().is_some_and(|&ne0| ne0 % block == 0) {
                    (t, None)
                } else {
                    let why = format!(
                        "{t} needs rows of a multiple of {block} values; ne0 = {}: wrote {auto}",
                        dims.first().copied().unwrap_or(0)
                    );
                    (auto, Some(why))
                }
            }
        }
    }
}
