"""Re-execute the proofs: each ``proofs/NN_topic.py`` (jupytext percent) -> ``NN_topic.ipynb``.

Run as ``python proofs/build.py [NN_topic.py ...]`` (``make proofs`` runs it on all).
The result is reproducible: cell ids are derived from the file name and cell index,
the kernel is always ``python3`` (the environment running this script), no timing
or execution metadata is kept, and the notebook metadata is reduced to the
kernelspec and the language name. Running it twice leaves ``git diff`` empty.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jupytext
import nbformat
from nbclient import NotebookClient

HERE = Path(__file__).resolve().parent
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def sources() -> list[Path]:
    """The proof scripts, ``proofs/[0-9][0-9]_*.py``, in order."""
    return sorted(HERE.glob("[0-9][0-9]_*.py"))


def notebook_from_script(script: Path) -> nbformat.NotebookNode:
    """The unexecuted notebook of ``script``, with deterministic ids and metadata."""
    nb = jupytext.read(script, fmt="py:percent")
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}})
    nb.nbformat, nb.nbformat_minor = 4, 5
    for i, cell in enumerate(nb.cells):
        cell.id = f"{script.stem[:2]}-{i:03d}"
        cell.metadata = nbformat.from_dict({})
    return nb


def strip(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """Drop everything that changes from run to run without the proof changing."""
    nb.metadata = nbformat.from_dict({"kernelspec": dict(KERNELSPEC), "language_info": {"name": "python"}})
    for cell in nb.cells:
        cell.metadata = nbformat.from_dict({})
    return nb


def build(script: Path, timeout: int = 600) -> Path:
    """Execute ``script`` as a notebook and write ``script.with_suffix('.ipynb')``."""
    nb = notebook_from_script(script)
    client = NotebookClient(
        nb,
        kernel_name="python3",
        timeout=timeout,
        record_timing=False,
        resources={"metadata": {"path": str(script.parent)}},
    )
    client.execute()
    out = script.with_suffix(".ipynb")
    nbformat.write(strip(nb), out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Command line: build the given scripts, or all of them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scripts", nargs="*", type=Path, help="proof scripts (default: all)")
    args = parser.parse_args(argv)
    for script in args.scripts or sources():
        print(f"executing {script.name}", file=sys.stderr)
        build(script.resolve())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
