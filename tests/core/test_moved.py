"""A config naming a module by its path before the layers' folders (`fedlight.compression...`)
is refused in one line that names the new path; a run recorded with old paths resumes."""

from pathlib import Path

import pytest

from fedlight.core.errors import ConfigError
from fedlight.core.moved import current_path
from fedlight.runs.same_config import comparable_config
from tests.conftest import REPO, run_cli
from tests.helpers.commands import validate_command_line

OLD_TOPK = "fedlight.compression.topk.TopK"
NEW_TOPK = "fedlight.stages.compression.topk.TopK"
REFUSAL = (
    f"upload.topk._target_={OLD_TOPK}: fedlight's modules moved into the folders of its layers; "
    f"write {NEW_TOPK}"
)


def test_an_old_module_path_is_its_new_one() -> None:
    assert current_path(OLD_TOPK) == NEW_TOPK
    assert current_path("fedlight.pipeline.stage.UploadStage") == "fedlight.stages.base.UploadStage"
    assert current_path("fedlight.aggregation.mean.Mean") == "fedlight.aggregation.mean.Mean"
    assert current_path("fedlight.wirestuff.X") == "fedlight.wirestuff.X"


def test_a_target_of_an_old_path_is_refused_in_one_line_naming_the_new(tmp_path: Path) -> None:
    args = ["upload=[topk]", f"upload.topk._target_={OLD_TOPK}"]
    with pytest.raises(ConfigError) as error:
        validate_command_line(args)
    assert str(error.value) == REFUSAL
    (tmp_path / "upload").mkdir()
    (tmp_path / "upload" / "old_topk.yaml").write_text(f"old_topk:\n  _target_: {OLD_TOPK}\n")
    result = run_cli(f"--config-dir={tmp_path}", "upload=[old_topk]", cwd=REPO, check=False)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"fedlight: error: {REFUSAL.replace('upload.topk', 'upload.old_topk')}"
    ]


def test_a_run_recorded_with_old_paths_compares_equal_to_its_new_config() -> None:
    recorded = {"upload": {"topk": {"_target_": OLD_TOPK, "ratio": 0.1}}}
    current = {"upload": {"topk": {"_target_": NEW_TOPK, "ratio": 0.1}}}
    assert comparable_config(recorded) == comparable_config(current)
