"""A small training job that knows nothing of traceview: `traceview record` must record it as it is. It prints
what it ran, one JSON object a line on stdout, so tests check the recording against the job itself.

    python -m torch.distributed.run --nproc-per-node 2 tests/jobs/unmodified_train.py --loop plain
    python tests/jobs/unmodified_train.py --loop trainer --accumulate 2      # one process, no process group

`--loop plain`: forward, backward, optimizer step. `--loop accumulate`: `--accumulate K` micro-batches a step
(DDP's `no_sync` on all but the last), one optimizer step. `--loop trainer`: what a trainer such as Lightning
does: the module's `training_step` runs inside a closure, the last micro-batch's closure inside
`optimizer.step(closure)` of a wrapper that is no `torch.optim.Optimizer` (Lightning's `LightningOptimizer`),
the earlier ones outside it. `--loop manual`: no optimizer at all, each step one call of `train_step` (the
update written out). `--model mlp` feeds float examples `[b, features]`; `--model tokens` a tiny
language model token ids `[b, seq]` (its output head tied to its embedding).

Each step k (its optimizer step index, from 0) runs one `aten::cumsum` over k + 1 elements before stepping (a
running statistic of the job's own), so a trace's step can be told by its contents. Printed: `{"rank",
"world_size", "params"}` once (`params`: `sum(p.numel() for p in model.parameters())`, shared weights once),
then per step `{"rank", "step", "local_batch", "unit", "micro_batches", "step_s"}` (the batch it fed:
examples, or every token id; the wall time of the step).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from typing import Any

import torch
import torch.distributed as dist

FEATURES, HIDDEN, OUTPUTS, VOCAB, WIDTH = 24, 48, 6, 50, 16


class TinyLM(torch.nn.Module):
    """Token ids -> next-token logits; the head shares the embedding's weight."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(VOCAB, WIDTH)
        self.mix = torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.mix(self.embed(input_ids))))


class Job:
    """The model, its optimizer and its batches."""

    def __init__(self, args: argparse.Namespace) -> None:
        torch.manual_seed(0)
        self.args = args
        self.net = TinyLM() if args.model == "tokens" else _mlp()
        self.params = sum(p.numel() for p in self.net.parameters())
        distributed = dist.is_initialized()
        self.model: torch.nn.Module = (
            torch.nn.parallel.DistributedDataParallel(self.net) if distributed else self.net
        )
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.01)

    def batch(self) -> tuple[torch.Tensor, torch.Tensor]:
        b = self.args.micro_batch
        if self.args.model == "tokens":
            ids = torch.randint(0, VOCAB, (b, self.args.seq))
            return ids, torch.randint(0, VOCAB, (b, self.args.seq))
        return torch.randn(b, FEATURES), torch.randn(b, OUTPUTS)

    def fed(self) -> tuple[int, str]:
        """The local batch of one micro-batch: examples, or every token id."""
        if self.args.model == "tokens":
            return self.args.micro_batch * self.args.seq, "tokens"
        return self.args.micro_batch, "examples"

    def loss(
        self, module: Callable[[torch.Tensor], torch.Tensor], inputs: torch.Tensor, target: torch.Tensor
    ) -> torch.Tensor:
        out = module(inputs)
        if self.args.model == "tokens":
            return torch.nn.functional.cross_entropy(out.reshape(-1, VOCAB), target.reshape(-1))
        return torch.nn.functional.mse_loss(out, target)

    def no_sync(self, last: bool) -> Any:
        skip = not last and isinstance(self.model, torch.nn.parallel.DistributedDataParallel)
        return self.model.no_sync() if skip else nullcontext()


def _mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, OUTPUTS)
    )


def _statistic(step: int) -> None:
    """The job's running statistic: one cumsum over step + 1 elements."""
    torch.ones(step + 1).cumsum(0)


def plain_loop(job: Job) -> Iterator[int]:
    for step in range(job.args.steps):
        inputs, target = job.batch()
        job.loss(job.model, inputs, target).backward()
        _statistic(step)
        job.optimizer.step()
        job.optimizer.zero_grad()
        yield 1


def accumulate_loop(job: Job) -> Iterator[int]:
    k = job.args.accumulate
    for step in range(job.args.steps):
        for micro in range(k):
            inputs, target = job.batch()
            with job.no_sync(micro == k - 1):
                (job.loss(job.model, inputs, target) / k).backward()
        _statistic(step)
        job.optimizer.step()
        job.optimizer.zero_grad()
        yield k


class Lit(torch.nn.Module):
    """A trainer's module: it holds the network and says what one training step computes."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.net = job.model
        self.job = job

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return self.job.loss(self.net, *batch)


class WrappedOptimizer:
    """A trainer's optimizer wrapper (no torch.optim.Optimizer itself): `step(closure)` runs the closure
    inside the real optimizer's step."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def step(self, closure: Callable[[], torch.Tensor]) -> None:
        self.optimizer.step(closure=closure)


def trainer_loop(job: Job) -> Iterator[int]:
    lit, k = Lit(job), job.args.accumulate
    optimizer = WrappedOptimizer(job.optimizer)
    for step in range(job.args.steps):
        for micro in range(k):
            batch = job.batch()

            def closure(
                batch: tuple[torch.Tensor, torch.Tensor] = batch,
                last: bool = micro == k - 1,
                step: int = step,
            ) -> torch.Tensor:
                with job.no_sync(last):
                    loss = lit.training_step(batch) / k
                    loss.backward()
                if last:
                    _statistic(step)
                return loss

            if micro < k - 1:
                closure()
            else:
                optimizer.step(closure)
        job.optimizer.zero_grad()
        yield k


def train_step(job: Job, step: int) -> None:
    """One step with no torch.optim: the update written out (a loop `--step-on` is for)."""
    inputs, target = job.batch()
    job.loss(job.model, inputs, target).backward()
    _statistic(step)
    with torch.no_grad():
        for parameter in job.model.parameters():
            parameter.sub_(0.01 * parameter.grad)
            parameter.grad = None


def manual_loop(job: Job) -> Iterator[int]:
    for step in range(job.args.steps):
        train_step(job, step)
        yield 1


LOOPS = {"plain": plain_loop, "accumulate": accumulate_loop, "trainer": trainer_loop, "manual": manual_loop}


def say(**fields: Any) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--loop", choices=sorted(LOOPS), default="plain")
    parser.add_argument("--model", choices=("mlp", "tokens"), default="mlp")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--micro-batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        dist.init_process_group("gloo")
    rank = dist.get_rank() if dist.is_initialized() else 0
    job = Job(args)
    say(rank=rank, world_size=dist.get_world_size() if dist.is_initialized() else 1, params=job.params)
    size, unit = job.fed()
    started = time.perf_counter()
    for step, micro_batches in enumerate(LOOPS[args.loop](job)):
        now = time.perf_counter()
        say(
            rank=rank,
            step=step,
            local_batch=size * micro_batches,
            unit=unit,
            micro_batches=micro_batches,
            step_s=now - started,
        )
        started = now
    if dist.is_initialized():
        # PyTorch 2.13's gloo worker threads outlive destroy_process_group; one still freeing the last
        # backward's all-reduce (it holds a Python object, so it needs the GIL) once the interpreter is
        # finalising aborts the process ("terminate called without an active exception"), bare or recorded.
        # The barrier's wait releases the GIL: a worker thread still freeing an earlier work gets it first.
        dist.barrier()
        dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1:])
