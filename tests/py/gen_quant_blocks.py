"""Writes random well-formed blocks of every block type golden-lens decodes, plus gguf-py's
dequantization of them, for tests/gguf_python.rs to compare bit for bit.

usage: gen_quant_blocks.py OUT_DIR
writes OUT_DIR/manifest.json and, per type, <TYPE>.blocks (raw bytes) and <TYPE>.f32 (expected).
"""

import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

from gguf_blocks import random_blocks

TYPES = [QT.Q8_0, QT.Q4_0, QT.MXFP4, QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ2_XXS, QT.F16, QT.BF16, QT.F32]
N_BLOCKS = 512


def main() -> None:
    out = sys.argv[1]
    rng = np.random.default_rng(20261129)
    manifest = []
    for qtype in TYPES:
        block_size, _ = GGML_QUANT_SIZES[qtype]
        blocks = random_blocks(qtype, N_BLOCKS, rng)
        # gguf-py wants rows of whole blocks; one row holding every block.
        values = dequantize(blocks.reshape(1, -1), qtype).astype(np.float32).reshape(-1)
        assert values.size == N_BLOCKS * block_size
        blocks.tofile(os.path.join(out, f"{qtype.name}.blocks"))
        values.astype("<f4").tofile(os.path.join(out, f"{qtype.name}.f32"))
        manifest.append({"type": qtype.name, "type_id": int(qtype), "n_values": int(values.size)})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
