"""Each operator class on the compute roofline (docs/metrics.md, "Kernels and operators", "Achieved FLOP/s").

Per (operator class, dtype), over every rank: FLOPs and bytes of the operators that launched kernels
(`traceview.events.shape_flops`), each over the kernel time of the calls it is known for. With the device's
peak FLOP/s in that dtype and its peak memory bandwidth (`traceview.core.hardware`):

- achieved FLOP/s = FLOPs / kernel time; achieved bandwidth = bytes / kernel time;
- arithmetic intensity I = FLOPs / bytes; the ridge point = peak FLOP/s / bandwidth;
- `bound`: compute when I >= the ridge, memory below it; the attainable FLOP/s = min(peak, I x bandwidth);
- `peak_fraction` = achieved / peak FLOP/s; `attainable_fraction` = achieved / attainable for a compute-bound
  class, achieved bandwidth / peak bandwidth for a memory-bound one (copies, with no FLOPs, are memory-bound).

A dtype the device has no peak for (integers, fp64 on most GPUs) has no FLOP/s figures; an unknown device has
neither peak (`device` says so).
"""

from __future__ import annotations

import polars as pl

from traceview.core.hardware import GpuSpec, HardwareLookupError, match_device, peak_flops
from traceview.core.records import record

ROOFLINE_SCHEMA: dict[str, pl.DataType] = {
    "op_class": pl.Utf8(),
    "dtype": pl.Utf8(),
    "calls": pl.Int64(),
    "flops": pl.Float64(),
    "flops_kernel_us": pl.Float64(),
    "bytes": pl.Float64(),
    "bytes_kernel_us": pl.Float64(),
    "achieved_flops": pl.Float64(),
    "achieved_bytes_per_s": pl.Float64(),
    "intensity": pl.Float64(),
    "peak_flops": pl.Float64(),
    "memory_bytes_per_s": pl.Float64(),
    "ridge": pl.Float64(),
    "bound": pl.Utf8(),
    "attainable_flops": pl.Float64(),
    "peak_fraction": pl.Float64(),
    "attainable_fraction": pl.Float64(),
}


@record
class Device:
    """The device the roofline is drawn for: the trace's name, the table's row (None: unknown), its source."""

    name: str | None
    spec: GpuSpec | None

    @property
    def memory_bytes_per_s(self) -> float | None:
        """Peak memory bandwidth (None when unknown)."""
        return None if self.spec is None else self.spec.memory_bytes_per_s

    def peak(self, dtype: str | None) -> float | None:
        """Peak dense FLOP/s in `dtype` (None: no peak, or an unknown device or dtype)."""
        if self.spec is None or dtype is None:
            return None
        try:
            return peak_flops(self.spec, dtype)
        except HardwareLookupError:
            return None


def run_device(ranks: pl.DataFrame) -> Device:
    """The device most ranks ran on (`ranks.device`), matched in the hardware table."""
    names = ranks.get_column("device").drop_nulls() if ranks.height else pl.Series([], dtype=pl.Utf8)
    if names.len() == 0:
        return Device(None, None)
    name = str(names.mode().sort()[0])
    return Device(name, match_device(name))


def roofline(parts: pl.DataFrame, device: Device) -> pl.DataFrame:
    """Per (op_class, dtype) over every rank's roofline part: the figures of the module docstring."""
    if parts.height == 0:
        return pl.DataFrame(schema=ROOFLINE_SCHEMA)
    summed = parts.group_by("op_class", "dtype").agg(
        pl.col("calls").sum(),
        *(
            pl.when(pl.col(c).is_not_null().any()).then(pl.col(c).sum()).alias(c)
            for c in ROOFLINE_SCHEMA
            if c.startswith(("flops", "bytes"))
        ),
    )
    peaks = {dtype: device.peak(dtype) for dtype in summed.get_column("dtype").unique().to_list()}
    achieved = pl.col("flops") / (pl.col("flops_kernel_us") * 1e-6)
    with_device = summed.with_columns(
        pl.col("dtype").replace_strict(peaks, default=None, return_dtype=pl.Float64).alias("peak_flops"),
        pl.lit(device.memory_bytes_per_s, pl.Float64).alias("memory_bytes_per_s"),
        pl.when(pl.col("flops_kernel_us") > 0).then(achieved).alias("achieved_flops"),
        pl.when(pl.col("bytes_kernel_us") > 0)
        .then(pl.col("bytes") / (pl.col("bytes_kernel_us") * 1e-6))
        .alias("achieved_bytes_per_s"),
        pl.when(pl.col("bytes") > 0).then(pl.col("flops") / pl.col("bytes")).alias("intensity"),
    )
    return _placed(with_device).sort("op_class", "dtype", nulls_last=True).select(list(ROOFLINE_SCHEMA))


def _placed(frame: pl.DataFrame) -> pl.DataFrame:
    ridge = pl.col("peak_flops") / pl.col("memory_bytes_per_s")
    attainable = pl.min_horizontal(pl.col("peak_flops"), pl.col("intensity") * pl.col("memory_bytes_per_s"))
    return (
        frame.with_columns(ridge.alias("ridge"))
        .with_columns(
            pl.when(pl.col("intensity").is_null() | pl.col("ridge").is_null())
            .then(pl.lit(None, pl.Utf8))
            .when(pl.col("intensity") >= pl.col("ridge"))
            .then(pl.lit("compute"))
            .otherwise(pl.lit("memory"))
            .alias("bound"),
            (pl.col("achieved_flops") / pl.col("peak_flops")).alias("peak_fraction"),
        )
        .with_columns(  # no peak in the dtype: no bound, no attainable figures (min_horizontal skips nulls)
            pl.when(pl.col("bound").is_not_null()).then(attainable).alias("attainable_flops"),
        )
        .with_columns(
            pl.when(pl.col("bound") == "memory")
            .then(pl.col("achieved_bytes_per_s") / pl.col("memory_bytes_per_s"))
            .when(pl.col("bound") == "compute")
            .then(pl.col("achieved_flops") / pl.col("attainable_flops"))
            .alias("attainable_fraction")
        )
    )
