"""Property-based tests of the command line against mutated inputs and options (hypothesis).

Classes of mutation: truncations, byte flips, structural mutations of events and headers, control characters
in every name a trace or log carries (kernel, device, host, process-group description, file name, NCCL log
text), multi-rank runs with one bad rank, and bad options. The properties, for every input: the exit code is
one of 0, 1, 2, 4 (never 3, an internal error); no traceback; stdout and stderr hold no raw control character
(ESC, NUL, C0 but newline, C1, DEL, bidi overrides); a run with one bad rank still reports the others.

`traceview.cli.main` runs in this process (a subprocess per example would cost ~1 s each). The number of
examples per class is bounded (`TRACEVIEW_FUZZ_EXAMPLES`, default 12) to keep the suite fast; with
`TRACEVIEW_FUZZ_REPORT=path` the outcome counts by class are written there as JSON at the end.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import traceview.cli.main as cli  # noqa: E402
from tests import kineto_factory as kf  # noqa: E402
from tests import nccl_log_factory as nf  # noqa: E402
from tests import report_factory as rf  # noqa: E402

EXAMPLES = int(os.environ.get("TRACEVIEW_FUZZ_EXAMPLES", "12"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
RAW_CONTROL = re.compile(r"[\x00-\x09\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
OUTCOMES: Counter[tuple[str, str]] = Counter()
OUTCOME_OF_CODE = {0: "analysed", 1: "analysed", 4: "partial", 2: "refused"}
NASTY = ["\x1b[2J", "\x1b]0;owned\x07", "\x00", "\x9b31m", "\u202e", "\r", "\x08", "\u2066", "[bold]x[/bold]"]

nasty_text = st.lists(st.sampled_from(NASTY) | st.text(max_size=4), min_size=1, max_size=4).map("".join)


@pytest.fixture(scope="module", autouse=True)
def _outcome_report() -> Iterator[None]:
    yield
    target = os.environ.get("TRACEVIEW_FUZZ_REPORT")
    if target:
        counts: dict[str, dict[str, int]] = {}
        for (kind, outcome), count in sorted(OUTCOMES.items()):
            counts.setdefault(kind, {})[outcome] = count
        Path(target).write_text(json.dumps(counts, indent=2) + "\n")


def run_cli(*args: str) -> tuple[int, str, str]:
    """`traceview ARGS` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["traceview", *args]
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main()
        code = 0
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else 0
    finally:
        sys.argv = argv
    return code, out.getvalue(), err.getvalue()


def check(kind: str, *args: str) -> tuple[int, str, str]:
    """Run the command and assert the properties every input must keep; count the outcome."""
    code, out, err = run_cli(*args)
    OUTCOMES[(kind, OUTCOME_OF_CODE.get(code, f"exit {code}"))] += 1
    assert code in (0, 1, 2, 4), (code, err)
    assert "Traceback" not in out + err
    found = RAW_CONTROL.search(out + err)
    assert found is None, (found, err[-500:])
    return code, out, err


def _good_doc(rank: int = 0, world: int = 1) -> dict[str, Any]:
    doc = kf.document(rf.rank_events(rank % 2), rank=rank, world_size=world, base_ns=rf.BASE_NS)
    doc["deviceProperties"] = [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}]
    doc["distributedInfo"]["pg_config"] = [
        {"pg_name": "0", "pg_desc": "default_pg", "ranks": list(range(world))}
    ]
    return doc


GOOD = json.dumps(_good_doc()).encode()


@pytest.fixture
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


def _fresh(folder: Path, name: str = "rank0.json") -> Path:
    for old in folder.iterdir():
        old.unlink()
    return folder / name


