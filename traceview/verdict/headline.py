"""The headline: what sets the pace of the run, and by how much (docs/metrics.md, "Verdict").

Rules are data: each row of `RULES` names a label, the facts it needs, a condition and a sentence; the first
row whose facts are known and whose condition holds is the verdict. Beside the sentence, the verdict always
carries measured gamma against the alpha-beta prediction, or the one input the prediction misses.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from traceview.core.records import record
from traceview.verdict._rank_advice import stake_clause, straggler_stake_share
from traceview.verdict._run_shape import run_shape, some_ranks
from traceview.verdict.facts import Facts, duration_text
from traceview.verdict.kinds import WARMUP_SHARE_MIN
from traceview.verdict.recommend import Recommendation, recommendations

STRAGGLER_COST_MIN = 0.05
"""A straggler whose stake (`straggler_stake_share`) is at least this share of the median step may set the
pace of the run."""
DIMENSION_SHARE_MIN = 0.10
"""In a run of two or more named dimensions, the one exposing at least this share of the median step may set
the pace."""


@record
class Verdict:
    """The label of the first rule that holds, its sentence, and measured against predicted gamma.

    `prediction`: one line, measured gamma against the prediction, or which input the prediction misses;
    `notes`: what the NCCL logs flag (degraded transports, a slower link than the model's)."""

    label: str
    sentence: str
    prediction: str = ""
    gamma: float | None = None
    gamma_pred: float | None = None
    gamma_ratio: float | None = None
    gamma_pred_source: str | None = None  # `replay` or `closed form` (`traceview.replay.predicted`)
    notes: tuple[str, ...] = ()
    run_shape: tuple[str, ...] = ()  # what the run is, said plainly (`SHAPE_RULES`)
    withheld: tuple[tuple[str, str], ...] = ()
    """(figure, why) for each headline figure the verdict withholds: every surface (tiles, card, `figures`,
    `--fail-on`) reads this one decision; the figures stay in their own section and JSON keys."""


@record
class HeadlineRule:
    """A verdict rule: `label` when every fact in `needs` is known and `holds` is true."""

    label: str
    needs: tuple[str, ...]
    holds: Callable[[Facts], bool]
    sentence: Callable[[Facts], str]
    advice: str = ""
    """The recommendation rule that states this label's stake: of the rules that hold and have one, the
    verdict is the one whose advice ranks first (`verdict`), so the label and the advice agree."""


_ms = duration_text


def _bound_clause(f: Facts) -> str:
    side = "communication-bound" if f["gamma"] > 1 else "compute-bound"
    return (
        f"the run is {side}: communication takes {f['gamma']:.2f}x the compute time (measured gamma = "
        f"T_comm / T_comp, median over steps and ranks) and {f['exposed_comm_share']:.0%} of the step is "
        f"communication nothing hides (exposed gamma {f['exposed_gamma']:.2f})"
    )


def _bound_sentence(f: Facts) -> str:
    clause = _bound_clause(f)
    return clause[len("the run is ") :][0].upper() + clause[len("the run is ") + 1 :] + "."


def _mismatch_sentence(f: Facts) -> str:
    where = f"in process group {f.word('mismatch_group')}" if "mismatch_group" in f else ""
    step = f", step {f['mismatch_step']:.0f}" if "mismatch_step" in f else ""
    rank = f", rank {f['mismatch_rank']:.0f}" if "mismatch_rank" in f else ""
    detail = f" ({f.word('mismatch_detail')})" if "mismatch_detail" in f else ""
    bound = f" Apart from that, {_bound_clause(f)}." if "gamma" in f and "exposed_comm_share" in f else ""
    return (
        f"Ranks disagree on the collectives they call: {f['mismatches']:.0f} mismatch(es), the first {where}"
        f"{step}{rank}{detail}. A job like this hangs or times out; the skew and wait figures leave the "
        f"mismatched calls out.{bound}"
    )


def _idle_sentence(f: Facts) -> str:
    return (
        f"The {f.word('worker') if 'worker' in f else 'GPU'} is idle {f['idle_share']:.0%} of the median "
        f"step: neither compute nor communication sets the "
        f"pace; look at the host (input pipeline, launches, synchronisation)."
    )


def _straggler_sentence(f: Facts) -> str:
    cause = next((f.word(n) for n in ("straggler_cause_text", "straggler_cause") if n in f), "unexplained")
    return (
        f"Rank {f['straggler_rank']:.0f} sets the pace: it arrives last in {f['straggler_times_last']:.0f} "
        f"of "
        f"its {f['straggler_instances']:.0f} collectives (1 in {f['straggler_group_size']:.0f} would be "
        f"chance), "
        f"and its lateness costs {_ms(f, 'straggler_cost_us')} per step ({f['straggler_cost_share']:.0%} of "
        f"the "
        f"step) that its peers spend waiting; likely cause: {cause}.{stake_clause(f, 'straggler')} "
        f"Otherwise {_bound_clause(f)}."
    )


def _dimension_leads(f: Facts) -> bool:
    """Two or more dimensions named, the costliest exposing `DIMENSION_SHARE_MIN` of the step or more; without
    the critical path (where the advice's ranking cannot decide, `_leading`), more than the straggler's
    stake."""
    share = f["dimension_exposed_share"]
    ranked = "path_step_us" in f or share > straggler_stake_share(f)
    return f["dimensions_named"] >= 2 and share >= DIMENSION_SHARE_MIN and ranked


def _costly_straggler(f: Facts) -> bool:
    """A straggler whose stake is `STRAGGLER_COST_MIN` of the step or more."""
    return straggler_stake_share(f) >= STRAGGLER_COST_MIN


def _straggler_leads(f: Facts) -> bool:
    """A costly straggler; without the critical path, unless a dimension exposes more of the step."""
    dimension = "path_step_us" not in f and all(n in f for n in DIMENSION_NEEDS) and _dimension_leads(f)
    return _costly_straggler(f) and not dimension


DIMENSION_NEEDS = ("dimensions_named", "dimension_exposed_share")


def _idle_outweighs_straggler(f: Facts) -> bool:
    """The device's idle on the critical path holds more of the step than a costly straggler's stake."""
    step = f.numbers.get("path_step_us", 0.0)
    idle = f.numbers.get("path_idle_us", 0.0) / step if step > 0 else 0.0
    return _costly_straggler(f) and idle > straggler_stake_share(f)


def _dimension_sentence(f: Facts) -> str:
    name = f.word("dimension_name")
    return (
        f"{name[0].upper()}{name[1:]} sets the pace: it exposes {_ms(f, 'dimension_exposed_us')} per step "
        f"({f['dimension_exposed_share']:.0%} of the step, communication nothing hides; "
        f"{_ms(f, 'dimension_wait_us')} of its time is waiting for peers), the most of the run's "
        f"{f['dimensions_named']:.0f} dimensions; {f.word('dimension_advice')}. Otherwise {_bound_clause(f)}."
    )


def _waiting_sentence(f: Facts) -> str:
    return (
        f"Waiting-bound: communication takes {f['gamma']:.2f}x the compute time, but only "
        f"{f['transfer_gamma']:.2f}x is transfer (transfer gamma): most of it is waiting at collectives for "
        f"peers that arrive late (load imbalance, host delays), not the network."
    )


def _no_compute_sentence(f: Facts) -> str:
    return (
        f"The steps hold {_ms(f, 'comm_us')} of communication and no compute (T_comp = 0), so gamma is "
        f"undefined: the trace holds only communication (a benchmark such as nccl-tests), or its compute "
        f"kernels were not recorded."
    )


def _no_comm_sentence(f: Facts) -> str:
    return (
        f"Compute only: no communication kernel runs in any step (T_comm = 0 of {_ms(f, 'comp_us')} of "
        f"compute "
        f"per median step); nothing waits on the network."
    )


def _capture_sentence(f: Facts) -> str:
    return (
        f"The trace records a CUDA/HIP graph capture, not the run: {f['capture_launches']:.0f} kernel "
        f"launches "
        f"were recorded and {f['capture_launches_ran']:.0f} of them ran (a captured graph runs when it is "
        "replayed). Profile steps that replay the graph (cudaGraphLaunch) to measure the run."
    )


BOUND = ("gamma", "exposed_comm_share", "exposed_gamma")
RULES: tuple[HeadlineRule, ...] = (
    HeadlineRule(
        "no-device-activity",
        (),
        lambda f: f.numbers.get("step_us", 0.0) <= 0.0,
        lambda f: "The trace holds no device activity inside any step.",
    ),
    HeadlineRule(
        "graph-capture",
        ("capture_steps", "windows", "capture_launches", "capture_launches_ran"),
        lambda f: f["capture_steps"] == f["windows"] > 0,
        _capture_sentence,
    ),
    HeadlineRule(
        "warm-up",
        ("warmup_share", "warmup_us", "step_us"),
        lambda f: f["warmup_share"] >= WARMUP_SHARE_MIN,
        lambda f: (
            f"The recorded window is a benchmark harness's warm-up: {f['warmup_share']:.0%} of the median "
            f"{_ms(f, 'step_us')} window runs inside its `warmup` annotation, so it is no step of the run; "
            f"profile the timed iterations, one window each."
        ),
    ),
    HeadlineRule(
        "no-compute", ("comp_us", "comm_us"), lambda f: f["comp_us"] <= 0 < f["comm_us"], _no_compute_sentence
    ),
    HeadlineRule("call-mismatch", ("mismatches",), lambda f: f["mismatches"] > 0, _mismatch_sentence),
    HeadlineRule(
        "straggler-bound",
        (
            "straggler_rank",
            "straggler_cost_share",
            "straggler_cost_us",
            "straggler_times_last",
            "straggler_instances",
            "straggler_group_size",
            *BOUND,
        ),
        _straggler_leads,
        _straggler_sentence,
        advice="straggler",
    ),
    HeadlineRule(
        "idle-bound",
        ("idle_us", "comp_us", "exposed_comm_us", "idle_share"),
        lambda f: f["idle_us"] > f["comp_us"] + f["exposed_comm_us"] or _idle_outweighs_straggler(f),
        _idle_sentence,
        advice="idle-gpu",
    ),
    HeadlineRule(
        "dimension-bound",
        (
            "dimensions_named",
            "dimension_exposed_share",
            "dimension_exposed_us",
            "dimension_wait_us",
            "dimension_name",
            "dimension_advice",
            *BOUND,
        ),
        _dimension_leads,
        _dimension_sentence,
        advice="dimension-cost",
    ),
    HeadlineRule(
        "no-communication",
        ("comm_us", "comp_us"),
        lambda f: f["comm_us"] <= 0 < f["comp_us"],
        _no_comm_sentence,
    ),
    HeadlineRule(
        "waiting-bound",
        ("gamma", "transfer_gamma"),
        lambda f: f["gamma"] > 1.0 >= f["transfer_gamma"],
        _waiting_sentence,
    ),
    HeadlineRule("communication-bound", BOUND, lambda f: f["gamma"] > 1.0, _bound_sentence),
    HeadlineRule("compute-bound", BOUND, lambda f: True, _bound_sentence),
    HeadlineRule(
        "undetermined",
        (),
        lambda f: True,
        lambda f: "The steps hold device activity the budget cannot split.",
    ),
)
"""The verdict rules, first match wins; `compute-bound` needs only the budget's figures, the last row none."""


SOURCE_WORDS = {
    "replay": " replayed on the run's own graph (its compute, overlap and waits kept)",
    "closed form": " in closed form",
}
"""How the headline says where its gamma_pred came from (`gamma_pred_source`)."""


def prediction_line(f: Facts) -> str:
    """Measured gamma against the alpha-beta prediction; or why the prediction stays out of the headline (an
    implausible input, named with how to give it); or which input the prediction misses."""
    if f.numbers.get("world_size") == 1:
        return "No predicted gamma: a run of one rank has no communication to predict."
    if "gamma" in f and "gamma_pred" in f and "gamma_ratio" in f:
        if "prediction_doubt" in f:
            return (
                f"Predicted gamma withheld from the headline: {f.word('prediction_doubt')}. Its figures stay "
                f"in the "
                "prediction section."
            )
        gap = (
            f"; the gap is mostly {f.word('dominant_factor')}"
            if "dominant_factor" in f and not some_ranks(f)
            else ""
        )
        measured = (
            " B was measured in this run (run.json hardware.links_measured), so this is no independent check."
            if "links_measured" in f
            else ""
        )
        how = SOURCE_WORDS.get(f.word("gamma_pred_source") if "gamma_pred_source" in f else "", "")
        return (
            f"Measured gamma {f['gamma']:.2f} against {f['gamma_pred']:.2f} predicted by the alpha-beta "
            f"model{how} (measured / predicted {f['gamma_ratio']:.2f}x{gap}).{measured}"
        )
    if "prediction_missing" in f:
        return f"Predicted gamma not computed: {f.word('prediction_missing')}."
    return "Predicted gamma not computed: the run gives the model nothing to price."


WITHHELD_RULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("prediction_doubt", ("gamma_pred", "gamma_ratio")),
)
"""(word fact that withholds, the headline figures it withholds): the reason is the fact's text."""


