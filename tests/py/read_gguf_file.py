"""Reads one GGUF with gguf-py's GGUFReader and dumps what it sees (for tests/gguf_writer.rs).

usage: read_gguf_file.py FILE.gguf OUT_DIR
writes OUT_DIR/read.json and OUT_DIR/t<i>.f32 (dequantized tensor values)
"""

import json
import os
import sys

import numpy as np
from gguf import GGUFReader
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf.quants import dequantize


def main() -> None:
    path, out = sys.argv[1], sys.argv[2]
    r = GGUFReader(path)
    metadata = []
    for key, field in r.fields.items():
        if key.startswith("GGUF."):
            continue
        entry = {"key": key, "type": field.types[0].name.lower()}
        if field.types[0] == VT.ARRAY:
            entry["elem_type"] = field.types[1].name.lower()
            if field.types[1] == VT.ARRAY:
                entry["value"] = None  # GGUFReader.contents() does not decode nested arrays
                metadata.append(entry)
                continue
        entry["value"] = field.contents()
        metadata.append(entry)
    tensors = []
    for i, t in enumerate(r.tensors):
        values = t.data.astype(np.float32) if t.tensor_type == QT.I8 else dequantize(t.data, t.tensor_type)
        np.asarray(values, dtype=np.float32).reshape(-1).astype("<f4").tofile(os.path.join(out, f"t{i}.f32"))
        tensors.append(
            {
                "name": t.name,
                "type_id": int(t.tensor_type),
                "dims": [int(d) for d in t.shape],
                "offset": int(t.data_offset),
                "n_bytes": int(t.n_bytes),
            }
        )
    with open(os.path.join(out, "read.json"), "w") as f:
        json.dump({"alignment": int(r.alignment), "data_offset": int(r.data_offset), "metadata": metadata, "tensors": tensors}, f)


if __name__ == "__main__":
    main()
