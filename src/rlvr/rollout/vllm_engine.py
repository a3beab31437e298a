"""Rollouts with vLLM on a GPU (optional extra: `pip install 'rlvr[vllm]'`).

Status: written against vLLM's documented offline API (`LLM`, `SamplingParams`, `logprobs_mode`,
`worker_extension_cls` + `collective_rpc`, `sleep`/`wake_up`), but NOT exercised by this project's tests, which
run without a GPU. Selecting it on a machine without CUDA or without vLLM stops at start-up with a clear message
(that part is tested).

- Behaviour log-probs: requested for the sampled token only (`logprobs=0`) with
  `logprobs_mode="processed_logprobs"`, i.e. after temperature, which is what the learner computes as long as
  top-p/top-k are off (with them on, vLLM's processed log-probs are of the truncated distribution).
- Weights in place: after each update the learner's state dict is sent to vLLM's workers through
  `collective_rpc` into `RlvrWeightSync.rlvr_load_weights`, which calls the model's own `load_weights`.
- Colocated with the learner (`colocate: true`): vLLM sleeps (`sleep(level=1)` frees the KV cache and offloads
  weights) while the learner trains and wakes up to generate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlvr.rollout.base import ENGINES, RolloutEngine, SamplingParams
from rlvr.types import Sample


class RlvrWeightSync:
    """Mixed into vLLM's GPU worker via `worker_extension_cls` (the worker imports it by its dotted path)."""

    def rlvr_load_weights(self, named_tensors: list[tuple[str, Any]]) -> None:
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = next(model.parameters()).device
        model.load_weights(weights=[(name, t.to(device)) for name, t in named_tensors])


def _check_environment() -> Any:
    from rlvr.config import ConfigError

    try:
        import torch
        import vllm
    except ImportError:
        raise ConfigError("rollout.engine: 'vllm' needs vLLM: pip install 'rlvr[vllm]' (GPU machines only); "
                          "on CPU use rollout.engine=hf or fast") from None
    if not torch.cuda.is_available():
        raise ConfigError("rollout.engine: 'vllm' needs a CUDA GPU, and torch sees none; use rollout.engine=hf "
                          "or fast on CPU")
    return vllm


@ENGINES.register("vllm")
class VLLMEngine(RolloutEngine):
    """vLLM rollouts. `model` is the learner's policy (its weights are pushed after every update)."""

    @staticmethod
    def check_available() -> None:
        """Called before a run starts: a clear message instead of a failure mid-way."""
        _check_environment()

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 256, gpu_memory_utilization: float = 0.5,
                 colocate: bool = True, tensor_parallel_size: int = 1, dtype: str = "auto"):
        vllm = _check_environment()
        from rlvr.models.loading import eos_token_ids

        self.tokenizer = tokenizer
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.colocate = colocate
        self.policy_version = 0
        path = getattr(getattr(model, "config", None), "_name_or_path", None)
        if not path:
            raise RuntimeError("rollout.engine=vllm needs the policy loaded from a directory (model.path)")
        self.llm = vllm.LLM(
            model=path, tokenizer=path, dtype=dtype, gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size, enable_sleep_mode=colocate, max_num_seqs=batch_size,
            logprobs_mode="processed_logprobs", enable_prefix_caching=True,
            worker_extension_cls=f"{__name__}.RlvrWeightSync",
        )
        self._vllm = vllm
        self._asleep = False

    def sync_weights(self, model: Any, version: int) -> None:
        self._wake()
        named = [(name, t.detach()) for name, t in model.state_dict().items()]
        self.llm.collective_rpc("rlvr_load_weights", args=(named,))
        self.policy_version = version
        self._sleep()

    def _wake(self) -> None:
        if self.colocate and self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _sleep(self) -> None:
        if self.colocate and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        self._wake()
        sp = self._vllm.SamplingParams(
            n=params.n, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or -1,
            max_tokens=params.max_new_tokens, stop=list(params.stop) or None, stop_token_ids=self.eos_ids,
            include_stop_str_in_output=True, logprobs=0, seed=None,
        )
        outputs = self.llm.generate([{"prompt_token_ids": list(p)} for p in prompts], sp, use_tqdm=False)
        results = []
        for prompt, out in zip(prompts, outputs):
            group = []
            for o in out.outputs:
                ids = list(o.token_ids)
                lps = [float(step[t].logprob) if step and t in step else 0.0 for t, step in zip(ids, o.logprobs or [])]
                group.append(Sample(
                    prompt_ids=list(prompt), response_ids=ids, logprobs=lps,
                    finish_reason="length" if o.finish_reason == "length" else "stop",
                    policy_version=self.policy_version,
                    text=self.tokenizer.decode(ids, skip_special_tokens=True),
                ))
            results.append(group)
        self._sleep()
        return results
