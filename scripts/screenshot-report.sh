#!/usr/bin/env bash
# Renders a simulation report in headless Chromium and saves a screenshot, to check the
# charts draw (the report is self-contained: no scripts, no network).
#   scripts/screenshot-report.sh [REPORT_DIR (default capstan-report)] [OUT.png]
set -euo pipefail
dir="${1:-capstan-report}"
out="${2:-$dir/report.png}"
command -v chromium >/dev/null || { echo "installing chromium" >&2; apt-get install -y chromium >/dev/null; }
chromium --headless --no-sandbox --disable-gpu --window-size=1200,2600 \
  --screenshot="$out" "file://$(realpath "$dir/report.html")" 2>/dev/null
size=$(stat -c %s "$out")
echo "$out: $size bytes"
# A blank page renders to a few kilobytes; five charts and tables to well over 100 KB.
[ "$size" -gt 100000 ]
