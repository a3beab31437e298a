"""Every metric rlvr logs, declared in one place: its key, a one-line description and its unit.

Two kinds of keys:

- `METRICS`: the keys a training run writes to metrics.jsonl (`rlvr train`, `rlvr sft`, `rlvr rm`, `rlvr prm`);
- `EVAL_RESULTS`: the keys of an evaluation result (`rlvr eval --out`, RUN/eval_<tag>.json, `rlvr.evaluate`).

A key with a variable part is declared as a pattern: `{name}` stands for one path segment (no `/`), e.g.
`reward/{component}` matches `reward/correctness`. `describe(key)` looks a key up: exact keys first, then
patterns. docs/reference/metrics.md is generated from this module (scripts/gen_reference.py) and
tests/unit/test_metrics_catalog.py fails when a logged key has no declaration here.

This module imports nothing heavy (no torch, no pydantic).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["AREAS", "EVAL_RESULTS", "METRICS", "Entry", "describe", "entries"]


@dataclass(frozen=True)
class Entry:
    """One declared metric: `key` (exact, or a pattern with `{...}` parts), the `area` it belongs to (a section
    of the reference page), its `unit` and a one-line `description`."""

    key: str
    area: str
    unit: str
    description: str
    regex: re.Pattern[str] | None = field(default=None, compare=False, repr=False)

    @property
    def is_pattern(self) -> bool:
        return "{" in self.key


def _compile(key: str) -> re.Pattern[str] | None:
    if "{" not in key:
        return None
    parts = re.split(r"(\{[^}]*\})", key)
    return re.compile("".join("[^/]+" if p.startswith("{") else re.escape(p) for p in parts) + r"\Z")


# the sections of the reference page, in order
AREAS = {
    "step": "Training step (the policy update)",
    "rollout": "Rollout (the step's samples)",
    "reward": "Reward",
    "sampling": "Sampling (the batch sampler, logged under sampling/)",
    "async": "Asynchronous pipeline (async/)",
    "agent": "Agents and tools (agent/, harness/)",
    "distributed": "Distributed placement (distributed/)",
    "timing": "Timing and throughput",
    "reward_model": "Reward models (rm/, self_reward/; co-evolving or self-rewarding runs)",
    "rm_training": "Reward-model and SFT training (rlvr rm, rlvr prm, rlvr sft)",
    "eval": "Evaluation during training (eval/)",
    "eval_result": "Evaluation results (rlvr eval JSON, RUN/eval_<tag>.json)",
}

_F, _N, _T, _S, _R = "fraction", "count", "tokens", "seconds", "reward"

# (key, area, unit, description)
_METRICS: list[tuple[str, str, str, str]] = [
    # -- the learner's update (rlvr.learner.learner.Learner.update / _backward / _finish) ---------------------
    ("step", "step", "step", "The training step this line belongs to (1-based)."),
    ("loss", "step", "loss",
     "Training loss of the step (rlvr sft, rlvr rm, rlvr prm; an RL step logs pg_loss and value_loss instead)."),
    ("pg_loss", "step", "loss",
     "Policy-gradient loss, token-weighted mean over the first PPO epoch's micro-batches (GKD: the JSD)."),
    ("kl", "step", "nats", "KL estimate to the reference policy, token-weighted mean over the first epoch."),
    ("entropy", "step", "nats", "Mean per-token entropy of the policy on the response tokens (first epoch)."),
    ("clip_frac", "step", _F, "Share of trained tokens whose importance ratio was clipped (first epoch)."),
    ("approx_kl_old", "step", "nats",
     "Mean of 0.5 * (log pi - log pi_old)^2 over response tokens: how far the policy moved within the step."),
    ("grad_norm", "step", "norm",
     "Gradient norm before clipping, averaged over the step's optimizer steps (NaN when every one was skipped)."),
    ("lr", "step", "learning rate", "The scheduler's learning rate after the step."),
    ("skipped_optimizer_steps", "step", _N,
     "Optimizer steps skipped this step because the loss or the gradient norm was not finite."),
    ("train_tokens", "step", _T, "Tokens (prompt and response) the learner ran forward/backward over this step."),
    ("kl_coef", "step", "coefficient", "The KL controller's current coefficient."),
    ("entropy_coef", "step", "coefficient",
     "The entropy controller's current coefficient (only with algorithm.entropy_coef > 0)."),
    ("critic_only", "step", "flag (0/1)", "1 while the critic warms up and the policy is not updated, else 0."),
    ("value_loss", "step", "loss", "The critic's value loss, token-weighted mean over the first epoch (PPO)."),
    ("teacher_kl", "step", "nats", "KDRL: reverse-KL estimate to the teacher over every response token."),
    ("kd_coef", "step", "coefficient", "The knowledge-distillation coefficient of the loss (KDRL)."),
    ("gkd_jsd", "step", "nats", "GKD: the generalized Jensen-Shannon divergence to the teacher per trained token."),
    ("trained_token_frac", "step", _F,
     "Share of response tokens that the token filter left in training (only with a token filter)."),
    ("zero_adv_rows_skipped_frac", "step", _F,
     "Share of the batch's rows left out of the update because every trained token's advantage was 0."),
    ("teacher_forward_tokens", "step", _T, "Sequence tokens the teacher scored this step (frozen-model work)."),
    ("reference_forward_tokens", "step", _T,
     "Sequence tokens the reference model scored this step (frozen-model work)."),
    ("rollout/logprob_abs_diff", "step", "nats",
     "Mean |learner - engine| log-prob of the sampled tokens before the first optimizer step (train/inference gap)."),
    # -- rollout statistics (rlvr.trainer.metrics.rollout_metrics) -----------------------------------------
    ("reward_mean", "rollout", _R, "Mean total reward of the step's samples (non-finite ones excluded)."),
    ("reward_std", "rollout", _R, "Standard deviation of the step's sample rewards."),
    ("accuracy", "rollout", _F, "Share of the step's samples the verifier marked correct (RM training: pair accuracy)."),
    ("response_length_mean", "rollout", _T, "Mean response length of the step's samples."),
    ("response_length_max", "rollout", _T, "Longest response of the step."),
    ("response_length_correct_mean", "rollout", _T, "Mean response length of the correct samples (when any)."),
    ("response_length_wrong_mean", "rollout", _T, "Mean response length of the incorrect samples (when any)."),
    ("truncated_frac", "rollout", _F, "Share of samples cut off at the token limit."),
    ("zero_std_frac", "rollout", _F,
     "Share of groups whose valid samples have fewer than two distinct rewards (no group-relative signal)."),
    ("response_tokens", "rollout", _T, "Response tokens of the step's samples, excluded ones included."),
    ("rollout_tokens_total", "rollout", _T,
     "Response tokens generated since the run began (sampler's count, kept or dropped; the token budget)."),
    ("images_skipped_total", "rollout", _N, "Prompts left out so far because an image did not decode (multimodal)."),
    # -- reward (rlvr.rewards.base) ----------------------------------------------------------------------------
    ("reward/{component}", "reward", _R, "Mean value of one reward component over the step's valid samples."),
    ("reward/{component}/{stat}", "reward", "varies",
     "A reward component's own statistic for the step (its `metrics()`; the rows below are the built-in ones), "
     "or one function's mean reward under a `python` reward (reward/python/<function>)."),
    ("reward/{component}/verify_calls_per_s", "reward", "calls/s", "Verifier calls per second inside the pool."),
    ("reward/{component}/verifier_timeouts", "reward", _N, "Verifier calls that timed out this step."),
    ("reward/{component}/verifier_crashes", "reward", _N, "Verifier worker crashes this step."),
    ("reward/{component}/verifier_restarts", "reward", _N, "Verifier workers replaced this step."),
    ("reward/{component}/reward_worker_restarts", "reward", _N, "Remote reward actors restarted (Ray pool)."),
    ("reward/{component}/blocked_frac", "reward", _F,
     "Code verifiers: share of verified samples whose program was blocked probing the judge."),
    ("reward/{component}/anomaly_frac", "reward", _F,
     "Code verifiers: share of verified samples flagged as anomalous."),
    ("reward/{component}/hack_suspect_frac", "reward", _F, "Code verifiers: blocked_frac + anomaly_frac."),
    ("reward/{component}/trust_mean", "reward", _F, "Process reward: mean trust over the step's mixed groups."),
    ("reward/{component}/trust_full_frac", "reward", _F,
     "Process reward: share of the mixed groups with full trust."),
    ("reward/{component}/errors", "reward", _N, "Ecosystem reward: calls that failed this step."),
    ("reward_non_finite", "reward", _N, "Samples whose reward was not a finite number (scored 0, excluded)."),
    ("reward_non_finite_frac", "reward", _F, "reward_non_finite as a share of the step's samples."),
    ("reward_failures/{reason}", "reward", _N,
     "Reward failures since the run began, by 'component: kind' (non-finite, exception type, timeout, crashed)."),
    # -- sampling (rlvr.sampling: common.sampling_metrics and each sampler's extras) ----------------------------
    ("sampling/groups_kept", "sampling", _N, "Groups handed to the learner."),
    ("sampling/groups_dropped", "sampling", _N, "Groups generated this step and not trained on."),
    ("sampling/useful_groups", "sampling", _N, "Kept groups whose rewards are not all equal."),
    ("sampling/samples_generated", "sampling", _N, "Responses generated this step (kept or not)."),
    ("sampling/tokens_generated", "sampling", _T, "Response tokens generated this step (kept or not)."),
    ("sampling/samples_per_useful_group", "sampling", "ratio", "samples_generated / max(useful_groups, 1)."),
    ("sampling/rounds", "sampling", _N, "Calls to the rollout engine this step."),
    ("sampling/prompts_finished", "sampling", _N, "adaptive: prompts that collected enough positive and negative samples this step."),
    ("sampling/prompts_unfinished", "sampling", _N, "adaptive: prompts that did not within max_rounds."),
    ("sampling/samples_discarded", "sampling", _N, "adaptive: samples generated and not kept in a group."),
    ("sampling/mean_retire_round", "sampling", "round", "adaptive: mean round at which finished prompts retired."),
    ("sampling/weight/{arm}", "sampling", _F, "bandit: the sampling weight of one arm."),
    ("sampling/abs_adv/{arm}", "sampling", "advantage", "bandit: mean |advantage| in one arm's recent window."),
    ("sampling/difficulty_target", "sampling", "difficulty", "curriculum: the current target difficulty."),
    ("sampling/difficulty_mean", "sampling", "difficulty", "curriculum: mean difficulty of the step's prompts."),
    ("sampling/difficulty_max_admitted", "sampling", "difficulty", "curriculum: highest difficulty admitted."),
    ("sampling/pool_size", "sampling", _N, "pool curriculum: prompts in the pool."),
    ("sampling/pool_pass_rate", "sampling", _F, "pool curriculum: mean pass rate of the step's groups."),
    ("sampling/example_pass_rate", "sampling", _F, "per-example curriculum: mean pass rate of the step's groups."),
    ("sampling/student_samples", "sampling", "flag (0/1)", "gkd: 1 when the step trains on the student's samples."),
    ("sampling/missing_solutions", "sampling", _N, "gkd, guidance: prompts without a usable reference solution."),
    ("sampling/teacher_tokens", "sampling", _T, "gkd: response tokens the teacher generated this step."),
    ("sampling/groups_surplus", "sampling", _N, "filtering samplers: groups that passed beyond prompts_per_step."),
    ("sampling/cap_hit", "sampling", "flag (0/1)",
     "filtering samplers: 1 when fewer groups than prompts_per_step passed within sampling.max_rounds."),
    ("sampling/pass_rate_mean", "sampling", _F, "pass-rate filter: mean pass rate of the kept groups."),
    ("sampling/guided_groups", "sampling", _N, "guidance: groups given an off-policy guide sample."),
    ("sampling/off_policy_samples", "sampling", _N, "guidance: off-policy samples in the batch."),
    ("sampling/on_policy_replaced", "sampling", _N, "guidance: on-policy samples replaced by guides."),
    ("sampling/candidates_scored", "sampling", _N, "pcl: candidate prompts the value model scored."),
    ("sampling/value_mae", "sampling", _F, "pcl: mean absolute error of the predicted pass rates."),
    ("sampling/predicted_pass_rate", "sampling", _F, "pcl: mean predicted pass rate of the chosen prompts."),
    ("sampling/observed_pass_rate", "sampling", _F, "pcl: their observed pass rate."),
    ("sampling/effective_ratio", "sampling", _F, "pcl: share of the step's groups that are useful."),
    ("sampling/value_fit_n", "sampling", _N, "pcl: examples the value model is fit on."),
    ("sampling/nodes_per_prompt", "sampling", _N, "search: tree nodes per prompt."),
    ("sampling/leaves_per_prompt", "sampling", _N, "search: leaves per prompt."),
    ("sampling/finished_leaves_per_prompt", "sampling", _N, "search: finished leaves per prompt."),
    ("sampling/evaluations_per_prompt", "sampling", _N, "search: node evaluations per prompt."),
    ("sampling/tokens_per_prompt", "sampling", _T, "search: tokens generated per prompt."),
    ("sampling/pgts_{stat}", "sampling", "varies", "search (PGTS): a statistic of the learned action policy."),
    ("sampling/trunks_per_prompt", "sampling", _N, "tree: trunks sampled per prompt."),
    ("sampling/branches", "sampling", _N, "tree: branch samples forked from the trunks."),
    ("sampling/tokens_saved", "sampling", _T, "tree: tokens not generated thanks to shared prefixes."),
    ("sampling/tokens_saved_frac", "sampling", _F, "tree: tokens_saved / (generated + saved)."),
    ("sampling/mean_fork_position", "sampling", "token index", "tree: mean token position of the forks."),
    ("sampling/mean_fork_entropy", "sampling", "nats", "tree: mean policy entropy at the forks."),
    # -- asynchronous pipeline (rlvr.trainer.async_loop) ----------------------------------------------------
    ("async/staleness_{d}", "async", _F, "Share of the step's samples generated d policy versions ago."),
    ("async/queue_depth", "async", _N, "Rollout batches submitted and not yet consumed."),
    ("async/learner_wait_s", "async", _S, "Time the learner waited for this step's rollouts."),
    ("async/rollout_idle_frac", "async", _F, "Share of the span the rollout workers were idle."),
    ("async/samples_per_s", "async", "samples/s", "Samples consumed per second since the last step."),
    ("async/dropped_samples", "async", _N, "Samples dropped for being too stale."),
    ("async/requeued_groups", "async", _N, "Stale groups regenerated with the current weights."),
    # -- agents (rlvr.rollout.agent.agent_metrics, rlvr.rollout.harness) --------------------------------------
    ("agent/turns_mean", "agent", "turns", "Mean turns per episode."),
    ("agent/turns_max", "agent", "turns", "Most turns of an episode this step."),
    ("agent/tool_calls_mean", "agent", "calls", "Mean tool calls per episode."),
    ("agent/tool_errors_mean", "agent", "calls", "Mean failed tool calls per episode."),
    ("agent/tool_success_rate", "agent", _F, "Share of tool calls that did not fail (1 with no calls)."),
    ("agent/tool_use_frac", "agent", _F, "Share of episodes with at least one tool call."),
    ("agent/multi_call_frac", "agent", _F, "Share of episodes with more than one tool call."),
    ("agent/tool_latency_mean_s", "agent", _S, "Mean tool-call latency."),
    ("agent/tool_latency_max_s", "agent", _S, "Longest tool call."),
    ("agent/tool_timeouts", "agent", _N, "Tool calls that timed out."),
    ("agent/env_reward_mean", "agent", _R, "Mean reward the environment gave per episode."),
    ("agent/obs_token_frac", "agent", _F, "Share of response tokens that are observations (not trained on)."),
    ("agent/obs_truncated_frac", "agent", _F, "Share of episodes with a truncated observation."),
    ("agent/truncated_frac", "agent", _F, "Share of episodes cut short (any reason)."),
    ("agent/truncated/{reason}", "agent", _F, "Share of episodes cut short for one reason."),
    ("agent/tool_calls_when_correct", "agent", "calls", "Mean tool calls of the correct episodes."),
    ("harness/{stat}", "agent", "varies",
     "An agent harness's episode statistic (calls_mean, episodes, failed_frac, own_reward_frac, "
     "samples_per_episode, seconds_mean, timeout_frac)."),
    # -- distributed placement (rollout engine's metrics()) -------------------------------------------------
    ("distributed/rollout_worker_restarts", "distributed", _N, "Ray rollout workers restarted so far."),
    ("distributed/weight_broadcast", "distributed", "flag (0/1)",
     "1 while weights go to the Ray workers over their process group (weight_sync: broadcast), else 0."),
    # -- timing ---------------------------------------------------------------------------------------------
    ("rollout_s", "timing", _S, "Rollout and scoring time of the step."),
    ("train_s", "timing", _S, "Learner time of the step (advantages and update)."),
    ("step_s", "timing", _S, "Wall time of the whole step."),
    ("rollout_tokens_per_s", "timing", "tokens/s", "response_tokens / rollout_s."),
    ("train_tokens_per_s", "timing", "tokens/s", "train_tokens / train_s."),
    # -- reward models inside an RL run (rlvr.learner.reward_model, rlvr.learner.spark) ----------------------
    ("rm/pairs", "reward_model", _N, "co_evolve: (correct, incorrect) pairs the reward model trained on."),
    ("rm/accuracy", "reward_model", _F,
     "co_evolve: pair accuracy on the step's pairs before the update; SPARK: the judge's pointwise accuracy."),
    ("rm/margin", "reward_model", "score", "co_evolve: mean score(chosen) - score(rejected) before the update."),
    ("rm/loss", "reward_model", "loss", "Reward model's mean training loss."),
    ("rm/grad_norm", "reward_model", "norm", "co_evolve: the reward model's mean gradient norm."),
    ("rm/examples", "reward_model", _N, "SPARK: pointwise examples the judge trained on."),
    ("rm/{kind}_examples", "reward_model", _N, "SPARK: examples of another kind (pairwise, reflection)."),
    ("rm/accuracy_correct", "reward_model", _F, "SPARK: pointwise accuracy on correct answers."),
    ("rm/accuracy_incorrect", "reward_model", _F, "SPARK: pointwise accuracy on incorrect answers."),
    ("rm/pairwise_loss", "reward_model", "loss", "SPARK: mean loss on pairwise examples."),
    ("rm/pairwise_accuracy", "reward_model", _F, "SPARK: accuracy on pairwise examples."),
    ("rm/pairwise_accuracy_first", "reward_model", _F, "SPARK: pairwise accuracy when the first is better."),
    ("rm/pairwise_accuracy_second", "reward_model", _F, "SPARK: pairwise accuracy when the second is better."),
    ("rm/reflection_loss", "reward_model", "loss", "SPARK: mean loss on reflection examples."),
    ("self_reward/step", "reward_model", "flag (0/1)", "1 on steps rewarded by the policy's own judgement."),
    ("self_reward/p_yes", "reward_model", _F, "Mean probability the self-judge answered yes."),
    ("self_reward/agreement", "reward_model", _F, "Share of self-judge verdicts that agree with the verifier."),
    # -- rlvr rm / rlvr prm / rlvr sft -------------------------------------------------------------------------
    ("margin", "rm_training", "score", "rlvr rm: mean score(chosen) - score(rejected) of the step's pairs."),
    ("reward_chosen", "rm_training", "score", "rlvr rm: mean score of the chosen responses."),
    ("reward_rejected", "rm_training", "score", "rlvr rm: mean score of the rejected responses."),
    ("tokens", "rm_training", _T, "rlvr sft: tokens trained on this step."),
    ("eval/accuracy", "rm_training", _F, "rlvr rm: held-out pair accuracy."),
    ("eval/margin", "rm_training", "score", "rlvr rm: held-out mean margin."),
    ("eval/pairs", "rm_training", _N, "rlvr rm: held-out pairs."),
    ("eval/steps", "rm_training", _N, "rlvr prm: held-out reasoning steps."),
    ("eval/step_accuracy", "rm_training", _F, "rlvr prm: held-out step accuracy at the threshold."),
    ("eval/step_mse", "rm_training", "squared error", "rlvr prm: held-out mean (sigmoid(score) - label)^2."),
    ("eval/best_of_n", "rm_training", _F, "Held-out: share of prompts whose top-scored solution is correct."),
    ("eval/random_of_n", "rm_training", _F, "Held-out: mean share of correct solutions (a random pick)."),
    ("eval/oracle_of_n", "rm_training", _F, "Held-out: share of prompts with at least one correct solution."),
    ("eval/prompts", "rm_training", _N, "Held-out prompts with at least two solutions (best-of-n)."),
    # -- evaluation during training (rlvr.trainer.evaluation.eval_summary, eval.every) ----------------------
    ("eval/pass@{k}", "eval", _F, "Held-out pass@k (unbiased estimate) at this step."),
    ("eval/maj@{k}", "eval", _F, "Held-out majority-vote accuracy of k samples (k > 1)."),
    ("eval/rm@{k}", "eval", _F, "Held-out accuracy of the reward model's top pick of k samples (k > 1)."),
    ("eval/mean_reward", "eval", _R, "Held-out mean reward (when it differs from accuracy)."),
    ("eval/mean_length", "eval", _T, "Held-out mean response length."),
]

# keys of an evaluation result (rlvr.eval.evaluate)
_EVAL_RESULTS: list[tuple[str, str, str, str]] = [
    ("pass@k", "eval_result", "{k: fraction}", "Unbiased pass@k for each k in eval.ks, mean over prompts."),
    ("maj@k", "eval_result", "{k: fraction}", "Majority-vote accuracy of k samples (tasks with an answer)."),
    ("rm@k", "eval_result", "{k: fraction}", "Accuracy of a scorer's top pick of k samples (eval.select_model)."),
    ("accuracy", "eval_result", _F, "Share of all samples that are correct."),
    ("mean_length", "eval_result", _T, "Mean response length over all samples."),
    ("length", "eval_result", "{stat: tokens}", "Response-length p10, p50, p90, right_mean and wrong_mean."),
    ("truncated_frac", "eval_result", _F, "Share of samples cut off at the token limit."),
    ("mean_reward", "eval_result", _R, "Mean reward over all samples."),
    ("region_vote", "eval_result", _F, "GUI grounding: mean spatial vote of all n samples."),
    ("num_prompts", "eval_result", _N, "Held-out prompts evaluated."),
    ("n", "eval_result", _N, "Samples per prompt."),
    ("temperature", "eval_result", "temperature", "Sampling temperature."),
    ("max_new_tokens", "eval_result", _T, "Token limit per response."),
    ("seconds", "eval_result", _S, "Wall time of the evaluation."),
    ("backtracks", "eval_result", "object", "Backtracking statistics (tasks with a backtrack marker)."),
    ("by_{field}", "eval_result", "object", "pass@k, maj@k, rm@k by difficulty or source (when several)."),
    ("problems", "eval_result", "list", "Per-prompt results: id, n, correct, truncated, reward_sum, example."),
    ("tag", "eval_result", "text", "Which evaluation of a run (before, after, step_NNNNNN)."),
]


def _entries(rows: list[tuple[str, str, str, str]]) -> list[Entry]:
    return [Entry(key, area, unit, desc, _compile(key)) for key, area, unit, desc in rows]


METRICS: list[Entry] = _entries(_METRICS)
EVAL_RESULTS: list[Entry] = _entries(_EVAL_RESULTS)


def entries() -> list[Entry]:
    """Every declared entry, metrics.jsonl keys first."""
    return METRICS + EVAL_RESULTS


def _lookup(key: str, table: list[Entry]) -> Entry | None:
    for e in table:
        if e.regex is None and e.key == key:
            return e
    # the most specific pattern: the one with the longest fixed text
    hits = [e for e in table if e.regex is not None and e.regex.match(key)]
    return max(hits, key=lambda e: len(re.sub(r"\{[^}]*\}", "", e.key)), default=None)


def describe(key: str, where: str = "any") -> Entry | None:
    """The declaration of `key`: an exact key first, then the most specific matching pattern; None when the key
    is not declared. `where`: "metrics" (metrics.jsonl), "eval" (an evaluation result) or "any" (metrics first)."""
    if where not in ("any", "metrics", "eval"):
        raise ValueError(f"where: 'any', 'metrics' or 'eval', not {where!r}")
    tables = {"any": (METRICS, EVAL_RESULTS), "metrics": (METRICS,), "eval": (EVAL_RESULTS,)}[where]
    for table in tables:
        hit = _lookup(key, table)
        if hit is not None:
            return hit
    return None
