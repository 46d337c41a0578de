//! GGML tensor type ids and their block layouts (ggml.h ids, spec §3.1/§3.2). Unknown ids are
//! carried as numbers so an inspector can list a file written by a newer ggml.

use std::fmt;

/// A GGML tensor type. `Unknown` keeps ids this build does not know; their size is unknown,
/// so such tensors are listed but never dequantized.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q8_1,
    Q2K,
    Q3K,
    Q4K,
    Q5K,
    Q6K,
    Q8K,
    Iq2Xxs,
    Iq2Xs,
    Iq3Xxs,
    Iq1S,
    Iq4Nl,
    Iq3S,
    Iq2S,
    Iq4Xs,
    I8,
    I16,
    I32,
    I64,
    F64,
    Iq1M,
    Bf16,
    Tq1_0,
    Tq2_0,
    Mxfp4,
    Nvfp4,
    Q1_0,
    /// An id this build has no name or size for.
    Unknown(u32),
}

/// Values per super-block of the k-quants and i-quants (ggml `QK_K`).
pub const QK_K: usize = 256;

impl GgmlType {
    /// Maps a type id from a tensor info to a type; never fails (unknown ids are kept).
    pub fn from_id(id: u32) -> Self {
        use GgmlType::*;
        match id {
            0 => F32,
            1 => F16,
            2 => Q4_0,
            3 => Q4_1,
            6 => Q5_0,
            7 => Q5_1,
            8 => Q8_0,
            9 => Q8_1,
            10 => Q2K,
            11 => Q3K,
            12 => Q4K,
            13 => Q5K,
            14 => Q6K,
            15 => Q8K,
            16 => Iq2Xxs,
            17 => Iq2Xs,
            18 => Iq3Xxs,
            19 => Iq1S,
            20 => Iq4Nl,
            21 => Iq3S,
            22 => Iq2S,
            23 => Iq4Xs,
            24 => I8,
            25 => I16,
            26 => I32,
            27 => I64,
            28 => F64,
            29 => Iq1M,
            30 => Bf16,
            34 => Tq1_0,
            35 => Tq2_0,
            39 => Mxfp4,
            40 => Nvfp4,
            41 => Q1_0,
            other => Unknown(other),
        }
    }

    /// The numeric id written in tensor infos.
    pub fn id(self) -> u32 {
        use GgmlType::*;
        match self {
            F32 => 0,
            F16 => 1,
            Q4_0 => 2,
            Q4_1 => 3,
            Q5_0 => 6,
            Q5_1 => 7,
            Q8_0 => 8,
            Q8_1 => 9,
            Q2K => 10,
            Q3K => 11,
            Q4K => 12,
            Q5K => 13,
            Q6K => 14,
            Q8K => 15,
            Iq2Xxs => 16,
            Iq2Xs => 17,
            Iq3Xxs => 18,
            Iq1S => 19,
            Iq4Nl => 20,
            Iq3S => 21,
            Iq2S => 22,
            Iq4Xs => 23,
            I8 => 24,
            I16 => 25,
            I32 => 26,
            I64 => 27,
            F64 => 28,
            Iq1M => 29,
            Bf16 => 30,
            Tq1_0 => 34,
            Tq2_0 => 35,
            Mxfp4 => 39,
            Nvfp4 => 40,
            Q1_0 => 41,
            Unknown(id) => id,
        }
    }

    /// The ggml spelling (`Q4_K`, `IQ2_XXS`, `BF16`); `type<N>` for unknown ids.
    pub fn name(self) -> String {
        use GgmlType::*;
        let s = match self {
            F32 => "F32",
            F16 => "F16",
            Q4_0 => "Q4_0",
            Q4_1 => "Q4_1",
            Q5_0 => "Q5_0",
            Q5_1 => "Q5_1",
            Q8_0 => "Q8_0",
            Q8_1 => "Q8_1",
            Q2K => "Q2_K",
            Q3K => "Q3_K",
            Q4K => "Q4_K",
            Q5K => "Q5_K",
            Q6K => "Q6_K",
            Q8K => "Q8_K",
            Iq2Xxs => "IQ2_XXS",
            Iq2Xs => "IQ2_XS",
            Iq3Xxs => "IQ3_XXS",
            Iq1S => "IQ1_S",
            Iq4Nl => "IQ4_NL",
            Iq3S => "IQ3_S",
            Iq2S => "IQ2_S",
            Iq4Xs => "IQ4_XS",
            I8 => "I8",
            I16 => "I16",
            I32 => "I32",
            I64 => "I64",
            F64 => "F64",
            Iq1M => "IQ1_M",
            Bf16 => "BF16",
            Tq1_0 => "TQ1_0",
            Tq2_0 => "TQ2_0",
            Mxfp4 => "MXFP4",
            Nvfp4 => "NVFP4",
            Q1_0 => "Q1_0",
            Unknown(id) => return format!("type{id}"),
        };
        s.to_string()
    }

