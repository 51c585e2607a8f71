"""The ``prompt-mean`` aggregation: ``w_it = 1 / (P N_tok(g(i)))`` (``proofs/08_aggregation.py``)."""

from __future__ import annotations

from fractions import Fraction

import pytest
import torch

from sigma_ref import objectives as O  # noqa: N812  (as tests/test_objectives.py)


def _by_hand(lengths: list[int], index: list[int], width: int) -> list[list[Fraction]]:
    """Exact weights, counted with integers: each group's tokens, then 1 / (P n_g)."""
    tokens: dict[int, int] = {}
    for n, g in zip(lengths, index, strict=True):
        tokens[g] = tokens.get(g, 0) + n
    prompts = sum(1 for t in tokens.values() if t > 0)
    return [
        [Fraction(1, prompts * tokens[g]) if t < n else Fraction(0) for t in range(width)]
        for n, g in zip(lengths, index, strict=True)
    ]


@pytest.mark.parametrize(
    ("lengths", "index"),
    [([2, 3, 1, 4, 3], [0, 0, 0, 1, 1]), ([1, 5, 2, 0, 4], [9, 2, 9, 2, 5]), ([3], [0])],
)
def test_weights_equal_the_exact_count(lengths: list[int], index: list[int]) -> None:
    width = max(lengths) + 1
    mask = torch.tensor([[1 if t < n else 0 for t in range(width)] for n in lengths])
    w = O.prompt_mean_weights(mask, index)
    expected = torch.tensor(
        [[float(x) for x in row] for row in _by_hand(lengths, index, width)], dtype=torch.float64
    )
    assert torch.allclose(w, expected, rtol=1e-15, atol=0)
    assert float(w.sum()) == pytest.approx(1.0, rel=1e-15)


def test_a_prompt_mean_loss_written_per_prompt_is_detected_only_with_the_index() -> None:
    """A loss looping over prompt ids (float32 inputs from lists, as trainers write it): autograd's
    weights are the oracle's, detection names prompt-mean given the index."""
    lengths, ids = [2, 4, 1, 3, 3, 5], ["a", "a", "b", "b", "b", "c"]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(5)] for n in lengths])
    adv = torch.tensor([0.5, -0.5, 1.0, -0.25, -0.75, 0.3])
    logp = torch.zeros(6, 5, requires_grad=True)
    losses = []
    for g in dict.fromkeys(ids):
        rows = [i for i, x in enumerate(ids) if x == g]
        per_token = -adv[rows, None] * logp[rows] * mask[rows]
        losses.append(per_token.sum() / mask[rows].sum())
    (sum(losses) / len(losses)).backward()
    assert logp.grad is not None
    measured = (-logp.grad / adv[:, None]).to(torch.float64)
    index = torch.tensor([0, 0, 1, 1, 1, 2])
    assert torch.allclose(measured, O.prompt_mean_weights(mask, index), rtol=1e-6, atol=0)  # float32 loss
    assert O.detect_aggregation(measured, mask, index=index) == ("prompt-mean", None)
    assert O.detect_aggregation(measured, mask) is None


def test_it_is_token_mean_iff_groups_hold_equal_token_counts() -> None:
    mask = torch.tensor([[1, 1, 0], [1, 0, 0], [1, 1, 1], [0, 0, 0]])
    equal = O.prompt_mean_weights(mask, [0, 0, 1, 1])  # 3 and 3 tokens
    assert torch.allclose(equal, O.aggregation_weights(mask, "token-mean"), rtol=1e-15, atol=0)
    unequal = O.prompt_mean_weights(mask, [0, 1, 1, 1])  # 2 and 4 tokens
    assert not torch.allclose(unequal, O.aggregation_weights(mask, "token-mean"))
    one_each = O.prompt_mean_weights(mask, [0, 1, 2, 3])
    assert torch.allclose(one_each, O.aggregation_weights(mask, "seq-mean-token-mean"), rtol=1e-15, atol=0)


@pytest.mark.parametrize(
    ("mask", "index", "words"),
    [
        ([[1, 0]], [0, 1], "index has shape (2,)"),
        ([[1, 0]], [0.5], "pass one integer group id per row"),
        ([[0, 0]], [0], "prompt-mean of an empty batch is undefined"),
        ([[2, 0]], [0], "a response mask holds only 0 and 1"),
    ],
)
def test_errors_name_the_argument_and_the_fix(mask: list, index: list, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(").replace(")", r"\)")):
        O.prompt_mean_weights(torch.tensor(mask), torch.tensor(index))


# ---------------------------------------------------------------------------
# at scale: the weights a split accumulates, the globals a loss gets (proofs/12_scale_out.py)


