//! Golden-less runs in the app (`gui --gguf F --prompt TEXT | --tokens IDS`): the GGUF's own
//! vocabulary tokenizes the prompt, one prefill regime runs over its ids and N greedy decode
//! steps follow, and the CPU oracle is the live reference (a
//! [`crate::session::reference::TokensReference`]); later backends (the wgpu path) are compared
//! with it under the backend policy, as `check --gguf F --tokens …` does. `--layers A-B` runs
//! only those blocks, then `Final`.

use super::files::FileJob;
use crate::gguf::GgufFile;
use crate::model::tokenizer::GgufTokenizer;
use crate::model::{LayerRange, ModelConfig};
use crate::session::builder::ModelParts;
use crate::session::controller::BoxedBackend;
use crate::session::reference::{SharedReference, TokensReference};
use crate::session::SessionError;
use anyhow::Context as _;
use eframe::egui;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Sender;
use std::sync::Arc;

/// Builds the backends of a golden-less run on a GGUF: the CPU oracle first (the live
/// reference), then any GPU backend, each restricted to the layer range when one is given.
pub type TokensMaker = Arc<
    dyn Fn(&Path, Option<RangeInclusive<usize>>) -> Result<Vec<BoxedBackend>, SessionError>
        + Send
        + Sync,
>;

/// The CPU oracle alone (with its diagnostic scores, for top-k triage) on the GGUF.
pub fn oracle_maker() -> TokensMaker {
    Arc::new(|gguf: &Path, layers: Option<RangeInclusive<usize>>| {
        let model = ModelParts::from_gguf(gguf)?;
        let mut oracle = model.oracle_with_diagnostics();
        oracle.set_layer_range(layers).map_err(|e| {
            SessionError::build("cpu", format!("{}: --layers: {e}", gguf.display()))
        })?;
        Ok(vec![Box::new(oracle) as BoxedBackend])
    })
}

/// What the prompt row holds (the text of its fields).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptForm {
    /// A prompt, or token ids when `as_ids`.
    pub text: String,
    /// Read `text` as comma- or space-separated token ids rather than text to tokenize.
    pub as_ids: bool,
    /// Greedy decode steps after the prefill.
    pub decode: usize,
    /// `A-B` or `N`: the blocks to run (empty: every block).
    pub layers: String,
}

/// A golden-less run ready to start: the GGUF, the prompt's ids and pieces, and the model.
/// The GGUF's tokenizer, shared by the prepared run (the decode text's pieces).
#[derive(Clone)]
pub struct SharedTokenizer(pub Arc<GgufTokenizer>);

impl std::fmt::Debug for SharedTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GgufTokenizer({} tokens)", self.0.vocab_size())
    }
}

#[derive(Debug, Clone)]
pub struct PreparedRun {
    pub gguf: PathBuf,
    pub ids: Vec<i64>,
    /// The vocabulary piece of each id (empty when the GGUF has no usable vocabulary and ids
    /// were given).
    pub pieces: Vec<String>,
    pub decode: usize,
    pub layers: Option<RangeInclusive<usize>>,
    pub cfg: ModelConfig,
    /// One line about the weights (dialect, size).
    pub describe: String,
    /// What the tokenizer assumed, or why there are no pieces.
    pub notes: Vec<String>,
    /// The GGUF's vocabulary, when it has a usable one.
    pub tokenizer: Option<SharedTokenizer>,
}

impl PreparedRun {
    /// `0 '<bos>' · 17 'Ġlens' · …` (the label tests read).
    pub fn ids_line(&self) -> String {
        let items: Vec<String> = self
            .ids
            .iter()
            .enumerate()
            .map(|(k, id)| match self.pieces.get(k) {
                Some(p) => format!("{id} '{p}'"),
                None => id.to_string(),
            })
            .collect();
        format!("{} tokens: {}", self.ids.len(), items.join(" · "))
    }

    /// `Greedy decode: 2 tokens: 17 'x' · 42 'y'; text "xy"`: the oracle's greedy next token
    /// after each regime (the label tests read).
    pub fn decode_line(&self, greedy: &[i64]) -> String {
        let tok = self.tokenizer.as_ref().map(|t| &t.0);
        let items: Vec<String> = greedy
            .iter()
            .map(
                |&id| match tok.and_then(|t| u32::try_from(id).ok().and_then(|i| t.piece(i))) {
                    Some(p) => format!("{id} '{p}'"),
                    None => id.to_string(),
                },
            )
            .collect();
        let mut line = format!(
            "Greedy decode: {} tokens: {}",
            greedy.len(),
            items.join(" · ")
        );
        let ids: Option<Vec<u32>> = greedy.iter().map(|&i| u32::try_from(i).ok()).collect();
        if let Some(text) = tok.zip(ids).and_then(|(t, ids)| t.detokenize(&ids).ok()) {
            line.push_str(&format!("; text {text:?}"));
        }
        line
    }

