"""Code only tests use, kept out of fedlight: functions that do by hand what a round does inside
(`algorithms`, `drivers`), a command line checked as fedlight checks it (`commands`), the users' own
modules, datasets, stages and attacks that tests name by `_target_`
(`tests.helpers.user_module.RecordingModule`, `own_data`, `user_stage`, `wild_modules`, ...), what
spawned worker processes run (`worker_targets`), an independent DP accountant (`independent_dp`)
and the process that forks each CLI command of a test (`cli_server`)."""
