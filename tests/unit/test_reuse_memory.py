"""run.reuse_memory: with glibc told to keep freed memory, a large tensor allocated again after being freed
reuses the same pages instead of page-faulting fresh zeroed ones (counted as minor page faults)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from rlvr.config import Config
from rlvr.runtime import reuse_freed_memory

PROBE = """
import json, resource, sys, torch
from rlvr.runtime import reuse_freed_memory
applied = reuse_freed_memory(sys.argv[1] == "on")
def faults_of_one_pass(mib):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = torch.empty(mib * 2**18)  # fp32: far above glibc's largest mmap threshold (32 MiB)
    t.fill_(1.0)                  # touch every page
    del t
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
faults_of_one_pass(256)           # the first block always faults its pages in
# a slightly smaller block next: a freed block of exactly the same size cannot serve torch's aligned
# request (posix_memalign asks for size + alignment + a header), so the same size would test fragmentation
print(json.dumps({"applied": applied, "faults": faults_of_one_pass(255)}))
"""

PAGES = 255 * 2**20 // 4096  # 65,280 pages of 4 KiB in the measured tensor


def probe(mode: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_freed_memory_is_reused_without_page_faults():
    off, on = probe("off"), probe("on")
    assert off["applied"] is False and on["applied"] is True
    # glibc's default: the second block is a fresh mmap, every page faults again (huge pages would
    # make it 512x fewer, still far above the reused case)
    assert off["faults"] > PAGES // 1024
    # kept: the first block's heap pages serve the second; a few faults for Python's own small allocations
    assert on["faults"] < PAGES // 1024 < off["faults"]


def test_disabled_is_a_no_op_and_default_is_on():
    assert reuse_freed_memory(False) is False
    assert Config.model_validate({}).run.reuse_memory is True
