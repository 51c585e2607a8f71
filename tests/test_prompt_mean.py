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