def _scoped_by_hand(
    lengths: list[int],
    index: list[int],
    piece: list[int],
    width: int,
    prompts: str,
    tokens: str,
    scale: Fraction,
) -> list[list[Fraction]]:
    """``scale * 1 / (P * N_tok(g))`` counted with integers, P over the ``prompts`` scope and
    ``N_tok(g)`` over the ``tokens`` scope (``global`` or the row's ``micro-batch`` piece)."""

    def tokens_of(g: int, p: int | None) -> int:
        return sum(n for n, h, q in zip(lengths, index, piece, strict=True) if h == g and p in (None, q))

    def prompts_in(p: int | None) -> int:
        return len({h for h, q in zip(index, piece, strict=True) if p in (None, q) and tokens_of(h, p) > 0})

    out = []
    for n, g, p in zip(lengths, index, piece, strict=True):
        n_tok = tokens_of(g, None if tokens == "global" else p)
        n_prompts = prompts_in(None if prompts == "global" else p)
        out.append([scale / (n_prompts * n_tok) if t < n else Fraction(0) for t in range(width)])
    return out


@pytest.mark.parametrize(
    ("prompts", "tokens"), [("global", "global"), ("global", "micro-batch"), ("micro-batch", "micro-batch")]
)
def test_scoped_weights_equal_the_exact_count(prompts: str, tokens: str) -> None:
    """``prompt_mean_effective_weights`` on one rank, two micro-batches cutting prompt 1: exact rationals."""
    lengths, index, piece = [2, 3, 1, 4, 3, 2, 1], [0, 0, 1, 1, 1, 2, 2], [0, 0, 0, 1, 1, 1, 1]
    width = max(lengths) + 1
    mask = torch.tensor([[1 if t < n else 0 for t in range(width)] for n in lengths])
    got = O.prompt_mean_effective_weights(mask, index, micro_batch=piece, prompts=prompts, tokens=tokens)  # type: ignore[arg-type]
    exact = _scoped_by_hand(lengths, index, piece, width, prompts, tokens, Fraction(1))
    assert torch.allclose(
        got, torch.tensor([[float(x) for x in r] for r in exact], dtype=torch.float64), rtol=1e-15, atol=0
    )
    if prompts == tokens == "global":
        assert torch.allclose(got, O.prompt_mean_weights(mask, index), rtol=1e-15, atol=0)
    else:  # prompt 1 straddles the two micro-batches: its parts weigh as whole prompts
        assert float(got[2:5].sum()) > float(O.prompt_mean_weights(mask, index)[2:5].sum())


def test_loss_globals_give_a_loss_the_steps_prompt_counts() -> None:
    """Per micro-batch: ``global_num_prompts`` is P of the step and ``prompt_num_tokens`` each row's
    prompt's tokens in the step; the gallery's prompt-mean loss summed over micro-batches has the
    oracle's weights, and its straddling twin the weights of ``tokens="micro-batch"``."""
    from sigma_ref.conformance.scaleout import declared_globals, loss_globals
    from tests.gallery import normalisers as gallery

    lengths, index = [2, 3, 1, 4, 3, 2, 1], [5, 5, 8, 8, 8, 9, 9]
    mask = torch.tensor([[1.0 if t < n else 0.0 for t in range(5)] for n in lengths], dtype=torch.float64)
    pieces = [[0, 1, 2], [3, 4, 5, 6]]  # prompt 8 straddles them
    adv = torch.tensor([0.5, -1.0, 2.0, 0.25, -0.75, 1.5, -0.5], dtype=torch.float64)
    for loss, expected in [
        (gallery.prompt_mean_loss, O.prompt_mean_weights(mask, index)),
        (gallery.straddling_prompt_mean, O.prompt_mean_effective_weights(
            mask, index, micro_batch=[0, 0, 0, 1, 1, 1, 1], tokens="micro-batch")),
    ]:  # fmt: skip
        logp = torch.zeros(7, 5, dtype=torch.float64, requires_grad=True)
        for rows in pieces:
            g = loss_globals(
                mask[rows], global_mask=mask, micro_index=[index[r] for r in rows], global_index=index
            )
            assert g["global_num_prompts"] == 3 and g["prompt_index"].tolist() == [index[r] for r in rows]
            kw = {k: g[k] for k in declared_globals(loss)}
            loss(logp[rows], logp[rows].detach(), adv[rows], mask[rows], **kw).backward()
        assert logp.grad is not None
        assert torch.allclose(-logp.grad / adv[:, None], expected, rtol=1e-14, atol=0), loss.__name__
    g = loss_globals(mask[[2]], global_mask=mask, micro_index=[8], global_index=index)
    assert g["prompt_num_tokens"].tolist() == [8.0]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        (
            {"micro_index": [0.5, 1.5]},
            "micro_index has shape (2,) and dtype float64; pass one integer prompt",
        ),
        ({"micro_index": [0]}, "micro_index has shape (1,)"),
        (
            {"micro_index": [0, 3], "global_index": [0, 1]},
            "micro_index holds prompts [3] that global_index does not",
        ),
    ],
)
def test_loss_globals_errors_name_the_index(kwargs: dict, words: str) -> None:
    from sigma_ref.conformance.scaleout import loss_globals

    with pytest.raises(
        ValueError,
        match=words.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[").replace("]", r"\]"),
    ):
        loss_globals(torch.ones(2, 3), global_mask=torch.ones(2, 3), **kwargs)


