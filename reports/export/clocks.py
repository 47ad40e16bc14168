"""Clocks of the ranks of a run: the shift that puts each rank stamped by another host's clock onto the
reference (lowest) rank's, from sql/export_clock_offset."""

from __future__ import annotations

from dataclasses import dataclass, field

# clock alignment (sql/export_clock_offset): ranks whose offsets from the reference rank are significant are
# grouped into hosts, two offsets within max(ALIGN_FACTOR x spread, ALIGN_FLOOR_NS) of each other being one clock
ALIGN_FACTOR = 5
ALIGN_FLOOR_NS = 20_000


@dataclass
class ClockAlignment:
    """Per rank the ns subtracted from its times (0: not shifted), and what was estimated."""

    reference: int | None = None
    shifts: dict[int, int] = field(default_factory=dict)
    estimates: list[dict] = field(default_factory=list)  # export_clock_offset's rows
    notes: list[str] = field(default_factory=list)
    applied: bool = True  # False: --no-align

    def meta(self) -> dict:
        out = {"clock_reference_rank": self.reference, "clock_aligned": self.applied}
        for e in self.estimates:
            r = e["rank"]
            out[f"rank {r} clock_shift_ns"] = self.shifts.get(r, 0)
            out[f"rank {r} clock_offset_estimate_ns"] = e["offset_ns"]
            out[f"rank {r} clock_offset_spread_ns"] = e["spread_ns"]
            out[f"rank {r} clock_offset_matched"] = e["matched"]
        return out


def clock_alignment(con, run_id: str, align: bool = True) -> ClockAlignment:
    """The shift of each rank (sql/export_clock_offset): ranks whose offset from the reference rank is
    significant are grouped into hosts (sorted by offset, a rank joins the previous one's host when their
    offsets differ by at most max(ALIGN_FACTOR x the larger spread, ALIGN_FLOOR_NS)); every rank of a host is
    shifted by the lower median of its ranks' offsets, so ranks of one clock stay exactly as recorded
    against each other. A rank whose offset is not significant keeps its times (the reference's clock)."""
    rows = con.execute(
        """
        SELECT rank, reference_rank, matched, offset_ns, spread_ns, significant FROM export_clock_offset
        WHERE run_id = ? ORDER BY rank""",
        [run_id],
    ).fetchall()
    out = ClockAlignment(applied=align)
    if not rows:
        return out
    out.reference = rows[0][1]
    out.estimates = [
        dict(zip(("rank", "reference_rank", "matched", "offset_ns", "spread_ns", "significant"), r))
        for r in rows
    ]
    ref = out.reference
    same = [e["rank"] for e in out.estimates if not e["significant"] and e["matched"] >= 3]
    unmatched = [e["rank"] for e in out.estimates if e["matched"] < 3]
    moved = sorted((e for e in out.estimates if e["significant"]), key=lambda e: e["offset_ns"])
    hosts: list[list[dict]] = []
    for e in moved:
        prev = hosts[-1][-1] if hosts else None
        if prev is not None and e["offset_ns"] - prev["offset_ns"] <= max(
            ALIGN_FACTOR * max(e["spread_ns"], prev["spread_ns"]), ALIGN_FLOOR_NS
        ):
            hosts[-1].append(e)
        else:
            hosts.append([e])
    for host in hosts:
        offsets = sorted(e["offset_ns"] for e in host)
        shift = offsets[(len(offsets) - 1) // 2]
        ranks = ", ".join(str(e["rank"]) for e in host)
        worst = max(e["spread_ns"] for e in host)
        if align:
            for e in host:
                out.shifts[e["rank"]] = shift
            out.notes.append(
                f"clocks: rank(s) {ranks} shifted by {-shift:+,} ns onto rank {ref}'s clock (median "
                f"end difference of the collectives they ran with rank {ref}; the ends' spread "
                f"{worst:,} ns); --no-align keeps their own times"
            )
        else:
            out.notes.append(
                f"clocks: rank(s) {ranks} are {shift:+,} ns off rank {ref}'s clock (collective ends); "
                "not shifted (--no-align)"
            )
    if same:
        out.notes.append(
            f"clocks: rank(s) {', '.join(map(str, same))} on rank {ref}'s clock (collective ends agree "
            f"within max({ALIGN_FACTOR} x their spread, {ALIGN_FLOOR_NS // 1000} us)): not shifted"
        )
    if unmatched:
        out.notes.append(
            f"clocks: rank(s) {', '.join(map(str, unmatched))} not aligned: fewer than 3 collectives "
            f"matched with rank {ref}'s; their own times are kept (if they ran on another host, "
            "their clock may be offset)"
        )
    return out
