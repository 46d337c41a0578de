"""Times gguf-py's `gguf.quants.dequantize` on the blocks golden-lens benchmarks, for
`golden-lens bench`.

usage: gguf_py_dequant.py MANIFEST.json OUT.json

The manifest lists {"type", "path", "values", "verify_values", "verify_path"}: `path` holds
`values` values of the GGML type `type` as raw blocks. For each entry this writes the best wall
time of three dequantizations (numpy, one thread, as gguf-py runs) to OUT.json and the first
`verify_values` dequantized values as little-endian f32 to `verify_path`, so the caller can check
the bits against its own decoder.
"""

import json
import sys
import time

import numpy as np
from gguf import GGMLQuantizationType
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

REPS = 3


def main() -> None:
    manifest_path, out_path = sys.argv[1], sys.argv[2]
    with open(manifest_path) as f:
        manifest = json.load(f)
    results = {}
    for entry in manifest:
        qtype = GGMLQuantizationType[entry["type"]]
        block_values, block_bytes = GGML_QUANT_SIZES[qtype]
        raw = np.fromfile(entry["path"], dtype=np.uint8)
        n_blocks = entry["values"] // block_values
        if raw.size != n_blocks * block_bytes:
            raise SystemExit(f"{entry['path']}: {raw.size} bytes, expected {n_blocks * block_bytes}")
        rows = raw.reshape(n_blocks, block_bytes)
        best = float("inf")
        out = None
        for _ in range(REPS):
            t0 = time.perf_counter()
            out = dequantize(rows, qtype)
            best = min(best, time.perf_counter() - t0)
        flat = np.asarray(out, dtype=np.float32).reshape(-1)
        if flat.size != entry["values"]:
            raise SystemExit(f"{entry['type']}: {flat.size} values, expected {entry['values']}")
        flat[: entry["verify_values"]].astype("<f4").tofile(entry["verify_path"])
        results[entry["type"]] = {"seconds": best, "values": int(flat.size)}
    with open(out_path, "w") as f:
        json.dump(results, f)


if __name__ == "__main__":
    main()
