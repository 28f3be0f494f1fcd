"""The cli layer: the command line (`main.py`: checked, composed by Hydra, built into typed parts
and run; `entry.py`: the `fedlight` command and its subcommands; `jobs.py`: a command's jobs).
The only code that sees a `DictConfig`; it may import every layer below it, and only the Hydra
plugins (`hydra_plugins/`) import it.
"""
