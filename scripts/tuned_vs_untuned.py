"""Print the tuned-beside-untuned table of a tuning page (docs/results/tuning_*/README.md).

Each study directory (a `hydra/sweeper=optuna` sweep, one per algorithm) holds its best trial in
optimization_results.yaml and, after `fedlight tuned`, the best configuration tested with three
seeds in `tested/`; the untuned sweep runs the same setting at its defaults, one group per
algorithm (`algo=`). Cells are the report's: test accuracy in percent, mean ± std over the healthy
seeds, diverged and collapsed seeds marked. Run from the repository root:

    python -m scripts.tuned_vs_untuned multirun/tune_fvs/untuned multirun/tune_fvs/{fedavg,scaffold}
"""

import argparse
from pathlib import Path

import yaml

from fedlight.reports.cells import cell, group_jobs, mean_and_std, metric_values
from fedlight.reports.load import load_jobs
from fedlight.reports.model import MISSING, Group
from fedlight.reports.write import markdown_table
from fedlight.runs.resume import recorded_command
from fedlight.runs.tuned import RESULTS_FILE, TESTED_DIR, TUNE_PRESET, best_params

LABELS = {
    "fedavg": "FedAvg",
    "fedprox": "FedProx",
    "scaffold": "SCAFFOLD",
    "fednova": "FedNova",
    "fedadam": "FedAdam",
    "fedyogi": "FedYogi",
}
FINAL, AT_BEST = "final_accuracy", "test_accuracy_at_best"


def only_group(sweep: Path) -> Group:
    groups = group_jobs(load_jobs(sweep))
    if len(groups) != 1:
        raise SystemExit(f"{sweep}: {len(groups)} groups of finished jobs, expected one")
    return groups[0]


def study_algorithm(study: Path) -> str:
    """The study's `+experiment/tune=<algorithm>`, from Hydra's record of its command."""
    for override in recorded_command(study, "tuned").task:
        key, _, value = override.partition("=")
        if key.lstrip("+") == TUNE_PRESET:
            return value
    raise SystemExit(f"{study}: its command has no +{TUNE_PRESET}=...")


def parameters_text(study: Path) -> str:
    """`optim.lr=0.0591`, ... of the best trial, with its objective (validation) in brackets."""
    best = best_params(study)
    value = yaml.safe_load((study / RESULTS_FILE).read_text())["best_value"]
    shown = ", ".join(
        f"`{k}={v:.3g}`" if isinstance(v, float) else f"`{k}={v}`" for k, v in best.items()
    )
    return f"{shown} (val {100 * value:.1f})"


def delta(untuned: Group | None, tuned: Group) -> str:
    """Tuned minus untuned mean final test accuracy, in points."""
    before, after = (
        mean_and_std(metric_values(g, FINAL) if g else [])[0] for g in (untuned, tuned)
    )
    if before is None or after is None:
        return MISSING
    return f"{100 * (after - before):+.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("untuned", type=Path, help="the sweep at the setting's defaults")
    parser.add_argument("studies", type=Path, nargs="+", help="one study directory per algorithm")
    args = parser.parse_args()
    untuned = {g.setting("algo"): g for g in group_jobs(load_jobs(args.untuned))}
    header = [
        "algorithm",
        "untuned: final test",
        "untuned: test at best val round",
        "tuned parameters (best trial, validation)",
        "tuned: final test",
        "tuned: test at best val round",
        "Δ final",
    ]
    body = []
    for study in args.studies:
        algorithm = study_algorithm(study)
        before, tuned = untuned.get(algorithm), only_group(study / TESTED_DIR)
        body.append(
            [
                LABELS.get(algorithm, algorithm),
                cell(before, FINAL),
                cell(before, AT_BEST),
                parameters_text(study),
                cell(tuned, FINAL),
                cell(tuned, AT_BEST),
                delta(before, tuned),
            ]
        )
    print("\n".join(markdown_table(header, body, text_columns=1)))


if __name__ == "__main__":
    main()
