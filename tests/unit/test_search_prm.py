"""A learned PRM as the search's node value (`search.prm`): a random-init PRM head on the built-in model, saved
and reloaded as a `rlvr prm` directory, values hand-built nodes exactly as the direct `token_logits` computation
does; beam_prm follows it; the config and load errors name search.prm. No training."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import ConfigError, load_config
from rlvr.eval.search import evaluate_search, prm_complete_scores
from rlvr.rollout import SamplingParams
from rlvr.sampling.search import SearchSettings, load_search_prm, prm_step_value, search_prompt
from rlvr.search import Budget, SearchTree
from rlvr.tasks.addition import AdditionTask
from rlvr.types import Sample, TaskRecord

RECORD = TaskRecord(id="r", question="4821+397", answer="5218", meta={"a": 4821, "b": 397})


@pytest.fixture(scope="module")
def prm_dir(tmp_path_factory):
    """A PRM directory as `rlvr prm` writes it: a one-label token-classification head (seeded random init) on
    the built-in model, with its tokenizer; and the model as built, for the direct computation."""
    from rlvr.models import load_tokenizer
    from rlvr.models.reward_head import load_step_reward_model
    from rlvr.trainer.checkpoint import save_hf_dir

    tok = load_tokenizer("builtin")
    torch.manual_seed(0)
    model = load_step_reward_model("builtin", dtype=torch.float32, device=torch.device("cpu"),
                                   pad_token_id=int(tok.pad_token_id), key="test").eval()
    path = tmp_path_factory.mktemp("prm") / "final"
    save_hf_dir(model, tok, path)
    return path, model, tok


def _direct(model, tok, prompt: list[int], response: list[int], token: int) -> float:
    """sigmoid of the head's logit at response token `token`, computed directly."""
    from rlvr.models.reward_head import token_logits

    with torch.no_grad():
        row = token_logits(model, [prompt + response], int(tok.pad_token_id), torch.device("cpu"))[0]
    return float(torch.sigmoid(row[len(prompt) + token]))


def _ids(tok, text: str) -> list[int]:
    return list(tok(text)["input_ids"])


def test_node_value_is_the_prm_score_of_the_last_complete_step(prm_dir):
    path, model, tok = prm_dir
    prm = load_search_prm(SearchSettings(strategy="beam_prm", max_tokens=100, prm=str(path)), tok, AdditionTask())
    value = prm_step_value(prm, AdditionTask(), RECORD, lambda ids: tok.decode(ids, skip_special_tokens=True))
    prompt = _ids(tok, "4821+397=")
    # hand-built nodes: root -> "1+7=8;8|" -> "2+9=11;18|8+3" (two complete steps, a third begun) ; root -> "1+7"
    tree = SearchTree(Budget(max_nodes=10), prompt)
    a = tree.add_children(tree.root, [(_ids(tok, "1+7=8;8|"), [0.0] * 8)])[0]
    a1 = tree.add_children(a, [(_ids(tok, "2+9=11;18|8+3"), [0.0] * 13)])[0]
    b = tree.add_children(tree.root, [(_ids(tok, "1+7"), [0.0] * 3)])[0]
    assert len(a.response_ids()) == 8 and len(a1.response_ids()) == 21  # one character a token
    # the steps end at characters 7 and 17 (before each '|'): response tokens 6 and 16
    assert value(prompt, a.response_ids()) == pytest.approx(_direct(model, tok, prompt, a.response_ids(), 6), abs=1e-6)
    assert value(prompt, a1.response_ids()) == pytest.approx(_direct(model, tok, prompt, a1.response_ids(), 16),
                                                             abs=1e-6)
    assert value(prompt, a1.response_ids()) != pytest.approx(_direct(model, tok, prompt, a1.response_ids(), 20),
                                                             abs=1e-6)  # not the unfinished step's last token
    assert value(prompt, b.response_ids()) == 0.0  # no complete step yet
    # the same PRM as the `prm` reward of complete responses (prm_terminal): its weakest step's score
    full = _ids(tok, "1+7=8;8|2+9=11;18|A:18")
    score = prm_complete_scores(prm, AdditionTask(), RECORD, prompt, tok)
    expected = min(_direct(model, tok, prompt, full, 6), _direct(model, tok, prompt, full, 16))
    assert score([Sample(prompt_ids=prompt, response_ids=full)]) == [pytest.approx(expected, abs=1e-6)]


