"""The cli layer: the command line, the only code that sees a `DictConfig` (but for the Optuna
sweeper's body, `fedlight.runs.optuna_sweeper`, which Hydra hands the sweep's config).

`entry.py`: the `fedlight` command and its subcommands; `main.py`: a run or a sweep, checked,
composed by Hydra and run; `jobs.py`: a command's jobs; `validate.py`: the command line's checks;
`schema.py`: the config groups, stage kinds and Hydra schema, registered as the command starts;
`job.py` and `build.py`: a composed config into a typed `Job` and the round's stages;
`resume.py`: `resume=`; `output.py`: what a job writes and says. It may import every layer
below it, and only the Hydra plugins (`hydra_plugins/`) import it.
"""
