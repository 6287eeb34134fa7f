"""What the drop-in recorder measures of a model and where it finds a step's end, in one process (PyTorch on
the CPU): the batch of a forward's input (examples, or every token id), the model among the modules alive, the
parameter count with tied weights once and sharded parameters at their global size, the optimizer step as
the step's end (nested and second optimizers not), and a sharded two-rank model (FSDP, DTensor, DeviceMesh).
Expected values are hand arithmetic over the layers' shapes."""

from __future__ import annotations

import gc
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

if importlib.util.find_spec("torch") is None:
    if os.environ.get("CI") == "true":
        raise ImportError("torch is not installed: .ci/run installs it for these tests")
    pytest.skip("torch is not installed (pip install 'traceview[record]')", allow_module_level=True)

import torch

from tests.job_runs import run_job
from traceview.record.observe import BatchObserver, batch_input, batch_of, global_param_count, model_chain
from traceview.record.steps import FunctionSteps, OptimizerSteps

LINEAR_8_16 = 8 * 16 + 16
LINEAR_16_4 = 16 * 4 + 4


def _net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def test_the_batch_is_the_first_dimension_of_examples_and_every_token_id() -> None:
    ids = torch.zeros(4, 7, dtype=torch.long)
    assert batch_of(ids, torch) == (4 * 7, "tokens")
    assert batch_of(torch.zeros(5, 3, 32, 32), torch) == (5, "examples")
    found = batch_input((), {"attention_mask": torch.ones(4, 7), "input_ids": ids}, torch)
    assert found is not None
    assert found[0] == "input_ids"
    assert found[1] is ids
    nested = batch_input(({"labels": torch.zeros(2), "pixel_values": torch.zeros(2, 3)},), {}, torch)
    assert nested is not None
    assert nested[0] == "pixel_values"
    assert batch_input((torch.tensor(1.0),), {}, torch) is None  # a scalar is no batch


class Wrapper(torch.nn.Module):
    """A DDP-like wrapper: one child holding every parameter."""

    def __init__(self, module: torch.nn.Module) -> None:
        super().__init__()
        self.module = module

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.module(*args, **kwargs)


class Lit(torch.nn.Module):
    """A trainer's module: the network and a loss, never called itself."""

    def __init__(self) -> None:
        super().__init__()
        self.net = Wrapper(_net())
        self.loss = torch.nn.MSELoss()


def test_the_model_is_the_root_holding_the_optimizers_parameters_down_to_its_wrappers() -> None:
    lit, teacher = Lit(), torch.nn.Linear(100, 100)  # a larger model the optimizer does not hold
    optimized = {id(p) for p in lit.parameters()}
    chain = model_chain(torch, optimized)
    assert chain == [lit, lit.net, lit.net.module]
    assert model_chain(torch, set())[0] is teacher  # without an optimizer: the largest
    del teacher
    gc.collect()


def test_tied_and_sharded_parameters_count_once_at_their_global_size() -> None:
    embed = torch.nn.Embedding(10, 6)
    head = torch.nn.Linear(6, 10, bias=False)
    head.weight = embed.weight
    assert global_param_count(torch.nn.ModuleList([embed, head]))[0] == 10 * 6
    partitioned = torch.nn.Parameter(torch.empty(0))
    partitioned.ds_numel = 1000  # type: ignore[attr-defined]  # DeepSpeed ZeRO-3 keeps only a shard
    holder = torch.nn.Module()
    holder.weight = partitioned
    count, rules = global_param_count(holder)
    assert count == 1000
    assert rules == {"DeepSpeed ZeRO-3 partition (ds_numel)": 1}


def test_a_step_sums_the_micro_batches_of_the_models_training_forwards() -> None:
    net = _net()
    observer = BatchObserver(torch, model_chain(torch, {id(p) for p in net.parameters()}))
    for _ in range(3):  # three micro-batches of 5
        net(torch.randn(5, 8)).sum().backward()
    with torch.no_grad():
        net(torch.randn(50, 8))  # evaluation: not the batch
    observer.end_step(0)
    x = torch.randn(2, 8)
    net(x)
    net(x)  # a closure run twice on one batch (LBFGS): once
    observer.end_step(1)
    observer.close()
    assert [(s.size, s.unit, s.calls) for s in observer.steps.values()] == [
        (15, "examples", 3),
        (2, "examples", 1),
    ]
    net(torch.randn(7, 8))
    observer.end_step(2)
    assert 2 not in observer.steps  # the hooks are gone


class Outer(torch.optim.SGD):
    """An optimizer whose step runs another's (ZeRO, a wrapper)."""

    def __init__(self, params: Any, inner: torch.optim.Optimizer) -> None:
        super().__init__(params, lr=0.1)
        self.inner = inner

    def step(self, closure: Any = None) -> Any:
        self.inner.step()
        return super().step(closure)


def test_a_step_ends_with_the_leading_optimizers_outermost_step() -> None:
    ended: list[int] = []
    steps = OptimizerSteps(torch, lambda: ended.append(1))
    a, b = torch.nn.Parameter(torch.ones(2)), torch.nn.Parameter(torch.ones(2))
    for p in (a, b):
        p.grad = torch.ones(2)
    outer = Outer([a], torch.optim.SGD([a], lr=0.1))
    other = torch.optim.SGD([b], lr=0.1)  # a second optimizer of the same iteration (a GAN's other half)
    for _ in range(3):
        outer.step()
        other.step()
    assert len(ended) == 3
    assert steps.optimizer_params() == {id(a)}
    steps.close()
    outer.step()
    assert len(ended) == 3


def test_a_step_that_raised_does_not_stop_the_count() -> None:
    ended: list[int] = []
    steps = OptimizerSteps(torch, lambda: ended.append(1))
    p = torch.nn.Parameter(torch.ones(2))
    p.grad = torch.ones(2)
    optimizer = torch.optim.SGD([p], lr=0.1)

    def broken() -> None:
        raise RuntimeError("closure failed")

    with pytest.raises(RuntimeError):
        optimizer.step(broken)
    optimizer.step()
    optimizer.step()
    steps.close()
    assert len(ended) == 2


def test_step_on_ends_a_step_at_each_outermost_return() -> None:
    ended: list[int] = []
    steps = FunctionSteps("some.module:Loop.step", lambda: ended.append(1))

    class Loop:
        def step(self, depth: int) -> None:
            if depth:
                self.step(depth - 1)  # a call of itself is inside the step

    namespace: dict[str, Any] = {"Loop": Loop}
    assert steps.patch(namespace)
    Loop().step(2)
    Loop().step(0)
    assert len(ended) == 2
    assert not steps.patch(namespace)  # wrapped once


SHARDED = Path(__file__).parent / "jobs" / "sharded_model.py"


def test_a_sharded_model_counts_its_global_parameters_and_names_its_mesh_dims(tmp_path: Path) -> None:
    done = run_job([sys.executable, str(SHARDED), str(tmp_path)])
    assert done.returncode == 0, done.stderr[-3000:]
    whole = LINEAR_8_16 + LINEAR_16_4
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text(encoding="utf-8"))
        assert seen["local"]["fsdp2"] < whole  # each rank holds a shard
        assert (seen["fsdp2"], seen["fsdp1_flat"], seen["fsdp1_orig"]) == (whole, whole, whole)
        dims = {(g["mesh_dim"], tuple(g["ranks"])) for g in seen["groups"] if g.get("mesh_dim")}
        assert ("shard", (0, 1)) in dims
        assert ("replicate", (rank,)) in dims
