"""The runnable examples of the how-to guides (docs/howto/): each folder holds the module a user
writes and, under `conf/`, the option YAMLs that make it a choice on the command line
(`python -m fedlight --config-dir examples/<example>/conf ...`, from the repository's root)."""
