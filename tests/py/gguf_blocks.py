"""Random *well-formed* GGML blocks: random bytes everywhere, except that every f16/bf16 scale
field is forced finite (a NaN/inf scale would make the comparison meaningless)."""

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES

# Byte offsets of the f16 scale fields inside one block, per type.
F16_FIELDS = {
    QT.Q8_0: [0],
    QT.Q4_0: [0],
    QT.Q2_K: [80, 82],
    QT.Q3_K: [108],
    QT.Q4_K: [0, 2],
    QT.Q5_K: [0, 2],
    QT.Q6_K: [208],
    QT.IQ2_XXS: [0],
    QT.MXFP4: [],
}


def finite_f16_bits(bits: np.ndarray) -> np.ndarray:
    """Clears the top exponent bit of any inf/NaN half, leaving every finite half reachable."""
    bits = bits.astype(np.uint16)
    bad = (bits & 0x7C00) == 0x7C00
    return np.where(bad, bits & ~np.uint16(0x4000), bits).astype(np.uint16)


def finite_bf16_bits(bits: np.ndarray) -> np.ndarray:
    bits = bits.astype(np.uint16)
    bad = (bits & 0x7F80) == 0x7F80
    return np.where(bad, bits & ~np.uint16(0x4000), bits).astype(np.uint16)


def random_blocks(qtype: QT, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """`n_blocks` blocks of `qtype` as a uint8 array of shape (n_blocks, type_size)."""
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    if qtype == QT.F16:
        return finite_f16_bits(raw.view(np.uint16)).view(np.uint8).reshape(n_blocks, type_size)
    if qtype == QT.BF16:
        return finite_bf16_bits(raw.view(np.uint16)).view(np.uint8).reshape(n_blocks, type_size)
    if qtype == QT.F32:
        vals = rng.standard_normal(n_blocks).astype(np.float32)
        return vals.view(np.uint8).reshape(n_blocks, type_size)
    for off in F16_FIELDS[qtype]:
        field = raw[:, off : off + 2].copy().view(np.uint16)
        raw[:, off : off + 2] = finite_f16_bits(field).view(np.uint8).reshape(n_blocks, 2)
    return raw
