"""Training from Python in ten lines: rlvr.train with a reward function defined right here.

    python examples/train_script.py                  # 20 steps of GRPO on the built-in addition task
    python examples/train_script.py train.steps=2    # any key.sub=value override, as on the command line
"""
import sys

import rlvr


def shorter_is_better(response, record):  # the task's answer, plus a small bonus for brevity
    right = response.strip().endswith(f"A:{record.answer}")
    return {"reward": float(right) + 0.1 * (len(response) < 40), "right": float(right), "correct": right}


if __name__ == "__main__":
    run_dir = rlvr.train("recipes/grpo.yaml", ["train.steps=20", "eval.before=false", "eval.after=false",
                                               *sys.argv[1:]], rewards=[shorter_is_better])
    print(run_dir, rlvr.evaluate(run_dir / "final", task="addition", n=4, k=[1, 4], size=50)["pass@k"])
