"""What the drop-in recorder measures of an unmodified job's model (docs/run-manifest.md, "Drop-in
recording"): which module is the model, the local batch of each step (summed over the micro-batches of one
optimizer step), and the parameter count of the whole model with global shapes (FSDP, DeepSpeed ZeRO-3,
DTensor).

The model is found once, at the end of the first step: among the modules alive with no parent module, the one
holding the most of the stepping optimizer's parameters (the largest, without an optimizer), then down through
wrappers that hold all of its parameters (DDP, FSDP, `torch.compile`). Forward hooks on that chain only (no
global module hook) see each training forward: the outermost call's input is the batch.
"""

from __future__ import annotations

import statistics
import weakref
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from traceview.core.records import record
from traceview.record.rank_facts import MeasuredModel, alive

BATCH_KEYWORDS = (
    "input_ids",
    "input",
    "inputs",
    "x",
    "pixel_values",
    "inputs_embeds",
    "src",
    "tokens",
    "idx",
)
"""Keyword arguments read as the batch before any other tensor (a transformer's token ids first)."""
NESTED_DEPTH = 3
"""How deep a batch tensor is looked for inside tuples, lists and dicts of the forward's arguments."""
GLOBAL_NUMEL_RULES: tuple[tuple[str, str, Callable[[Any], int]], ...] = (
    # (attribute that marks the parameter, what it is, its count in the whole model)
    ("ds_numel", "DeepSpeed ZeRO-3 partition (ds_numel)", lambda p: int(p.ds_numel)),
    (
        "_unpadded_unsharded_size",
        "FSDP flat parameter (unsharded)",
        lambda p: int(p._unpadded_unsharded_size.numel()),
    ),
    ("device_mesh", "DTensor (global shape)", lambda p: int(p.numel())),
)
"""How a sharded parameter counts in the whole model: the first rule whose attribute it has, else `numel()`
(`_fsdp_flattened` views into a flat parameter are left out: the flat parameter counts them)."""


@record
class StepBatch:
    """The batch one step fed the model: its size in `unit`, the forward calls it was summed over, and what
    the first call's input was."""

    size: int
    unit: str
    calls: int
    input: str


def _tensors(value: Any, name: str, torch: Any, depth: int) -> Iterator[tuple[str, Any]]:
    """Every tensor in `value` (depth first, keyword names first in dicts), with where it was found."""
    if isinstance(value, torch.Tensor):
        yield name, value
    elif depth < NESTED_DEPTH and isinstance(value, dict):
        keys = [k for k in BATCH_KEYWORDS if k in value] + [k for k in value if k not in BATCH_KEYWORDS]
        for key in keys:
            yield from _tensors(value[key], str(key), torch, depth + 1)
    elif depth < NESTED_DEPTH and isinstance(value, list | tuple):
        for index, item in enumerate(value):
            yield from _tensors(item, f"{name}[{index}]", torch, depth + 1)


def batch_input(args: Sequence[Any], kwargs: dict[str, Any], torch: Any) -> tuple[str, Any] | None:
    """The tensor a forward call's batch is read from: a keyword of `BATCH_KEYWORDS`, else the first tensor of
    the positional arguments, else of the other keywords (tensors of no dimension skipped)."""
    ordered = [
        *_tensors({k: kwargs[k] for k in BATCH_KEYWORDS if k in kwargs}, "kwargs", torch, 0),
        *_tensors(tuple(args), "args", torch, 0),
        *_tensors(kwargs, "kwargs", torch, 0),
    ]
    return next(((name, t) for name, t in ordered if t.dim() > 0), None)


def batch_of(tensor: Any, torch: Any) -> tuple[int, str]:
    """(size, unit) of a batch tensor: integer ids count every element as a token (all dimensions, the
    convention of docs/metrics.md), any other tensor its first dimension in examples."""
    dtype = tensor.dtype
    if not (dtype.is_floating_point or dtype.is_complex or dtype == torch.bool):
        return int(tensor.numel()), "tokens"
    return int(tensor.shape[0]), "examples"


def _root_modules(torch: Any) -> list[Any]:
    """The modules alive in the process that are no other module's child."""
    modules = alive(torch.nn.Module)
    children = {id(child) for module in modules for child in module.children()}
    return [module for module in modules if id(module) not in children]


def model_chain(torch: Any, optimizer_params: set[int]) -> list[Any]:
    """The model: the root module holding the most of `optimizer_params` (most parameters first when none
    is known or held), then each only child that holds all of its parameters (DDP, FSDP), down to a
    `torch.compile` wrapper at most (a hook inside compiled code would make it compile again)."""
    scored = []
    for module in _root_modules(torch):
        held = {id(p): p for p in module.parameters()}
        if held:
            size = sum(int(p.numel()) for p in held.values())
            scored.append((len(held.keys() & optimizer_params), size, module))
    if not scored:
        return []
    chain = [max(scored, key=lambda item: item[:2])[2]]
    while not hasattr(chain[-1], "_orig_mod"):  # torch.compile's wrapper: the compiled module is left alone
        every = {id(p) for p in chain[-1].parameters()}
        whole = [c for c in chain[-1].children() if {id(p) for p in c.parameters()} == every]
        if len(whole) != 1:
            break
        chain.append(whole[0])
    return chain