    /// The run's label (the reference's, shown in the toolbar).
    pub fn label(&self) -> String {
        let layers = match &self.layers {
            Some(r) => format!(", layers {}-{}", r.start(), r.end()),
            None => String::new(),
        };
        format!(
            "{} ({} tokens, {} decode steps{layers}; cpu oracle, live)",
            self.gguf.display(),
            self.ids.len(),
            self.decode
        )
    }

    /// The live reference over these tokens.
    pub fn reference(&self) -> SharedReference {
        Arc::new(TokensReference::prompt(
            self.label(),
            self.cfg.clone(),
            self.ids.clone(),
            self.decode,
        ))
    }
}

/// Token ids separated by commas and/or white space.
pub fn parse_ids(text: &str, vocab: usize) -> anyhow::Result<Vec<i64>> {
    let items: Vec<&str> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|s| !s.is_empty())
        .collect();
    if items.is_empty() {
        anyhow::bail!("token ids: give at least one id (e.g. 0,17,42)");
    }
    items
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let id: u64 = s.parse().with_context(|| {
                format!("token ids: item {k} `{s}` is not a non-negative integer")
            })?;
            if id >= vocab as u64 {
                anyhow::bail!("token ids: item {k} is {id}, outside the vocabulary 0..{vocab}");
            }
            i64::try_from(id).with_context(|| format!("token ids: item {k} is too large"))
        })
        .collect()
}

/// `A-B` or `N` checked against the model; empty text: every block.
pub fn parse_layers(
    text: &str,
    cfg: &ModelConfig,
) -> anyhow::Result<Option<RangeInclusive<usize>>> {
    let text = text.trim();
    if text.is_empty() {
        return Ok(None);
    }
    let range = LayerRange::parse(text).with_context(|| format!("layers `{text}`"))?;
    LayerRange::new(cfg, range.clone()).with_context(|| format!("layers `{text}`"))?;
    Ok(Some(range))
}

/// Open the GGUF, tokenize (or parse the ids) and check the layer range.
pub fn prepare(gguf: &Path, form: &PromptForm) -> anyhow::Result<PreparedRun> {
    let model = ModelParts::from_gguf(gguf).with_context(|| format!("{}", gguf.display()))?;
    let vocab = model.cfg.vocab_size;
    let tokenizer = GgufFile::open(gguf)
        .map_err(anyhow::Error::from)
        .and_then(|f| GgufTokenizer::from_gguf(&f).map_err(anyhow::Error::from));
    let mut notes = Vec::new();
    let (ids, pieces) = if form.as_ids {
        let ids = parse_ids(&form.text, vocab)?;
        let pieces = match &tokenizer {
            Ok(t) => ids
                .iter()
                .map(|&id| {
                    u32::try_from(id)
                        .ok()
                        .and_then(|i| t.detokenize(&[i]).ok())
                        .unwrap_or_default()
                })
                .collect(),
            Err(e) => {
                notes.push(format!("no pieces: {e:#}"));
                Vec::new()
            }
        };
        (ids, pieces)
    } else {
        let t = tokenizer
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e:#}"))
            .with_context(|| {
                format!(
                    "{}: the prompt needs the GGUF's vocabulary (or give token ids)",
                    gguf.display()
                )
            })?;
        notes.extend(t.notes.iter().cloned());
        let tok = t
            .tokenize(&form.text)
            .with_context(|| format!("{}: tokenizing the prompt", gguf.display()))?;
        if tok.ids.is_empty() {
            anyhow::bail!("the prompt gives no tokens: type some text");
        }
        if let Some(&bad) = tok.ids.iter().find(|&&i| i as usize >= vocab) {
            anyhow::bail!(
                "{}: the tokenizer gives id {bad}, outside the model's vocabulary 0..{vocab}",
                gguf.display()
            );
        }
        (tok.ids.iter().map(|&i| i64::from(i)).collect(), tok.pieces)
    };
    let layers = parse_layers(&form.layers, &model.cfg)?;
    Ok(PreparedRun {
        gguf: gguf.to_path_buf(),
        ids,
        pieces,
        decode: form.decode,
        layers,
        describe: model.describe(),
        cfg: model.cfg,
        notes,
        tokenizer: tokenizer.ok().map(|t| SharedTokenizer(Arc::new(t))),
    })
}

/// [`prepare`] on its own thread (a real GGUF's vocabulary takes a moment); reports a
/// [`FileJob::Prompt`].
pub fn prepare_async(
    gguf: PathBuf,
    form: PromptForm,
    tx: Sender<FileJob>,
    ctx: Option<egui::Context>,
) {
    std::thread::spawn(move || {
        let result = prepare(&gguf, &form)
            .map(Box::new)
            .map_err(|e| format!("{e:#}"));
        let _ = tx.send(FileJob::Prompt(result));
        if let Some(c) = ctx {
            c.request_repaint();
        }
    });
}
