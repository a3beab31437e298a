"""A config naming a teacher-based estimator or loss without model.teacher_path fails at load time, naming the
key to set; with a teacher it loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlvr.config import ConfigError, load_config

RECIPE = """\
task: addition
rollout:
  n: 4
algorithm:
  advantage: grpo
  loss: ppo_clip
"""


@pytest.mark.parametrize("override,key", [("algorithm.loss.name=kdrl", "algorithm.loss"),
                                          ("algorithm.advantage.name=on_policy_distill", "algorithm.advantage")])
def test_teacher_methods_fail_at_load_naming_the_key(tmp_path: Path, override: str, key: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    load_config(recipe, [])  # the base recipe is fine
    with pytest.raises(ConfigError) as err:
        load_config(recipe, [override])
    msg = str(err.value)
    assert "model.teacher_path" in msg and key in msg and "docs/distillation.md" in msg
    cfg = load_config(recipe, [override, "model.teacher_path=builtin-teacher"])
    assert cfg.model.teacher_path == "builtin-teacher"
