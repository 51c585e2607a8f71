"""``python -m tests.gallery --markdown``: the kill table of the gallery, for the README.

One row per deliberately wrong implementation: what its author meant, the property the
suite must catch it with, how many required properties fail, and the suite's words.
"""

from __future__ import annotations

import argparse

from . import failing_properties, wrong, wrong_context


def kill_table() -> str:
    """The gallery's kill table as markdown (the cause is the suite's own message)."""
    matrix = {case.name: failing_properties(wrong_context(case), max_examples=2) for case in wrong.WRONG}
    killed = sum(1 for fails in matrix.values() if fails)
    rows = [
        f"Kill rate: {killed}/{len(matrix)} deliberately wrong implementations caught.",
        "",
        "| wrong implementation | meant | caught by | failing | what the suite says |",
        "| --- | --- | --- | --- | --- |",
    ]
    for case in wrong.WRONG:
        fails = matrix[case.name]
        caught = next((f for f in sorted(fails) if f.startswith(f"test_{case.breaks}")), None)
        message = fails.get(caught, "") if caught else ""
        cause = message.rpartition("Likely cause: ")[2] if "Likely cause: " in message else message
        cause = " ".join(cause.split()).replace("|", "/")
        caught = caught or "NOT CAUGHT"
        rows.append(f"| `{case.name}` | {case.intended} | `{caught}` | {len(fails)} | {cause} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the kill table as markdown")
    parser.parse_args()
    print(kill_table())


if __name__ == "__main__":
    main()
