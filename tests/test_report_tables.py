"""The result tables of README.md and docs/ are what bench/report_tables.py writes from bench/results/.

A table is drawn from records (JSON lines under bench/results/), never typed: a figure changed in a page or in a
record without the other fails here, naming the table. The checks run on copies, so that a disagreement made on
purpose proves the check can fail.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import report_tables  # noqa: E402  (bench/ is not a package)


def copy_of_repository_parts(tmp_path: Path) -> tuple[Path, Path]:
    """README, the two report pages and the records, copied under tmp_path as the repository lays them out."""
    for page in report_tables.PAGES:
        (tmp_path / page).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / page, tmp_path / page)
    shutil.copytree(report_tables.RESULTS, tmp_path / "results")
    return tmp_path, tmp_path / "results"


def test_every_table_in_the_pages_agrees_with_its_records() -> None:
    assert report_tables.differing() == [], "run: python bench/report_tables.py"


def test_the_pages_have_the_tables_the_records_name() -> None:
    marked = {name for page in report_tables.PAGES
              for name in re.findall(r"<!-- table: ([\w-]+) -->", (ROOT / page).read_text(encoding="utf-8"))}
    named = {name for records in report_tables.load_records(report_tables.RESULTS).values()
             for record in records for name in record.get("tables", [])}
    assert named <= marked, f"records name tables no page shows: {sorted(named - marked)}"
    assert "readme-claims" in marked and "real-who" in marked and "thrash-arena" in marked


def test_a_figure_changed_in_a_record_makes_its_table_differ(tmp_path: Path) -> None:
    root, results = copy_of_repository_parts(tmp_path)
    path = results / "node_survival.jsonl"
    records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    target = next(r for r in records if r["id"] == "b-befast-ev")
    target["outcomes"]["relief_s"] = [9.9, 9.9]
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert report_tables.differing(root, results) == ["docs/node-survival.md: real-time"]


def test_a_figure_changed_in_a_page_makes_its_table_differ(tmp_path: Path) -> None:
    root, results = copy_of_repository_parts(tmp_path)
    page = root / "README.md"
    text = page.read_text(encoding="utf-8")
    claims = text.split("<!-- table: readme-claims -->", 1)[1].split("<!-- end table -->", 1)[0]
    edited = claims.replace("**5 of 5**", "**4 of 5**", 1)
    assert edited != claims
    page.write_text(text.replace(claims, edited), encoding="utf-8")
    assert report_tables.differing(root, results) == ["README.md: readme-claims"]


def test_every_record_says_where_when_and_on_what_it_ran() -> None:
    for name, records in report_tables.load_records(report_tables.RESULTS).items():
        for record in records:
            where = f"{name}: {record.get('id', record.get('date'))}"
            assert record.get("date") and str(record["date"]).startswith("2026-"), where
            if "tables" in record:
                assert record.get("machine") and "load" in record and "commit" in record, where
                assert record.get("kernel") or record.get("guest_kernel"), where
                assert isinstance(record.get("runs"), int) and record["runs"] > 0, where
                assert record.get("settings") and record.get("outcomes"), where


def test_readme_claim_cells_stay_short() -> None:
    table = report_tables.render("readme-claims", report_tables.load_records(report_tables.RESULTS))
    cells = [cell.strip() for line in table.splitlines() for cell in line.strip("|").split(" | ")]
    assert len(report_tables.CLAIMS) <= 6
    assert max(len(cell) for cell in cells) <= 120, max(cells, key=len)


def test_the_history_rows_are_json_lines_with_their_page_section_and_row() -> None:
    files = sorted((report_tables.RESULTS / "history").glob("*.jsonl"))
    assert files, "bench/results/history/ holds the pages' tables from before the reports"
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            row = json.loads(line)
            assert row["page"] and row["section"] and row["row"], f"{path.name}:{number}"