def withheld_figures(facts: Facts) -> tuple[tuple[str, str], ...]:
    """(figure, why) for each headline figure a `WITHHELD_RULES` row withholds."""
    return tuple(
        (name, f"withheld: {facts.word(fact)}")
        for fact, names in WITHHELD_RULES
        if fact in facts
        for name in names
    )


def _leading(facts: Facts, advice: Sequence[Recommendation] | None) -> HeadlineRule:
    """The first rule of `RULES` that holds; where it states a stake (`HeadlineRule.advice`), the rule of
    those that hold and state one whose advice ranks first among the recommendations (`advice`, ranked;
    None: ranked here) (of equals, or none ranked, the first in `RULES`): the verdict and the first of that
    advice rank by one measure. Without the critical path (facts that lack `path_step_us`), the first that
    holds."""
    held = [r for r in RULES if all(n in facts for n in r.needs) and r.holds(facts)]
    if not held[0].advice or "path_step_us" not in facts:
        return held[0]
    ranked = [item.rule for item in (recommendations(facts) if advice is None else advice)]
    place = {rule: index for index, rule in reversed(list(enumerate(ranked)))}
    return min((r for r in held if r.advice), key=lambda r: place.get(r.advice, len(ranked)))


def verdict(facts: Facts, advice: Sequence[Recommendation] | None = None) -> Verdict:
    """The rule of `RULES` that `_leading` picks on `facts` (the first that holds, or of those stating a
    stake the one whose advice ranks first in `advice`, the recommendations `recommend` ranked on these
    facts; None: ranked here), with the prediction's line and the NCCL logs' notes."""
    rule = _leading(facts, advice)
    withheld = withheld_figures(facts)
    hidden = {name for name, _ in withheld}
    return Verdict(
        label=rule.label,
        sentence=rule.sentence(facts),
        prediction=prediction_line(facts),
        gamma=facts.numbers.get("gamma"),
        gamma_pred=None if "gamma_pred" in hidden else facts.numbers.get("gamma_pred"),
        gamma_ratio=None if "gamma_ratio" in hidden else facts.numbers.get("gamma_ratio"),
        gamma_pred_source=facts.words.get("gamma_pred_source"),
        notes=tuple(facts.word(note) for note in ("nccl_note", "links_note") if note in facts),
        run_shape=run_shape(facts),
        withheld=withheld,
    )
