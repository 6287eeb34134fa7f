"""The run's prediction in the reduce: the alpha-beta model priced on the stated links, again on the host link
the run measures when no datasheet gives it, and again on every measured link with `--links measured`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from traceview.across_ranks.analysis import CrossRank
from traceview.budget.time_budget import TimeBudget
from traceview.collectives.tables import CollectiveAnalysis
from traceview.links_measured.analysis import MEASURED_NOTE, LinksMeasured, measure_links
from traceview.model.trace import Run
from traceview.nccl.join import NcclJoin
from traceview.options.run import RunOptions
from traceview.prediction.gamma import Prediction, predict
from traceview.prediction.inputs import with_nccl_overrides
from traceview.reduce.held import Stacked


def _prediction(
    run: Run,
    frames: Stacked,
    parts: tuple[CollectiveAnalysis, TimeBudget, CrossRank],
    options: RunOptions,
    nccl: NcclJoin | None,
) -> Prediction:
    """The alpha-beta prediction of the run, with the NCCL logs' links and hosts."""
    collectives, budget, crossrank = parts
    return predict(
        run,
        collectives.kernels,
        frames.windows,
        budget,
        crossrank,
        with_nccl_overrides(options.model, nccl),
        options.ranks_per_host,
        nccl.hosts_by_rank if nccl else None,
    )


HOST_MEASURED_NOTE = (
    "The link of host collectives inside a host, which no datasheet gives, is measured in this run: that "
    "part of the prediction is not an independent check."
)
STATED_FIELDS: dict[str, dict[str, Any]] = {
    "intra": {"bandwidth_Bps": None, "alpha_s": None},
    "inter": {"inter_bandwidth_Bps": None, "inter_alpha_s": None},
    "host": {"host_bandwidth_Bps": None},
}
"""The `ModelOptions` fields a measured link of each scope replaces."""


def _measured_prediction(
    prediction: Prediction,
    links: LinksMeasured,
    rerun: Callable[[RunOptions], Prediction],
    options: RunOptions,
) -> tuple[Prediction, LinksMeasured]:
    """With `--links measured` and links fitted: the prediction again on them, in place of the links of the
    scopes they cover, stated ones included (its sentence says so)."""
    if options.links != "measured" or not links.overrides:
        return prediction, links
    model = replace(options.model, link_overrides=(*options.model.link_overrides, *links.overrides))
    for scope in {o.scope for o in links.overrides}:  # the measured link replaces a stated one
        model = replace(model, **STATED_FIELDS[scope])
    again = rerun(replace(options, model=model))
    return replace(again, sentence=f"{MEASURED_NOTE} {again.sentence}"), replace(links, used=True)


def priced(
    run: Run,
    frames: Stacked,
    parts: tuple[CollectiveAnalysis, TimeBudget, CrossRank],
    options: RunOptions,
    nccl: NcclJoin | None,
) -> tuple[Prediction, LinksMeasured]:
    """The prediction and the links fitted on the run's transfer times (the prediction priced on them with
    `--links measured`)."""
    prediction = _prediction(run, frames, parts, options, nccl)
    links = measure_links(parts[0].kernels, parts[2], prediction)
    host = [o for o in links.overrides if o.scope == "host"]
    if host and prediction.inputs.host_link is None and options.links != "measured":
        # the host link no datasheet gives, measured from the run's own calls (docs/metrics.md, "Links")
        model = replace(options.model, link_overrides=(*options.model.link_overrides, *host))
        again = _prediction(run, frames, parts, replace(options, model=model), nccl)
        prediction, links = (
            replace(again, sentence=f"{HOST_MEASURED_NOTE} {again.sentence}"),
            replace(links, used=True),
        )
    return _measured_prediction(
        prediction, links, lambda o: _prediction(run, frames, parts, o, nccl), options
    )
