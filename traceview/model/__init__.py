"""The trace model: one `RankTrace` per rank and a `Run` of ranks, frozen dataclasses of polars frames."""
