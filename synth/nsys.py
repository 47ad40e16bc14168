"""An Nsight Systems-shaped SQLite export (`nsys export --type sqlite`, schema 3.x) with its ground truth.

ingest/nsys.py reads real exports; this writes a small one whose every figure is known, for the corners of
the schema the real files in hand do not cover: CUDA graph replays (one cudaGraphLaunch, several kernels
on its correlation, graphId / graphNodeId), several processes and devices in one file (one process that
drives two GPUs), nested NVTX ranges (ProfilerStep#N > aten op > aten op, PyTorch's emit_nvtx text with
`op_id` / `seq` / `sizes`), memcpy and memset, driver calls, a kernel whose runtime call lies outside the
window, a cudaStreamWaitEvent with its CUDA event record (eventSyncId), an unterminated NVTX range.

The tables and columns are those of Nsight Systems 2026.2 exports (schema 3.25; only the ones tracehouse
or a user's own query would read, plus the keys); ids of strings go through StringIds, API names carry
their `_vNNNN` version suffix, thread ids are globalTid = globalPid | tid with globalPid = pid << 24, times
are integer ns of the session clock. `write_export(path, schema=...)` also writes the same events as older
versions wrote them (SCHEMAS): "3.13" (Nsight Systems 2024.5: no systemClockNs, so times count from the
session's start; no greenContextId / graphId / eventSyncId / CUDA event timestamps), "2.9" (2022.1: the
metadata table is EXPORT_META_DATA with the older key names, text that is not UTF-8 in the user name and
TARGET_INFO_SYSTEM_ENV, a Windows machine's display adapters beside the GPUs in TARGET_INFO_GPU and no
TARGET_INFO_CUDA_DEVICE) and "none" (2.9's tables with no metadata table at all). `write_no_gpu_export`
writes one recorded without CUDA tracing (NVTX ranges only). `write_export` returns the ground truth
(`expected`), worked out here from the event list with plain Python, never by tracehouse code.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from tracehouse.synth.intervals import union_ns

T0 = 5_000_000_000  # session clock ns at the first event (exports are not time-normalized by default)
SESSION_UTC_NS = 1_779_000_000_000_000_000
SESSION_CLOCK_NS = 1_000_000_000
SCHEMAS = ("3.25", "3.13", "2.9", "none")
NOT_UTF8 = b"Alexander Gei\xe1"  # a Windows (code page) user name, as a 2022 export on Windows stores it


def gpid(pid: int) -> int:
    return pid << 24


def gtid(pid: int, tid: int) -> int:
    return gpid(pid) | tid


@dataclass
class Export:
    """Rows of an export being built; times are ns from T0."""

    strings: dict[str, int] = field(default_factory=dict)
    runtime: list[tuple] = field(default_factory=list)  # start, end, globalTid, corr, name
    kernels: list[dict] = field(default_factory=list)
    memcpy: list[dict] = field(default_factory=list)
    memset: list[dict] = field(default_factory=list)
    nvtx: list[tuple] = field(default_factory=list)  # start, end, eventType, text, globalTid
    syncs: list[dict] = field(default_factory=list)
    events: list[dict] = field(default_factory=list)  # CUDA event records
    processes: dict[int, str] = field(default_factory=dict)
    corr: int = 1000

    def sid(self, text: str) -> int:
        return self.strings.setdefault(text, len(self.strings) + 1)

    def call(self, pid: int, tid: int, name: str, start: int, end: int) -> int:
        self.corr += 1
        self.runtime.append((T0 + start, T0 + end, gtid(pid, tid), self.corr, name))
        return self.corr

    def kernel(
        self,
        pid: int,
        device: int,
        stream: int,
        name: str,
        start: int,
        end: int,
        corr: int | None,
        *,
        graph: tuple[int, int] | None = None,
    ) -> None:
        if corr is None:  # launched before the window: its runtime call is not in the export
            self.corr += 1
            corr = self.corr
        self.kernels.append(
            {
                "pid": pid,
                "device": device,
                "stream": stream,
                "name": name,
                "start": T0 + start,
                "end": T0 + end,
                "corr": corr,
                "graph": graph,
            }
        )

    def range(self, pid: int, tid: int, text: str, start: int, end: int | None, event_type: int = 59) -> None:
        self.nvtx.append((T0 + start, None if end is None else T0 + end, event_type, text, gtid(pid, tid)))


def build() -> Export:
    """The scenario: three processes (pids 100, 200, 300; 300 drives devices 2 and 3)."""
    x = Export()
    x.processes = {100: "python3", 200: "python3", 300: "trtllm-serve", 999: "nsys"}
    for pid, device in ((100, 0), (200, 1)):
        main = pid + 1
        off = device * 7_000  # the two ranks are not in lockstep
        for step in range(2):
            s0 = off + step * 1_000_000
            x.range(pid, main, f"ProfilerStep#{step}", s0, s0 + 900_000)
            # aten::linear > aten::addmm (emit_nvtx text), with the launch inside the inner one
            x.range(
                pid,
                main,
                f"aten::linear, seq = {10 + step}, op_id = {500 + 3 * step}, "
                f"sizes = [[8, 4096], [4096, 4096], [4096]], input_op_ids = [(0, 0)]",
                s0 + 10_000,
                s0 + 60_000,
            )
            x.range(
                pid,
                main,
                f"aten::addmm, seq = {10 + step}, op_id = {501 + 3 * step}",
                s0 + 12_000,
                s0 + 58_000,
            )
            c = x.call(pid, main, "cudaLaunchKernel_v7000", s0 + 20_000, s0 + 25_000)
            x.kernel(pid, device, 7, "nvjet_tst_128x256_64x4_2x1_v_bz_TNT", s0 + 30_000, s0 + 230_000, c)
            c = x.call(pid, main, "cudaMemcpyAsync_v3020", s0 + 70_000, s0 + 74_000)
            x.memcpy.append(
                {
                    "pid": pid,
                    "device": device,
                    "stream": 7,
                    "start": T0 + s0 + 240_000,
                    "end": T0 + s0 + 250_000,
                    "corr": c,
                    "bytes": 1 << 20,
                    "kind": 1,
                    "src": 1,
                    "dst": 2,
                }
            )
            c = x.call(pid, main, "cudaMemsetAsync_v3020", s0 + 80_000, s0 + 82_000)
            x.memset.append(
                {
                    "pid": pid,
                    "device": device,
                    "stream": 7,
                    "start": T0 + s0 + 250_500,
                    "end": T0 + s0 + 251_500,
                    "corr": c,
                    "bytes": 4096,
                    "mem": 2,
                }
            )
            # a graph replay: three kernels on the graph launch's correlation
            c = x.call(pid, main, "cudaGraphLaunch_v10000", s0 + 90_000, s0 + 102_000)
            for node, (start, end) in enumerate(((260_000, 300_000), (300_500, 340_000), (340_200, 400_000))):
                x.kernel(
                    pid,
                    device,
                    7,
                    f"flash_fwd_splitkv_kernel_{node}",
                    s0 + start,
                    s0 + end,
                    c,
                    graph=(40 + device, 7000 + node),
                )
            # a driver-API launch on a second stream, after an event record / stream wait
            rec = x.call(pid, main, "cudaEventRecord_v3020", s0 + 110_000, s0 + 111_000)
            x.events.append(
                {
                    "pid": pid,
                    "device": device,
                    "stream": 7,
                    "corr": rec,
                    "event": 77 + step,
                    "sync_id": 9000 + 10 * device + step,
                    "ts": T0 + s0 + 400_100,
                }
            )
            wait = x.call(pid, main, "cudaStreamWaitEvent_v3020", s0 + 112_000, s0 + 113_000)
            x.syncs.append(
                {
                    "pid": pid,
                    "device": device,
                    "stream": 13,
                    "start": T0 + s0 + 112_500,
                    "end": T0 + s0 + 113_000,
                    "corr": wait,
                    "type": 2,
                    "event": 77 + step,
                    "sync_id": 9000 + 10 * device + step,
                }
            )
            c = x.call(pid, main, "cuLaunchKernelEx", s0 + 120_000, s0 + 126_000)
            x.kernel(
                pid, device, 13, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", s0 + 400_500, s0 + 480_000, c
            )
            # the step ends with a stream synchronize
            c = x.call(pid, main, "cudaStreamSynchronize_v3020", s0 + 130_000, s0 + 480_500)
            x.syncs.append(
                {
                    "pid": pid,
                    "device": device,
                    "stream": 7,
                    "start": T0 + s0 + 130_500,
                    "end": T0 + s0 + 480_500,
                    "corr": c,
                    "type": 3,
                    "event": None,
                    "sync_id": None,
                }
            )
        # a kernel launched before the window (no runtime call) and an unterminated range
        x.kernel(pid, device, 7, "vectorized_elementwise_kernel", off + 2_000_000, off + 2_010_000, None)
        x.range(pid, main, "decode_loop", off + 1_950_000, None, 60)
        x.range(pid, main + 1, "tokenizer", off + 5_000, off + 15_000, 60)  # a start/end range, other thread
        x.nvtx.append((T0 + off + 1_000, None, 34, "a mark", gtid(pid, main)))
    # process 300: one process, two devices, no NVTX at all
    for device in (2, 3):
        c = x.call(300, 301, "cudaLaunchKernel_v7000", device * 1_000, device * 1_000 + 3_000)
        x.kernel(300, device, 20 + device, "fmha_v2_flash_attention_fp16_kernel", 50_000 + device, 150_000, c)
        c = x.call(300, 301, "cudaLaunchKernel_v7000", 200_000 + device, 203_000 + device)
        x.kernel(
            300, device, 20 + device, "fmha_v2_flash_attention_fp16_kernel", 140_000, 260_000 + device, c
        )
    return x


SCHEMA = """
CREATE TABLE META_DATA_EXPORT (name TEXT, value TEXT);
CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE PROCESSES (globalPid INTEGER, pid INTEGER, name TEXT);
CREATE TABLE ThreadNames (nameId INTEGER, priority INTEGER, globalTid INTEGER);
CREATE TABLE TARGET_INFO_SESSION_START_TIME (utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER);
CREATE TABLE TARGET_INFO_GPU (vmId INTEGER, id INTEGER, name TEXT, busLocation TEXT, isDiscrete INTEGER,
    l2CacheSize INTEGER, totalMemory INTEGER, memoryBandwidth INTEGER, clockRate INTEGER, smCount INTEGER,
    pwGpuId INTEGER, uuid TEXT, luid INTEGER, chipName TEXT, cuDevice INTEGER, ctxId INTEGER);
