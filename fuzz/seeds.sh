#!/usr/bin/env bash
# Seeds fuzz/corpus/TARGET from the repository's own files: reference goldens, the first pass's
# reproducers, tiny GGUF exports of both dialects (when the golden-lens binary is built), the
# shipped name maps, small npy/npz/safetensors/manifest dumps, and a few blocks of every type;
# then writes the dictionaries in fuzz/dict/. With --dicts it only writes the dictionaries.
set -euo pipefail
cd "$(dirname "$0")"
root=..
# The libFuzzer dictionaries, derived from the sources (so a renamed key, field or shader
# name reaches them): fuzz/run.sh rewrites them before every campaign.
write_dicts() {
  # Dictionaries: every deepseek41 key spelled in the key table, and the golden schema's fields.
  {
    echo '"GGUF"'
    grep -o '"[a-z_][a-z0-9_.]*"' $root/src/gguf/deepseek41/keys.rs | sort -u |
      sed 's/^"\(.*\)"$/"deepseek41.\1"\n"\1"/'
    for k in general.architecture general.name general.alignment tokenizer.ggml.tokens \
             split.count split.no split.tensors.count; do echo "\"$k\""; done
  } > dict/gguf.dict
  {
    grep -oh '"[a-z_][a-z0-9_]*"' $root/src/golden/fixture.rs $root/src/golden/parse/*.rs \
      $root/src/golden/schema.rs | sort -u
    for t in '{' '}' '[' ']' ':' ',' 'null' 'true' 'false' '1e308' '-0' '1.0e-45' \
             '18446744073709551616' '"NaN"' '"Infinity"'; do printf '"%s"\n' "${t//\"/\\\"}"; done
  } > dict/json.dict
  {
    for t in '[[rule]]' 'match' 'capture' 'layer' 'transpose' 'scale' 'dtype' '{layer}' '{pos}'  \
             '"""' "'''" '= [' '= {' ; do printf '"%s"\n' "${t//\"/\\\"}"; done
    grep -oh '"[a-z_][a-z0-9_]*"' $root/src/import/map.rs | sort -u
  } > dict/toml.dict
  # The WGSL dictionary: keywords, types, attributes, builtins, and the names the Rust side
  # checks (entry points, structs, functions, constants of the embedded shaders).
  {
    for t in fn var let const struct return if else loop for while break continue switch case \
             default override alias enable requires diagnostic continuing discard true false \
             '@compute' '@workgroup_size(' '@group(0)' '@binding(' '@builtin(' '@align(' '@size(' \
             'var<storage, read>' 'var<storage, read_write>' 'var<uniform>' 'var<workgroup>' \
             'var<private>' 'array<' 'atomic<' 'ptr<' 'vec2<' 'vec3<' 'vec4<' 'mat4x4<' \
             f32 f16 i32 u32 bool vec3u vec4f global_invocation_id local_invocation_id \
             local_invocation_index workgroup_id num_workgroups subgroup_size arrayLength \
             workgroupBarrier storageBarrier atomicAdd atomicLoad atomicStore bitcast select \
             clamp min max abs exp log sqrt inverseSqrt fma floor round pow countOneBits \
             extractBits insertBits unpack2x16float pack2x16float '->' '::' '>>' '<<' '>>=' \
             '{' '}' '(' ')' '[' ']' ';' ',' '//' '/*' '*/' '0u' '1e38' '0x7f800000u' \
             '4294967295u' '-2147483648i'; do printf '"%s"\n' "${t//\"/\\\"}"; done
    grep -ohE '^ *(fn|struct|const|override) [A-Za-z_][A-Za-z0-9_]*' $root/shaders/*.wgsl |
      awk '{print "\"" $2 "\""}' | sort -u
  } > dict/wgsl.dict
}
if [ "${1:-}" = --dicts ]; then
  write_dicts
  exit 0
fi
c=corpus
mkdir -p $c/{golden_parse,gguf_file,gguf_model,dequant,engram_rows,import_dump,name_map,shader_set}
cp $root/golden/reference/ds41_tiny_golden.v1.json $root/golden/reference/ds41_tiny_golden.v2.json \
   $root/golden/ds41_tiny.json $c/golden_parse/
for f in $root/tests/data/fuzz/*; do
  case $f in
    *.json) cp "$f" $c/golden_parse/ ;;
    *.gguf|*.fuzzinput) cp "$f" $c/gguf_file/; cp "$f" $c/gguf_model/ ;;
  esac
done
bin=$root/target/debug/golden-lens
if [ -x $bin ]; then
  for d in ds4 llamacpp; do
    $bin gguf export --golden $root/golden/reference/ds41_tiny_golden.v1.json --dialect $d \
      --types default=q4_0 --alignment 32 --out $c/gguf_model/tiny-$d.gguf >/dev/null 2>&1 || true
  done
  cp $c/gguf_model/tiny-*.gguf $c/gguf_file/ 2>/dev/null || true
fi
cp $root/src/import/maps/*.toml $c/name_map/
# A 3 kB golden (v1's fixture, its first regime's first four captures, six weights) so that
# golden_parse mutates small valid inputs too, not only the 100 kB+ reference files.
python3 - $root/golden/reference/ds41_tiny_golden.v1.json $c/golden_parse/small-v1.json <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
first = g['fixture']['regimes'][0]
small = {'fixture': dict(g['fixture'], regimes=[first]),
         'weights_meta': dict(list(g['weights_meta'].items())[:6]),
         first: dict(list(g[first].items())[:4])}
json.dump(small, open(sys.argv[2], 'w'), separators=(',', ':'))
PY
python3 - "$c" <<'PY'
import json, os, random, struct, sys, zipfile, io
c = sys.argv[1]
random.seed(14)
def npy(shape, dtype='<f4', data=b''):
    hdr = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (dtype, repr(tuple(shape)))
    hdr = hdr.encode() + b' ' * (63 - (len(hdr) + 10) % 64) + b'\n'
    return b'\x93NUMPY\x01\x00' + struct.pack('<H', len(hdr)) + hdr + data
def save(pick, name, data):
    with open(os.path.join(c, 'import_dump', name), 'wb') as f:
        f.write(bytes([pick]) + data)
vals = struct.pack('<6f', *[1.5, -2, 0.25, 3, 4, 5])
meta = {"L0.h_out": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
        "__metadata__": {"pos": "0"}}
h = json.dumps(meta).encode()
save(0, 'safetensors', struct.pack('<Q', len(h)) + h + vals)
save(1, 'npy', npy([2, 3], data=vals))
buf = io.BytesIO()
with zipfile.ZipFile(buf, 'w') as z:
    z.writestr('L0.h_out.npy', npy([2, 3], data=vals))
    z.writestr('L1.x.npy', npy([3], '<i4', struct.pack('<3i', 1, 2, 3)))
save(2, 'npz', buf.getvalue())
save(3, 'manifest.tsv', b'name\tfile\tdtype\tshape\toffset\nL0.h_out\tx.bin\tf32\t2,3\t0\n')
save(4, 'manifest.json', json.dumps({"tensors": [{"name": "L0.h_out", "file": "x.bin",
     "dtype": "f32", "shape": [2, 3], "offset": 0}]}).encode())
for t in range(16):
    with open(os.path.join(c, 'dequant', 'blocks%d' % t), 'wb') as f:
        f.write(bytes([t]) + bytes(random.getrandbits(8) for _ in range(2 * 292)))
    with open(os.path.join(c, 'engram_rows', 'rows%d' % t), 'wb') as f:
        f.write(bytes([t % 8, t]) + bytes(random.getrandbits(8) for _ in range(2 * 528)))
PY
write_dicts
# shader_set: each embedded WGSL file behind the byte that picks it (`common` first, then the
# kernel families in `FAMILIES` order, read from the table itself).
i=0
for f in common $(sed -n 's/^ *&crate::gpu::\([a-z_]*\)::FAMILY,$/\1/p' $root/src/gpu/exec/family.rs); do
  { printf "\\$(printf '%03o' $i)"; cat $root/shaders/$f.wgsl; } > $c/shader_set/$f
  i=$((i + 1))
done
echo "seeded: $(find $c -type f | wc -l) files"
