"""Heartbeat lines off a terminal, the zero-spread warning, the LoRA summary."""

from __future__ import annotations

from types import SimpleNamespace

from rlvr.trainer.watch import Heartbeat, ZeroSpreadWatch


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_heartbeat_prints_after_silence_and_names_the_step() -> None:
    clock, lines = Clock(), []
    hb = Heartbeat(enabled=False, every_s=15, emit=lines.append, clock=clock)
    hb.doing("train step 3/80 running")
    clock.t += 14.9
    assert hb.beat() is None  # not yet 15 s of silence
    clock.t += 0.2
    assert hb.beat() == "train step 3/80 running: 15 s in it"
    clock.t += 10
    assert hb.beat() is None  # the heartbeat itself was a line
    hb.doing("train step 4/80 running")
    clock.t += 3
    hb.printed()  # a metrics line reset the silence
    clock.t += 14
    assert hb.beat() is None
    clock.t += 1
    assert hb.beat() == "train step 4/80 running: 18 s in it"
    assert lines == ["train step 3/80 running: 15 s in it", "train step 4/80 running: 18 s in it"]


def test_heartbeat_thread_emits_and_stops() -> None:
    lines: list[str] = []
    with Heartbeat(enabled=True, every_s=0.05, emit=lines.append) as hb:
        hb.doing("train step 1/2 running")
        deadline = 200
        while not lines and deadline:
            import time

            time.sleep(0.05)
            deadline -= 1
    assert lines and lines[0].startswith("train step 1/2 running: ")
    assert hb._thread is not None and not hb._thread.is_alive()


def _groups(rewards: list[list[float | None]], reason: str = "no <answer> tag") -> list[SimpleNamespace]:
    """Groups of samples with these rewards; None: an excluded sample (a non-finite reward, scored 0)."""
    return [SimpleNamespace(samples=[SimpleNamespace(reward=r or 0.0, excluded=r is None,
                                                     meta={"reasons": {"correctness": reason}})
                                     for r in rs]) for rs in rewards]


def test_zero_spread_warns_once_after_patience_with_the_cause() -> None:
    out: list[str] = []
    watch = ZeroSpreadWatch(frac=0.95, patience=3, emit=out.append)
    flat = _groups([[0.0, 0.0]] * 20)
    assert watch.observe(1, flat) is None
    assert watch.observe(2, flat) is None
    msg = watch.observe(3, flat, chat=False)
    assert msg is not None and out == [msg]
    assert "100% of groups" in msg and "3 steps in a row" in msg and "most common reward 0" in msg
    assert "no chat template" in msg and "'no <answer> tag' (40)" in msg
    assert watch.observe(4, flat) is None and len(out) == 1  # once


def test_zero_spread_streak_resets_on_a_learning_step() -> None:
    out: list[str] = []
    watch = ZeroSpreadWatch(frac=0.95, patience=2, emit=out.append)
    flat = _groups([[1.0, 1.0]] * 20)
    mixed = _groups([[1.0, 1.0]] * 18 + [[0.0, 1.0]] * 2)  # 90% flat: below 95%
    watch.observe(1, flat)
    watch.observe(2, mixed)
    watch.observe(3, flat)
    assert out == []
    watch.observe(4, flat)
    assert len(out) == 1 and "too easy" in out[0]


def test_lora_summary_counts_trainable_parameters() -> None:
    import pytest

    pytest.importorskip("peft")
    from rlvr.config import LoraSpec
    from rlvr.models import load_causal_lm
    from rlvr.models.lora import apply_lora, lora_summary

    spec = LoraSpec(r=2, alpha=4, target_modules=["q_proj"])
    model = apply_lora(load_causal_lm("builtin"), spec)
    cfg = model.get_base_model().config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    q_out = cfg.num_attention_heads * head_dim
    expected = cfg.num_hidden_layers * 2 * (cfg.hidden_size + q_out)  # A: r x in, B: out x r, per layer
    total = sum(p.numel() for p in model.parameters())
    line = lora_summary(model, spec)
    assert line.startswith("LoRA adapters on (q_proj; r=2, alpha=4, dropout=0): ")
    assert f"trainable params {expected:,} of {total:,}" in line


def test_zero_spread_leaves_excluded_samples_out() -> None:
    """[1, 1, excluded] is a flat group (the excluded sample's stand-in 0 is no reward); the most common reward
    is counted on valid samples only."""
    out: list[str] = []
    watch = ZeroSpreadWatch(frac=0.95, patience=2, emit=out.append)
    flat = _groups([[1.0, 1.0, None, None]] * 20)
    watch.observe(1, flat)
    watch.observe(2, flat)
    assert len(out) == 1 and "100% of groups" in out[0] and "most common reward 1" in out[0], out
