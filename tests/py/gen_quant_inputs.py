"""Writes f32 inputs and gguf-py's `gguf.quants.quantize` encoding of them (Q8_0, Q4_0, BF16,
F16, MXFP4), for tests/gguf_python.rs to compare byte for byte with golden-lens's encoder.

usage: gen_quant_inputs.py OUT_DIR
writes OUT_DIR/manifest.json, inputs.f32 and, per type, <TYPE>.bytes.
"""

import json
import os
import sys

import numpy as np
from gguf import GGMLQuantizationType as QT
from gguf.quants import quantize

TYPES = [QT.Q8_0, QT.Q4_0, QT.BF16, QT.F16, QT.MXFP4]
BLOCK = 32


def inputs(rng: np.random.Generator) -> np.ndarray:
    """Rows of 32 values: random scales, and blocks built to hit the quantizers' edges."""
    rows = [rng.standard_normal(BLOCK) * s for s in (1e-3, 0.1, 1.0, 37.0, 1e4) for _ in range(40)]
    rows.append(np.zeros(BLOCK))                          # all-zero block: scale 0
    rows.append(np.full(BLOCK, -2.5))                     # constant negative block
    rows.append(np.arange(BLOCK) - 15.5)                  # max magnitude is negative
    rows.append(np.arange(BLOCK) * 0.5)                   # exact halves after scaling
    r = rng.standard_normal(BLOCK)
    r[7] = -np.abs(r).max() * 1.0000001                   # extreme negative beside a near tie
    rows.append(r)
    rows.append(np.linspace(-1, 1, BLOCK) * 2 ** -20)     # tiny values (f16 subnormals)
    rows.append(np.array([65504.0, -65504.0, 1e-8, -1e-8] * 8))  # f16 range edges
    # bf16 round-to-nearest-even ties: values exactly halfway between two bf16 numbers.
    base = np.float32(1.0) + np.arange(BLOCK, dtype=np.float32) * np.float32(2 ** -7)
    rows.append(base + np.float32(2 ** -8))
    return np.stack(rows).astype(np.float32)


def main() -> None:
    out = sys.argv[1]
    x = inputs(np.random.default_rng(20261130))
    x.astype("<f4").tofile(os.path.join(out, "inputs.f32"))
    manifest = {"n_values": int(x.size), "types": []}
    for qtype in TYPES:
        q = quantize(x, qtype)
        np.ascontiguousarray(q).view(np.uint8).tofile(os.path.join(out, f"{qtype.name}.bytes"))
        manifest["types"].append(qtype.name)
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f)


if __name__ == "__main__":
    main()
