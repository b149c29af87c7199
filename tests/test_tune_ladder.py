"""Issue #49: the ladder of smaller input sizes below tune's choice, each tried only while the
size above held the budget and paid."""

from __future__ import annotations

from dataclasses import replace

import pytest

from visionrt.tune import Candidate, Limits, Measurement
from visionrt.tune.ladder import descend, ladder_sizes
from visionrt.tune.mixed import try_mixed
from visionrt.tune.search import OutOfTime, SearchResult, Trial

INT8 = Candidate("openvino", "int8", (512, 640), fold=True, export="openvino-int8")
VTEST, MODEL = (576, 768), (640, 640)


def test_sizes_keep_the_frames_aspect_below_the_chosen_size() -> None:
    assert ladder_sizes(VTEST, MODEL, (512, 640)) == [(448, 576), (384, 512), (352, 448),
                                                       (288, 384)]  # fmt: skip
    assert ladder_sizes((1080, 1920), MODEL, (384, 640)) == [(352, 576), (288, 512), (256, 448),
                                                             (224, 384)]  # fmt: skip
    assert ladder_sizes((768, 576), MODEL, (640, 512))[0] == (576, 448)  # portrait
    assert ladder_sizes((500, 500), MODEL, (640, 640))[0] == (576, 576)
    # Never larger than the choice on either side.
    assert ladder_sizes(VTEST, MODEL, (448, 576)) == [(384, 512), (352, 448), (288, 384)]
    assert ladder_sizes(VTEST, (320, 320), (320, 320)) == [(224, 288), (192, 256), (192, 224),
                                                           (160, 192)]  # fmt: skip


class Sized:
    """FPS and fidelity by input size (vtest's demo model at INT8, issue #49's figures)."""

    def __init__(self, figures: dict[tuple[int, int], tuple[float, float]]) -> None:
        self.figures, self.asked = figures, []

    def __call__(self, candidate: Candidate, frames: int) -> Measurement:
        assert candidate.input_size is not None
        self.asked.append(candidate.input_size)
        fps, fidelity = self.figures[candidate.input_size]
        return Measurement(fps, 30.0, 60.0, fidelity, frames)


def _search(best: Candidate, fps: float, fidelity: float) -> SearchResult:
    trial = Trial(best, [Measurement(fps, 30.0, 60.0, fidelity, 300)], reached=2)
    return SearchResult([trial], trial, None)


def test_the_ladder_stops_at_the_first_size_that_breaks_the_budget() -> None:
    evaluate = Sized({(448, 576): (35.0, 0.43), (384, 512): (45.0, 0.52)})
    search = _search(INT8, 27.3, 0.979)
    lines: list[str] = []
    ladder = descend(search, evaluate, Limits(), 300, VTEST, MODEL,
                     on_trial=lambda t, n: lines.append(t.candidate.label))  # fmt: skip
    assert ladder is not None
    assert evaluate.asked == [(448, 576)]  # 384×512 is never tried
    assert search.best is search.trials[0]  # the search's choice stays
    assert search.trials[1].why_out == "fidelity 0.430 < 0.95"
    assert lines == ["openvino int8 448×576 fold"]
    assert ladder.line() == (
        "sizes: 448×576 tried, fidelity 0.430 < 0.95: the ladder stops there (384×512,"
        " 352×448, 288×384 not tried)"
    )
    assert ladder.to_json()["tried"] == [
        {"size": [448, 576], "fps": 35.0, "fidelity": 0.43, "why_not": "fidelity 0.430 < 0.95"}
    ]


def test_the_smallest_size_that_holds_the_budget_and_pays_is_chosen() -> None:
    evaluate = Sized({(448, 576): (35.0, 0.97), (384, 512): (44.0, 0.96),
                      (352, 448): (43.0, 0.955)})  # fmt: skip
    search = _search(INT8, 27.3, 0.979)
    ladder = descend(search, evaluate, Limits(), 300, VTEST, MODEL)
    assert ladder is not None
    assert evaluate.asked == [(448, 576), (384, 512), (352, 448)]
    assert search.best is not None
    assert search.best.candidate == replace(INT8, input_size=(384, 512))
    assert search.best.reached == 2  # as far as the choice it came from
    assert search.trials[0].why_out == "448×576 holds the budget and is faster"
    assert search.trials[3].why_out == "no better than 384×512"
    assert "352×448 tried, no better than 384×512" in ladder.line()