CREATE TABLE TARGET_INFO_CUDA_DEVICE (gpuId INTEGER, cudaId INTEGER, pid INTEGER, uuid TEXT,
    numMultiprocessors INTEGER, computeMajor INTEGER, computeMinor INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL,
    globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, returnValue INTEGER NOT NULL,
    callchainId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
    globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, mangledName INTEGER,
    launchType INTEGER, cacheConfig INTEGER, registersPerThread INTEGER NOT NULL, gridX INTEGER NOT NULL,
    gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, blockX INTEGER NOT NULL, blockY INTEGER NOT NULL,
    blockZ INTEGER NOT NULL, staticSharedMemory INTEGER NOT NULL, dynamicSharedMemory INTEGER NOT NULL,
    localMemoryPerThread INTEGER NOT NULL, localMemoryTotal INTEGER NOT NULL, gridId INTEGER NOT NULL,
    sharedMemoryExecuted INTEGER, graphNodeId INTEGER, sharedMemoryLimitConfig INTEGER, graphId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMCPY (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
    globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, deprecatedSrcId INTEGER,
    srcKind INTEGER, dstKind INTEGER, srcDeviceId INTEGER, srcContextId INTEGER, dstDeviceId INTEGER,
    dstContextId INTEGER, migrationCause INTEGER, graphNodeId INTEGER, virtualAddress INTEGER, copyCount INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_MEMSET (start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL,
    contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER,
    globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL, graphNodeId INTEGER, memKind INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_SYNCHRONIZATION (start INTEGER NOT NULL, end INTEGER NOT NULL,
    deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL,
    correlationId INTEGER, globalPid INTEGER, deprecatedSyncType INTEGER, syncType INTEGER NOT NULL,
    eventId INTEGER NOT NULL, eventSyncId INTEGER);
CREATE TABLE CUPTI_ACTIVITY_KIND_CUDA_EVENT (timestamp INTEGER, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL,
    greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER,
    eventId INTEGER NOT NULL, eventSyncId INTEGER);
CREATE TABLE NVTX_EVENTS (start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER,
    category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, textId INTEGER,
    domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, uint32Value INTEGER,
    int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT, binaryData TEXT);
"""


# Columns that Nsight Systems 2024.5 (schema 3.13) and older did not write (the real 2024.5.1 and 2022.1.1
# exports in hand lack each of them).
NEWER_COLUMNS = (
    "greenContextId INTEGER, ",
    "deprecatedSyncType INTEGER, ",
    ", eventSyncId INTEGER",
    "timestamp INTEGER, ",
    ", systemClockNs INTEGER",
    ", graphId INTEGER",
    ", copyCount INTEGER",
    ", jsonTextId INTEGER, jsonText TEXT, binaryData TEXT",
)


def schema_sql(schema: str) -> str:
    """The CREATE statements of an export of `schema` (SCHEMAS)."""
    sql = SCHEMA
    if schema != "3.25":
        for text in NEWER_COLUMNS:
            assert text in sql, text
            sql = sql.replace(text, "")
    if schema in ("2.9", "none"):
        sql = sql.replace("CREATE TABLE META_DATA_EXPORT", "CREATE TABLE EXPORT_META_DATA")
        sql = ";".join(part for part in sql.split(";") if "TARGET_INFO_CUDA_DEVICE" not in part)
        sql += "\nCREATE TABLE TARGET_INFO_SYSTEM_ENV (globalVid INTEGER, devStateName TEXT, name TEXT, nameEnum INTEGER, value TEXT);"
    if schema == "none":
        sql = sql.replace("CREATE TABLE EXPORT_META_DATA (name TEXT, value TEXT);", "")
    return sql


def _insert(con: sqlite3.Connection, table: str, rows: list[dict]) -> None:
    """Rows as column -> value; the columns this schema's table lacks are left out (as that version did)."""
    have = {r[1] for r in con.execute(f'PRAGMA table_info("{table}")')}
    for row in rows:
        cols = [c for c in row if c in have]
        con.execute(
            f'INSERT INTO "{table}" ({", ".join(cols)}) VALUES ({", ".join("?" for _ in cols)})',
            [row[c] for c in cols],
        )


def _meta(schema: str) -> dict[str, str]:
    if schema == "2.9":
        return {
            "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
            "EXPORT_PRODUCT_VERSION": "2022.1.1.61",
            "EXPORT_SCHEMA_VERSION": "2.9.1",
            "EXPORT_SCHEMA_VERSION_MAJOR": "2",
            "EXPORT_SCHEMA_VERSION_MINOR": "9",
            "EXPORT_INPUT_FILE": "Report 1.nsys-rep",
            "EXPORT_OUTUPT_FILE": "Report 1.sqlite",  # sic: 2022.1's spelling
        }
    version, product = {"3.25": ("3.25.0", "2026.2.1.210"), "3.13": ("3.13.2", "2024.5.1.113")}[schema]
    return {
        "EXPORT_PRODUCT_NAME": "NVIDIA Nsight Systems",
        "EXPORT_PRODUCT_VERSION": product,
        "EXPORT_SCHEMA_VERSION": version,
        "EXPORT_SCHEMA_VERSION_MAJOR": version.split(".")[0],
        "EXPORT_SCHEMA_VERSION_MINOR": version.split(".")[1],
        "EXPORT_PARAM_INPUT_FILE": "synth.nsys-rep",
    }


def write_export(
    path: Path, x: Export | None = None, *, schema: str = "3.25", session_utc_ns: int = SESSION_UTC_NS
) -> dict:
    """Write the export to `path` (replacing it) as Nsight Systems of `schema` (SCHEMAS) writes it; return
    its ground truth. session_utc_ns: when the profiling session started (TARGET_INFO_SESSION_START_TIME)."""
    x = x or build()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.executescript(schema_sql(schema))
    meta = _meta(schema) if schema != "none" else {}
    if schema == "2.9":
        con.executemany("INSERT INTO EXPORT_META_DATA VALUES (?, ?)", meta.items())
        con.execute("INSERT INTO EXPORT_META_DATA VALUES ('EXPORT_USER', CAST(? AS TEXT))", (NOT_UTF8,))
    elif meta:
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", meta.items())
    if schema in ("2.9", "none"):
        env = [
            ("Hostname", b"synth-host"),
            ("OsDescription", b"Windows 10.0.19044"),
            ("GpuInfo", b"\n\x8a\x01\xff\xfe"),
        ]
        con.executemany(
            "INSERT INTO TARGET_INFO_SYSTEM_ENV VALUES (72057594037927936, 'Local', ?, 0, CAST(? AS TEXT))",
            env,
        )
    _insert(
        con,
        "TARGET_INFO_SESSION_START_TIME",
        [{"utcEpochNs": session_utc_ns, "utcTime": "", "localTime": "", "systemClockNs": SESSION_CLOCK_NS}],
    )
    if schema in ("2.9", "none"):  # a laptop's display adapters, listed first, with the default cuDevice 0
        for i, name in enumerate(("Intel(R) UHD Graphics 630", "Microsoft Basic Render Driver")):
            _insert(con, "TARGET_INFO_GPU", [{"vmId": 0, "id": i, "name": name, "smCount": 0, "cuDevice": 0}])
    for i in range(4):
        con.execute(
            "INSERT INTO TARGET_INFO_GPU (vmId, id, name, totalMemory, smCount, chipName, cuDevice) "
            "VALUES (0, ?, 'NVIDIA H100 80GB HBM3', 85520809984, 132, 'GH100', ?)",
            (10 + i, i),
        )
        if schema not in ("2.9", "none"):
            con.execute(
                "INSERT INTO TARGET_INFO_CUDA_DEVICE (gpuId, cudaId, pid, numMultiprocessors, computeMajor, "
                "computeMinor) VALUES (?, ?, 0, 132, 9, 0)",
                (10 + i, i),
            )
    con.executemany(
        "INSERT INTO PROCESSES VALUES (?, ?, ?)", [(gpid(p), p, n) for p, n in x.processes.items()]
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 0, ?, ?, ?, 0, NULL)",
        [(s, e, t, c, x.sid(n)) for s, e, t, c, n in x.runtime],
    )
    _insert(
        con,
        "CUPTI_ACTIVITY_KIND_KERNEL",
        [
            {
                "start": k["start"],
                "end": k["end"],
                "deviceId": k["device"],
                "contextId": 1,
                "streamId": k["stream"],
                "correlationId": k["corr"],
                "globalPid": gpid(k["pid"]),
                "demangledName": x.sid(k["name"]),
                "shortName": x.sid(k["name"].split("<")[0][:24]),
                "registersPerThread": 128,
                "gridX": 132,
                "gridY": 2,
                "gridZ": 1,
                "blockX": 256,
                "blockY": 1,
                "blockZ": 1,
                "staticSharedMemory": 1024,
                "dynamicSharedMemory": 49152,
                "localMemoryPerThread": 0,
                "localMemoryTotal": 0,
                "gridId": i,
                "graphId": (k["graph"] or (None, None))[0],
                "graphNodeId": (k["graph"] or (None, None))[1],
            }
            for i, k in enumerate(x.kernels)
        ],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY (start, end, deviceId, contextId, streamId, correlationId, globalPid, "
        "bytes, copyKind, srcKind, dstKind) VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?)",
        [
            (
                m["start"],
                m["end"],
                m["device"],
                m["stream"],
                m["corr"],
                gpid(m["pid"]),
                m["bytes"],
                m["kind"],
                m["src"],
                m["dst"],
            )
            for m in x.memcpy
        ],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_MEMSET (start, end, deviceId, contextId, streamId, correlationId, globalPid, "
        "value, bytes, memKind) VALUES (?, ?, ?, 1, ?, ?, ?, 0, ?, ?)",
        [
            (m["start"], m["end"], m["device"], m["stream"], m["corr"], gpid(m["pid"]), m["bytes"], m["mem"])
            for m in x.memset
        ],
    )
    _insert(
        con,
        "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
        [
            {
                "start": s["start"],
                "end": s["end"],
                "deviceId": s["device"],
                "contextId": 1,
                "streamId": s["stream"],
                "correlationId": s["corr"],
                "globalPid": gpid(s["pid"]),
                "syncType": s["type"],
                "eventId": s["event"] if s["event"] is not None else 0,
                "eventSyncId": s["sync_id"],
            }
            for s in x.syncs
        ],
    )
    _insert(
        con,
        "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
        [
            {
                "timestamp": e["ts"],
                "deviceId": e["device"],
                "contextId": 1,
                "streamId": e["stream"],
                "correlationId": e["corr"],
                "globalPid": gpid(e["pid"]),
                "eventId": e["event"],
                "eventSyncId": e["sync_id"],
            }
            for e in x.events
        ],
    )
    # NVTX text inline for most ranges, through StringIds (textId) for every other one, as exports do
    rows = []
    for i, (s, e, t, text, tid) in enumerate(x.nvtx):
        inline = i % 2 == 0
        rows.append((s, e, t, text if inline else None, tid, None if inline else x.sid(text)))
    con.executemany(
        "INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, textId, domainId) "
        "VALUES (?, ?, ?, ?, ?, ?, 0)",
        rows,
    )
    con.executemany("INSERT INTO StringIds VALUES (?, ?)", [(i, s) for s, i in x.strings.items()])
    con.commit()
    con.close()
    truth = expected(x) if x.kernels else {"ranks": []}
    if (
        schema != "3.25" and truth["ranks"]
    ):  # no system clock: the export's times count from the session start
        truth["base_time_ns"] = SESSION_UTC_NS
    if "base_time_ns" in truth:
        truth["base_time_ns"] += session_utc_ns - SESSION_UTC_NS
    truth["schema"] = schema
    return truth


def write_no_gpu_export(path: Path, schema: str = "3.25") -> dict:
    """An export recorded without CUDA tracing: NVTX ranges of one process, no CUDA call, no GPU row."""
    x = Export()
    x.processes = {100: "python3"}
    for step in range(2):
        x.range(100, 101, f"ProfilerStep#{step}", step * 1_000_000, step * 1_000_000 + 900_000)
    return write_export(path, x, schema=schema)


def expected(x: Export) -> dict:
    """Per rank (pids ordered by their lowest device): what the warehouse must hold."""
    pids = sorted(
        {k["pid"] for k in x.kernels}, key=lambda p: (min(k["device"] for k in x.kernels if k["pid"] == p), p)
    )
    runtime_corr = {(t >> 24, c) for _, _, t, c, _ in x.runtime}
    ranks = []
    for rank, pid in enumerate(pids):
        acts = (
            [("kernel", k) for k in x.kernels if k["pid"] == pid]
            + [("memcpy", m) for m in x.memcpy if m["pid"] == pid]
            + [("memset", m) for m in x.memset if m["pid"] == pid]
        )
        devices = sorted({a["device"] for _, a in acts})
        steps = sorted(
            (t, s, e) for s, e, ty, t, tid in x.nvtx if tid >> 24 == pid and t.startswith("ProfilerStep#")
        )
        ranks.append(
            {
                "rank": rank,
                "pid": pid,
                "kernels": sum(1 for kind, _ in acts if kind == "kernel"),
                "memcpy": sum(1 for kind, _ in acts if kind == "memcpy"),
                "memset": sum(1 for kind, _ in acts if kind == "memset"),
                "kernel_ns_by_device": {
                    d: sum(a["end"] - a["start"] for kind, a in acts if kind == "kernel" and a["device"] == d)
                    for d in devices
                },
                "busy_ns_by_device": {
                    d: union_ns([(a["start"], a["end"]) for _, a in acts if a["device"] == d])
                    for d in devices
                },
                "linked": sum(1 for _, a in acts if (pid, a["corr"]) in runtime_corr),
                "graph_replayed": sum(1 for k in x.kernels if k["pid"] == pid and k["graph"]),
                "runtime_calls": sum(1 for _, _, t, _, _ in x.runtime if t >> 24 == pid),
                "driver_calls": sum(
                    1 for _, _, t, _, n in x.runtime if t >> 24 == pid and n.startswith("cuLaunch")
                ),
                "cpu_ops": sum(
                    1
                    for _, e, _, t, tid in x.nvtx
                    if tid >> 24 == pid and e is not None and t.startswith("aten::")
                ),
                "annotations": sum(
                    1
                    for _, e, ty, t, tid in x.nvtx
                    if tid >> 24 == pid and e is not None and ty in (59, 60) and not t.startswith("aten::")
                ),
                "open_ranges": sum(
                    1 for _, e, ty, _, tid in x.nvtx if tid >> 24 == pid and e is None and ty in (59, 60)
                ),
                "steps": [{"name": t, "start_ns": s, "end_ns": e} for t, s, e in steps],
                "streams": sorted({(a["device"], a["stream"]) for _, a in acts}),
                "waits": [
                    {
                        "stream": s["stream"],
                        "wait_on_stream": next(e["stream"] for e in x.events if e["sync_id"] == s["sync_id"]),
                        "wait_on_event_corr": next(
                            e["corr"] for e in x.events if e["sync_id"] == s["sync_id"]
                        ),
                    }
                    for s in x.syncs
                    if s["pid"] == pid and s["type"] == 2
                ],
            }
        )
    return {
        "ranks": ranks,
        "base_time_ns": SESSION_UTC_NS - SESSION_CLOCK_NS,
        "hardware": "NVIDIA H100 80GB HBM3",
        "trace_start_ns": min(
            min(k["start"] for k in x.kernels),
            min(r[0] for r in x.runtime),
            min(n[0] for n in x.nvtx if n[2] in (59, 60) and n[1] is not None),
        ),
    }
