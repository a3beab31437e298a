"""Config loading, dotted overrides, error messages that name the fix, and the component registry."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import yaml

from rlvr.config import ConfigError, SFTConfig, dump_config, load_config, parse_override
from rlvr.registry import Registry, RegistryError

RECIPE = """\
run:
  seed: 3
task: addition
train:
  steps: 3
  prompts_per_step: 4
rollout:
  n: 4
algorithm:
  advantage: grpo
  loss: ppo_clip
"""


@pytest.fixture
def recipe(tmp_path: Path) -> Path:
    p = tmp_path / "my_recipe.yaml"
    p.write_text(RECIPE)
    return p


def config_error(path, overrides, **kw) -> str:
    with pytest.raises(ConfigError) as info:
        load_config(path, overrides, **kw)
    return str(info.value)


# -- loading and overrides ------------------------------------------------------------------------------


def test_load_reads_yaml_and_names_run_after_file(recipe: Path) -> None:
    cfg = load_config(recipe, [])
    assert cfg.train.steps == 3
    assert cfg.train.prompts_per_step == 4
    assert cfg.rollout.n == 4
    assert cfg.run.seed == 3
    assert cfg.run.name == "my_recipe"
    # untouched sections keep their defaults
    assert cfg.optim.betas == (0.9, 0.999)
    assert cfg.task.name == "addition"


def test_overrides_are_parsed_as_yaml(recipe: Path) -> None:
    cfg = load_config(recipe, [
        "train.steps=5",
        "optim.betas=[0.8,0.9]",
        "optim.lr=3e-4",
        "task.digits=[2,3]",
        "model.trust_remote_code=true",
        "rollout.stop=[a, b]",
        "run.name=custom",
    ])
    assert cfg.train.steps == 5 and isinstance(cfg.train.steps, int)
    assert cfg.optim.betas == (0.8, 0.9)
    assert cfg.optim.lr == pytest.approx(3e-4)
    assert cfg.task.name == "addition"
    assert tuple(cfg.task.params["digits"]) == (2, 3)
    assert cfg.model.trust_remote_code is True
    assert cfg.rollout.stop == ["a", "b"]
    assert cfg.run.name == "custom"


def test_component_given_as_bare_string_then_parameter(recipe: Path) -> None:
    cfg = load_config(recipe, ["task=reasoning_gym", "task.dataset=leg_counting", "task.eval_size=5"])
    assert cfg.task.name == "reasoning_gym"
    assert cfg.task.params["dataset"] == "leg_counting"
    assert cfg.task.params["eval_size"] == 5
    # the defaults of the newly chosen component are filled in
    assert cfg.task.params["train_size"] == 10_000
    # and none of addition's parameters leak over
    assert "digits" not in cfg.task.params


def test_parse_override_values() -> None:
    assert parse_override("a.b=1") == (["a", "b"], 1)
    assert parse_override("a=[1, 2]") == (["a"], [1, 2])
    assert parse_override("a=off") == (["a"], False)
    assert parse_override("a=hello") == (["a"], "hello")
    assert parse_override("a=x=y") == (["a"], "x=y")
    assert parse_override("a=") == (["a"], "")


def test_override_on_component_section_missing_from_recipe(tmp_path: Path) -> None:
    """`rlvr eval builtin task.digits=[3,4]` (the CLI's own help example) loads no recipe at all.

    The default task is addition, so the override must refine it instead of dropping its name.
    """
    cfg = load_config(None, ["task.digits=[3,4]"])
    assert cfg.task.name == "addition"
    assert tuple(cfg.task.params["digits"]) == (3, 4)

    p = tmp_path / "bare.yaml"
    p.write_text("train:\n  steps: 2\n")
    cfg = load_config(p, ["algorithm.advantage.std_scope=batch"])
    assert cfg.algorithm.advantage.name == "grpo"
    assert cfg.algorithm.advantage.params["std_scope"] == "batch"


# -- errors ---------------------------------------------------------------------------------------------


def test_unknown_key_suggests_and_lists_valid_keys(recipe: Path) -> None:
    msg = config_error(recipe, ["train.stpes=5"])
    assert "train.stpes" in msg
    assert "unknown key" in msg
    assert "Did you mean 'steps'" in msg
    assert "Valid keys here:" in msg
    for key in ("steps", "prompts_per_step", "ppo_epochs", "micro_batch_size"):
        assert key in msg.split("Valid keys here:")[1]
    assert str(recipe) in msg


def test_unknown_top_level_section(recipe: Path) -> None:
    msg = config_error(recipe, ["trian.steps=5"])
    assert "trian" in msg and "unknown key" in msg and "Did you mean 'train'" in msg


def test_wrong_type_names_key_expected_and_got(recipe: Path) -> None:
    msg = config_error(recipe, ["train.steps=abc"])
    assert "train.steps" in msg
    assert "integer" in msg
    assert "got 'abc'" in msg


@pytest.mark.parametrize(
    ("override", "key", "expected", "got"),
    [
        ("rollout.temperature=-1", "rollout.temperature", "greater than 0", "got -1"),
        ("rollout.top_p=1.5", "rollout.top_p", "less than or equal to 1", "got 1.5"),
        ("train.steps=0", "train.steps", "greater than or equal to 1", "got 0"),
        ("model.device=gpu", "model.device", "cuda", "got 'gpu'"),
        ("model.dtype=fp8", "model.dtype", "bfloat16", "got 'fp8'"),
    ],
)
def test_out_of_range_names_key_expected_and_got(recipe: Path, override: str, key: str, expected: str,
                                                  got: str) -> None:
    msg = config_error(recipe, [override])
    assert key in msg
    assert expected in msg
    assert got in msg


def test_several_problems_are_reported_together(recipe: Path) -> None:
    msg = config_error(recipe, ["train.steps=abc", "rollout.top_p=2"])
    assert "train.steps" in msg and "rollout.top_p" in msg


def test_unknown_task_name_suggests(recipe: Path) -> None:
    msg = config_error(recipe, ["task.name=additon"])
    assert "task.name" in msg
    assert "Did you mean 'addition'" in msg
    assert "Available:" in msg and "jsonl" in msg


def test_unknown_task_parameter(recipe: Path) -> None:
    msg = config_error(recipe, ["task.digitz=[1,2]"])
    assert "task.digitz" in msg
    assert "unknown key" in msg
    assert "Did you mean 'digits'" in msg


@pytest.mark.parametrize(("override", "key", "got"), [
    ("task.digits=abc", "task.digits", "'abc'"),
    ("task.eval_size=lots", "task.eval_size", "'lots'"),
    ("task.eval_size=0", "task.eval_size", "0"),
])
def test_bad_task_parameter_type(recipe: Path, override: str, key: str, got: str) -> None:
    msg = config_error(recipe, [override])
    assert key in msg
    assert f"got {got}" in msg


def test_unknown_reasoning_gym_dataset_in_config(recipe: Path) -> None:
    msg = config_error(recipe, ["task=reasoning_gym", "task.dataset=leg_countin"])
    assert "task.dataset" in msg
    assert "Did you mean 'leg_counting'" in msg


def test_group_advantage_needs_two_samples(recipe: Path) -> None:
    msg = config_error(recipe, ["rollout.n=1"])
    assert "rollout.n" in msg
    assert ">= 2" in msg
    assert "got 1" in msg
    # rollout.n=2 is the smallest allowed group
    assert load_config(recipe, ["rollout.n=2"]).rollout.n == 2


def test_eval_ks_must_not_exceed_eval_n(recipe: Path) -> None:
    msg = config_error(recipe, ["eval.ks=[1,16]", "eval.n=8"])
    assert "eval.ks" in msg
    assert "16" in msg
    cfg = load_config(recipe, ["eval.ks=[1,8]", "eval.n=8"])
    assert cfg.eval.ks == [1, 8]


def test_bad_advantage_parameter(recipe: Path) -> None:
    msg = config_error(recipe, ["algorithm.advantage.std_scope=bogus"])
    assert "algorithm.advantage.std_scope" in msg
    assert "'bogus'" in msg
    assert "group" in msg  # the allowed values are listed


def test_unknown_engine_and_empty_rewards(recipe: Path) -> None:
    msg = config_error(recipe, ["rollout.engine=vllmx", "rewards=[]"])
    assert "rollout.engine" in msg and "vllmx" in msg and "hf" in msg
    assert "rewards" in msg and "at least one" in msg


def test_too_many_mini_batches(recipe: Path) -> None:
    # mini-batches hold whole groups: at most one per prompt (4 prompts per step here)
    assert load_config(recipe, ["train.mini_batches=4"]).train.mini_batches == 4
    msg = config_error(recipe, ["train.mini_batches=5"])
    assert "train.mini_batches" in msg and "prompts_per_step=4" in msg


def test_missing_recipe_file_names_path(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "recipe.yaml"
    msg = config_error(missing, [])
    assert str(missing) in msg
    assert "not found" in msg


def test_recipe_that_is_not_a_mapping(tmp_path: Path) -> None:
    p = tmp_path / "list.yaml"
    p.write_text("- a\n- b\n")
    msg = config_error(p, [])
    assert "mapping" in msg and "list" in msg


def test_recipe_with_invalid_yaml(tmp_path: Path) -> None:
    p = tmp_path / "broken.yaml"
    p.write_text("train: {steps: 3\n")
    msg = config_error(p, [])
    assert "not valid YAML" in msg and str(p) in msg


@pytest.mark.parametrize("bad", ["train.steps", "train steps=3", ".steps=3", "train..steps=3"])
def test_malformed_override(recipe: Path, bad: str) -> None:
    msg = config_error(recipe, [bad])
    assert bad in msg


def test_override_into_a_value(recipe: Path) -> None:
    msg = config_error(recipe, ["train.steps.x=3"])
    assert "train.steps" in msg and "not a section" in msg


# -- dump -----------------------------------------------------------------------------------------------


def test_dump_config_round_trips(recipe: Path, tmp_path: Path) -> None:
    cfg = load_config(recipe, ["optim.betas=[0.8,0.9]", "task.digits=[2,3]", "rollout.stop=['|A:']",
                               "algorithm.advantage.std_scope=batch"])
    text = dump_config(cfg)
    data = yaml.safe_load(text)
    # every default of the chosen components is written out
    assert data["task"]["name"] == "addition"
    assert data["task"]["eval_size"] == 200
    assert data["task"]["digits"] == [2, 3]
    assert data["task"]["train_size"] == 100_000
    assert data["algorithm"]["advantage"] == {"name": "grpo", "std_scope": "batch", "eps": pytest.approx(1e-6)}
    assert data["algorithm"]["loss"]["name"] == "ppo_clip"
    assert "clip_high" in data["algorithm"]["loss"]
    assert data["rewards"] == [{"name": "correctness", "weight": 1.0, "gate": None, "gate_threshold": 1.0,
                                "process_only": False, "workers": 2, "timeout": 30.0}]

    dumped = tmp_path / "dumped.yaml"
    dumped.write_text(text)
    again = load_config(dumped, [])
    assert again.model_dump() == cfg.model_dump()
    assert again.run.name == "my_recipe"  # the saved name wins over the new file's stem


def test_default_task_digits_appear_in_dump() -> None:
    data = yaml.safe_load(dump_config(load_config(None, [])))
    assert data["task"]["digits"] == [2, 4]
    assert data["task"]["eval_size"] == 200


# -- SFT schema -----------------------------------------------------------------------------------------


def test_sft_requires_data_path(tmp_path: Path) -> None:
    p = tmp_path / "sft.yaml"
    p.write_text("train:\n  steps: 2\n")
    msg = config_error(p, [], schema=SFTConfig)
    assert "data" in msg and "required" in msg

    cfg = load_config(p, ["data.path=traces.jsonl"], schema=SFTConfig)
    assert cfg.data.path == Path("traces.jsonl")
    assert cfg.train.steps == 2
    assert cfg.optim.lr == pytest.approx(1e-4)  # SFT's own default, not RL's


def test_sft_rejects_rl_sections(tmp_path: Path) -> None:
    p = tmp_path / "sft.yaml"
    p.write_text("data:\n  path: x.jsonl\nrollout:\n  n: 4\n")
    msg = config_error(p, [], schema=SFTConfig)
    assert "rollout" in msg and "unknown key" in msg


# -- registry -------------------------------------------------------------------------------------------


def _fresh_registry() -> Registry:
    reg: Registry = Registry("widget")

    @reg.register("scale")
    def scale(x: float, *, factor: float = 2.0, mode: str = "mul") -> float:
        return x * factor if mode == "mul" else x + factor

    @reg.register("needs")
    def needs(*, level: int) -> int:
        return level

    @reg.register("klass")
    class Klass:
        def __init__(self, *, width: int = 3, tags: list[str] | None = None):
            self.width = width
            self.tags = tags or []

    return reg


def test_registry_register_get_names() -> None:
    reg = _fresh_registry()
    assert reg.names() == ["klass", "needs", "scale"]
    assert "scale" in reg and "nope" not in reg
    assert reg.get("scale")(3.0) == 6.0


def test_registry_duplicate_name_rejected() -> None:
    reg = _fresh_registry()
    with pytest.raises(RegistryError, match="already registered"):
        reg.register("scale")(lambda: None)
    # re-registering the very same object is harmless
    fn = reg.get("scale")
    assert reg.register("scale")(fn) is fn


def test_registry_unknown_name_lists_available() -> None:
    reg = _fresh_registry()
    with pytest.raises(RegistryError) as info:
        reg.get("scael")
    msg = str(info.value)
    assert "unknown widget 'scael'" in msg
    assert "Did you mean 'scale'" in msg
    assert "Available: klass, needs, scale" in msg


def test_registry_resolve_fills_defaults() -> None:
    reg = _fresh_registry()
    assert reg.resolve("scale", {}) == {"factor": 2.0, "mode": "mul"}
    assert reg.resolve("scale", {"factor": "3"}) == {"factor": 3.0, "mode": "mul"}
    with pytest.raises(RegistryError, match=r"sec\.name: unknown widget"):
        reg.resolve("nope", {}, "sec")


def test_registry_bind_returns_validated_partial() -> None:
    reg = _fresh_registry()
    bound = reg.bind("scale", {"factor": 5, "mode": "add"})
    assert isinstance(bound, functools.partial)
    assert bound.func is reg.get("scale")
    assert bound.keywords == {"factor": 5.0, "mode": "add"}
    assert bound(1.0) == 6.0

    obj = reg.build("klass", {"tags": ["a"]})
    assert obj.width == 3 and obj.tags == ["a"]


def test_registry_bind_rejects_bad_params() -> None:
    reg = _fresh_registry()
    with pytest.raises(RegistryError) as info:
        reg.bind("scale", {"factor": "lots"}, where="algorithm.thing")
    assert "algorithm.thing.factor" in str(info.value)
    assert "'lots'" in str(info.value)

    with pytest.raises(RegistryError) as info:
        reg.bind("scale", {"facter": 2}, where="sec")
    msg = str(info.value)
    assert "sec.facter: unknown key" in msg and "Did you mean 'factor'" in msg
    assert "Valid keys here: factor, mode" in msg

    # positional parameters (x) are runtime inputs, not config knobs
    with pytest.raises(RegistryError, match="sec.x: unknown key"):
        reg.bind("scale", {"x": 1.0}, where="sec")

    with pytest.raises(RegistryError, match="sec.level: required"):
        reg.bind("needs", {}, where="sec")
    assert reg.bind("needs", {"level": 4})() == 4

    with pytest.raises(RegistryError, match="sec.width"):
        reg.bind("klass", {"width": "wide"}, where="sec")


def test_engine_options_are_checked_against_the_engine():
    cfg = load_config(None, ["rollout.engine=fast", "rollout.engine_options={compile: true}"])
    assert cfg.rollout.engine_options == {"compile": True}
    with pytest.raises(ConfigError, match=r"rollout.engine_options.compile: unknown key"):
        load_config(None, ["rollout.engine=hf", "rollout.engine_options={compile: true}"])
    with pytest.raises(ConfigError, match="set rollout.batch_size instead"):
        load_config(None, ["rollout.engine=fast", "rollout.engine_options={batch_size: 4}"])