class TextEngine:
    """generate(prompt + prefix) -> the continuations scripted for the prefix's text (cycled), as token ids."""

    def __init__(self, tok, prompt_len: int, script: dict[str, list[str]]):
        self.tok, self.prompt_len, self.script = tok, prompt_len, script
        self.eos_ids = [int(tok.eos_token_id)]

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            options = self.script[self.tok.decode(p[self.prompt_len:], skip_special_tokens=True)]
            group = []
            for i in range(params.n):
                text = options[i % len(options)]
                ids = _ids(self.tok, text.removesuffix("<eos>")) + (self.eos_ids if text.endswith("<eos>") else [])
                group.append(Sample(prompt_ids=list(p), response_ids=ids, logprobs=[-0.1] * len(ids)))
            out.append(group)
        return out


def test_beam_prm_keeps_the_candidate_the_prm_prefers_and_spends_no_rollouts(prm_dir):
    path, model, tok = prm_dir
    task = AdditionTask()
    prm = load_search_prm(SearchSettings(strategy="beam_prm", max_tokens=100, prm=str(path)), tok, task)
    prompt = _ids(tok, "4821+397=")
    first = ["1+7=8;8|", "1+7=9;9|"]
    engine = TextEngine(tok, len(prompt), {"": first, first[0]: ["A:8<eos>"], first[1]: ["A:9<eos>"]})
    direct = [_direct(model, tok, prompt, _ids(tok, s), 6) for s in first]
    settings = SearchSettings(strategy="beam_prm", strategy_params={"beam_width": 1}, max_tokens=100, branch=2,
                              delimiter="|", prm=str(path))
    result = search_prompt(engine, SamplingParams(max_new_tokens=40), prompt, settings, lambda ss: [0.0] * len(ss),
                           engine.eos_ids, prm=prm_step_value(prm, task, RECORD, tok.decode))
    children = result.tree.root.children
    assert [c.value for c in children] == pytest.approx(direct, abs=1e-6)
    kept = children[0 if direct[0] >= direct[1] else 1]
    assert [len(c.children) for c in children] == [int(c is kept) for c in children]  # only the PRM's pick grows
    assert result.rollouts == [] and result.stats.rollout_tokens == 0  # the PRM replaces the leaf rollouts
    assert result.stats.tokens == 16 + 2 * 4  # 2 segments of 8, then the kept beam's 2 samples of "A:x" + EOS


def test_evaluate_search_passes_the_prm_and_needs_it_loaded(prm_dir):
    path, model, tok = prm_dir
    task = AdditionTask()
    prm = load_search_prm(SearchSettings(strategy="beam_prm", max_tokens=100, prm=str(path)), tok, task)
    prompt = _ids(tok, "4821+397=")

    class Renderer:
        def render(self, record):
            return list(prompt), "4821+397="

    engine = TextEngine(tok, len(prompt), {"": ["1+7=8;8|"], "1+7=8;8|": ["A:5218<eos>"]})
    settings = SearchSettings(strategy="beam_prm", max_tokens=100, branch=1, delimiter="|", prm=str(path),
                              prm_terminal=True, select="value")
    out = evaluate_search(engine, Renderer(), task, [RECORD], SamplingParams(max_new_tokens=40), settings, tok,
                          prm=prm)
    assert out["problems"][0]["answer"] == "1+7=8;8|A:5218" and out["search"]["prm"] == str(path)
    with pytest.raises(ValueError, match="load_search_prm"):
        evaluate_search(engine, Renderer(), task, [RECORD], SamplingParams(max_new_tokens=40), settings, tok)


def test_load_errors_name_search_prm(prm_dir, tmp_path):
    from rlvr.models.loading import resolve_model_path

    path, _, tok = prm_dir
    task = AdditionTask()

    def load(where, tokenizer=tok, t=task):
        return load_search_prm(SearchSettings(strategy="beam_prm", max_tokens=10, prm=str(where)), tokenizer, t)

    with pytest.raises(ConfigError, match=r"search.prm: '.*nowhere' is not a PRM directory .*rlvr prm"):
        load(tmp_path / "nowhere")
    with pytest.raises(ConfigError, match="search.prm: .* Qwen2ForCausalLM checkpoint, not a process reward model"):
        load(resolve_model_path("builtin"))

    class OtherTokenizer:
        def get_vocab(self):
            return {"a": 0}

    with pytest.raises(ConfigError, match="search.prm: the PRM at .* different tokenizer"):
        load(path, tokenizer=OtherTokenizer())

    class NoSteps:
        name = "nosteps"

    with pytest.raises(ConfigError, match="search.prm: .*task 'nosteps' has no reasoning_steps"):
        load(path, t=NoSteps())
    assert load_search_prm(SearchSettings(strategy="mcts", max_tokens=10), tok, task) is None


