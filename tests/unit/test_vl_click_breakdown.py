"""scripts/vl_click_breakdown.py: which button a click lands on, and how far a miss is from the nearest one."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("vl_click_breakdown", ROOT / "scripts" / "vl_click_breakdown.py")
breakdown = importlib.util.module_from_spec(spec)
sys.modules["vl_click_breakdown"] = breakdown
spec.loader.exec_module(breakdown)

SCREEN = SimpleNamespace(meta={"buttons": {"red": [4, 10, 14, 16], "blue": [30, 30, 40, 38]}, "target": "red"})


def test_a_click_inside_a_box_edge_included_is_on_that_button() -> None:
    assert breakdown.classify(SCREEN, 4, 16) == ("named", None)
    assert breakdown.classify(SCREEN, 35, 31) == ("other", None)


def test_a_miss_reports_the_nearest_button_and_its_l1_distance() -> None:
    assert breakdown.outside([4, 10, 14, 16], 16, 18) == 4  # 2 px right and 2 px below
    assert breakdown.classify(SCREEN, 16, 18) == ("none", (True, 4))
    assert breakdown.classify(SCREEN, 41, 40) == ("none", (False, 3))
