#!/usr/bin/env bash
# Real-GPU check of the wgpu path, offline: the tiny golden through
# `check --backend cpu,gpu --reference-ties` (each backend against the golden, the GPU against
# the oracle under the GPU policy) and one real-dims compressed block timed on the oracle and on
# the GPU. Lines starting with `FIGURE` are the numbers for the issue note.
#
# Dependencies come from `target-vendor/vendor.tar.xz` (ignored by git; carry `target-vendor`):
# a `cargo vendor` tree in which crates the Linux `gpu` build never compiles (Windows, macOS,
# web, GUI) are reduced to their manifests. Make it with `scripts/make_gpu_vendor.sh`.
# Cargo is pointed at it with `--config` flags, so nothing is written outside the target dirs.
#
# The lent H200 image has no Rust toolchain. There, carry prebuilt binaries instead: build here
# with `cargo build --release --features gpu --bin golden-lens --example gpu_realdims_block`, copy
# both into `dist-gpu/` (excluded from git), and carry `dist-gpu`. The image also lacks the Vulkan
# loader: carry `.gl/` holding Debian's libvulkan1 .deb (`apt-get download libvulkan1`); the script
# unpacks it and points the loader at the NVIDIA ICD.
set -uo pipefail
cd "$(dirname "$0")/.."
TOKENS="${TOKENS:-16}"
LAYER="${LAYER:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-device}"
start=$(date +%s)
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

GOLDEN_ARG=()
for g in "${GOLDEN:-}" golden/reference/ds41_tiny_golden.v3.json; do
  if [ -n "$g" ] && [ -f "$g" ]; then GOLDEN_ARG=(--golden "$g"); break; fi
done
[ ${#GOLDEN_ARG[@]} -eq 0 ] && echo "note: v3 golden not found; using the embedded golden"

if ls .gl/*.deb >/dev/null 2>&1; then
  for f in .gl/*.deb; do dpkg -x "$f" /; done; ldconfig
fi
icd=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
[ -f "$icd" ] && export VK_DRIVER_FILES="$icd"

if [ -x dist-gpu/golden-lens ] && [ -x dist-gpu/gpu_realdims_block ]; then
  BIN=dist-gpu/golden-lens
  EX=dist-gpu/gpu_realdims_block
  echo "using prebuilt binaries in dist-gpu/"
elif [ ! -f target-vendor/vendor.tar.xz ]; then
  echo "neither dist-gpu/ binaries nor target-vendor/vendor.tar.xz (carry one of them)"; exit 2
else
rm -rf "$CARGO_TARGET_DIR/vendor" && mkdir -p "$CARGO_TARGET_DIR"
tar -C "$CARGO_TARGET_DIR" -xJf target-vendor/vendor.tar.xz && mv "$CARGO_TARGET_DIR/vend" "$CARGO_TARGET_DIR/vendor"
echo "building (release, offline, vendored) ..."
if ! cargo build --offline --release --features gpu --bin golden-lens --example gpu_realdims_block \
     -j "$(nproc)" \
     --config 'source.crates-io.replace-with="vendored"' \
     --config "source.vendored.directory=\"$CARGO_TARGET_DIR/vendor\"" > "$CARGO_TARGET_DIR/build.log" 2>&1; then
  tail -20 "$CARGO_TARGET_DIR/build.log"; echo "FIGURE build=failed"; exit 2
fi
BIN="$CARGO_TARGET_DIR/release/golden-lens"
EX="$CARGO_TARGET_DIR/release/examples/gpu_realdims_block"
echo "FIGURE build_s=$(( $(date +%s) - start ))"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/FIGURE nvidia: /'
ls /usr/share/vulkan/icd.d /etc/vulkan/icd.d 2>/dev/null | tr '\n' ' ' | sed 's/^/vulkan ICDs: /'; echo
ldconfig -p 2>/dev/null | grep -q libvulkan.so.1 || echo "warning: libvulkan.so.1 (Debian libvulkan1) not found: wgpu cannot load Vulkan"

t0=$(now)
timeout 240 "$BIN" check "${GOLDEN_ARG[@]}" --backend cpu,gpu --reference-ties --quiet > "$CARGO_TARGET_DIR/tiny_check.log" 2>&1
rc=$?
t1=$(now)
grep -E "^adapter:|^gpu vs cpu:|^gpu:|^overall:|passed, .* failed|^bit-exact:|^first|OUTSIDE|FAIL" "$CARGO_TARGET_DIR/tiny_check.log" | head -30
echo "FIGURE tiny_check_exit=$rc tiny_check_s=$(secs "$t0" "$t1")"

t0=$(now)
timeout 300 "$EX" "$TOKENS" "$LAYER" > "$CARGO_TARGET_DIR/realdims.log" 2>&1
rc=$?
t1=$(now)
grep -v "^error: XDG" "$CARGO_TARGET_DIR/realdims.log" | tail -14
grep REALDIMS_SUMMARY "$CARGO_TARGET_DIR/realdims.log" | sed 's/^/FIGURE /'
echo "FIGURE realdims_exit=$rc realdims_total_s=$(secs "$t0" "$t1") total_s=$(( $(date +%s) - start ))"
