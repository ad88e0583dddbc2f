"""Assembling a new file from a plan: edits in file order, everything else copied."""

from __future__ import annotations

import pytest

from riffd.repair.plan import InsertLine, LineSpan, RemoveLine, ReplaceLine, render

ORIGINAL = b"a\nb\nc\n"
A, B, C = LineSpan(1, 0, 2), LineSpan(2, 2, 2), LineSpan(3, 4, 2)


def test_insert_after_a_line_goes_before_an_edit_of_the_next_line() -> None:
    assert (
        render(ORIGINAL, [ReplaceLine(B, b"B\n", ""), InsertLine(A, b"new\n", "")])
        == b"a\nnew\nB\nc\n"
    )
    assert render(ORIGINAL, [RemoveLine(B, ""), InsertLine(A, b"new\n", "")]) == b"a\nnew\nc\n"


def test_insert_after_an_edited_line_follows_it() -> None:
    assert (
        render(ORIGINAL, [InsertLine(A, b"new\n", ""), ReplaceLine(A, b"A\n", "")])
        == b"A\nnew\nb\nc\n"
    )


def test_insert_after_the_last_line() -> None:
    assert render(ORIGINAL, [InsertLine(C, b"new\n", "")]) == ORIGINAL + b"new\n"


def test_no_edits_copies_the_file() -> None:
    assert render(ORIGINAL, []) == ORIGINAL


@pytest.mark.parametrize(
    "edits",
    [
        [RemoveLine(B, ""), ReplaceLine(B, b"B\n", "")],
        [RemoveLine(LineSpan(4, 6, 2), "")],
    ],
)
def test_overlapping_or_out_of_range_edits_are_refused(
    edits: list[RemoveLine | ReplaceLine],
) -> None:
    with pytest.raises(ValueError):
        render(ORIGINAL, edits)