def test_the_ladder_starts_nothing_past_the_budget_and_keeps_what_it_measured() -> None:
    evaluate = Sized({(448, 576): (35.0, 0.97)})
    search = _search(INT8, 27.3, 0.979)
    spent = iter([False, True])
    ladder = descend(search, evaluate, Limits(), 300, VTEST, MODEL, over=lambda: next(spent))
    assert ladder is not None
    assert evaluate.asked == [(448, 576)]
    assert search.best is not None
    assert search.best.candidate.input_size == (448, 576)
    assert ladder.stopped == "the budget was spent"
    assert ladder.untried == [(384, 512), (352, 448), (288, 384)]

    def abandoned(candidate: Candidate, frames: int) -> Measurement:
        raise OutOfTime

    with pytest.raises(OutOfTime):  # the tuner keeps the search's choice and says so
        descend(_search(INT8, 27.3, 0.979), abandoned, Limits(), 300, VTEST, MODEL)


def test_nothing_chosen_or_no_smaller_size_leaves_the_search_as_it_is() -> None:
    assert descend(SearchResult([], None, None), Sized({}), Limits(), 300, VTEST, MODEL) is None
    search = _search(replace(INT8, input_size=(288, 384)), 60.0, 0.96)
    ladder = descend(search, Sized({}), Limits(), 300, VTEST, MODEL)
    assert ladder is not None
    assert ladder.line() == "sizes: no smaller size to try"


# -- mixed precision where full INT8 falls short ------------------------------------------------

BF16 = Candidate("openvino", "bf16", (480, 640), fold=True)
INT8_CUP = replace(INT8, input_size=(480, 640))


def _short_search() -> SearchResult:
    """The 480×640 camera's search: INT8 out at 0.921 (issue #49), bf16 chosen."""
    int8 = Trial(INT8_CUP, [Measurement(30.0, 30.0, 60.0, 0.921, 300)], "fidelity 0.921 < 0.95", 2)
    bf16 = Trial(BF16, [Measurement(20.0, 40.0, 70.0, 0.99, 300)], reached=2)
    return SearchResult([bf16, int8], bf16, None)


def test_int8_that_falls_short_gets_its_mixed_precision_twin() -> None:
    search = _short_search()
    asked: list[Candidate] = []

    def evaluate(candidate: Candidate, frames: int) -> Measurement:
        asked.append(candidate)
        return Measurement(26.0, 33.0, 65.0, 0.962, frames)

    twin = try_mixed(search, evaluate, Limits(), 300)
    assert twin is not None
    assert asked == [replace(INT8_CUP, export="openvino-int8-ac")]
    assert twin.candidate.label == "openvino int8+float 480×640 fold"
    assert search.best is twin
    assert twin.reached == 2
    assert (
        search.trials[0].why_out
        == "openvino int8+float 480×640 fold holds the budget and is faster"
    )


def test_a_twin_that_is_out_or_slower_leaves_the_choice() -> None:
    slower = "no better than openvino bf16 480×640 fold"
    for fps, fidelity, why in ((26.0, 0.94, "fidelity 0.940 < 0.95"), (19.0, 0.97, slower)):
        search = _short_search()
        twin = try_mixed(search, lambda c, n, f=fps, d=fidelity: Measurement(f, 1, 1, d, n),
                         Limits(), 300)  # fmt: skip
        assert twin is not None
        assert twin.why_out == why
        assert search.best is search.trials[0]
        assert search.trials[-1] is twin


def test_no_int8_short_of_the_budget_tries_nothing() -> None:
    search = _search(INT8, 27.3, 0.979)  # INT8 held the budget: nothing to restore
    assert try_mixed(search, Sized({}), Limits(), 300) is None
    said: list[str] = []
    short = try_mixed(
        _short_search(), Sized({}), Limits(), 300, left=lambda: 300.0, say=said.append
    )
    assert short is None  # 5 minutes left: its export would run past the budget
    assert said == [
        "int8+float: not tried, its export needs ~8 min of the budget (--budget-minutes)"
    ]
