#!/usr/bin/env bash
# Commit the long runs' progress (only multirun/): what a new machine needs to continue them and
# to write the reports: metrics, summaries, Hydra's records, Optuna's studies, and the checkpoints
# of unfinished jobs; not the models, plots or finished jobs' checkpoints (regenerated or unneeded).
set -euo pipefail
cd /work/main
files=$(find multirun -type f ! -name '*.png' ! -name 'model.ckpt' ! -name 'model.pt' \
  ! -name 'checkpoint.pt' ! -name 'run*.log' ! -name '*.tmp' ! -name '.fedlight.lock')
unfinished=$(find multirun -name checkpoint.pt -printf '%h\n' | while read -r d; do
  [ -f "$d/summary.json" ] || echo "$d/checkpoint.pt"; done)
git add -f $files $unfinished
finished=$(git ls-files multirun | grep 'checkpoint.pt$' | while read -r f; do
  [ -f "$(dirname "$f")/summary.json" ] && echo "$f"; done || true)
[ -z "$finished" ] || git rm -q --cached $finished
git commit -q -m "runs: progress of the long runs ($(date -u +%H:%M))" -- multirun && git log --oneline -1
