"""Writes GGUF files with gguf-py's GGUFWriter (odd alignments, every value type, u64 arrays,
nested arrays, float and quantized tensors, a merged 3-D expert tensor), reads them back with
GGUFReader and records what gguf-py sees, for tests/gguf_python.rs to compare field by field.

usage: write_gguf_files.py OUT_DIR
writes OUT_DIR/<name>.gguf, OUT_DIR/<name>.expected.json and OUT_DIR/<name>.t<i>.f32
"""

import json
import os
import sys

import numpy as np
from gguf import GGUFReader, GGUFWriter
from gguf import GGMLQuantizationType as QT
from gguf import GGUFValueType as VT
from gguf.quants import dequantize, quantize

from gguf_blocks import random_blocks

ALIGNMENTS = [1, 8, 64, 16384]


def add_metadata(w: GGUFWriter) -> dict:
    """Adds one key per value type (and array flavours); returns key -> value written, for the
    values GGUFReader.contents() cannot express (nested arrays)."""
    w.add_uint8("t.u8", 200)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 60000)
    w.add_int16("t.i16", -30000)
    w.add_uint32("t.u32", 4_000_000_000)
    w.add_int32("t.i32", -2_000_000_000)
    w.add_float32("t.f32", 3.14159)
    w.add_uint64("t.u64", 2**63 + 12345)
    w.add_int64("t.i64", -(2**62) - 7)
    w.add_float64("t.f64", 1.0 / 3.0)
    w.add_bool("t.bool_true", True)
    w.add_bool("t.bool_false", False)
    w.add_string("t.str", "h\u00e9llo \u2713")
    w.add_string("t.str_empty", "")
    w.add_array("t.arr_str", ["a", "", "\u00fc", "four"])
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_key_value("t.arr_u64", [2**47 + 1, 3, 2**64 - 1], VT.ARRAY, VT.UINT64)
    w.add_key_value("t.arr_i64", [-(2**63), 2**63 - 1], VT.ARRAY, VT.INT64)
    w.add_key_value("t.arr_u8", [0, 255, 7], VT.ARRAY, VT.UINT8)
    w.add_key_value("t.arr_i8", [-128, 127], VT.ARRAY, VT.INT8)
    w.add_key_value("t.arr_u16", [65535, 1], VT.ARRAY, VT.UINT16)
    w.add_key_value("t.arr_i16", [-32768, 32767], VT.ARRAY, VT.INT16)
    w.add_key_value("t.arr_u32", [4_294_967_295, 0], VT.ARRAY, VT.UINT32)
    w.add_key_value("t.arr_f32", [0.1, -2.5, 1e-30], VT.ARRAY, VT.FLOAT32)
    w.add_key_value("t.arr_f64", [0.1, -2.5e300], VT.ARRAY, VT.FLOAT64)
    w.add_key_value("t.arr_bool", [True, False, True], VT.ARRAY, VT.BOOL)
    nested = [[1, 2, 3], [4], [5, 6]]
    w.add_key_value("t.nested", nested, VT.ARRAY)
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
    return {"t.nested": nested}


def add_tensors(w: GGUFWriter, rng: np.random.Generator) -> None:
    w.add_tensor("f32.weight", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("f16.weight", rng.standard_normal((2, 7)).astype(np.float16))
    w.add_tensor("bf16.weight", quantize(rng.standard_normal((2, 8)).astype(np.float32), QT.BF16), raw_dtype=QT.BF16)
    w.add_tensor("i8.weight", rng.integers(-128, 128, size=(5, 264), dtype=np.int8))
    for qtype in (QT.Q8_0, QT.Q4_0, QT.MXFP4):
        data = quantize(rng.standard_normal((4, 64)).astype(np.float32), qtype)
        w.add_tensor(f"{qtype.name.lower()}.weight", data, raw_dtype=qtype)
    for qtype in (QT.Q2_K, QT.Q3_K, QT.Q4_K, QT.Q5_K, QT.Q6_K, QT.IQ2_XXS):
        blocks = random_blocks(qtype, 6, rng).reshape(3, -1)  # 3 rows of 2 super-blocks
        w.add_tensor(f"{qtype.name.lower()}.weight", blocks, raw_dtype=qtype)
    experts = quantize(rng.standard_normal((3, 2, 64)).astype(np.float32), QT.Q8_0)
    w.add_tensor("blk.0.ffn_gate_exps.weight", experts, raw_dtype=QT.Q8_0)


def field_value(field) -> object:
    return field.contents()


def main() -> None:
    out = sys.argv[1]
    rng = np.random.default_rng(41)
    for alignment in ALIGNMENTS:
        name = f"align{alignment}"
        path = os.path.join(out, f"{name}.gguf")
        w = GGUFWriter(path, "deepseek41")
        w.add_custom_alignment(alignment)
        written = add_metadata(w)
        add_tensors(w, rng)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()

        r = GGUFReader(path)
        metadata = []
        for key, field in r.fields.items():
            if key.startswith("GGUF."):
                continue
            vtype = field.types[0]
            entry = {"key": key, "type": vtype.name.lower()}
            if vtype == VT.ARRAY:
                entry["elem_type"] = field.types[1].name.lower()
            entry["value"] = written[key] if key in written else field_value(field)
            metadata.append(entry)
        tensors = []
        for i, t in enumerate(r.tensors):
            if t.tensor_type == QT.I8:
                values = t.data.astype(np.float32)
            else:
                values = dequantize(t.data, t.tensor_type)
            values = np.asarray(values, dtype=np.float32).reshape(-1)
            values_file = f"{name}.t{i}.f32"
            values.astype("<f4").tofile(os.path.join(out, values_file))
            tensors.append(
                {
                    "name": t.name,
                    "type_id": int(t.tensor_type),
                    "dims": [int(d) for d in t.shape],
                    "offset": int(t.data_offset),
                    "n_bytes": int(t.n_bytes),
                    "n_elements": int(t.n_elements),
                    "values_file": values_file,
                }
            )
        expected = {
            "file": f"{name}.gguf",
            "alignment": int(r.alignment),
            "data_offset": int(r.data_offset),
            "metadata": metadata,
            "tensors": tensors,
        }
        with open(os.path.join(out, f"{name}.expected.json"), "w") as f:
            json.dump(expected, f)


if __name__ == "__main__":
    main()
