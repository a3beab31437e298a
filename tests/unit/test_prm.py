"""ER-PRM: the entropy-regularized step label, the labelling pass, the PRM trainer and the `prm` reward."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest
import torch

from rlvr.config import ConfigError, PRMConfig, load_config
from rlvr.rewards import RewardContext, RewardFunction
from rlvr.rewards.base import build_component, token_char_ends
from rlvr.rm.prm import StepExample, evaluate_prm, prm_step_loss, run_prm, split_by_prompt
from rlvr.rm.prm_label import entropy_regularized_value as er
from rlvr.tasks.addition import AdditionTask, worked_solution
from rlvr.types import Group, Sample, TaskRecord

ROOT = Path(__file__).resolve().parents[2]


# -- the label formula ------------------------------------------------------------------------------------------


def test_er_value_hand_computed():
    r = [1.0, 0.0, 0.0, 0.0]
    # eta = 2: (1/2) log((e^2 + 3) / 4) = 0.5 * log(2.5972640...) = 0.5 * 0.9544586 = 0.4772293
    assert er(r, 2.0) == pytest.approx(0.5 * math.log((math.e ** 2 + 3) / 4), abs=1e-12)
    assert er(r, 2.0) == pytest.approx(0.4772293, abs=1e-7)
    assert er([0.5, 1.0], 1.0) == pytest.approx(math.log((math.exp(0.5) + math.e) / 2), abs=1e-12)
    assert er([0.0, 0.0, 0.0], 2.0) == 0.0 and er([1.0, 1.0], 7.0) == 1.0


def test_er_value_limits_mean_and_max():
    r = [1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0]
    assert er(r, 0.0) == 0.25  # eta = 0: exactly the mean (soft Monte Carlo)
    assert er(r, 1e-6) == pytest.approx(0.25, abs=1e-6)
    # large eta: max - log(m / #max) / eta, -> the max (hard Monte Carlo)
    assert er(r, 100.0) == pytest.approx(1 - math.log(4) / 100, abs=1e-9)
    assert er(r, 1e4) == pytest.approx(1.0, abs=2e-4)
    assert er(r, math.inf) == 1.0
    values = [er(r, eta) for eta in (0.0, 0.5, 1.0, 2.0, 5.0, 50.0)]
    assert values == sorted(values) and all(0.25 <= v <= 1.0 for v in values)  # rises with eta, in [mean, max]


@pytest.mark.parametrize("eta", [-0.1, float("nan")])
def test_er_value_rejects_a_bad_eta(eta):
    with pytest.raises(ConfigError, match="label.eta"):
        er([1.0], eta)


def test_er_value_rejects_no_rollouts_and_the_config_checks_both():
    with pytest.raises(ConfigError, match="label.rollouts"):
        er([], 2.0)
    for bad, key in (("label.eta=-1", "label.eta"), ("label.rollouts=0", "label.rollouts")):
        with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
            load_config(ROOT / "recipes/prm_er.yaml", [bad], schema=PRMConfig)


# -- the labelling pass --------------------------------------------------------------------------------------


def test_label_pass_is_seeded_and_labels_each_step_prefix():
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rm.prm_label import label_solutions
    from rlvr.rollout import SamplingParams, build_engine
    from rlvr.tasks import PromptRenderer

    tok = load_tokenizer("builtin")
    engine = build_engine("fast", {}, 64, load_causal_lm("builtin", trainable=False), tok)
    task = AdditionTask(digits=(3, 3), eval_size=10)

    def label(seed):
        return label_solutions(engine, PromptRenderer(task, tok), task, [task.train[0], task.train[1]], tok,
                               solutions=2, rollouts=3, eta=2.0, params=SamplingParams(max_new_tokens=40), seed=seed)

    rows = label(3)
    assert rows == label(3)  # same model, prompts and seed: the same solutions, rollouts and labels
    steps = [s for r in rows for s in r["steps"]]
    assert len(rows) == 4 and len(steps) >= 4
    for row in rows:
        for s in row["steps"]:
            assert len(s["rewards"]) == 3 and set(s["rewards"]) <= {0.0, 1.0}
            assert s["value"] == pytest.approx(er(s["rewards"], 2.0))
            # the prefix ends at the step's last token: its decoded text reaches the step's end, one token less does not
            ends = token_char_ends(row["response_ids"], tok)
            assert ends[s["token"]] >= s["char_end"] and (s["token"] == 0 or ends[s["token"] - 1] < s["char_end"])


# -- the PRM trainer -----------------------------------------------------------------------------------------


def _labels_file(path: Path) -> Path:
    """Worked solutions (steps labelled 1) and carry-dropping ones (labelled 1 up to the slip, then 0)."""
    from rlvr.models import load_tokenizer
    from rlvr.rewards.process import step_token_ends

    tok = load_tokenizer("builtin")
    task = AdditionTask(digits=(3, 3), eval_size=10)
    rows = []
    for i in range(12):
        rec = task.train[i]
        prompt = list(tok(task.plain_prompt(rec))["input_ids"])
        for slip in (0.0, 1.0):
            text, ok = worked_solution(rec.meta["a"], rec.meta["b"], rng=random.Random(i), digit_slip=slip)
            ids = list(tok(text)["input_ids"])
            steps = step_token_ends(task, text, ids, rec, tok)
            rows.append({"id": rec.id, "prompt_ids": prompt, "response_ids": ids, "correct": ok,
                         "steps": [{"token": t, "char_end": e, "value": 1.0 if ok else 0.0} for t, _, e in steps]})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_prm_trainer_lowers_the_loss_and_final_loads(tmp_path):
    from rlvr.models.reward_head import load_step_reward_model
    from rlvr.tracking import read_metrics

    labels = _labels_file(tmp_path / "labels.jsonl")
    cfg = load_config(ROOT / "recipes/prm_er.yaml", [f"label.path={labels}", f"run.dir={tmp_path / 'run'}",
                                                     "train.steps=30", "train.batch_size=8", "train.eval_every=0",
                                                     "optim.lr=1e-3", "optim.warmup_steps=0",
                                                     "logging.progress=false"], schema=PRMConfig)
    run = run_prm(cfg)
    losses = [m["loss"] for m in read_metrics(run) if "loss" in m]
    assert len(losses) == 30
    assert sum(losses[-5:]) / 5 < 0.6 * sum(losses[:5]) / 5  # the head fits the step labels
    result = json.loads((run / "prm_eval.json").read_text())
    assert {"step_accuracy", "step_mse", "best_of_n", "random_of_n", "oracle_of_n"} <= set(result["after"])
    model = load_step_reward_model(str(run / "final"), dtype=torch.float32, device=torch.device("cpu"),
                                   pad_token_id=0, key="test")
    assert model.config.num_labels == 1


def test_prm_loss_and_best_of_n_by_hand():
    s, v = torch.tensor([0.0, 2.0]), torch.tensor([0.5, 1.0])
    bce = -(0.5 * math.log(0.5) + 0.5 * math.log(0.5) + math.log(1 / (1 + math.exp(-2)))) / 2
    assert float(prm_step_loss(s, v, "bce")) == pytest.approx(bce, abs=1e-6)
    assert float(prm_step_loss(s, v, "mse")) == pytest.approx((0 + (1 / (1 + math.exp(-2)) - 1) ** 2) / 2, abs=1e-6)

    class Fixed(torch.nn.Module):  # logit = the token id / 10 - 1: the scores are chosen by the ids
        training = False

        def forward(self, input_ids, attention_mask):
            return type("O", (), {"logits": (input_ids.float() / 10 - 1)[..., None]})()

    ex = [StepExample("p", [1, 30, 5], [1, 2], [1.0, 0.0], False),  # min prob sigmoid(-0.5)
          StepExample("p", [1, 25, 15], [1, 2], [1.0, 1.0], True),  # min prob sigmoid(0.5): picked
          StepExample("q", [1, 3], [1], [0.0], False), StepExample("q", [1, 12], [], [], True)]  # no steps: -inf
    out = evaluate_prm(Fixed(), ex, 0, torch.device("cpu"), aggregate="min")
    # probs: 0.881/0.378 vs labels 1/0 right; 0.818/0.622 vs 1/1 right; 0.332 vs 0 right -> 5/5
    assert out["step_accuracy"] == 1.0 and out["best_of_n"] == 0.5  # p picks the right one, q the wrong one
    assert out["random_of_n"] == 0.5 and out["oracle_of_n"] == 1.0
    train, held = split_by_prompt(ex, 0.5, seed=0)
    assert {e.prompt_id for e in train}.isdisjoint({e.prompt_id for e in held}) and len(held) == 2


# -- the reward component ------------------------------------------------------------------------------------


def test_prm_component_puts_step_scores_on_step_ends(tmp_path):
    from rlvr.models import load_tokenizer
    from rlvr.models.reward_head import load_step_reward_model, token_logits
    from rlvr.trainer.checkpoint import save_hf_dir

    tok = load_tokenizer("builtin")
    torch.manual_seed(0)
    model = load_step_reward_model("builtin", dtype=torch.float32, device=torch.device("cpu"),
                                   pad_token_id=int(tok.pad_token_id), key="test").eval()
    save_hf_dir(model, tok, tmp_path / "prm")
    task = AdditionTask(eval_size=10)
    rec = TaskRecord(id="r", question="4821+397", answer="5218", meta={"a": 4821, "b": 397})
    good, _ = worked_solution(4821, 397)  # 1+7=8;8|2+9=11;18|8+3+1=12;218|4+0+1=5;5218|A:5218
    texts = [good, "A:5218"]  # the second: an answer line, no steps
    prompt = list(tok("4821+397=")["input_ids"])
    samples = [Sample(prompt_ids=prompt, response_ids=list(tok(t)["input_ids"]), text=t) for t in texts]
    group = Group(rec, prompt, samples)
    comp = build_component("prm", {"path": str(tmp_path / "prm")}, RewardContext(tokenizer=tok), "rewards[1]")
    RewardFunction([("correctness", 1.0, build_component("correctness", {"workers": 0}, None, "r")),
                    ("prm", 0.5, comp)], tokenizer=tok)([group], task)
    a = samples[0]
    # the steps end at characters 7, 17, 30, 43 (before each '|'): tokens 6, 16, 29, 42 (one char a token)
    assert a.step_ends == [6, 16, 29, 42]
    with torch.no_grad():
        logits = token_logits(model, [prompt + a.response_ids], int(tok.pad_token_id), torch.device("cpu"))[0]
    probs = torch.sigmoid(logits[[len(prompt) + k for k in a.step_ends]]).tolist()
    assert a.step_rewards == pytest.approx([0.5 * p for p in probs], abs=1e-5)  # weighted by the term's 0.5
    assert a.rewards["prm"] == pytest.approx(min(probs), abs=1e-6)  # aggregate: min
    assert samples[1].step_ends == [] and samples[1].rewards["prm"] == 0.0


def test_er_prm_recipe_loads_and_prm_needs_a_step_task():
    cfg = load_config(ROOT / "recipes/er_prm.yaml", [])
    assert cfg.algorithm.advantage.name == "process_grpo" and any(r.name == "prm" for r in cfg.rewards)
    with pytest.raises(ConfigError, match="reasoning_steps"):
        load_config(ROOT / "recipes/er_prm.yaml", ["task.name=guess_number"])
    prm_cfg = load_config(ROOT / "recipes/prm_er.yaml", [], schema=PRMConfig)
    assert prm_cfg.label.eta == 2.0 and prm_cfg.label.rollouts == 8


def test_relabel_reaggregates_stored_rollouts_with_another_eta():
    from rlvr.rm.prm import relabel

    rows = [{"eta": 2.0, "steps": [{"rewards": [1.0, 0.0, 0.0, 0.0], "value": er([1.0, 0.0, 0.0, 0.0], 2.0)}]}]
    assert relabel(rows, 0.0)[0]["steps"][0]["value"] == 0.25 and rows[0]["eta"] == 0.0  # soft: the mean
    assert relabel(rows, math.inf)[0]["steps"][0]["value"] == 1.0  # hard: the max
    with pytest.raises(ConfigError, match="label.eta"):
        relabel([{"steps": [{"value": 0.5}]}], 0.0)
