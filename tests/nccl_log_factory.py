"""Writers of synthetic NCCL_DEBUG logs from the printf formats of each NCCL generation (round-trip tests)."""

from __future__ import annotations

from dataclasses import dataclass

# Communicator init lines, by the generation that printed them (NCCL's format strings, %p as %s).
INIT_FORMATS: dict[str, str] = {
    "2.4": "comm %s rank %d nranks %d cudaDev %d nvmlDev %d - Init COMPLETE",
    "2.5-2.15": "comm %s rank %d nranks %d cudaDev %d busId %x - Init COMPLETE",
    "2.16+": "comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
    "2.21+": "%s comm %s rank %d nranks %d cudaDev %d nvmlDev %d busId %lx commId 0x%llx - Init COMPLETE",
}
COLL_FORMAT = (
    "%s: opCount %lx sendbuff %s recvbuff %s count %zi datatype %d op %d root %d comm %s [nranks=%d]"
    " stream %s"
)
RING_24 = "Ring %02d : %d -> %d [send] via %s"
RING_25 = "Ring %02d : %d[%lx] -> %d[%lx] via %s"
CHANNEL_NEW = "Channel %02d/%d : %d[%d] -> %d[%d] [receive] via %s"
RING_LIST_OLD = "Ring %02d : %s"
RING_LIST_NEW = "Channel %02d/%02d : %s"
TREES_24 = " [%d] %d->%d->%d/%d/%d"
TREES_25 = " [%d] %d/%d/%d->%d->%d|%d->%d->%d/%d/%d"
TREES_NEW = " [%d] %d/%d/%d->%d->%d"
TUNING_OLD = "%ld Bytes -> Algo %d proto %d time %f"
TUNING_NEW = "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}"
CHANNELS_220 = (
    "%d coll channels, %d collnet channels, %d nvls channels, %d p2p channels, %d p2p channels per peer"
)
SHAPE = "comm %s rank %d nRanks %d nNodes %d localRanks %d localRank %d MNNVL %d"


def c_format(fmt: str, *args: object) -> str:
    """printf with C length modifiers (%ld, %lx, %llx, %zi) turned into Python's."""
    for modifier in ("ll", "l", "z"):
        fmt = fmt.replace("%" + modifier, "%")
    return fmt % args


@dataclass(frozen=True)
class Writer:
    """The thread that prints a record: `host:pid:tid [dev] NCCL INFO `."""

    host: str
    pid: int
    tid: int
    dev: int

    def prefix(self, level: str = "INFO") -> str:
        """The record start NCCL prints before every message."""
        return f"{self.host}:{self.pid}:{self.tid} [{self.dev}] NCCL {level} "

    def info(self, fmt: str, *args: object) -> str:
        """One INFO record."""
        return self.prefix() + c_format(fmt, *args)


def trees_line(fmt: str, *channels: tuple[int, ...]) -> str:
    """A `Trees` body from one per-channel format and its arguments (channel number first)."""
    return "Trees" + "".join(fmt % args for args in channels)


A = Writer("node-a", 100, 101, 0)  # NCCL 2.4
B = Writer("node-b", 200, 201, 1)  # 2.5-2.15
C = Writer("node-c.example.com", 300, 301, 2)  # 2.16-2.20
D = Writer("node_d", 400, 401, 3)  # 2.21+


def historical_log_lines() -> list[str]:
    """One log in every init/ring/tree/transport/COLL/TUNING generation, with foreign prefixes,
    interleaved writes (a bare prefix, its body on the next line) and a terminal wrap."""
    coll = COLL_FORMAT
    return [
        "[1,0]<stdout>:NCCL version 2.21.5+cuda12.4",
        "Epoch 1 loss 0.3",
        "[1,0]<stdout>:" + A.info(RING_LIST_OLD, 0, "   0   1   2   3"),
        "[1,0]<stdout>:" + A.info(RING_24, 0, 1, 2, "NET/Socket/0"),
        "[1,0]<stdout>:" + A.info(trees_line(TREES_24, (0, 3, 1, 2, -1, -1))),
        "[1,0]<stdout>:" + A.info(INIT_FORMATS["2.4"], "0x1000", 1, 4, 0, 0),
        "2024-05-01 10:00:00.123 " + B.info(RING_25, 1, 2, 0x1B000, 3, 0x1C000, "P2P/IPC/read"),
        "2024-05-01 10:00:00.124 " + B.info(trees_line(TREES_25, (0, 4, -1, -1, 2, 0, 0, 2, 4, -1, -1))),
        "2024-05-01 10:00:00.125 " + B.info(INIT_FORMATS["2.5-2.15"], "0x2000", 2, 4, 1, 0x1B000),
        "> " + C.info("NCCL_P2P_DISABLE set by environment to 1."),
        "> " + C.info(RING_LIST_NEW, 0, 2, "   0   3   2   1"),
        "> " + C.info(CHANNEL_NEW, 2, 1, 0, 0, 3, 2, "NET/IB/0/GDRDMA"),
        "> " + C.info("Channel %02d/%d : %d[%d] -> %d[%d] via %s", 1, 0, 3, 2, 4, 0, "SHM/direct/direct"),
        "> " + C.info(trees_line(TREES_NEW, (0, -1, -1, -1, 3, 2), (1, 5, 6, -1, 3, -1))),
        "> " + C.info(INIT_FORMATS["2.16+"], "0x3000", 3, 8, 2, 2, 0x3E000, 0xABC),
        "",
        D.info(SHAPE, "0x4000", 5, 8, 2, 4, 1, 0),
        D.info(CHANNELS_220, 24, 2, 16, 32, 2),
        D.info(INIT_FORMATS["2.21+"], "ncclCommInitRankConfig", "0x4000", 5, 8, 3, 3, 0x4F000, 0xABC),
        "(RayTrainWorker pid=400, ip=10.0.0.4) "
        + D.info(coll, "AllReduce", 0x1A2B, "0x7f00", "0x7f00", 1000, 9, 0, 0, "0x4000", 8, "0x99"),
        # interleaved writes: B's prefix, then all of D's record; B's body comes alone on the next line
        B.prefix()
        + D.info(coll, "ReduceScatter", 0x1A2C, "0x7f00", "0x7f80", 7, 10, 0, 0, "0x4000", 8, "0x99"),
        c_format(coll, "Broadcast", 0x5, "0x1", "0x1", 64, 8, 0, 2, "0x2000", 4, "0x77"),
        # a terminal wrap before the stream pointer
        D.info(coll, "Send", 0x1A2D, "(nil)", "0x7f00", 3, 4, 0, 1, "0x4000", 8, "")[:-1],
        " 0x98",
        D.info(TUNING_NEW, "AllReduce", 1048576, "RING", "LL128", 0, 15),
        A.info(TUNING_OLD, 4096, 0, 0, 12.5),
        A.prefix("WARN").replace("NCCL WARN", "misc/socket.cc:50 NCCL WARN")
        + "Call to connect returned Connection timed out, retrying",
        "(RayTrainWorker pid=400, ip=10.0.0.4) [E ProcessGroupNCCL.cpp:821] [Rank 5] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, Timeout(ms)=600000) ran 6e5 ms",
        "[I ProcessGroupNCCL.cpp:1234] [Rank 5] ProcessGroupNCCL created ncclComm_ 0x4000 on CUDA device: 3",
        D.info("%s:%d -> %d", "transport/net.cc", 870, 2),
    ]
