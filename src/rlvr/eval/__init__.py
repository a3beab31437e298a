"""Evaluation: unbiased pass@k and held-out evaluation."""

from rlvr.eval.evaluate import evaluate, summarize, write_results
from rlvr.eval.passk import mean_pass_at_k, pass_at_k

__all__ = ["evaluate", "mean_pass_at_k", "pass_at_k", "summarize", "write_results"]
