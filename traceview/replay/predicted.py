"""The headline's predicted gamma (docs/metrics.md, "Predicted gamma", The headline's gamma_pred): the one
decision the verdict, the JSON summary, the terminal, the report's tiles, the notebook card and `--fail-on`
read.

Where the replay's `comm_model` lever has a gamma, the headline's gamma_pred is that gamma (source `replay`):
the run's own compute, overlap and dependencies, every transfer at the alpha-beta model's time, so the
prediction differs from the measurement by the network model alone; gamma_ratio is then `as_recorded`'s gamma
over `comm_model`'s (both medians over the same (rank, step)), and the gap is named among the factors a
replay keeps (`NETWORK_FACTORS`). Elsewhere (no replay, or a link the lever cannot price) it is the closed
form's pooled gamma_pred and gamma_ratio (source `closed form`), its gap among every factor.
"""

from __future__ import annotations

from traceview.core.records import record
from traceview.prediction.gamma import AGREEMENT, NETWORK_FACTORS, Prediction, dominant_factor, gap_factor
from traceview.prediction.trust import far_off_doubt, guessed_inputs
from traceview.replay.analysis import Replay

REPLAY = "replay"
CLOSED_FORM = "closed form"


@record
class PredictedGamma:
    """`gamma_pred` and `gamma_ratio` (measured / predicted) of the headline, their `source` (`replay` or
    `closed form`), `dominant` (the factor column the gap is mostly due to, None when they agree), `doubt`
    (why it stays out of the headline, None when it may lead) and `why_closed_form` (the `comm_model`
    lever's reason where the replay could not give it)."""

    gamma_pred: float | None
    gamma_ratio: float | None
    source: str
    dominant: str | None
    doubt: str | None
    why_closed_form: str = ""


def _replayed(replay: Replay | None) -> tuple[float, float] | str:
    """(as_recorded gamma, comm_model gamma), or why the replay gives no predicted gamma."""
    if replay is None:
        return "no replay (no collective matched on two ranks or more)"
    recorded, modelled = replay.lever("as_recorded"), replay.lever("comm_model")
    if modelled is None or recorded is None:
        return "the comm_model lever was not replayed"
    measured, predicted = recorded.get("gamma"), modelled.get("gamma")
    if not isinstance(measured, float) or not isinstance(predicted, float) or predicted <= 0:
        return str(modelled.get("notes") or "the comm_model lever has no gamma")
    return measured, predicted


def predicted_gamma(prediction: Prediction | None, replay: Replay | None) -> PredictedGamma | None:
    """The headline's predicted gamma (module docstring); None without a prediction."""
    if prediction is None:
        return None
    found = _replayed(replay)
    if isinstance(found, str):
        run = prediction.run
        return PredictedGamma(
            run.get("gamma_pred"),
            run.get("gamma_ratio"),
            CLOSED_FORM,
            prediction.dominant,
            prediction.trust.doubt if prediction.trust else None,
            found,
        )
    measured, predicted = found
    ratio = measured / predicted
    guesses = guessed_inputs(prediction.inputs, ("network",))
    agree = max(ratio, 1 / ratio) < AGREEMENT
    dominant = None if agree else gap_factor(prediction.run, dominant_factor(prediction.run, NETWORK_FACTORS))
    return PredictedGamma(predicted, ratio, REPLAY, dominant, far_off_doubt(ratio, guesses))
