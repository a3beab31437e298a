"""The `search` section: tree-search rollouts (training) or a searched answer (evaluation); docs/search.md.

`name` is the search strategy (`rlvr.search.SEARCH_STRATEGIES`: mcts, beam_prm, policy_guided), or `sampling`, plain
sampling under the same token budget (an evaluation baseline only). The keys listed here are the rollout's
own; every other key is a knob of the strategy (e.g. `search.c=0.3`, `search.beam_width=2`) and is checked
against it when the config is bound.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from rlvr.config.base import ComponentSpec

SEARCH_NAMES = ("mcts", "beam_prm", "policy_guided", "sampling")


class SearchConfig(ComponentSpec):
    """A search rollout: strategy, budget per prompt, expansion and leaf values."""

    name: str = Field("mcts", description="Strategy: mcts, beam_prm, policy_guided (PGTS: a learned policy over "
                      "expand/branch/backtrack/terminate), or sampling (the evaluation baseline: "
                      "independent samples until the token budget is spent).")
    max_tokens: int | None = Field(None, ge=1, description="Budget per prompt: tokens the engine generates for it "
                                   "(expansions, merged duplicates and rollouts).")
    max_nodes: int | None = Field(None, ge=1, description="Budget per prompt: tree nodes (segments) created.")
    branch: int = Field(4, ge=1, description="Continuations sampled per expansion (k).")
    segment_tokens: int = Field(16, ge=1, description="Tokens per expansion at most (a step is cut there).")
    delimiter: str | None = Field(None, description="A segment ends after this string (a reasoning step), "
                                  "e.g. '|' for the addition task's columns or a newline; none: fixed length.")
    leaf_rollouts: int = Field(1, ge=0, description="Completions sampled to value a partial leaf (mean reward); "
                               "0: partial leaves are worth 0.")
    advantage: Literal["rewards", "parent", "treerl", "siblings"] = Field(
        "rewards", description="rewards: the algorithm's estimator on the leaves' rewards; parent / treerl / "
        "siblings: per-token tree advantages from node values (needs algorithm.advantage=tree).")
    select: Literal["verifier", "value", "vote"] = Field(
        "verifier", description="Evaluation: how the answer is chosen. verifier: the verifier scores responses "
        "during the search (an oracle); value: by node values, vote: by majority vote over the complete "
        "responses, both with no verifier during the search (docs/search.md).")
    prm: str | None = Field(None, description="A process reward model directory written by `rlvr prm` (its "
                            "final/): partial nodes are valued by its score of their last complete step instead "
                            "of by rollouts (rlvr eval and rlvr train).")
    prm_terminal: bool = Field(False, description="With search.prm and search.select=value|vote: score complete "
                               "responses by the PRM too (its weakest step) instead of the policy's confidence.")
    compare: str | None = Field(None, description="beam_prm at evaluation (rlvr eval): a Bradley-Terry reward "
                                "model directory written by `rlvr rm` (its final/); the top candidates of each depth "
                                "are re-ranked by Copeland wins of the pairwise preference P(a > b) = "
                                "sigmoid(r(a) - r(b)) (BPP-Search's preference model).")
    prefix_cache_mb: float = Field(256.0, ge=0, description="KV memory (MiB) of the fast engine's cross-call "
                                   "prefix cache during one prompt's search: an expansion prefills only the tokens "
                                   "after the longest prefix already decoded; 0: off (every call prefills its "
                                   "whole prompt). Log-probs equal up to fp32 rounding; a draw that lands within that rounding of a "
                                   "CDF boundary can give another token (docs/search.md).")

    @model_validator(mode="after")
    def _check(self) -> SearchConfig:
        if self.name not in SEARCH_NAMES:
            raise ValueError(f"search.name: unknown search '{self.name}'; expected one of "
                             f"{', '.join(SEARCH_NAMES)}")
        if self.max_tokens is None and self.max_nodes is None:
            raise ValueError("search: a search needs a budget per prompt; set search.max_tokens (tokens generated) "
                             "or search.max_nodes (tree nodes), e.g. search.max_tokens=400")
        if self.name == "sampling" and self.max_tokens is None:
            raise ValueError("search.max_tokens: search.name=sampling spends a token budget; set search.max_tokens")
        if self.prm is not None:
            if not str(self.prm).strip():
                raise ValueError("search.prm: empty path; give the final/ directory of a `rlvr prm` run")
            if self.name == "sampling" and not self.prm_terminal:
                raise ValueError("search.prm: search.name=sampling has no partial nodes to value; set "
                                 "search.prm_terminal=true (with search.select=value) to pick among the samples by "
                                 "the PRM, or use search.name=beam_prm or mcts")
            if "leaf_rollouts" in self.model_fields_set and self.leaf_rollouts > 0:
                raise ValueError(f"search.leaf_rollouts: with search.prm partial nodes are valued by the PRM, not by "
                                 f"rollouts; remove search.leaf_rollouts={self.leaf_rollouts} or search.prm")
        if self.compare is not None:
            if not str(self.compare).strip():
                raise ValueError("search.compare: empty path; give the final/ directory of a `rlvr rm` run")
            if self.name != "beam_prm":
                raise ValueError(f"search.compare: only beam_prm re-ranks its candidates by a pairwise preference; "
                                 f"set search.name=beam_prm or remove search.compare (search.name={self.name})")
        if self.prm_terminal:
            if self.prm is None:
                raise ValueError("search.prm_terminal: scores complete responses by the PRM; set search.prm=DIR "
                                 "(a `rlvr prm` run's final/)")
            if self.select == "verifier":
                raise ValueError("search.prm_terminal: with search.select=verifier the verifier scores complete "
                                 "responses (an oracle); set search.select=value or vote, or remove "
                                 "search.prm_terminal")
        return self

    def settings(self) -> Any:
        """The section as `rlvr.sampling.search.SearchSettings` (what the sampler and eval use)."""
        from rlvr.sampling.search import SearchSettings

        return SearchSettings(strategy=self.name, strategy_params=self.params, max_nodes=self.max_nodes,
                              max_tokens=self.max_tokens, branch=self.branch, segment_tokens=self.segment_tokens,
                              delimiter=self.delimiter, advantage=self.advantage,
                              leaf_rollouts=0 if self.prm is not None else self.leaf_rollouts,  # the PRM replaces them
                              select=self.select, prm=self.prm, prm_terminal=self.prm_terminal,
                              compare=self.compare, prefix_cache_mb=self.prefix_cache_mb)


def search_problems(cfg: Any) -> list[str]:
    """Cross-checks of the search section with the strategy registry, the sampler and the estimator."""
    from rlvr.registry import RegistryError
    from rlvr.search import SEARCH_STRATEGIES

    s = cfg.search
    adv = cfg.algorithm.advantage.name
    problems: list[str] = []
    if s is None:
        if cfg.sampling.name == "search":
            problems.append("sampling.name: 'search' is set by the search section; remove sampling.name and set "
                            "search.name=mcts (or beam_prm) with search.max_tokens")
        if adv == "tree":
            problems.append("algorithm.advantage: 'tree' passes a search rollout's tree advantages through; set "
                            "search.name=mcts and search.advantage=parent (or treerl, siblings), or use grpo")
        return problems
    if s.name != "sampling":
        try:
            for k, v in SEARCH_STRATEGIES.resolve(s.name, s.params, "search").items():
                setattr(s, k, v)
        except RegistryError as err:
            problems.extend(str(err).splitlines())
    elif s.params:
        problems.append(f"search: search.name=sampling takes no strategy knobs; got {', '.join(s.params)}")
    if cfg.sampling.name not in ("uniform", "search"):
        problems.append(f"sampling.name: a search rollout (search.name={s.name}) replaces the batch sampler; remove "
                        f"sampling.name={cfg.sampling.name} or the search section")
    if cfg.distributed.mode == "async":
        problems.append("distributed.mode: a search rollout runs step by step; set distributed.mode=sync")
    if cfg.agent is not None:
        problems.append("agent: a search rollout is single-turn; remove the agent section or the search section")
    if cfg.rollout.stop:
        problems.append("rollout.stop: a search rollout does not apply stop strings (responses end at EOS or "
                        "rollout.max_new_tokens); remove rollout.stop, and use search.delimiter to end a step")
    if s.advantage != "rewards" and adv != "tree":
        problems.append(f"algorithm.advantage: search.advantage={s.advantage} gives per-token tree advantages, "
                        f"which only algorithm.advantage=tree passes through; got '{adv}'")
    if s.advantage == "rewards" and adv == "tree":
        problems.append("algorithm.advantage: 'tree' needs tree advantages; set search.advantage=parent (or "
                        "treerl, siblings), or use an estimator on rewards such as grpo")
    return problems
