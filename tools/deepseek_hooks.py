#!/usr/bin/env python3
"""Record DeepSeek-V4.1 reference forwards as a golden-lens canonical safetensors dump.

For teams whose reference or port is PyTorch code in the layout of DeepSeek's `inference/model.py`
(`Transformer` with `embed`, `layers.N` blocks holding `attn`, `attn.indexer`, `ffn`, `ffn.gate`,
`engram`, ..., then `norm`). Forward hooks record every module call as
`pass{N}/{module path}.input{i}|.output{i}` (tensors cloned at capture time, since fused kernels
may reuse a buffer); the rules of golden-lens's shipped map `src/import/maps/deepseek-ref.toml`
turn those names into canonical `{regime}/{capture}` names, so the Rust importer and this script
share one mapping. Regimes are named as the golden names them: the first forward (start_pos 0)
`prefill{seqlen}`, each later one `decode{start_pos}`.

In your driver (needs torch; Python >= 3.11 for tomllib):

    import sys; sys.path.insert(0, "tools"); from deepseek_hooks import Recorder
    rec = Recorder(model)                  # hooks every submodule of the Transformer
    model(prompt_ids, 0); model(next_id, 12); model(next_id2, 13)
    rec.save("dump.safetensors")           # canonical names, float32 / int64
    rec.remove()

then `golden-lens check --golden G --captures dump.safetensors`.

Without torch, `python tools/deepseek_hooks.py convert RAW.npz OUT.safetensors --passes 0:12,12:1,13:1`
maps an .npz of raw hook names (the same `pass{N}/...` convention; `--passes` gives each forward's
start_pos:seqlen) to the canonical dump. A `.pt` dump is a pickle: load it in Python yourself and
`numpy.savez(path, **{k: v.float().numpy() for k, v in d.items()})` before converting.
"""

import json
import re
import sys
import tomllib
from pathlib import Path

MAP = Path(__file__).resolve().parent.parent / "src/import/maps/deepseek-ref.toml"


def load_rules(path=MAP):
    """The map's rules as (anchored regex, capture template or None) in file order."""
    with open(path, "rb") as f:
        rules = tomllib.load(f)["rule"]
    return [(re.compile(f"^(?:{r['match']})$"), None if r.get("skip") else r["capture"]) for r in rules]


def regime_name(start_pos, seqlen):
    return f"prefill{seqlen}" if start_pos == 0 else f"decode{start_pos}"


def canonical_name(raw, rules, passes):
    """`{regime}/{capture}` for a raw hook name, or None (skipped or unmapped). `passes` lists
    each forward's (start_pos, seqlen)."""
    for pattern, template in rules:
        m = pattern.match(raw)
        if not m:
            continue
        if template is None:
            return None
        groups = m.groupdict()
        capture = re.sub(r"\{(\w+)\}", lambda g: groups[g.group(1)], template)
        k = int(groups["occurrence"])
        if k >= len(passes):
            raise ValueError(f"{raw}: forward {k} but only {len(passes)} were recorded")
        return f"{regime_name(*passes[k])}/{capture}"
    return None


def write_safetensors(path, tensors):
    """Write {name: numpy array} as safetensors: floats as F32, integers and bools as I64."""
    import numpy as np

    header, blobs, offset = {}, [], 0
    for name, a in tensors.items():
        a = np.ascontiguousarray(a, dtype="<f4" if np.issubdtype(a.dtype, np.floating) else "<i8")
        blob = a.tobytes()
        header[name] = {"dtype": "F32" if a.dtype.kind == "f" else "I64", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-(8 + len(text)) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + b"".join(blobs))


def canonical(raw_tensors, passes, rules=None):
    """Raw hook tensors -> canonical ones (a capture recorded twice in one pass is an error)."""
    rules = rules or load_rules()
    out = {}
    for raw, a in raw_tensors.items():
        name = canonical_name(raw, rules, passes)
        if name is None:
            continue
        if name in out:
            raise ValueError(f"{raw}: {name} recorded twice")
        out[name] = a
    return out


class Recorder:
    """Forward hooks on every submodule of a DeepSeek `Transformer`."""

    def __init__(self, model):
        import torch

        self.torch, self.raw, self.passes, self.handles = torch, {}, [], []
        self.handles.append(model.register_forward_pre_hook(self._begin))
        for path, module in model.named_modules():
            if path:
                self.handles.append(module.register_forward_hook(self._hook(path)))

    def _begin(self, _module, args):
        ids, start_pos = args[0], int(args[1]) if len(args) > 1 else 0
        self.passes.append((start_pos, ids.shape[-1]))
        self._keep(f"input_ids@{len(self.passes) - 1}", ids)

    def _keep(self, name, t):
        if isinstance(t, self.torch.Tensor):
            t = t.detach().clone()
            self.raw[name] = (t.float() if t.is_floating_point() else t.long()).cpu().numpy()

    def _hook(self, path):
        def hook(_module, inputs, output):
            n = len(self.passes) - 1
            for i, t in enumerate(inputs):
                self._keep(f"pass{n}/{path}.input{i}", t)
            outs = output if isinstance(output, (tuple, list)) else (output,)
            for i, t in enumerate(outs):
                self._keep(f"pass{n}/{path}.output{i}", t)
        return hook

    def save(self, path):
        tensors = canonical({k: v for k, v in self.raw.items() if "@" not in k}, self.passes)
        for k, v in self.raw.items():
            if k.startswith("input_ids@"):
                tensors[f"{regime_name(*self.passes[int(k.split('@')[1])])}/input_ids"] = v
        write_safetensors(path, tensors)
        return len(tensors)

    def remove(self):
        for h in self.handles:
            h.remove()


def main(argv):
    if len(argv) != 5 or argv[0] != "convert" or argv[3] != "--passes":
        sys.exit(__doc__)
    import numpy as np

    passes = [tuple(int(x) for x in p.split(":")) for p in argv[4].split(",")]
    with np.load(argv[1], allow_pickle=False) as z:
        raw = {k: z[k] for k in z.files}
    tensors = canonical(raw, passes)
    write_safetensors(argv[2], tensors)
    print(f"wrote {argv[2]}: {len(tensors)} captures from {len(raw)} tensors")


if __name__ == "__main__":
    main(sys.argv[1:])
