"""The regex tables of the NCCL_DEBUG log parser: record starts, record bodies, and foreign (non-NCCL) lines.

Every pattern is data: `(name, needle, regex)`. The parser tries a pattern only when its `needle` (a literal
that
every match contains) occurs in the text, so a record costs a few substring tests before any regex runs. A
pattern's named groups become the columns of the raw frame of that name; types are fixed later, in polars.

Formats covered (NCCL 2.4 to 2.27): `NCCL version`, bootstrap and NET/IB / NET/Socket NIC selection, the four
generations of the communicator init line, `nRanks nNodes localRanks`, rings (`Ring 00 :` in 2.4-2.6, `Channel
00/02 :` after), trees (2.4 `up->me->down`, 2.5-2.6 dual `down->me->up|up->me->down`, 2.7+ `down->me->up`),
transports (`Ring|Channel|CollNet NN[/c] : a[dev] -> b[dev] [send|receive] via X`), channel counts (three
generations), COLL lines, TUNING lines (2.4-2.22 `N Bytes -> Algo a proto p time t`, 2.23+ `Op: N Bytes ->
Algo NAME proto NAME channel{Lo..Hi}={a..b}[ comm %p]`), `Init timings` (2.22 and 2.23+), error propagation
(`file.cc:123 -> 4`), `NCCL_X|RCCL_X set by environment to v`, and PyTorch's ProcessGroupNCCL lines.
"""

from __future__ import annotations

import re
from typing import NamedTuple


class Pattern(NamedTuple):
    """One record shape: rows of `name` come from `regex`'s named groups, tried only when `needle` occurs."""

    name: str
    needle: str
    regex: re.Pattern[str]


_PTR = r"(?:0x[0-9a-fA-F]+|\(nil\)|0)"

# `NCCL version 2.21.5+cuda12.4`; RCCL (ROCm's fork, same record prefix) prints `RCCL version 2.6.4+hip3.5`,
# newer ones `RCCL version : 2.20.5-HEAD:0c8d3b8`.
_VERSION = re.compile(r"(?:NCCL version|RCCL version(?: :)?) (?P<version>\d[\w.+\-]*)")

# The record-start and COLL regexes run on every line: their runs are plain greedy (faster in `re` than
# possessive ones, and safe here: every run is followed by a character it cannot hold, and they are matched at
# one position or scanned from a literal "["). The body patterns below use possessive / atomic runs.

# Where one NCCL record starts inside a physical line: `host:pid:tid [dev] [file.cc:N ]NCCL INFO|WARN `.
# Found in two steps for speed: RECORD_ANCHOR (it begins with a literal "[", which the regex engine scans
# for quickly), then HOST_TAIL on the last word before the anchor: the `host:pid:tid` part is optional
# (posters strip it). Several anchors on one line = interleaved writes of several processes.
RECORD_ANCHOR = re.compile(
    r"\[(?P<dev>\d+)\] +(?:(?P<src>[\w./\-]+:\d+) +)?NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?"
)
# The common case, tried first: one record starting the line, with its full `host:pid:tid` prefix.
LINE_START = re.compile(
    r"(?P<host>[A-Za-z0-9_.\-]+):(?P<pid>\d+):(?P<tid>\d+) +\[(?P<dev>\d+)\] +(?:(?P<src>[\w./\-]+:\d+) +)?"
    r"NCCL (?P<level>INFO|WARN|TRACE|ABORT) ?"
)
HOST_TAIL = re.compile(r"(?<![A-Za-z0-9_.\-])(?P<host>[A-Za-z0-9_.\-]++):(?P<pid>\d++):(?P<tid>\d++)\Z")

# The fast path for the commonest line of a big log: one whole COLL record starting the line, nothing after it
# but blanks. Its groups are the writer's (host, pid, tid, dev) then those of the "coll" body pattern, in
# order. A line it does not match takes the general path (record starts, then the body table), with the same
# result.
_COLL_BODY = (
    r"(?P<op>[A-Za-z]+): opCount (?P<opcount>[0-9a-fA-F]+) sendbuff "
    + _PTR
    + r" recvbuff "
    + _PTR
    + r" count (?P<count>\d+) datatype (?P<datatype>\d+) op (?P<red_op>\d+) root (?P<root>-?\d+)"
    r" comm (?P<comm>" + _PTR + r") \[nranks=(?P<nranks>\d+)\] stream (?P<stream>" + _PTR + r")"
    r"(?: task (?P<task>\d+) globalrank (?P<global_rank>\d+))?"
)
COLL_LINE = re.compile(
    r"(?P<host>[A-Za-z0-9_.\-]+):(?P<pid>\d+):(?P<tid>\d+) +\[(?P<dev>\d+)\] +(?:[\w./\-]+:\d+ +)?NCCL INFO "
    + _COLL_BODY
    + r"\s*\Z"
)

