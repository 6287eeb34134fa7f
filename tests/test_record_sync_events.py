"""`traceview record` / `traceview.profile()` turns on the profiler's CUDA sync events where PyTorch has them
(docs/metrics.md, "Critical path": the recorded sync edges); their effect shows only on a GPU recording, so
the tests check that the option reaches the profiler (torch on the CPU) and that a PyTorch without it is
recorded as before, silently.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tests.optional import require
from traceview.record.rank_facts import profiler_options


def _state(config: Any) -> Any:
    return config.__getstate__()


def test_profile_hands_the_sync_events_option_to_the_profiler(tmp_path: Path) -> None:
    require("torch")
    import torch

    import traceview

    config_type = torch._C._profiler._ExperimentalConfig
    with traceview.profile(tmp_path / "run", wait=0, warmup=0, active=1, merge_wait_s=0) as prof:
        given = prof.profiler.experimental_config
        torch.ones(4).sum()
        prof.step()
    assert _state(given) == _state(config_type(enable_cuda_sync_events=True))
    assert _state(given) != _state(config_type())  # the option is off by default


@pytest.mark.parametrize(
    "torch_like",
    [
        SimpleNamespace(),  # no torch._C at all
        SimpleNamespace(_C=SimpleNamespace(_profiler=SimpleNamespace())),  # no _ExperimentalConfig
        SimpleNamespace(_C=SimpleNamespace(_profiler=SimpleNamespace(_ExperimentalConfig=lambda: None))),
    ],
)
def test_a_pytorch_without_the_option_records_as_before(torch_like: Any) -> None:
    """Older versions: no experimental config, or one without `enable_cuda_sync_events` (a TypeError)."""
    assert profiler_options(torch_like) == {}
