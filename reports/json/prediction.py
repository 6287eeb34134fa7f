"""The `prediction` object of the JSON summary (docs/json-schema.md, "prediction"): the alpha-beta model's
inputs with their provenance, its run figures, per step, per collective and the what-ifs; nothing is computed
here."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from traceview.reports.json.records import clean, records

from traceview.reduce.results import RunAnalysis


def prediction_document(analysis: RunAnalysis) -> dict[str, Any] | None:
    """The `prediction` object: inputs with provenance, run figures, per step, per collective, what-ifs."""
    found = analysis.prediction
    if found is None:
        return None
    what_if = found.what_if
    trust, topology = found.trust, found.inputs.topology
    return {
        "sentence": found.sentence,
        "dominant_factor": found.dominant,
        "waiting_measured": found.waiting_measured,
        "gamma_pred": clean(found.run.get("gamma_pred")),
        "gamma_ratio": clean(found.run.get("gamma_ratio")),
        "missing_input": found.missing_input,
        "link_known": found.link_known,
        "assumed_links": list(trust.assumed_links) if trust else [],
        "defaulted_inputs": list(trust.defaulted) if trust else [],
        "caveats": list(trust.caveats) if trust else [],
        "achieved_over_peak": clean(trust.achieved_over_peak) if trust else None,
        "headline_doubt": trust.doubt if trust else None,
        "guessed_inputs": list(trust.guesses) if trust else [],
        "links_measured": trust.links_measured if trust else False,
        "topology": None
        if topology is None
        else {
            "gpus_per_node": topology.ranks_per_node,
            "source": topology.source,
            "detail": topology.detail,
            "hosts": topology.hosts,
            "conflicts": list(topology.conflicts),
            "evidence": [{k: clean(v) for k, v in asdict(e).items()} for e in topology.evidence],
        },
        "assumptions": [{k: clean(v) for k, v in asdict(a).items()} for a in found.inputs.assumptions],
        "notes": list(found.inputs.notes),
        "run": {k: clean(v) for k, v in found.run.items()},
        "per_step": records(found.per_step),
        "per_collective": records(found.per_collective),
        "what_if": None
        if what_if is None
        else {
            "rank": what_if.rank,
            "step": what_if.step,
            "workers": what_if.workers,
            "closed_form_gamma": clean(what_if.closed_form_gamma),
            "break_even_workers": clean(what_if.break_even_workers),
            "table": records(what_if.table),
            "curve": records(what_if.curve),
        },
    }