# Bodies of NCCL INFO records (the text after "NCCL INFO "), tried in order; the first match wins.
BODY_PATTERNS: tuple[Pattern, ...] = (
    Pattern("coll", "opCount", re.compile(_COLL_BODY)),
    Pattern(
        "transport",
        " via ",
        re.compile(
            r"(?P<scope>Ring|Channel|CollNet) (?P<channel>\d++)(?:/(?P<conn>\d++))? : (?P<from_rank>\d++)"
            r"(?:\[(?P<from_dev>[0-9a-fA-F]++)\])?(?: -> "
            r"(?P<to_rank>\d++)(?:\[(?P<to_dev>[0-9a-fA-F]++)\])?)?"
            r"(?: \[(?P<direction>send|receive)\])? via (?P<via>.*\S)"
        ),
    ),
    Pattern(
        "ring",
        " : ",
        re.compile(
            r"(?:Ring|Channel) (?P<channel>\d++)(?:/(?P<n_channels>\d++))? :(?P<ranks>(?: +\d++)+) *$"
        ),
    ),
    Pattern("tree", "Trees", re.compile(r"Trees (?P<spec>(?:\[\d++\] \S++ ?)+)\s*$")),
    Pattern(
        "tuning",
        "Bytes -> Algo",
        re.compile(
            r"(?:(?P<op>[A-Za-z]+): )?(?P<bytes>\d++) Bytes -> Algo (?P<algo>\w+) proto (?P<proto>\w+)"
            r"(?: time (?P<time_us>[\d.eE+\-]+))?"
            r"(?: channel\{Lo\.\.Hi\}=\{(?P<channel_lo>\d++)\.\.(?P<channel_hi>\d++)\})?"
            r"(?: comm (?P<comm>" + _PTR + r"))?"
        ),
    ),
    Pattern(
        "comm_init",
        "- Init ",
        re.compile(
            r"(?:(?P<func>nccl\w+) )?comm (?P<comm>" + _PTR + r") rank (?P<rank>\d++) nranks (?P<nranks>\d++)"
            r" cudaDev (?P<init_dev>\d++)(?>(?: nvmlDev (?P<nvml_dev>\d++))?(?: busId "
            r"(?P<bus_id>[0-9a-fA-F]++))?"
            r"(?: commId (?P<comm_id>0x[0-9a-fA-F]++))?).*?- Init (?P<state>START|COMPLETE)"
        ),
    ),
    Pattern(
        "comm_shape",
        "nNodes",
        re.compile(
            r"comm (?P<comm>"
            + _PTR
            + r") rank (?P<rank>\d++) nRanks (?P<nranks>\d++) nNodes (?P<n_nodes>\d++)"
            r" localRanks (?P<local_ranks>\d++) localRank (?P<local_rank>\d++)"
        ),
    ),
    Pattern(
        "channel_counts",
        "coll channels",
        re.compile(
            r"(?P<coll>\d++) coll channels, (?:(?P<collnet>\d++) collnet channels, )?"
            r"(?:(?P<nvls>\d++) nvls channels, )?(?P<p2p>\d++) p2p channels,"
            r" (?P<p2p_per_peer>\d++) p2p channels per peer"
        ),
    ),
    Pattern(
        "init_timings",
        "Init timings",
        re.compile(
            r"Init timings(?: - (?P<func>\w+))?: rank (?P<rank>\d++) nranks (?P<nranks>\d++)"
            r" total (?P<total_s>[\d.]+)(?: \((?P<components>[^)]*)\))?"
        ),
    ),
    Pattern(
        "setting",
        "set by environment",
        re.compile(r"(?P<name>[NR]CCL_\w++) set by environment to (?P<value>.*)"),
    ),
    Pattern("version", "CCL version", _VERSION),
    # Which network NCCL uses (docs/metrics.md, "NCCL log"): `Using network IB|Socket|<plugin name>` (2.12+),
    # what each network's init prints (`NET/IB : Using [0]mlx5_0:1/IB ; OOB ...`, `NET/IB : No device found.`,
    # `NET/Socket : Using [0]eth0:10.0.0.1<0>`, `NET/Socket : GPU Direct RDMA Disabled for HCA 0 'lo'`), the
    # plugin loader (`NET/Plugin : No plugin found (libnccl-net.so)...`, `NET/Plugin: Loaded net plugin X`,
    # `Plugin Path : /opt/.../libnccl-net.so`, `P2P plugin IBext`, AWS's `NET/OFI Using aws-ofi-nccl 1.7`;
    # 2.24+ `Initialized NET plugin X` and `Assigned NET plugin X to comm`; RCCL's `Successfully loaded
    # external network plugin /path`), and the bootstrap interface.
    Pattern("network", "Using network", re.compile(r"Using network (?P<detail>.*\S)")),
    Pattern("network", "Bootstrap", re.compile(r"(?P<source>Bootstrap) ?: Using (?P<detail>.*\S)")),
    Pattern("network", "P2P plugin", re.compile(r"(?P<source>P2P plugin) (?P<detail>\S++)")),
    Pattern("network", "Plugin Path", re.compile(r"(?P<source>Plugin Path) ?: (?P<detail>.*\S)")),
    Pattern(
        "network",
        "NET plugin",
        re.compile(r"(?P<source>(?:Initialized|Assigned) NET plugin) (?P<detail>\S++)"),
    ),
    Pattern(
        "network",
        "external network plugin",
        re.compile(r"(?P<source>Successfully loaded external network plugin) (?P<detail>\S.*\S|\S)"),
    ),
    Pattern("network", "non-device net plugin", re.compile(r"(?P<source>Using non-device net plugin)")),
    Pattern("network", "NET/", re.compile(r"(?P<source>NET/[\w\-]++) ?:? ?(?P<detail>\S.*\S|\S)")),
    Pattern(
        "event", "Connected ", re.compile(r"(?P<event>Connected (?:all rings|all trees|NVLS tree|CollNet))")
    ),
    Pattern(
        "error_trace",
        " -> ",
        re.compile(r"(?P<source>[\w./\-]+\.(?:cc|cu|cpp|c|h):\d++) -> (?P<code>\d++)\s*$"),
    ),
)

