#!/usr/bin/env bash
# Real-GPU check of the wgpu path: the tiny golden through `--backend cpu,gpu --reference-ties`
# (each backend against the golden, the GPU against the oracle) and one real-dims compressed
# block timed on the oracle and on the GPU. Runs offline.
#
# Build: with a vendored source tree (`vendor/`, made by `cargo vendor vendor` on a networked
# machine and carried with the working tree) the script writes `.cargo/config.toml` pointing
# crates.io at it and builds `--release --features gpu --offline`. Without `vendor/`, prebuilt
# binaries in `dist-gpu/` (copied there from target/release on the build machine) are used.
# Prints lines starting with `FIGURE` for the issue note.
set -uo pipefail
cd "$(dirname "$0")/.."
GOLDEN="${GOLDEN:-../shared/reference/ds41_tiny_golden.v3.json}"
TOKENS="${TOKENS:-16}"
LAYER="${LAYER:-2}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target-device}"
start=$(date +%s)

if [ -d vendor ]; then
  mkdir -p .cargo
  cat > .cargo/config.toml <<'TOML'
[source.crates-io]
replace-with = "vendored-sources"

[source.vendored-sources]
directory = "vendor"
TOML
  echo "building (offline, vendored) ..."
  if ! cargo build --offline --release --features gpu --bin golden-lens --example gpu_realdims_block -j "$(nproc)" 2>&1 | tail -5; then
    echo "FIGURE build=failed"; exit 2
  fi
  BIN="$CARGO_TARGET_DIR/release/golden-lens"
  EX="$CARGO_TARGET_DIR/release/examples/gpu_realdims_block"
elif [ -x dist-gpu/golden-lens ]; then
  BIN=dist-gpu/golden-lens
  EX=dist-gpu/gpu_realdims_block
else
  echo "neither vendor/ nor dist-gpu/ is present: nothing to build or run"; exit 2
fi
echo "FIGURE build_s=$(( $(date +%s) - start ))"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/FIGURE nvidia: /'

t0=$(date +%s.%N)
timeout 240 "$BIN" check --golden "$GOLDEN" --backend cpu,gpu --reference-ties --quiet > tiny_check.log 2>&1
rc=$?
t1=$(date +%s.%N)
grep -E "^adapter:|^gpu vs cpu:|^gpu:|^overall:|passed, .* failed|^bit-exact:|first" tiny_check.log
echo "FIGURE tiny_check_exit=$rc tiny_check_s=$(echo "$t1 - $t0" | bc)"

t0=$(date +%s.%N)
timeout 300 "$EX" "$TOKENS" "$LAYER" > realdims.log 2>&1
rc=$?
t1=$(date +%s.%N)
cat realdims.log | tail -12
grep REALDIMS_SUMMARY realdims.log | sed 's/^/FIGURE /'
echo "FIGURE realdims_exit=$rc realdims_total_s=$(echo "$t1 - $t0" | bc) total_s=$(( $(date +%s) - start ))"
