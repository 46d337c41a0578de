//! deepseek41 dialects. Placeholder filled in below.

/// Which converter wrote a deepseek41 GGUF (spec §1.2, §1.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Dialect {
    /// antirez/ds4: HF-style keys, raw FP8 engram rows in I8 tensors, one file.
    Ds4,
    /// llama.cpp PR / ik_llama: llama.cpp-style keys, quantized engram tables, split shards.
    LlamaCpp,
}
