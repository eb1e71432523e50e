"""`shardline drill`: repeatable questions, grading with the stated tolerance (numbers within 5%,
critical M rounded to an integer first, words exactly), expected values re-derived by hand, and
the CLI contract (`--answers FILE --json`).

Chip constants (A100 SXM4 40 GB, the catalog's a100-40gb.toml, NVIDIA A100 datasheet): dense bf16
peak P = 312e12 FLOP/s, HBM W = 1.555e12 B/s; NVLink 3: 12 links x 25e9 B/s = 300e9 B/s egress
per GPU through the NVSwitch, hop latency alpha = 1e-6 s.
"""

from __future__ import annotations

import io
import json
import math
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.drill import (
    REL_TOLERANCE,
    TOPICS,
    Question,
    grade,
    make_questions,
    normalize_word,
    parse_number,
)
from shardline.hardware import load_chip

A100 = load_chip("a100-40gb")
P_BF16 = 312e12  # FLOP/s
W_HBM = 1.555e12  # B/s
W_NVLINK = 12 * 25e9  # B/s, one-way egress per GPU
ALPHA = 1e-6  # s per hop
SEEDS = (0, 1, 7, 42, 2024)


def _questions(topic: str, seed: int, count: int = 4) -> list[Question]:
    return make_questions((topic,), [A100], seed, count)


def _as_text(q: Question, scale: float = 1.0) -> str:
    """The expected value times `scale`, written with units as a person would."""
    if q.unit == "word":
        return str(q.expected)
    v = float(q.expected) * scale
    return {
        "FLOP/B": f"{v:.6g} FLOP/B",
        "FLOP": f"{v / 1e9:.6g} GFLOP",
        "s": f"{v * 1e3:.6g} ms",
        "": f"{v:.6g}",
    }[q.unit]


# --- repeatability -----------------------------------------------------------------------------


def test_same_seed_same_questions() -> None:
    for seed in SEEDS:
        first = make_questions(TOPICS, [A100], seed, 12)
        again = make_questions(TOPICS, [A100], seed, 12)
        assert [(q.topic, q.text, q.expected) for q in first] == [
            (q.topic, q.text, q.expected) for q in again
        ]
    texts = {tuple(q.text for q in make_questions(TOPICS, [A100], s, 6)) for s in SEEDS}
    assert len(texts) == len(SEEDS)  # different seeds, different sessions


def test_topics_cycle_in_order() -> None:
    qs = make_questions(TOPICS, [A100], 3, 8)
    assert [q.topic for q in qs] == list(TOPICS) + list(TOPICS[:2])


# --- grading -----------------------------------------------------------------------------------


@pytest.mark.parametrize("topic", TOPICS)
def test_expected_is_right_and_20_percent_off_is_wrong(topic: str) -> None:
    for seed in SEEDS:
        for q in _questions(topic, seed):
            assert grade(q, _as_text(q)).correct, (q.text, _as_text(q))
            if q.unit == "word":
                other = next(c for c in q.choices if c != q.expected)
                assert not grade(q, other).correct
                assert grade(q, str(q.expected).upper()).correct
            else:
                assert not grade(q, _as_text(q, 1.2)).correct
                assert not grade(q, _as_text(q, 0.8)).correct


def test_tolerance_edges() -> None:
    q = Question("intensity", "?", {}, 100.0, "FLOP/B", REL_TOLERANCE)
    assert REL_TOLERANCE == 0.05
    assert grade(q, "104.9").correct and grade(q, "95.1 FLOP/B").correct
    assert not grade(q, "105.1").correct and not grade(q, "94.9").correct
    assert grade(q, "0.1k").correct  # 0.1 x 1e3 = 100


def test_critical_m_rounds_to_an_integer_first() -> None:
    q = Question("critical-m", "?", {}, 200.0, "", REL_TOLERANCE, round_to_int=True)
    assert grade(q, "209.6").correct  # rounds to 210 = 200 x 1.05
    assert not grade(q, "210.6").correct  # rounds to 211 > 210
    assert not grade(q, "240").correct