def test_levels_0_to_4_fill_the_prompt_globals_from_the_batchs_groups() -> None:
    """One process, one micro-batch: a loss declaring the prompt globals gets the batch's groups as its
    prompts (any ids), and each row as its own prompt where the probe has no groups."""
    from types import SimpleNamespace

    from sigma_ref.conformance.inputs import single_process_globals
    from tests.gallery import normalisers as gallery

    ctx = SimpleNamespace(adapter=SimpleNamespace(loss=gallery.prompt_mean_loss, aggregation=None))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    got = single_process_globals(ctx, mask, [0, 0, 1])  # type: ignore[arg-type]
    assert set(got) == {"prompt_num_tokens", "global_num_prompts", "world_size"}
    assert got["global_num_prompts"] == 2 and got["prompt_num_tokens"].tolist() == [3.0, 3.0, 3.0]
    assert got["prompt_num_tokens"].dtype == mask.dtype
    alone = single_process_globals(ctx, mask)  # type: ignore[arg-type]
    assert alone["global_num_prompts"] == 3 and alone["prompt_num_tokens"].tolist() == [2.0, 1.0, 3.0]


# ---------------------------------------------------------------------------
# prompt-mean as a declaration (--aggregation prompt-mean)


def test_prompt_mean_is_a_declared_aggregation_beside_the_five_modes() -> None:
    """``Adapter(aggregation="prompt-mean")`` is accepted; a constant with it or an unknown name raises
    naming prompt-mean; it is no objective's aggregation (a usage error says what to do)."""
    from sigma_ref.conformance.adapter import load_adapter
    from sigma_ref.conformance.session import declare_objective
    from tests.gallery import normalisers as gallery

    adv = "sigma_ref.conformance.scaleout:oracle_advantages"
    assert O.resolve_declared_aggregation("prompt_mean") == "prompt-mean"
    with pytest.raises(ValueError, match="or 'prompt-mean' \\(a token mean per prompt"):
        O.resolve_declared_aggregation("per-prompt")
    adapter = load_adapter(adv, layout="index").replace(
        loss=gallery.prompt_mean_loss, aggregation="prompt-mean"
    )
    assert adapter.aggregation == "prompt-mean"
    with pytest.raises(
        ValueError, match="is the C of seq-mean-token-sum-norm, but aggregation='prompt-mean'"
    ):
        adapter.replace(aggregation_constant=8.0)
    with pytest.raises(ValueError, match="--objective ppo with --aggregation prompt-mean"):
        declare_objective(adapter, "ppo", clip="0.2")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("loss", "verdict"), [("prompt_mean_loss", "CONFORMANT"), ("straddling_prompt_mean", "NOT CONFORMANT")]
)
def test_sigma_ref_check_judges_a_declared_prompt_mean_at_scale(loss: str, verdict: str) -> None:
    """As a user runs it: ``sigma-ref check ... --aggregation prompt-mean --world-size 2
    --micro-batches 2,3``; levels 0 to 4 measure the declared weights over the batch's groups, level 5
    passes the correct loss and names the straddling one's class."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, CI="true", OMP_NUM_THREADS="1", PYTHONPATH=str(root))
    env.pop("HYPOTHESIS_PROFILE", None)
    cmd = [
        str(Path(sys.executable).parent / "sigma-ref"),
        *("check", "sigma_ref.conformance.scaleout:oracle_advantages", "--layout", "index"),
        *("--loss", f"tests.gallery.normalisers:{loss}", "--aggregation", "prompt-mean"),
        *("--world-size", "2", "--micro-batches", "2,3"),
    ]
    run = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    out = run.stdout
    assert f"result: {verdict}" in out, out[-3000:] + run.stderr[-2000:]
    assert "NOTE test_loss_aggregation: aggregation: prompt-mean [declared, measured]" in out, out[-3000:]
    if verdict == "CONFORMANT":
        assert run.returncode == 0 and "scale-out      3     0" in out, out[-3000:]
    else:
        assert "FAIL test_scaleout_gradient: scaleout_gradient[W=2,M=2]: prompt's tokens counted per" in out
