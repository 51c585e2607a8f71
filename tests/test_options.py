"""Issue 23, item 4: the suite's options are declared once (``sigma_ref._options.OPTIONS``) and read
as one :class:`~sigma_ref._options.SuiteOptions`, from pytest and from argparse alike: its fields are
the table's, the two routes give the same object, and the readers (the plugin, ``build_context``,
level 5's :func:`~sigma_ref.conformance.session.scaleout_options`) take it whole instead of a hand
list of names."""

from __future__ import annotations

import argparse
import dataclasses
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sigma_ref._options import OBJECTIVE_OPTIONS, OPTIONS, SuiteOptions, add_to_argparse, add_to_pytest
from sigma_ref.conformance.session import SCALEOUT_FIELDS, build_context, scaleout_options

ROOT = Path(__file__).resolve().parents[1]

#: A value other than the default for every option, as given on a command line.
GIVEN: dict[str, str | None] = {
    "impl": "m:f",
    "layout": "index",
    "output": "advantages",
    "framework": "torch",
    "loss": "m:loss",
    "convention": "dr_grpo",
    "report": "out.json",
    "force": None,
    "precision": "float32",
    "strict": None,
    "aggregation": "dr_grpo",
    "aggregation-constant": "16",
    "clip": "0.2,0.28",
    "returns": "advantages",
    "keep-metric": "reward",
    "timeout": "2.5",
    "objective": "ppo",
    "dual-clip": "3",
    "kl": "k3",
    "kl-coef": "0.04",
    "kl-placement": "reward",
    "tis-cap": "2",
    "tis-level": "sequence",
    "tis-mode": "mask",
    "world-size": "2",
    "micro-batches": "1,2",
    "split": "split-groups",
    "split-sizes": "equal",
    "steps-per-generation": "2",
    "mask-truncated": None,
    "pad-value": "inf",
    "packing": "cu_seqlens",
    "advantage-scale": "batch-tokens",
    "advantage-scaler": "m:scaler",
    "advantage-scale-on": "rank",
    "loss-scale": "mean-over-micro-batches",
    "scaleout-timeout": "30",
    "backend": "gloo",
    "rendezvous-host": "0.0.0.0",
}


def _argv(prefix: str) -> list[str]:
    return [part for name, value in GIVEN.items() for part in (prefix + name, value) if part is not None]


def _check_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_to_argparse(parser)
    return parser


def _pytest_config(argv: list[str]) -> Any:
    """A stand-in for pytest's config: the plugin's options on an argparse parser, read back by
    ``getoption`` as pytest reads them."""
    parser = argparse.ArgumentParser()

    class Group:
        def addoption(self, *flags: str, **kw: Any) -> None:
            parser.add_argument(*flags, **kw)

    add_to_pytest(Group())
    namespace = parser.parse_args(argv)
    return SimpleNamespace(getoption=lambda name, default=None: getattr(namespace, name, default))


def test_the_fields_are_the_table() -> None:
    """One field per option, in the table's order, named as check's namespace names it, with the
    table's default (a switch: False); a field that may be ``None`` says so in its type."""
    fields = dataclasses.fields(SuiteOptions)
    assert [f.name for f in fields] == [o.check_dest for o in OPTIONS]
    assert set(GIVEN) == {o.name for o in OPTIONS}
    for field, option in zip(fields, OPTIONS, strict=True):
        assert field.default == (False if option.flag else option.default), option.name
        if option.flag:
            assert field.type == "bool", option.name
        elif option.default is None:
            assert str(field.type).endswith("| None"), option.name
        if option.choices is not None:
            assert str(field.type).startswith("str"), option.name
    assert set(SuiteOptions().objective_terms()) == {
        n.replace("-", "_") for n in OBJECTIVE_OPTIONS if n != "objective"
    }