def test_word_answers() -> None:
    q = Question("bound", "?", {}, "memory", "word", 0.0, ("compute", "memory"))
    for answer in ("memory", "Memory", "MEMORY-bound", " memory bound "):
        assert grade(q, answer).correct
    assert not grade(q, "compute").correct
    assert not grade(q, "network").correct
    assert normalize_word("All_Gather") == normalize_word("all-gather") == "allgather"


def test_no_answer_and_unreadable_answers_are_wrong() -> None:
    q = Question("collective", "?", {}, 1e-3, "s", REL_TOLERANCE)
    assert not grade(q, None).correct
    assert grade(q, "  ").note == "no answer"
    bad = grade(q, "fast")
    assert not bad.correct and "cannot read" in bad.note
    assert not grade(q, "1 GB").correct  # a size is not a time


@pytest.mark.parametrize(
    ("text", "unit", "value"),
    [
        ("1.2 ms", "s", 1.2e-3),
        ("350 us", "s", 350e-6),
        ("3e12", "FLOP", 3e12),
        ("4 TFLOP", "FLOP", 4e12),
        ("68.7 GFLOPs", "FLOP", 68.7e9),
        ("512 GiB", "B", 512 * 2**30),
        ("25 MB", "B", 25e6),
        ("2.7k", "FLOP/B", 2700.0),
        ("455 FLOP/byte", "FLOP/B", 455.0),
        ("2,048", "", 2048.0),
        ("12.5%", "", 0.125),
    ],
)
def test_parse_number(text: str, unit: str, value: float) -> None:
    assert parse_number(text, unit) == pytest.approx(value, rel=1e-12)


# --- expected values, derived by hand ----------------------------------------------------------


def test_intensity_by_hand() -> None:
    for seed in SEEDS:
        for q in _questions("intensity", seed):
            m, k, n = q.given["M"], q.given["K"], q.given["N"]
            # I = F / Q = 2MKN / (2 B x (MK + KN + MN)) for bf16
            by_hand = 2 * m * k * n / (2 * (m * k + k * n + m * n))
            assert q.expected == pytest.approx(by_hand, rel=1e-12)


def test_bound_by_hand() -> None:
    ridge = P_BF16 / W_HBM  # 200.6 FLOP/B
    seen = set()
    for seed in SEEDS:
        for q in _questions("bound", seed):
            m, k, n = q.given["M"], q.given["K"], q.given["N"]
            intensity = 2 * m * k * n / (2 * (m * k + k * n + m * n))
            assert q.expected == ("compute" if intensity >= ridge else "memory")
            seen.add(q.expected)
    assert seen == {"compute", "memory"}


def test_critical_m_by_hand() -> None:
    for seed in SEEDS:
        for q in _questions("critical-m", seed):
            k, n = q.given["K"], q.given["N"]
            # 2MKN/P >= 2(MK + KN + MN)/W  <=>  M >= KN / (KN·W/P - K - N)
            bound = k * n / (k * n * W_HBM / P_BF16 - k - n)
            assert q.expected == math.ceil(bound)
            assert q.expected > P_BF16 / W_HBM  # above the ridge, 200.6: small K, N add bytes


def test_pipeline_by_hand() -> None:
    seen = set()
    for seed in SEEDS:
        for q in _questions("pipeline", seed):
            p, m, v = q.given["stages"], q.given["microbatches"], q.given["interleave"]
            # one chunk: the bubble's share of the step, (P - 1)/(m + P - 1) (GPipe);
            # V chunks: the bubble over the ideal step, (P - 1)/(V m) (interleaved 1F1B)
            by_hand = (p - 1) / (m + p - 1) if v == 1 else (p - 1) / (v * m)
            assert q.expected == pytest.approx(by_hand, rel=1e-12)
            seen.add(v == 1)
    assert seen == {True, False}


