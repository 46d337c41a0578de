#!/usr/bin/env bash
# Screenshots of the real window under Xvfb, one per detail view, on the embedded golden.
# Needs: xvfb, imagemagick (import), mesa-vulkan-drivers (lavapipe) and a `--features gui` build.
# Usage: assets/take_screenshots.sh path/to/golden-lens
set -euo pipefail
bin=${1:?path to the golden-lens binary}
out=$(dirname "$0")
# Seconds to let the window start, run the tiny golden and draw.
settle_secs=${SETTLE_SECS:-25}
Xvfb :99 -screen 0 1600x1000x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb' EXIT
export DISPLAY=:99
sleep 2
shoot() { # view capture file
  "$bin" gui --run --select "$2" --view "$1" &
  app=$!
  sleep "$settle_secs"
  import -window root "$out/$3"
  kill "$app"
  wait "$app" 2>/dev/null || true
}
shoot values prefill12/L3.sa_q screenshot_values.png
shoot topk prefill12/shared.L4.topk_idxs screenshot_topk.png
shoot mask decode12/L5.sa_topk_idxs screenshot_window_mask.png
shoot hc prefill12/L2.attn_comb screenshot_hc_mixes.png
shoot moe prefill12/L0.moe_indices screenshot_moe.png