@FUZZ
@given(cut=st.integers(min_value=0, max_value=len(GOOD)), gzip_it=st.booleans())
def test_truncations(folder: Path, cut: int, gzip_it: bool) -> None:
    path = _fresh(folder, "rank0.json.gz" if gzip_it else "rank0.json")
    if gzip_it:
        import gzip

        whole = gzip.compress(GOOD)
        path.write_bytes(whole[: cut * len(whole) // len(GOOD)])
    else:
        path.write_bytes(GOOD[:cut])
    check("truncation", "summary", str(path))


@FUZZ
@given(flips=st.lists(st.tuples(st.integers(0, len(GOOD) - 1), st.integers(0, 255)), min_size=1, max_size=8))
def test_byte_flips(folder: Path, flips: list[tuple[int, int]]) -> None:
    data = bytearray(GOOD)
    for at, value in flips:
        data[at] = value
    path = _fresh(folder)
    path.write_bytes(bytes(data))
    check("byte flip", "summary", str(path), "--json")


json_value = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
)
EVENT_KEYS = ["ph", "cat", "name", "ts", "dur", "pid", "tid", "args"]
HEADER_KEYS = ["distributedInfo", "deviceProperties", "baseTimeNanoseconds", "traceEvents", "schemaVersion"]


@FUZZ
@given(
    event_edits=st.lists(
        st.tuples(st.integers(0, 40), st.sampled_from(EVENT_KEYS), json_value), min_size=1, max_size=4
    ),
    header_edit=st.none() | st.tuples(st.sampled_from(HEADER_KEYS), json_value),
    command=st.sampled_from(["summary", "collectives", "stragglers"]),
)
def test_structural_mutations(
    folder: Path, event_edits: list[tuple[int, str, Any]], header_edit: tuple[str, Any] | None, command: str
) -> None:
    doc = copy.deepcopy(_good_doc())
    events = doc["traceEvents"]
    for index, key, value in event_edits:
        events[index % len(events)][key] = value
    if header_edit is not None:
        doc[header_edit[0]] = header_edit[1]
    path = _fresh(folder)
    path.write_text(json.dumps(doc, allow_nan=True))
    check("structural", command, str(path), "--json")


@FUZZ
@given(
    kernel=nasty_text,
    device=nasty_text,
    host=nasty_text,
    pg_desc=nasty_text,
    file_name=nasty_text,
    command=st.sampled_from(["summary", "collectives", "stragglers", "report"]),
    as_json=st.booleans(),
)
def test_control_characters_in_names(
    folder: Path,
    kernel: str,
    device: str,
    host: str,
    pg_desc: str,
    file_name: str,
    command: str,
    as_json: bool,
) -> None:
    doc = kf.document(
        rf.rank_events(0, kernel_name=kernel, pg_desc=pg_desc),
        rank=0,
        world_size=1,
        base_ns=rf.BASE_NS,
        hostname=host,
    )
    doc["deviceProperties"] = [{"id": 0, "name": device}]
    doc["distributedInfo"]["pg_config"] = [{"pg_name": "0", "pg_desc": pg_desc, "ranks": [0]}]
    safe_name = file_name.replace("/", "_").replace("\x00", "_")
    path = kf.write(doc, _fresh(folder, f"rank0{safe_name}.json"))
    extra = ["-o", str(folder / f"r{safe_name}.html")] if command == "report" else ["--json"] * as_json
    code, _, err = check("control characters", command, str(path), *extra)
    assert code in (0, 4), err


@FUZZ
@given(text=nasty_text, lines=st.integers(1, 6))
def test_control_characters_in_nccl_logs(folder: Path, text: str, lines: int) -> None:
    writer = nf.Writer(host=f"host{text}", pid=1, tid=2, dev=0)
    body = "NCCL version 2.18.1\n" + "".join(writer.info(f"{text} line {i}") + "\n" for i in range(lines))
    path = _fresh(folder, "job.log")
    path.write_text(body, encoding="utf-8", errors="surrogateescape")
    check("nccl log text", "nccl", str(path))


@FUZZ
@given(
    bad=st.sampled_from(["truncated", "flipped", "not json", "empty", "other format", "duplicate rank"]),
    cut=st.integers(1, 2000),
    command=st.sampled_from(["summary", "collectives", "stragglers"]),
)
def test_one_bad_rank_among_good_ones(folder: Path, bad: str, cut: int, command: str) -> None:
    _fresh(folder)
    for rank in (0, 1, 2):
        kf.write(_good_doc(rank, world=4), folder / f"rank{rank}.json")
    whole = json.dumps(_good_doc(3, world=4)).encode()
    mutated = {
        "truncated": whole[:cut],
        "flipped": whole[:cut] + b"\xff\x00\x1b" + whole[cut + 3 :],
        "not json": b"\x1b[2J this is not a trace \x00",
        "empty": b"",
        "other format": b'[{"ph": "B", "name": "NCCL_ALLREDUCE", "ts": 1}]',
        "duplicate rank": json.dumps(_good_doc(1, world=4)).encode(),
    }[bad]
    (folder / "rank3.json").write_bytes(mutated)
    code, out, err = check("one bad rank", command, str(folder), "--json")
    assert code in (0, 4), err
    if command == "summary":
        assert {0, 1, 2} <= set(json.loads(out)["run"]["ranks"])
    if code == 4:
        assert str(folder / "rank3.json") in err


OPTIONS = {
    "--workers": st.integers(-5, 3).map(str) | st.sampled_from(["x", "1.5", ""]),
    "--params": st.sampled_from(["nan", "inf", "-1", "0", "1e9", "abc", "-inf"]),
    "--local-batch": st.sampled_from(["nan", "inf", "-2", "0", "32", "1e400"]),
    "--efficiency": st.sampled_from(["0", "2", "nan", "0.5", "-1"]),
    "--fail-on": st.text(max_size=12) | st.sampled_from(["gamma>0.1", "gamma>>1", "nope<1", "gamma>nan"]),
    "--bandwidth": st.sampled_from(["300G,25G", "x", "0", "-1G", "1,2,3", ""]),
    "--alpha": st.sampled_from(["1,5", "nan", "-1", "a,b"]),
    "--peak-flops": st.sampled_from(["312T", "0", "-3", "1e999", "T"]),
    "--gpus-per-node": st.integers(-2, 9).map(str),
    "--virtual-stages": st.integers(-2, 4).map(str),
    "--nic": st.sampled_from(["ib_ndr", "nonsense", "\x1b[31m"]),
    "--dtype": st.sampled_from(["bf16", "fp64", "", "\x00"]),
    "--comm-pattern": st.sampled_from(["(", "nccl.*", "LIB=(", "[", "x" * 3]),
    "--nccl-log": st.sampled_from(["MISSING", "FOLDER", "\x1b.log"]),
    "--executor": st.sampled_from(["local", "nope"]),
    "--max-trace-bytes": st.integers(-1, 5000).map(str) | st.sampled_from(["1e3", "x"]),
}


@FUZZ
@given(
    chosen=st.lists(st.sampled_from(sorted(OPTIONS)), min_size=1, max_size=3, unique=True).flatmap(
        lambda names: st.tuples(*(st.tuples(st.just(n), OPTIONS[n]) for n in names))
    ),
    junk=st.lists(st.sampled_from(["--bogus", "sumary", "-", "--", "--json", "--version", "-h"]), max_size=2),
)
def test_bad_options(folder: Path, chosen: tuple[tuple[str, str], ...], junk: list[str]) -> None:
    run = rf.write_run(folder / "run")
    args = ["summary", str(run)]
    for name, value in chosen:
        args += [name, {"MISSING": str(folder / "missing.log"), "FOLDER": str(folder)}.get(value, value)]
    check("bad options", *args, *junk)


def _integer_in(low: int, high: int) -> Any:
    def valid(text: str) -> bool:
        return re.fullmatch(r"[0-9]+", text) is not None and low <= int(text) <= high

    return valid


def _finite_at_least_zero(text: str) -> bool:
    try:
        value = float(text)
    except ValueError:
        return False
    return 0 <= value <= 1e6  # float() accepts "nan", "inf", "1_0": only a finite number in range is valid


NUMERIC_OPTIONS = [  # (command, option, accepts): every numeric option of every command
    ("summary", "--workers", _integer_in(1, 4096)),
    ("summary", "--max-trace-bytes", _integer_in(1_000_000, 2**50)),  # smaller refuses the small run itself
    ("summary", "--virtual-stages", _integer_in(1, 1024)),
    ("collectives", "--workers", _integer_in(1, 4096)),
    ("stragglers", "--ranks-per-host", _integer_in(1, 2**16)),
    ("export", "--max-events", _integer_in(1, 2**40)),
    ("export", "--ranks-per-host", _integer_in(1, 2**16)),
    ("compare", "--threshold", _finite_at_least_zero),
    ("compare", "--workers", _integer_in(1, 4096)),
    ("trend", "--threshold", _finite_at_least_zero),
]
NUMBERS = st.sampled_from(
    [
        "nan",
        "inf",
        "-inf",
        "-3",
        "0",
        "1",
        "3",
        "1e400",
        "99999999999999999999",
        "1e3",
        "0x10",
        "",
        "2.5",
        "-0",
    ]
) | st.integers(-(10**25), 10**25).map(str)


@FUZZ
@given(chosen=st.sampled_from(NUMERIC_OPTIONS), value=NUMBERS)
def test_numeric_options_of_every_command(folder: Path, chosen: tuple[str, str, Any], value: str) -> None:
    command, option, accepts = chosen
    small_limit = option == "--max-trace-bytes" and value.isdigit() and 1 <= int(value) < 1_000_000
    assume(not small_limit)  # a valid limit the small run itself passes: refused as input, not as usage
    run = folder / "run"
    if not run.exists():
        rf.write_run(run)
        code, out, _ = run_cli("summary", str(run), "--json", "--quiet")
        (folder / "night.json").write_text(out)
    target = {"compare": [str(run), str(run)], "trend": [str(folder / "night.json")] * 3}.get(
        command, [str(run)]
    )
    output = ["-o", str(folder / "out.json")] if command == "export" else []
    code, _, err = check("numeric options", command, *target, *output, option, value)
    if accepts(value):
        assert code in (0, 1, 4), (option, value, err)
    else:
        assert code == 2, (option, value, err)
        assert err.count("\n") == 1, err  # one line...
        assert "--help" in err, err  # ...with the usage hint


def _leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _leaves(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, (*path, index))
    else:
        yield path


ODD_VALUES = st.sampled_from([None, "x", "\x1b[31m", [], {}, -1, 0, 1e308, True, [1, "a"], {"a": None}])


@FUZZ
@given(picks=st.lists(st.tuples(st.integers(0, 10**6), ODD_VALUES), min_size=1, max_size=4))
def test_saved_summaries_of_the_wrong_shape(folder: Path, picks: list[tuple[int, Any]]) -> None:
    good = folder / "good.json"
    if not good.exists():
        good.write_text(run_cli("summary", str(rf.write_run(folder / "run")), "--json", "--quiet")[1])
    document = json.loads(good.read_text())
    leaves = list(_leaves(document))
    for pick, value in picks:
        *parents, last = leaves[pick % len(leaves)]
        holder = document
        for key in parents:
            holder = holder[key]
        holder[last] = value
    bad = folder / "bad.json"
    bad.write_text(json.dumps(document))
    for args in (("compare", str(good), str(bad)), ("trend", str(good), str(bad), str(good))):
        code, _, err = check("saved summaries", *args)
        if code == 2:
            assert err.count("\n") == 1, err
            assert str(bad) in err, err  # the malformed document is the one named
