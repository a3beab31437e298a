"""beam_prm's pairwise preference model (`search.compare`, BPP-Search): a Bradley-Terry reward model as `rlvr rm`
writes it (a seeded random head on the built-in model) gives P(a > b) = sigmoid(r(a) - r(b)) with r computed
directly; beam_prm keeps the candidate it prefers; evaluate_search passes it; bad input names search.compare."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.eval.search import evaluate_search
from rlvr.rewards.models import render_exchange
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import SearchSettings, load_search_compare, search_prompt
from rlvr.search import Budget, SearchTree
from rlvr.tasks.addition import AdditionTask
from rlvr.types import TaskRecord
from tests.unit.test_search_prm import TextEngine

RECORD = TaskRecord(id="r", question="4821+397", answer="5218", meta={"a": 4821, "b": 397})


@pytest.fixture(scope="module")
def rm_dir(tmp_path_factory):
    """A reward model directory as `rlvr rm` writes it: a one-label sequence-classification head (seeded random
    init) on the built-in model, with its tokenizer; and the model as built, for the direct computation."""
    from rlvr.models import load_tokenizer
    from rlvr.models.reward_head import load_reward_model
    from rlvr.trainer.checkpoint import save_hf_dir

    tok = load_tokenizer("builtin")
    torch.manual_seed(0)
    model = load_reward_model("builtin", dtype=torch.float32, device=torch.device("cpu"),
                              pad_token_id=int(tok.pad_token_id), key="test").eval()
    path = tmp_path_factory.mktemp("rm") / "final"
    save_hf_dir(model, tok, path)
    return path, model, tok


def _ids(tok, text: str) -> list[int]:
    return list(tok(text)["input_ids"])


def _direct(model, tok, question: str, response: str) -> float:
    """The head's logit on (question, response) rendered as `rlvr rm` renders its pairs."""
    with torch.no_grad():
        enc = tok([render_exchange(tok, question, response)], return_tensors="pt")
        return float(model(**enc).logits[0, 0])


def _settings(path, **kw) -> SearchSettings:
    return SearchSettings(strategy="beam_prm", max_tokens=100, compare=str(path), **kw)


def test_preference_is_bradley_terry_of_the_scores_and_cached(rm_dir):
    path, model, tok = rm_dir
    pref = load_search_compare(_settings(path), tok)
    question = AdditionTask().plain_prompt(RECORD)
    compare = pref.for_problem(question, lambda ids: tok.decode(ids, skip_special_tokens=True))
    tree = SearchTree(Budget(max_nodes=10), _ids(tok, "4821+397="))
    a, b = tree.add_children(tree.root, [(_ids(tok, "1+7=8;8|"), [0.0] * 8), (_ids(tok, "1+7=9;9|"), [0.0] * 8)])
    ra, rb = _direct(model, tok, question, "1+7=8;8|"), _direct(model, tok, question, "1+7=9;9|")
    assert ra != rb  # a random head still separates the two texts, so the test below can see an order
    assert compare(a, b) == pytest.approx(1 / (1 + math.exp(rb - ra)), abs=1e-6)  # fp32 logits, one head
    assert compare(a, b) + compare(b, a) == pytest.approx(1.0, abs=1e-12)
    assert compare(a, a) == 0.5
    assert pref.calls == 2  # each response scored once, whatever the number of comparisons


def test_beam_prm_keeps_the_candidate_the_preference_model_prefers(rm_dir):
    path, model, tok = rm_dir
    task = AdditionTask()
    pref = load_search_compare(_settings(path), tok)
    prompt = _ids(tok, "4821+397=")
    question = task.plain_prompt(RECORD)
    # the model's less preferred segment first: expansion order alone (the tie-break) would keep it
    first = sorted(["1+7=8;8|", "1+7=9;9|"], key=lambda s: _direct(model, tok, question, s))
    engine = TextEngine(tok, len(prompt), {"": first, first[0]: ["A:8<eos>"], first[1]: ["A:9<eos>"]})
    # leaf_rollouts 0: every partial node is worth 0, so the ranking before re-ranking is expansion order
    settings = _settings(path, strategy_params={"beam_width": 1}, branch=2, delimiter="|", leaf_rollouts=0)
    params = SamplingParams(max_new_tokens=40)
    plain = search_prompt(engine, params, prompt, settings, lambda ss: [0.0] * len(ss), engine.eos_ids)
    assert [len(c.children) for c in plain.tree.root.children] == [1, 0]  # without it: the first is kept
    compare = pref.for_problem(question, lambda ids: tok.decode(ids, skip_special_tokens=True))
    result = search_prompt(engine, params, prompt, settings, lambda ss: [0.0] * len(ss), engine.eos_ids,
                           runtime={"compare": compare})
    assert [len(c.children) for c in result.tree.root.children] == [0, 1]  # with it: the preferred one


def test_evaluate_search_passes_the_preference_model_and_needs_it_loaded(rm_dir):
    path, _, tok = rm_dir
    task = AdditionTask()
    prompt = _ids(tok, "4821+397=")

    class Renderer:
        def render(self, record):
            return list(prompt), "4821+397="

    engine = TextEngine(tok, len(prompt), {"": ["1+7=8;8|", "1+7=9;9|"], "1+7=8;8|": ["A:5218<eos>"],
                                           "1+7=9;9|": ["A:5219<eos>"]})
    settings = _settings(path, strategy_params={"beam_width": 1}, branch=2, delimiter="|", leaf_rollouts=0)
    pref = load_search_compare(settings, tok)
    out = evaluate_search(engine, Renderer(), task, [RECORD], SamplingParams(max_new_tokens=40), settings, tok,
                          compare=pref)
    assert out["search"]["compare"] == str(path) and pref.calls >= 2
    with pytest.raises(ValueError, match="load_search_compare"):
        evaluate_search(engine, Renderer(), task, [RECORD], SamplingParams(max_new_tokens=40), settings, tok)


def test_load_errors_name_search_compare(rm_dir, tmp_path):
    from rlvr.models.loading import resolve_model_path

    path, _, tok = rm_dir
    with pytest.raises(ConfigError, match=r"search.compare: '.*nowhere' is not a reward model directory .*rlvr rm"):
        load_search_compare(_settings(tmp_path / "nowhere"), tok)
    with pytest.raises(ConfigError, match="search.compare: .* Qwen2ForCausalLM checkpoint, not a Bradley-Terry"):
        load_search_compare(_settings(resolve_model_path("builtin")), tok)

    class OtherTokenizer:
        def get_vocab(self):
            return {"a": 0}

    with pytest.raises(ConfigError, match="search.compare: the reward model at .* another tokenizer"):
        load_search_compare(_settings(path), OtherTokenizer())
    assert load_search_compare(SearchSettings(strategy="beam_prm", max_tokens=10), tok) is None


@pytest.mark.parametrize("overrides, needle", [
    (["search.name=mcts", "search.compare=x"], "search.compare: only beam_prm re-ranks"),
    (["search.name=beam_prm", "search.compare="], "search.compare: empty path"),
])
def test_config_errors_name_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, ["search.max_tokens=100", *overrides])


def test_training_with_a_preference_model_is_refused_before_the_run(tmp_path):
    from rlvr.trainer.preflight import preflight

    cfg = load_config(None, ["search.name=beam_prm", "search.max_tokens=100", f"search.compare={tmp_path}",
                             f"run.dir={tmp_path / 'run'}"])
    with pytest.raises(ConfigError, match="search.compare: .* at evaluation .* only"):
        preflight(cfg, multi_rank=False)
    assert not (tmp_path / "run").exists()
