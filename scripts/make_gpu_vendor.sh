#!/usr/bin/env bash
# Build target-vendor/vendor.tar.xz for scripts/gpu_device_check.sh: `cargo vendor` everything in
# Cargo.lock, then reduce every crate the Linux x86_64 `gpu` build (normal, build and dev edges)
# does not use to its manifest plus empty sources, with its checksum file list emptied so cargo
# accepts it. Needs network (or a warm cargo cache) and python3. About 7 MB compressed.
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
cargo vendor "$tmp/vend" > /dev/null
cargo tree --features gpu -e normal,build,dev --target x86_64-unknown-linux-gnu --prefix none \
  | awk '{print $1"-"$2}' | sed 's/-v\([0-9]\)/-\1/' | sort -u > "$tmp/needed.txt"
python3 - "$tmp" <<'PY'
import json, os, re, shutil, sys
tmp = sys.argv[1]
need = set(open(os.path.join(tmp, "needed.txt")).read().split())
root = os.path.join(tmp, "vend")
for d in sorted(os.listdir(root)):
    p = os.path.join(root, d)
    toml = open(os.path.join(p, "Cargo.toml")).read()
    pkg = re.search(r"^\[package\](.*?)(^\[|\Z)", toml, re.S | re.M).group(1)
    name = re.search(r'^name\s*=\s*"([^"]+)"', pkg, re.M).group(1)
    ver = re.search(r'^version\s*=\s*"([^"]+)"', pkg, re.M).group(1)
    if f"{name}-{ver}" in need:
        continue
    ck = json.load(open(os.path.join(p, ".cargo-checksum.json")))
    for e in os.listdir(p):
        if e not in ("Cargo.toml", ".cargo-checksum.json"):
            q = os.path.join(p, e)
            shutil.rmtree(q) if os.path.isdir(q) else os.remove(q)
    os.makedirs(os.path.join(p, "src"), exist_ok=True)
    open(os.path.join(p, "src", "lib.rs"), "w").close()
    for path in re.findall(r'^(?:path|build)\s*=\s*"([^"]+)"', toml, re.M):
        if path.endswith(".rs"):
            f = os.path.join(p, path)
            os.makedirs(os.path.dirname(f), exist_ok=True)
            open(f, "w").write("fn main() {}\n" if ("build" in path or "main" in path) else "")
    ck["files"] = {}
    json.dump(ck, open(os.path.join(p, ".cargo-checksum.json"), "w"))
PY
mkdir -p target-vendor
tar -C "$tmp" -cJf target-vendor/vendor.tar.xz vend
rm -rf "$tmp"
ls -la target-vendor/vendor.tar.xz