def global_param_count(model: Any) -> tuple[int, Counter[str]]:
    """The parameters of the whole model (each once: tied weights shared), with global shapes under FSDP,
    DeepSpeed ZeRO-3 and DTensor; and how many parameters each rule of `GLOBAL_NUMEL_RULES` counted."""
    found = {id(p): p for p in model.parameters()}
    for module in model.modules():  # FSDP with use_orig_params keeps its flat parameters off parameters()
        flat = getattr(getattr(module, "_handle", None), "flat_param", None)
        if flat is not None:
            found[id(flat)] = flat
    total, rules = 0, Counter[str]()
    for parameter in found.values():
        rule = next((r for r in GLOBAL_NUMEL_RULES if hasattr(parameter, r[0])), None)
        if rule is None and getattr(parameter, "_fsdp_flattened", False):
            continue  # a view into FSDP's flat parameter, counted there
        total += rule[2](parameter) if rule else int(parameter.numel())
        if rule:
            rules[rule[1]] += 1
    return total, rules


def _describe(module: Any) -> str:
    inner = module.module if hasattr(module, "module") else getattr(module, "_orig_mod", None)
    return type(module).__name__ + (f"({type(inner).__name__})" if inner is not None else "")


class BatchObserver:
    """Forward hooks on the model's chain that sum each step's batch; `end_step()` closes a step. It holds the
    job's modules only weakly: the job's model must die when the job drops it, not at the interpreter's end
    (a DDP model freed during finalisation races gloo's threads, which can abort the process)."""

    def __init__(self, torch: Any, chain: Sequence[Any]) -> None:
        self.torch = torch
        self.steps: dict[int, StepBatch] = {}
        self._chain = [weakref.ref(module) for module in chain]
        self._depth = 0
        self._inputs: list[tuple[weakref.ref[Any], int, str, str]] = []
        self._handles: list[Any] = []
        for module in chain:
            self._handles.append(module.register_forward_pre_hook(self._enter, with_kwargs=True))
            self._handles.append(module.register_forward_hook(self._leave, always_call=True))

    @property
    def model(self) -> Any:
        """The outermost module of the chain, while the job keeps it (None: none found, or dropped)."""
        return self._chain[0]() if self._chain else None

    def _enter(self, module: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        self._depth += 1
        if self._depth > 1 or not (module.training and self.torch.is_grad_enabled()):
            return
        found = batch_input(args, kwargs, self.torch)
        if found is None or any(ref() is found[1] for ref, *_ in self._inputs):  # a closure run twice
            return
        name, tensor = found
        size, unit = batch_of(tensor, self.torch)
        described = f"{name} {str(tensor.dtype).removeprefix('torch.')} {list(tensor.shape)}"
        self._inputs.append((weakref.ref(tensor), size, unit, described))

    def _leave(self, *_: Any) -> None:
        self._depth = max(0, self._depth - 1)

    def end_step(self, step: int) -> None:
        """Close step `step`: its batch is the sum over the model's training forwards since the last step."""
        if self._inputs:
            units = Counter(unit for _, _, unit, _ in self._inputs)
            unit = units.most_common(1)[0][0]
            size = sum(s for _, s, u, _ in self._inputs if u == unit)
            self.steps[step] = StepBatch(size, unit, len(self._inputs), self._inputs[0][3])
        self._inputs = []
        self._depth = 0

    def close(self) -> None:
        """Remove the hooks."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def measured(self, steps: Sequence[int], step_name: str) -> MeasuredModel:
        """The local batch of `steps` (the recorded ones) and the model's parameters, each with its source."""
        model = self.model
        if model is None:
            note = "no model found (no module holds parameters): give --local-batch and --params"
            return MeasuredModel(notes=(note,))
        params, rules = global_param_count(model)
        ruled = "".join(f"; {count} {rule}" for rule, count in sorted(rules.items()))
        sources = {"model.params": f"measured: the parameters of {_describe(model)}, each once{ruled}"}
        batches = [self.steps[s] for s in steps if s in self.steps]
        if not batches:
            note = f"no training forward of {_describe(model)} in the recorded steps: give --local-batch"
            return MeasuredModel(params=float(params), sources=sources, notes=(note,))
        sizes = [b.size for b in batches]
        sources["model.local_batch"] = _batch_source(batches[0], _describe(model), step_name, steps)
        varied = f"the local batch varied over the recorded steps: {sizes}; run.json states the median"
        notes = () if len(set(sizes)) == 1 else (varied,)
        return MeasuredModel(float(statistics.median(sizes)), batches[0].unit, float(params), sources, notes)


def _batch_source(first: StepBatch, model: str, step_name: str, steps: Sequence[int]) -> str:
    rule = "all dimensions of the ids" if first.unit == "tokens" else "its first dimension"
    return (
        f"measured: the input of {model}'s training forwards ({first.input}: {first.unit}, {rule}), summed "
        f"over the {first.calls} forward(s) of each {step_name}; steps {steps[0]}-{steps[-1]}"
    )
