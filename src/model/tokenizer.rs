//! Prompts to token ids with the GGUF's own vocabulary (spec §1.2): `tokenizer.ggml.model`
//! (`gpt2`: byte-level BPE), `tokens`, `merges`, `token_type` (3 = control tokens, matched
//! whole in the text and never split), BOS per `add_bos_token`. The BPE itself is Hugging
//! Face's `tokenizers` crate, not ours.
//!
//! Pre-tokenization: GPT-2's byte-level split. The real files say `tokenizer.ggml.pre =
//! joyai-llm`, whose exact split regex no source in the spec records; a file whose `pre` is not
//! `gpt2`/`default` gets a note saying the GPT-2 split was used, so ids may differ from the
//! model's own tokenizer on text where the two splits disagree (digit runs, CJK).

use crate::gguf::{GgufError, GgufFile};
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::{AddedToken, Tokenizer};

/// GGUF `token_type` of control (special) tokens.
const TOKEN_TYPE_CONTROL: i128 = 3;

/// Why a GGUF's vocabulary cannot tokenize.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error(transparent)]
    Gguf(#[from] GgufError),
    #[error("{path}: metadata `{key}`: {msg}")]
    Meta {
        path: String,
        key: &'static str,
        msg: String,
    },
    #[error("{path}: building the BPE tokenizer: {msg}")]
    Build { path: String, msg: String },
    #[error("tokenizing {what}: {msg}")]
    Encode { what: String, msg: String },
}

/// A prompt as token ids and the vocabulary piece of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tokenized {
    pub ids: Vec<u32>,
    /// `tokenizer.ggml.tokens[id]` for each id (byte-level pieces, `Ġ` for a space).
    pub pieces: Vec<String>,
}

/// The tokenizer a GGUF's metadata describes.
pub struct GgufTokenizer {
    tokenizer: Tokenizer,
    tokens: Vec<String>,
    bos: Option<u32>,
    add_bos: bool,
    /// What was assumed rather than read (one line each).
    pub notes: Vec<String>,
}

