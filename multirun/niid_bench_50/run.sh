#!/usr/bin/env bash
# Issue 38: Flower's niid_bench table at its setting (50 rounds, E=10), from a frozen checkout.
# Rerun this script to continue (resume=auto: finished jobs are skipped, the others continue from
# their checkpoints). Outputs live here, in /work/main/multirun/niid_bench_50, committed now and then
# so a new machine can continue: recreate the worktree at the commit below and rerun.
set -uo pipefail
COMMIT=9c36091
WT=/work/wt_runs            # ../shared/data resolves from here
OUT=/work/main/multirun/niid_bench_50
PY=/work/main/.venv/bin/python
[ -d $WT ] || git -C /work/main worktree add --detach $WT $COMMIT
cd $WT
run() {  # $1: sweep dir name, rest: overrides
  local d=$1; shift
  nice -n 19 $PY -m fedlight -m +experiment=niid_bench "$@" data.root=../shared/data \
    fl.workers=1 fl.threads_per_worker=1 hydra/launcher=joblib hydra.launcher.n_jobs=2 \
    resume=auto hydra.sweep.dir=$OUT/$d
}
# Flower's setup exactly: its split and its [0, 1] pixels (data.normalize, added after COMMIT, so
# from a second frozen checkout)
EXACT_COMMIT=0742c01
EXACT_WT=/work/wt_exact
# Streams keep both cores busy: "main" (the 14 jobs, then Flower's variant), "split" (one
# job) and "exact" (two jobs). `bash run.sh` runs them one after the other; `bash run.sh main &
# bash run.sh split &` runs them side by side.
main() {
  # the 14 jobs of the issue: every cell seed 0; seeds 1,2 for FedAvg and SCAFFOLD (niid_bench) on #C=2
  run seed0 '+experiment/niid_bench=fedavg,scaffold,scaffold_fedlight,fedprox,fednova' \
    partition=dirichlet,label_quantity seed=0
  run seeds12 '+experiment/niid_bench=fedavg,scaffold' partition=label_quantity seed=1,2
  # Flower's own SCAFFOLD variant, the one its merged table ran
  run flower '+experiment/niid_bench=scaffold_flower' partition=dirichlet,label_quantity seed=0
  run flower12 '+experiment/niid_bench=scaffold_flower' partition=label_quantity seed=1,2
}
split() {
  # FedAvg on the very #C=2 split Flower's table trained on (seed 42, written by
  # scripts/flower_label_quantity_split.py): the partition's draw told apart from everything else
  run flower_split '+experiment/niid_bench=fedavg' partition=from_file \
    partition.path=$OUT/flower_c2.json seed=0
}
exact() {
  [ -d $EXACT_WT ] || git -C /work/main worktree add --detach $EXACT_WT $EXACT_COMMIT
  cd $EXACT_WT
  run flower_exact '+experiment/niid_bench=fedavg,scaffold_flower' partition=from_file \
    partition.path=$OUT/flower_c2.json data.normalize=false seed=0
}
case ${1:-all} in
  main) main ;;
  split) split ;;
  exact) exact ;;
  *) main; split; exact ;;
esac
