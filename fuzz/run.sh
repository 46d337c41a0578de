#!/usr/bin/env bash
# Runs every fuzz target (or those named) for SECONDS each, one at a time, at low priority and
# under libFuzzer's memory bound, and prints per target: executions, exec/s, final coverage
# (libFuzzer's `cov`), features and the crash/timeout/oom files it left in artifacts/TARGET/.
# Usage: fuzz/run.sh SECONDS [TARGET...]   (needs a nightly toolchain and cargo-fuzz)
# Environment: FUZZ_MAX_LEN (bytes, default 1048576) bounds the inputs libFuzzer makes; a
# smaller bound (e.g. 65536 for golden_parse) trades the large seeds for many more executions.
# FUZZ_TIMEOUT (seconds, default 10) is libFuzzer's per-input wall-clock bound: at nice 19 on a
# loaded machine a 2 s input can exceed it, so time a timeout input again before fixing it (a
# background campaign beside builds wants e.g. 600). FUZZ_RUNS stops a target after that many
# executions (libFuzzer -runs) if it comes before SECONDS. FUZZ_CORPUS (a directory holding one
# folder per target) fuzzes that corpus instead of corpus/, e.g. a few hundred small seeds for
# FUZZ_MAX_LEN=4096 runs.
# Findings: copy artifacts/TARGET/* into tests/data/fuzz/crashes/TARGET/ once fixed; the stable
# test tests/fuzz_replay.rs replays them.
set -euo pipefail
cd "$(dirname "$0")"
secs=${1:?usage: fuzz/run.sh SECONDS [TARGET...]}
shift
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
  mapfile -t targets < <(sed -n 's/^name = "\(.*\)"$/\1/p' Cargo.toml | grep -v golden-lens-fuzz)
fi
[ -d corpus ] || ./seeds.sh
# The dictionaries follow the sources (a committed copy goes stale when a name changes).
./seeds.sh --dicts
nice -n 19 cargo +nightly fuzz build -O >/dev/null
printf '%-14s %12s %8s %8s %9s %s\n' target executions exec/s cov features findings
for t in "${targets[@]}"; do
  mkdir -p "${FUZZ_CORPUS:-corpus}/$t" "artifacts/$t"
  dict=()
  case $t in
    golden_parse) dict=(-dict=dict/json.dict) ;;
    gguf_file|gguf_model) dict=(-dict=dict/gguf.dict) ;;
    name_map) dict=(-dict=dict/toml.dict) ;;
    shader_set) dict=(-dict=dict/wgsl.dict) ;;
  esac
  log=$(mktemp)
  # Memory is bounded by libFuzzer (an address-space limit would stop ASan's shadow map): an
  # input that makes a parser allocate past 2 GB is an OOM finding.
  nice -n 19 "target/x86_64-unknown-linux-gnu/release/$t" \
    -max_total_time="$secs" -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout="${FUZZ_TIMEOUT:-10}" -max_len="${FUZZ_MAX_LEN:-1048576}" \
    ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} -print_final_stats=1 -artifact_prefix="artifacts/$t/" "${dict[@]}" \
    "${FUZZ_CORPUS:-corpus}/$t" >"$log" 2>&1 || true
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -o 'ft: [0-9]*' "$log" | tail -1 | cut -d' ' -f2)
  found=$(find "artifacts/$t" -type f | wc -l)
  printf '%-14s %12s %8s %8s %9s %s\n' "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "$found"
  cp "$log" "artifacts/$t.log"
  rm -f "$log"
done