    /// Parses a ggml spelling (case-insensitive) back to a type; used by tests and the CLI.
    pub fn from_name(name: &str) -> Option<Self> {
        (0..64)
            .map(GgmlType::from_id)
            .find(|t| !matches!(t, GgmlType::Unknown(_)) && t.name().eq_ignore_ascii_case(name))
    }

    /// `(values per block, bytes per block)`, or `None` when the id is unknown. Sizes follow
    /// ggml-common.h (and agree with gguf-py 0.19.0's `GGML_QUANT_SIZES`).
    pub fn block_layout(self) -> Option<(usize, usize)> {
        use GgmlType::*;
        let layout = match self {
            F32 => (1, 4),
            F16 => (1, 2),
            Q4_0 => (32, 18),
            Q4_1 => (32, 20),
            Q5_0 => (32, 22),
            Q5_1 => (32, 24),
            Q8_0 => (32, 34),
            Q8_1 => (32, 40),
            Q2K => (QK_K, 84),
            Q3K => (QK_K, 110),
            Q4K => (QK_K, 144),
            Q5K => (QK_K, 176),
            Q6K => (QK_K, 210),
            Q8K => (QK_K, 292),
            Iq2Xxs => (QK_K, 66),
            Iq2Xs => (QK_K, 74),
            Iq3Xxs => (QK_K, 98),
            Iq1S => (QK_K, 50),
            Iq4Nl => (32, 18),
            Iq3S => (QK_K, 110),
            Iq2S => (QK_K, 82),
            Iq4Xs => (QK_K, 136),
            I8 => (1, 1),
            I16 => (1, 2),
            I32 => (1, 4),
            I64 => (1, 8),
            F64 => (1, 8),
            Iq1M => (QK_K, 56),
            Bf16 => (1, 2),
            Tq1_0 => (QK_K, 54),
            Tq2_0 => (QK_K, 66),
            Mxfp4 => (32, 17),
            Nvfp4 => (64, 36),
            Q1_0 => (128, 18),
            Unknown(_) => return None,
        };
        Some(layout)
    }

    /// Whether golden-lens can turn this type into f32.
    pub fn is_dequantizable(self) -> bool {
        use GgmlType::*;
        matches!(
            self,
            F32 | F16 | Bf16 | I8 | Q8_0 | Q4_0 | Q2K | Q3K | Q4K | Q5K | Q6K | Iq2Xxs | Mxfp4
        )
    }

    /// Bytes needed for one row of `n_values` values, or `None` when the size is unknown,
    /// `n_values` is not a whole number of blocks, or the product overflows.
    pub fn row_bytes(self, n_values: u64) -> Option<u64> {
        let (block_values, block_bytes) = self.block_layout()?;
        if n_values % block_values as u64 != 0 {
            return None;
        }
        (n_values / block_values as u64).checked_mul(block_bytes as u64)
    }
}

impl fmt::Display for GgmlType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_unknown_ids_are_kept() {
        for id in 0..64u32 {
            assert_eq!(GgmlType::from_id(id).id(), id);
        }
        assert_eq!(GgmlType::from_id(31), GgmlType::Unknown(31));
        assert_eq!(GgmlType::from_id(42).block_layout(), None);
        assert_eq!(GgmlType::from_name("iq2_xxs"), Some(GgmlType::Iq2Xxs));
        assert_eq!(GgmlType::from_name("Q4_K"), Some(GgmlType::Q4K));
    }

    #[test]
    fn row_bytes_checks_block_multiples() {
        assert_eq!(GgmlType::Q8_0.row_bytes(256), Some(8 * 34));
        assert_eq!(GgmlType::Q4K.row_bytes(255), None);
        assert_eq!(GgmlType::F16.row_bytes(3), Some(6));
        assert_eq!(GgmlType::Unknown(99).row_bytes(32), None);
    }
}
