#!/usr/bin/env bash
# Issue 36: fedavg_vs_scaffold tuned per algorithm (lr, momentum), then tested with three seeds,
# beside the untuned table. Rerun to continue (studies continue from optuna.db, jobs resume=auto).
set -uo pipefail
COMMIT=9c36091
WT=/work/wt_runs
OUT=/work/main/multirun/tune_fvs
PY=/work/main/.venv/bin/python
[ -d $WT ] || git -C /work/main worktree add --detach $WT $COMMIT
cd $WT
for a in fedavg scaffold; do
  $PY -m fedlight -m +experiment/tuning=fedavg_vs_scaffold +experiment/tune=$a \
    'optim.momentum=choice(0.0,0.5,0.9)' data.root=../shared/data hydra.sweep.dir=$OUT/$a
done
for a in fedavg scaffold; do /work/main/.venv/bin/fedlight tuned $OUT/$a; done
$PY -m fedlight -m +experiment/tuning=fedavg_vs_scaffold algo=fedavg,scaffold seed=0,1,2 \
  data.root=../shared/data resume=auto hydra.sweep.dir=$OUT/untuned