impl GgufTokenizer {
    /// Builds the tokenizer from `file`'s `tokenizer.ggml.*` metadata.
    pub fn from_gguf(file: &GgufFile) -> Result<GgufTokenizer, TokenizerError> {
        let path = file.path().display().to_string();
        let meta = |key: &'static str, msg: String| TokenizerError::Meta {
            path: path.clone(),
            key,
            msg,
        };
        let model = file
            .get_str("tokenizer.ggml.model")?
            .ok_or_else(|| meta("tokenizer.ggml.model", "absent".into()))?;
        if model != "gpt2" {
            return Err(meta(
                "tokenizer.ggml.model",
                format!("{model:?}; only gpt2 (byte-level BPE) is supported"),
            ));
        }
        let mut notes = Vec::new();
        match file.get_str("tokenizer.ggml.pre")? {
            None | Some("gpt2") | Some("default") => {}
            Some(pre) => notes.push(format!(
                "tokenizer.ggml.pre = {pre:?}: split with GPT-2's byte-level regex (the \
                 {pre:?} split is not modelled); ids may differ on digit runs and CJK text"
            )),
        }
        let array = |key: &'static str| -> Result<_, TokenizerError> {
            file.get_array(key)?
                .ok_or_else(|| meta(key, "absent".into()))
        };
        let tokens =
            file.array_strings("tokenizer.ggml.tokens", &array("tokenizer.ggml.tokens")?)?;
        let merges_raw =
            file.array_strings("tokenizer.ggml.merges", &array("tokenizer.ggml.merges")?)?;
        let types = match file.get_array("tokenizer.ggml.token_type")? {
            Some(a) => file.array_ints("tokenizer.ggml.token_type", &a)?,
            None => Vec::new(),
        };
        if !types.is_empty() && types.len() != tokens.len() {
            return Err(meta(
                "tokenizer.ggml.token_type",
                format!("{} entries for {} tokens", types.len(), tokens.len()),
            ));
        }
        let n = u32::try_from(tokens.len())
            .map_err(|_| meta("tokenizer.ggml.tokens", format!("{} tokens", tokens.len())))?;
        let mut vocab = Vocab::default();
        for (i, t) in tokens.iter().enumerate() {
            if vocab.insert(t.clone(), i as u32).is_some() {
                return Err(meta(
                    "tokenizer.ggml.tokens",
                    format!("token {t:?} appears twice (second at id {i})"),
                ));
            }
        }
        let mut merges = Vec::with_capacity(merges_raw.len());
        for (i, m) in merges_raw.iter().enumerate() {
            let (a, b) = m.split_once(' ').ok_or_else(|| {
                meta(
                    "tokenizer.ggml.merges",
                    format!("merge {i} {m:?} is not `left right`"),
                )
            })?;
            merges.push((a.to_string(), b.to_string()));
        }
        let build = |msg: String| TokenizerError::Build {
            path: path.clone(),
            msg,
        };
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .build()
            .map_err(|e| build(e.to_string()))?;
        let mut tokenizer = Tokenizer::new(bpe);
        tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
        tokenizer.with_decoder(Some(ByteLevel::default()));
        let specials: Vec<AddedToken> = types
            .iter()
            .zip(&tokens)
            .filter(|(&t, _)| t == TOKEN_TYPE_CONTROL)
            .map(|(_, tok)| AddedToken::from(tok.clone(), true))
            .collect();
        tokenizer.add_special_tokens(&specials);
        let bos = match file.get_u64("tokenizer.ggml.bos_token_id")? {
            Some(b) if b < u64::from(n) => Some(b as u32),
            Some(b) => {
                return Err(meta(
                    "tokenizer.ggml.bos_token_id",
                    format!("{b} is outside the {n}-token vocabulary"),
                ))
            }
            None => None,
        };
        let add_bos = file
            .get_bool("tokenizer.ggml.add_bos_token")?
            .unwrap_or(false);
        if add_bos && bos.is_none() {
            return Err(meta(
                "tokenizer.ggml.bos_token_id",
                "absent while add_bos_token is true".into(),
            ));
        }
        Ok(GgufTokenizer {
            tokenizer,
            tokens,
            bos,
            add_bos,
            notes,
        })
    }

    /// The ids of `text` (BOS first when the file says `add_bos_token`) and their pieces.
    pub fn tokenize(&self, text: &str) -> Result<Tokenized, TokenizerError> {
        let enc = self
            .tokenizer
            .encode(text, false)
            .map_err(|e| TokenizerError::Encode {
                what: format!("{} bytes of text", text.len()),
                msg: e.to_string(),
            })?;
        let mut ids: Vec<u32> = Vec::with_capacity(enc.len() + 1);
        if let (true, Some(b)) = (self.add_bos, self.bos) {
            ids.push(b);
        }
        ids.extend_from_slice(enc.get_ids());
        let pieces = ids
            .iter()
            .map(|&i| self.tokens.get(i as usize).cloned().unwrap_or_default())
            .collect();
        Ok(Tokenized { ids, pieces })
    }

    /// The text of `ids` (control tokens, BOS included, are left out).
    pub fn detokenize(&self, ids: &[u32]) -> Result<String, TokenizerError> {
        if let Some(&bad) = ids.iter().find(|&&i| i as usize >= self.tokens.len()) {
            return Err(TokenizerError::Encode {
                what: format!("id {bad}"),
                msg: format!("outside the {}-token vocabulary", self.tokens.len()),
            });
        }
        self.tokenizer
            .decode(ids, true)
            .map_err(|e| TokenizerError::Encode {
                what: format!("{} ids", ids.len()),
                msg: e.to_string(),
            })
    }

    /// `tokenizer.ggml.tokens[id]`, the byte-level piece of one id.
    pub fn piece(&self, id: u32) -> Option<&str> {
        self.tokens.get(id as usize).map(String::as_str)
    }

    /// Vocabulary size.
    pub fn vocab_size(&self) -> usize {
        self.tokens.len()
    }
}

/// `text` tokenized with `file`'s vocabulary (see [`GgufTokenizer`]).
pub fn tokenize(file: &GgufFile, text: &str) -> Result<Tokenized, TokenizerError> {
    GgufTokenizer::from_gguf(file)?.tokenize(text)
}

/// The text of `ids` in `file`'s vocabulary.
pub fn detokenize(file: &GgufFile, ids: &[u32]) -> Result<String, TokenizerError> {
    GgufTokenizer::from_gguf(file)?.detokenize(ids)
}