def test_pytest_and_argparse_give_the_same_options() -> None:
    """Every option given, once as ``--<name>`` (``sigma-ref check``) and once as ``--sigma-ref-<name>``
    (pytest): the same SuiteOptions, and none left at its default; nothing given: the defaults."""
    from_check = SuiteOptions.from_argparse(_check_parser().parse_args(_argv("--")))
    from_pytest = SuiteOptions.from_pytest(_pytest_config(_argv("--sigma-ref-")))
    assert from_check == from_pytest
    defaults = SuiteOptions()
    for option in OPTIONS:
        name = option.check_dest
        assert getattr(from_check, name) != getattr(defaults, name), name
    assert (from_check.micro_batches, from_check.kl_coef, from_check.force) == ((1, 2), 0.04, True)
    assert SuiteOptions.from_argparse(_check_parser().parse_args([])) == defaults
    assert SuiteOptions.from_pytest(_pytest_config([])) == defaults
    assert SuiteOptions.from_argparse(argparse.Namespace(layout="index")) == SuiteOptions(layout="index")


def test_argv_round_trips() -> None:
    """``argv()`` gives back what pytest parses into the same options (check's child reads them so)."""
    options = SuiteOptions.from_argparse(_check_parser().parse_args(_argv("--")))
    assert SuiteOptions.from_pytest(_pytest_config(options.argv())) == options
    assert SuiteOptions.from_argparse(_check_parser().parse_args(options.argv(prefix="--"))) == options
    assert SuiteOptions().argv() == []


def test_an_unknown_option_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="lay_out: not an option of the suite"):
        SuiteOptions().replace(lay_out="index")
    with pytest.raises(TypeError, match="lay_out: not an option of the suite"):
        build_context(lay_out="index")


def test_build_context_takes_the_options_whole() -> None:
    """The keyword path is the options path: ``build_context(layout=...)`` is
    ``build_context(options=SuiteOptions(layout=...))``; ``impl`` replaces ``options.impl``."""
    by_keyword = build_context(layout="contiguous", convention="dr_grpo", strict=True)
    by_options = build_context(options=SuiteOptions(layout="contiguous", convention="dr_grpo", strict=True))
    for ctx in (by_keyword, by_options):
        assert (ctx.adapter.layout, ctx.reference.name, ctx.strict) == ("contiguous", "dr_grpo", True)
    assert by_keyword.declared == by_options.declared == "dr_grpo"


def test_every_scaleout_option_reaches_level_5() -> None:
    """Each field of ``ScaleoutOptions`` but its ``seed`` is the option of its name (or the one
    ``SCALEOUT_FIELDS`` names), and every level-5 option reaches one."""
    from sigma_ref.conformance.launch import ScaleoutOptions

    options = SuiteOptions.from_argparse(_check_parser().parse_args(_argv("--")))
    opts = scaleout_options(options)
    assert opts is not None
    fields = {f.name for f in dataclasses.fields(ScaleoutOptions)} - {"seed"}
    fed = {SCALEOUT_FIELDS.get(name, name) for name in fields}
    assert {o.check_dest for o in OPTIONS if o.group == "scale-out"} <= fed
    for name in fields:
        assert getattr(opts, name) == getattr(options, SCALEOUT_FIELDS.get(name, name)), name
    assert opts.seed == ScaleoutOptions().seed
    assert scaleout_options(SuiteOptions()) is None
    with pytest.raises(ValueError, match=re.escape("--advantage-scale batch-tokens is an option of level 5")):
        scaleout_options(SuiteOptions(advantage_scale="batch-tokens"))


def test_no_option_is_read_by_name() -> None:
    """The package and the suite read the options through SuiteOptions: ``getoption`` names only
    pytest's and hypothesis' own options and the hidden progress channel, never a table option."""
    table = {o.dest for o in OPTIONS}
    read = set()
    for folder in ("sigma_ref", "spec"):
        for path in (ROOT / folder).rglob("*.py"):
            read |= set(re.findall(r"getoption\(\s*[\"'](\w+)[\"']", path.read_text(encoding="utf-8")))
    assert read and not (read & table), sorted(read & table)
