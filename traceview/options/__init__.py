"""The options a run is analysed with (docs/metrics.md, "Options"): what the user states (`UserOptions`: the
command line and the API), the model inputs (`ModelOptions`), the run manifest (`run.json`), and the one
constructor that builds them (`build_options -> RunOptions`). Below every analysis; imports only core and
model."""