@pytest.mark.parametrize("overrides, needle", [
    (["search.name=sampling", "search.prm=x"], "search.prm: search.name=sampling has no partial nodes"),
    (["search.name=beam_prm", "search.prm=x", "search.leaf_rollouts=2"], "search.leaf_rollouts: with search.prm"),
    (["search.name=beam_prm", "search.prm_terminal=true", "search.select=value"], "search.prm_terminal: scores"),
    (["search.name=beam_prm", "search.prm=x", "search.prm_terminal=true"],
     "search.prm_terminal: with search.select=verifier"),
    (["search.name=beam_prm", "search.prm="], "search.prm: empty path"),
])
def test_config_errors_name_the_key(overrides, needle):
    with pytest.raises(ConfigError, match=needle):
        load_config(None, ["search.max_tokens=100", *overrides])


def test_config_binds_prm():
    cfg = load_config(None, ["search.name=sampling", "search.max_tokens=100", "search.prm=d", "search.select=value",
                             "search.prm_terminal=true"])
    s = cfg.search.settings()
    assert (s.prm, s.prm_terminal, s.strategy_params) == ("d", True, {})
    cfg = load_config(None, ["search.name=beam_prm", "search.max_tokens=100", "search.prm=d", "search.leaf_rollouts=0"])
    assert cfg.search.settings().prm == "d" and cfg.search.settings().strategy_params == {"beam_width": 2,
                                                                                          "rerank_top": None}
    cfg = load_config(None, ["search.name=mcts", "search.max_tokens=100", "search.prm=d"])
    assert cfg.search.leaf_rollouts == 1 and cfg.search.settings().leaf_rollouts == 0  # recorded as unused


def test_training_sampler_values_partial_nodes_by_the_prm(prm_dir, tmp_path):
    from rlvr.sampling.base import StepContext
    from rlvr.sampling.search import SearchSampler
    from rlvr.trainer.run import _build_sampler

    path, model, tok = prm_dir
    task = AdditionTask()
    with pytest.raises(ConfigError, match="search.prm: .* not a PRM directory"):
        _build_sampler(load_config("recipes/grpo.yaml", ["search.name=beam_prm", "search.max_tokens=100",
                                                         f"search.prm={tmp_path / 'none'}"]), [RECORD], tok, task)
    cfg = load_config("recipes/grpo.yaml", ["search.name=beam_prm", "search.max_tokens=100", "search.branch=2",
                                            "search.beam_width=1", "search.delimiter=|", f"search.prm={path}"])
    sampler = _build_sampler(cfg, [RECORD], tok, task)
    assert isinstance(sampler, SearchSampler) and sampler.prm is not None
    prompt = _ids(tok, "4821+397=")

    class Renderer:
        def render(self, record):
            return list(prompt), "4821+397="

    first = ["1+7=8;8|", "1+7=9;9|"]
    engine = TextEngine(tok, len(prompt), {"": first, first[0]: ["A:8<eos>"], first[1]: ["A:9<eos>"]})

    def score(groups):
        for g in groups:
            for smp in g.samples:
                smp.reward = 1.0

    ctx = StepContext(step=0, prompts_per_step=1, n=1, rollout=None, score=score, task=task, engine=engine,
                      renderer=Renderer(), params=SamplingParams(max_new_tokens=40), tokenizer=tok)
    groups, metrics = sampler.next_batch(ctx)
    direct = [_direct(model, tok, prompt, _ids(tok, f), 6) for f in first]
    kept = first[0 if direct[0] >= direct[1] else 1]
    # one finished leaf, the PRM's pick + its answer, and no rollout samples: the PRM replaced them
    texts = [tok.decode(smp.response_ids, skip_special_tokens=True) for smp in groups[0].samples]
    assert texts == [kept + ("A:8" if kept == first[0] else "A:9")]
    assert not groups[0].samples[0].meta["rollout"] and groups[0].samples[0].reward == 1.0
    assert metrics["tokens_generated"] == 16 + 2 * 4 and metrics["evaluations_per_prompt"] == 4  # root, 2 steps, 1 answer
