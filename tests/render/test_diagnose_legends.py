"""What a table does not show, it says (issue 34, item 12): positions no sequence reaches, the
per-position table's sampling of positions, what "KL if shuffled" is, and an effective rank that
cannot be read as two thresholds."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

from click.testing import Result

from posdiag.render.diagnosis import PER_POSITION_LEGEND, per_position_title

QUIET = ["--shards", "0", "-q"]


def _flat(text: str) -> str:
    return " ".join(text.split())


def test_per_position_title_says_which_positions() -> None:
    assert per_position_title(12, 1) == "Per position (all 12)"
    assert per_position_title(48, 3) == (
        "Per position (every 3rd of 0..47, and the last; --json has all 48)"
    )
    assert per_position_title(76, 4) == (
        "Per position (every 4th of 0..75, and the last; --json has all 76)"
    )
    assert per_position_title(40, 2).startswith("Per position (every 2nd of 0..39")


def test_diagnose_tables_say_what_they_leave_out(
    cli: Callable[..., Result], bundled_corpus: Path
) -> None:
    r = cli(["diagnose", str(bundled_corpus), *QUIET])
    assert r.exit_code == 0, r.output
    out = r.stdout
    # The corpus table: 76 analysed, 76..203 dropped, 204..511 reached by no sequence.
    assert "dropped positions          │ 76..203 (128): support below min_count" in out
    assert "unreached positions        │ 204..511 (308): no sequence reaches them" in out
    assert "Per position (every 4th of 0..75, and the last; --json has all 76)" in out
    shown = [int(m) for m in re.findall(r"^│\s+(\d+) │\s+[\d,]+ │", out, flags=re.M)]
    assert shown == [*range(0, 76, 4), 75]
    flat = _flat(out)
    assert _flat(PER_POSITION_LEGEND) in flat
    assert (
        "KL if shuffled: the KL that sampling noise alone gives N_i tokens when the position says "
        "nothing (tokens shuffled across positions), so only the excess is positional information"
    ) in flat
    doc = json.loads(cli(["diagnose", str(bundled_corpus), *QUIET, "--json"]).stdout)
    assert len(doc["information"]["per_position_null"]) == 76


def test_effective_rank_reads_as_dimensions_of_a_maximum(
    cli: Callable[..., Result], bundled_corpus: Path
) -> None:
    r = cli(["stress", str(bundled_corpus), "-n", "48", *QUIET])
    assert r.exit_code == 0, r.output
    flat = _flat(r.stdout)
    assert not re.search(r"effective rank \d+/\d+", flat)  # before: "effective rank 5/47"
    doc = json.loads(cli(["stress", str(bundled_corpus), "-n", "48", *QUIET, "--json"]).stdout)
    rank = doc["spectrum"]["effective_rank"]["0.1"]
    assert rank == 5
    assert "5 MDS dimensions (of at most 47) reach stress <= 0.1: a low-rank geometry;" in flat