# Lines with no NCCL record start: PyTorch's ProcessGroupNCCL lines, bare version lines, foreign NCCL errors.
# Tried in order on the whole line; the first match wins.
FOREIGN_PATTERNS: tuple[Pattern, ...] = (
    Pattern(
        "pg_comm",
        "created ncclComm_",
        re.compile(
            r"(?:\[(?:PG (?:ID )?(?P<pg>[^\s\]]++)[^\]]{0,256}? )?Rank (?P<rank>\d++)\] *)?"
            r"ProcessGroupNCCL created ncclComm_ (?P<comm>0x[0-9a-fA-F]++)"
            r"(?: on CUDA device: ?(?P<pg_dev>\d++)?)?"
        ),
    ),
    Pattern(
        "pg_error",
        "ProcessGroupNCCL.cpp",
        re.compile(
            r"(?<![A-Za-z])(?P<severity>[EW])(?:\d{4} +[\d:.]++ +\d++)? *ProcessGroupNCCL\.cpp:\d++\] +"
            r"(?:\[(?:PG [^\]]{0,256}? )?Rank (?P<rank>\d++)\] *)?(?P<text>[A-Za-z](?:.*\S)?)"
        ),
    ),
    Pattern("nccl_error", "NCCL error", re.compile(r"(?P<text>NCCL error(?:.*\S)?)")),
    Pattern("version", "CCL version", _VERSION),
)

# The process a foreign line came from, when a launcher prefix says so: Ray's "(RayTrainWorker pid=615, ...)".
LAUNCHER_PID = re.compile(r"\(\w+ pid=(?P<pid>\d++)(?:, ip=(?P<ip>[\d.]+))?\)")