def test_collective_by_hand() -> None:
    for seed in SEEDS:
        for q in _questions("collective", seed):
            v, n = q.given["bytes"], q.given["devices"]
            # through the NVSwitch: all-reduce 2(n-1)/n V/W + 2 alpha; gather/scatter half of it
            hops = 2 if q.given["kind"] == "all-reduce" else 1
            by_hand = hops * ((n - 1) / n * v / W_NVLINK + ALPHA)
            assert q.expected == pytest.approx(by_hand, rel=1e-12)


def test_sharding_by_hand() -> None:
    needs = {
        ("m", "split"): "none",
        ("n", "split"): "none",
        ("m", "replicated"): "all-gather",  # every device needs the other row blocks of C
        ("n", "replicated"): "all-gather",
        ("k", "split"): "reduce-scatter",  # partial sums, each device keeps its block
        ("k", "replicated"): "all-reduce",  # partial sums, every device keeps all of C
    }
    for seed in SEEDS:
        for q in _questions("sharding", seed, 6):
            g = q.given
            if g["ask"] == "collective":
                assert q.expected == needs[(g["along"], g["output"])]
            else:
                assert q.expected == 2 * g["M"] * g["K"] * g["N"] / g["devices"]


# --- the command line --------------------------------------------------------------------------


def _drill_json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(["drill", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_cli_json_contract_and_score(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    qs = make_questions(("pipeline",), [A100], 5, 3)
    answers = tmp_path / "answers.txt"
    # right, 20% off (wrong), and a blank line (no answer, wrong)
    answers.write_text(f"{_as_text(qs[0])}\n{_as_text(qs[1], 1.2)}\n\n", encoding="utf-8")
    argv = ["--topic", "pipeline", "--seed", "5", "--count", "3", "--answers", str(answers)]
    out = _drill_json(capsys, argv)
    assert set(out) >= {"questions", "score", "count", "missed_topics", "seed", "hw"}
    keys = {"topic", "question", "given", "expected", "unit", "tolerance", "correct"}
    assert all(set(q) >= keys | {"worked_answer"} for q in out["questions"])
    assert [q["correct"] for q in out["questions"]] == [True, False, False]
    # `given` is the answer as written in the file (None for the blank line)
    assert [q["given"] for q in out["questions"]] == [_as_text(qs[0]), _as_text(qs[1], 1.2), None]
    assert out["questions"][0]["inputs"] == qs[0].given
    assert out["score"] == 1 and out["count"] == 3
    assert out["missed_topics"] == ["pipeline"] and out["seed"] == 5 and out["hw"] == "a100-40gb"
    assert [q["expected"] for q in out["questions"]] == [q.expected for q in qs]
    assert "bubble" in out["questions"][0]["worked_answer"]
    assert _drill_json(capsys, argv) == out  # the same seed, the same session


def test_cli_all_topics_and_worked_answer_calls_the_bound_first(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    answers = tmp_path / "a.txt"
    answers.write_text("", encoding="utf-8")
    out = _drill_json(capsys, ["--seed", "11", "--count", "6", "--answers", str(answers)])
    assert [q["topic"] for q in out["questions"]] == list(TOPICS)
    assert out["score"] == 0 and out["missed_topics"] == list(TOPICS)
    bound_q = out["questions"][1]["worked_answer"]
    assert bound_q.index("-BOUND") < bound_q.index("## Counts")


def test_cli_text_and_interactive(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    q = make_questions(("bound",), [A100], 9, 3)
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{q[0].expected}\nnetwork\n"))
    assert main(["drill", "--topic", "bound", "--seed", "9", "--count", "3"]) == 0
    text = capsys.readouterr().out
    assert "-> RIGHT" in text and "-> WRONG" in text
    assert "Score: 1/2 (missed topics: bound)" in text  # end of input ends the session


@pytest.mark.parametrize(
    "argv",
    [
        ["--topic", "latency"],
        ["--count", "0"],
        ["--count", "1001"],
        ["--answers", "/nonexistent/answers.txt"],
        ["--hw", "no-such-chip"],
    ],
)
def test_cli_bad_input(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["drill", "--seed", "1", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and err.count("\n") == 1
