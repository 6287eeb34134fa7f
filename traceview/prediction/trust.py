"""How far a prediction can be trusted (docs/metrics.md, "Predicted gamma", "What the prediction lacks or
doubts"): the one input it lacks when there is no predicted gamma, whether the links it prices with are known
or assumed, the inputs that came from defaults, and the figures no device can reach.

`MISSING_RULES` and `CAVEAT_RULES` are data: each row a condition on the run's `Coverage` and the line it
gives. Pure functions of frames; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable

import polars as pl

from traceview.core.records import record
from traceview.prediction.inputs import KNOWN_LINK_SOURCES, ModelInputs
from traceview.prediction.trace_facts import Assumption

BANDWIDTH_ABOVE_B = 1.5
"""Achieved busbw above this multiple of B: the link is faster than the one assumed."""
FLAT_SLOPE = 0.5
"""A slope of log(duration) against log(S) below this over calls of one collective and group size: the
durations hardly grow with the bytes, so the time is not transfer."""
MIN_SIZE_SPREAD = 2.0
MIN_SLOPE_CALLS = 4


@record
class Coverage:
    """What the run gave the model: calls in steps, with a size, priced; the inputs; the pooled figures."""

    calls: int
    sized: int
    priced: int
    inputs: ModelInputs
    run: dict[str, float | None]
    size_slope: float | None
    host_calls: int = 0  # calls that ran on the host inside a host (priced over the host link)


@record
class Trust:
    """`missing_input`: one line naming what gamma_pred lacks (None when it was computed); `link_known`: every
    priced call's B is stated (command line, manifest) or read from an NCCL log; `assumed_links`: the others,
    one line each; `defaulted`: the inputs taken from defaults; `caveats`: one line each, defaults against
    evidence and figures no device reaches."""

    missing_input: str | None
    link_known: bool
    assumed_links: tuple[str, ...]
    defaulted: tuple[str, ...]
    caveats: tuple[str, ...]
    about: tuple[tuple[str, str], ...] = ()  # (factor, caveat) of the caveats that qualify one factor
    achieved_over_peak: float | None = None  # achieved FLOP/s / the device's peak; None: no peak, no compute
    doubt: str | None = (
        None  # why the prediction stays out of the headline (`plausibility`); None: it may lead
    )
    guesses: tuple[str, ...] = ()  # the inputs taken from a default or a guess, each with how to give it
    links_measured: bool = False  # B was measured in this run: the comparison is no independent check

    def caveat_of(self, factor: str | None) -> str | None:
        """The first caveat that qualifies `factor`, None without one."""
        return next((line for about, line in self.about if about == factor), None)


def _device(c: Coverage) -> str:
    name = c.inputs.device
    return f"device {name!r} is not in the hardware table" if name else "no device named in the traces"


MISSING_RULES: tuple[tuple[Callable[[Coverage], bool], Callable[[Coverage], str]], ...] = (
    (
        lambda c: c.calls == 0,
        lambda c: "collective calls: no communication kernel falls inside a step window",
    ),
    (
        lambda c: c.sized == 0,
        lambda c: "message sizes: the traces record none (profile with record_shapes=True)",
    ),
    (
        lambda c: c.priced == 0 and c.host_calls > 0 and c.inputs.host_link is None,
        lambda c: (
            "link of the host collectives: they run on the host (gloo or MPI: loopback or shared memory "
            "inside a "
            "host), whose speed no datasheet gives; pass --host-bandwidth or write "
            "hardware.host_bandwidth_Bps "
            "in run.json"
        ),
    ),
    (
        lambda c: c.priced == 0 and (c.inputs.intra is None or c.inputs.inter is None),
        lambda c: (
            f"link bandwidth ({_device(c)}): pass --bandwidth or write hardware.intra_bandwidth_Bps in "
            f"run.json"
        ),
    ),
    (
        lambda c: c.priced == 0,
        lambda c: "group sizes of the collectives: the traces name no process group size",
    ),
    (
        lambda c: c.inputs.peak_flops is None,
        lambda c: f"peak FLOP/s ({_device(c)}): pass --peak-flops or write hardware.peak_flops in run.json",
    ),
    (
        lambda c: c.inputs.flops_source is None,
        lambda c: (
            "local batch (or model FLOPs per sample): pass --local-batch or write model.local_batch in "
            "run.json"
        ),
    ),
)
"""(lacks, line) in the order the model needs them; the first that holds names the missing input."""


def missing_input(coverage: Coverage) -> str | None:
    """The first input gamma_pred lacks (`MISSING_RULES`), None when gamma_pred was computed."""
    if coverage.run.get("gamma_pred") is not None:
        return None
    found = next((line(coverage) for lacks, line in MISSING_RULES if lacks(coverage)), None)
    return found or "predicted T_comp: the FLOPs per step are zero"


def _achieved_over_peak(c: Coverage) -> float | None:
    """Achieved FLOP/s over the peak: compute_eff x efficiency (compute_eff = achieved / R, R =
    peak x eff)."""
    value = c.run.get("compute_eff")
    return None if value is None else value * c.inputs.efficiency


def _flops_how(c: Coverage) -> str:
    found = next((a for a in c.inputs.assumptions if a.name == "FLOPs per step"), None)
    return f"{found.value} from {found.source}" if found else "unknown"


CAVEAT_RULES: tuple[tuple[str, Callable[[Coverage], bool], Callable[[Coverage], str]], ...] = (
    (
        "compute_eff",
        lambda c: (_achieved_over_peak(c) or 0.0) > 1.0,
        lambda c: (
            f"achieved FLOP/s would be {_achieved_over_peak(c):.3g}x the device's peak, which no device "
            f"reaches: the FLOPs per step ({_flops_how(c)}) are too high or the peak too low; state "
            "model.flops_per_sample or model.local_batch in run.json"
        ),
    ),
    (
        "bandwidth_eff",
        lambda c: (c.run.get("bandwidth_eff") or 0.0) > BANDWIDTH_ABOVE_B,
        lambda c: (
            f"achieved busbw is {c.run['bandwidth_eff']:.3g}x the B used: the links are faster than "
            "assumed (or the group does not cross the link assumed)"
        ),
    ),
    (
        "bandwidth_eff",
        lambda c: c.size_slope is not None and c.size_slope < FLAT_SLOPE,
        lambda c: (
            f"call durations hardly grow with their bytes (slope {c.size_slope:.2f} of log time against "
            "log bytes, 1 for a transfer): the time is not transfer but waiting for peers or contention, "
            "which "
            "one rank's trace cannot tell apart"
        ),
    ),
)
"""(factor it qualifies, holds, line): figures of the run no device or link can reach, and durations that do
not follow bytes."""


def size_slope(priced: pl.DataFrame) -> float | None:
    """Least-squares slope of log(duration) on log(S) over bandwidth-bound calls, within each (collective, n)
    class whose sizes spread at least `MIN_SIZE_SPREAD`x over `MIN_SLOPE_CALLS` calls (pooled, each class
    centred); None without such a class."""
    usable = priced.filter(
        pl.col("bw_bound").fill_null(False) & (pl.col("dur_us") > 0) & (pl.col("size_bytes") > 0)
    ).with_columns(pl.col("size_bytes").cast(pl.Float64).log().alias("x"), pl.col("dur_us").log().alias("y"))
    keys = ["collective", "group_size"]
    classes = usable.with_columns(
        pl.len().over(keys).alias("n"),
        (pl.col("size_bytes").max().over(keys) / pl.col("size_bytes").min().over(keys)).alias("spread"),
        (pl.col("x") - pl.col("x").mean().over(keys)).alias("dx"),
        (pl.col("y") - pl.col("y").mean().over(keys)).alias("dy"),
    ).filter((pl.col("n") >= MIN_SLOPE_CALLS) & (pl.col("spread") >= MIN_SIZE_SPREAD))
    if classes.height == 0:
        return None
    sums = classes.select(
        (pl.col("dx") * pl.col("dy")).sum().alias("sxy"), (pl.col("dx") ** 2).sum().alias("sxx")
    ).row(0)
    return float(sums[0] / sums[1]) if sums[1] > 0 else None


def _assumed_links(priced: pl.DataFrame) -> tuple[str, ...]:
    used = (
        priced.filter(pl.col("t_pred_us").is_not_null())
        .select("link", "link_source", "bandwidth_Bps")
        .unique()
    )
    assumed = used.filter(~pl.col("link_source").is_in(KNOWN_LINK_SOURCES)).sort("link")
    return tuple(
        f"{row['link']}: B = {row['bandwidth_Bps'] / 1e9:.4g} GB/s from the {row['link_source']}, assumed: "
        "nothing in the run states it (run.json hardware.intra/inter_bandwidth_Bps, --bandwidth, or the "
        "job's "
        "NCCL log)"
        for row in assumed.iter_rows(named=True)
    )


def _host_calls(priced: pl.DataFrame) -> int:
    """Calls that ran on the host of one host (their link: loopback or shared memory)."""
    if priced.height == 0 or "comm_kind" not in priced.columns:
        return 0
    return int(
        priced.select((pl.col("comm_kind") == "host") & ~pl.col("spans_nodes").fill_null(False)).sum().item()
    )


ACHIEVED_RANGE = (0.01, 1.0)
"""Achieved over peak FLOP/s a real step reaches: below 1% or above 100% an input is wrong."""
RATIO_LIMIT = 10.0
"""Measured over predicted gamma beyond this factor (either way) while an input is a default or a guess: the
guess, not the run, may be what differs."""

GUESS_RULES: tuple[tuple[Callable[[Assumption], bool], str, str], ...] = (
    (
        lambda a: a.name == "FLOPs per step" and a.value == "6 P b" and a.source == "trace",
        "the FLOPs per step (6 P b of a P and b the trace suggests): give model.flops_per_sample or "
        "model.local_batch in run.json (--local-batch)",
        "compute",
    ),
    (
        lambda a: a.name == "efficiency" and a.source == "default",
        "the efficiency (default 0.5): give --efficiency or hardware.efficiency",
        "compute",
    ),
    (
        lambda a: (
            a.name.startswith("B ") and a.value is not None and a.source in ("hardware table", "default")
        ),
        "B ({name}, {source}): give --bandwidth or hardware.intra/inter_bandwidth_Bps",
        "network",
    ),
    (
        lambda a: a.name == "GPUs per node" and a.source == "default",
        "the GPUs per node (default 8): give --gpus-per-node or hardware.gpus_per_node",
        "network",
    ),
    (
        lambda a: a.name == "compute dtype" and a.source == "default",
        "the compute dtype (default fp32, which sets the peak): give --dtype",
        "compute",
    ),
)
"""(is the input a default or a guess, how to give it, the side of the model it sets: `compute` (T_comp_pred)
or `network` (T_comm_pred)): the inputs a headline prediction may not rest on."""


def guessed_inputs(inputs: ModelInputs, sides: tuple[str, ...] = ("compute", "network")) -> tuple[str, ...]:
    """The inputs of `GUESS_RULES` of `sides` the prediction took from a default or a guess, each with how to
    give it."""
    return tuple(
        text.format(name=a.name, source=a.source)
        for a in inputs.assumptions
        for holds, text, side in GUESS_RULES
        if side in sides and holds(a)
    )


FLOPS_WORDS = {
    "trace": "the profiler's flops args",
    "shapes": "counted from the operators' shapes",
    "6 P b": "6 P b",
    "FLOPs per sample x b": "the stated FLOPs per sample x b",
}
"""How the FLOPs per step were had, as a doubt names them."""


def _flops_doubt(inputs: ModelInputs, achieved: float) -> str:
    """Why achieved / peak FLOP/s of `achieved` is implausible, naming the inputs it rests on."""
    side = "above" if achieved > 1 else "below"
    how = next((a for a in inputs.assumptions if a.name == "FLOPs per step"), None)
    flops = FLOPS_WORDS.get(str(how.value), str(how.value)) if how else "unknown"
    guessed = (
        " of a P and b the trace suggests" if how and how.value == "6 P b" and how.source == "trace" else ""
    )
    peak = next((a for a in inputs.assumptions if a.name == "compute dtype"), None)
    dtype = f"{inputs.dtype} dense, its dtype from the {peak.source}" if peak else f"{inputs.dtype} dense"
    return (
        f"achieved FLOP/s would be {achieved:.3g}x the device's peak, {side} the {ACHIEVED_RANGE[0]:.0%} to "
        f"{ACHIEVED_RANGE[1]:.0%} a real step reaches, so the FLOPs per step ({flops}{guessed}) or the peak "
        f"({dtype}) is likely wrong: give model.flops_per_sample (or model.local_batch) in run.json, or "
        "--dtype / --peak-flops"
    )


def plausibility(
    inputs: ModelInputs, run: dict[str, float | None]
) -> tuple[float | None, str | None, tuple[str, ...]]:
    """(achieved / peak FLOP/s, why the prediction stays out of the headline or None, the guessed inputs): out
    when achieved / peak is outside `ACHIEVED_RANGE` (the peak known), or when measured / predicted is beyond
    `RATIO_LIMIT` either way while an input is a default or a guess. Where the peak is unknown (a CPU) the
    compute side is not checked."""
    compute_eff = run.get("compute_eff")
    achieved = None if compute_eff is None or inputs.peak_flops is None else compute_eff * inputs.efficiency
    guesses = guessed_inputs(inputs)
    if achieved is not None and not ACHIEVED_RANGE[0] <= achieved <= ACHIEVED_RANGE[1]:
        return achieved, _flops_doubt(inputs, achieved), guesses
    return achieved, far_off_doubt(run.get("gamma_ratio"), guesses), guesses


def far_off_doubt(ratio: float | None, guesses: tuple[str, ...]) -> str | None:
    """Why a measured / predicted `ratio` beyond `RATIO_LIMIT` either way stays out of the headline while
    `guesses` (inputs from a default or a guess) are not empty; None otherwise."""
    far = ratio is not None and ratio > 0 and max(ratio, 1 / ratio) > RATIO_LIMIT
    if not far or not guesses:
        return None
    return (
        f"measured gamma is {ratio:.3g}x the predicted, more than {RATIO_LIMIT:.0f}x off, while "
        f"{len(guesses)} input(s) are a default or a guess: " + "; ".join(guesses)
    )


def trust(
    priced: pl.DataFrame, inputs: ModelInputs, run: dict[str, float | None], waiting_measured: bool
) -> Trust:
    """What the prediction of `priced` calls (`pricing.price`) on `inputs` lacks and doubts."""
    coverage = Coverage(
        calls=priced.height,
        sized=int(priced["size_bytes"].is_not_null().sum()) if priced.height else 0,
        priced=int(priced["t_pred_us"].is_not_null().sum()) if priced.height else 0,
        inputs=inputs,
        run=run,
        size_slope=None if waiting_measured else size_slope(priced),
        host_calls=_host_calls(priced),
    )
    assumed = _assumed_links(priced) if priced.height else ()
    topology = inputs.topology.conflicts if inputs.topology else ()
    about = tuple((factor, line(coverage)) for factor, holds, line in CAVEAT_RULES if holds(coverage))
    defaulted = tuple(a.name for a in inputs.assumptions if a.source == "default" and a.value is not None)
    achieved, doubt, guesses = (
        plausibility(inputs, run) if run.get("gamma_pred") is not None else (None, None, ())
    )
    return Trust(
        missing_input=missing_input(coverage),
        link_known=coverage.priced > 0 and not assumed,
        assumed_links=assumed,
        defaulted=defaulted,
        caveats=(*topology, *(line for _, line in about)),
        about=about,
        achieved_over_peak=achieved,
        doubt=doubt,
        guesses=guesses,
        links_measured=inputs.links_measured,
    )
