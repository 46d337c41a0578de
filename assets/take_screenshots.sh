#!/usr/bin/env bash
# README screenshots of the real window under Xvfb at 1280x800, one per detail view, on the
# embedded golden: the app runs the golden, selects the capture, shows the view, writes a PNG of
# its own window (`gui --screenshot`) and closes. The real-dims screenshots come from the app
# tests instead: UPDATE_SCREENSHOTS=1 cargo test --test ui_views_layout frames -- --nocapture
# Needs: xvfb, mesa-vulkan-drivers (lavapipe) and a `gui` build of golden-lens.
# Usage: assets/take_screenshots.sh path/to/golden-lens
set -euo pipefail
bin=${1:?path to the golden-lens binary}
out=$(dirname "$0")
display=${SCREENSHOT_DISPLAY:-:97}
Xvfb "$display" -screen 0 1920x1200x24 >/dev/null 2>&1 &
xvfb=$!
trap 'kill $xvfb 2>/dev/null || true' EXIT
export DISPLAY=$display
sleep 2
shoot() { # view capture file [theme]
  timeout 300 "$bin" gui --fresh --size 1280x800 --theme "${4:-dark}" \
    --select "$2" --view "$1" --screenshot "$out/$3"
}
shoot values prefill12/L0.attn_in screenshot_values.png
shoot topk prefill12/shared.L4.topk_idxs screenshot_topk.png
shoot mask decode12/L5.sa_topk_idxs screenshot_window_mask.png
shoot hc prefill12/L2.attn_comb screenshot_hc_mixes.png
shoot moe prefill12/L0.moe_indices screenshot_moe.png
shoot values prefill12/L3.h_out screenshot_values_light.png light
