"""The HTML report in a real headless browser (Debian's `chromium`), and notebook rendering.

The report must load with no network, draw, and show one roofline point per computed row. Without
chromium the browser tests skip locally but FAIL in CI (CI=true), where `.ci/run` installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from shardline.cli.main import main
from shardline.report.html import json_for_script
from tests.conftest import require

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--virtual-time-budget=5000",
]
HOSTILE = [
    '<img src=x onerror="document.title=1">',
    "</script><script>document.title=2</script>",
    "a & b <!--",
    "see https://example.com/x.js",
]


def _chromium() -> str:
    for candidate in (
        "/usr/bin/chromium",
        shutil.which("chromium"),
        shutil.which("chromium-browser"),
    ):
        if candidate and Path(candidate).exists():
            return candidate
    if os.environ.get("CI") == "true":
        pytest.fail(
            "chromium is missing; CI must install Debian's chromium (apt-get install chromium)"
        )
    pytest.skip("chromium is not installed (apt-get install chromium)")


def _browse(page: Path, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    profile = tmp_path / f"profile-{len(list(tmp_path.iterdir()))}"
    return subprocess.run(
        [
            _chromium(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            *extra,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )


def _report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], source: Path, *extra: str
) -> tuple[Path, int]:
    out = tmp_path / "report.html"
    code = main(["report", str(source), "--html", str(out), *extra])
    capsys.readouterr()
    return out, code


def _sheet(tmp_path: Path) -> Path:
    lines = ["name,M,K,N,count"]
    lines += [f'"{name}",16,4096,16384,1' for name in HOSTILE]
    lines += ["square,8192,8192,8192,2", "decode,8,8192,8192,32", "bad row,x,1,1,1"]
    path = tmp_path / "shapes.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_page_is_self_contained_and_escapes_user_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out, code = _report(tmp_path, capsys, _sheet(tmp_path), "--hw", "a100-40gb")
    assert code == 2  # the bad row is reported; the page is still written with the others
    page = out.read_text(encoding="utf-8")
    # no external resource of any kind: no src/href to a URL, no @import, and a CSP that forbids it
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "@import" not in page and "default-src 'none'" in page
    assert re.findall(r"https?://", page) == []  # not even a namespace URI
    # user text only inside the JSON block, with < > & escaped
    for name in HOSTILE:
        assert name not in page
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert json_for_script({"x": "</script>&"}) == '{"x":"\\u003c\\/script\\u003e\\u0026"}'
    assert json.loads(json_for_script({"u": "https://x.example/a"})) == {"u": "https://x.example/a"}
    assert "//" not in json_for_script({"u": "https://x.example/a"})


def test_report_draws_one_point_per_row_in_chromium(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _chromium()
    out, _ = _report(tmp_path, capsys, _sheet(tmp_path), "--hw", "a100-40gb")
    dom = _browse(out, tmp_path, "--dump-dom").stdout
    assert 'data-ready="1"' in dom  # the script ran to the end
    n_good = len(HOSTILE) + 2
    assert f'data-points="{n_good}"' in dom
    assert len(re.findall(r'<circle class="pt (?:memory|compute)', dom)) == n_good
    assert (
        len(re.findall(r'<circle class="pt memory', dom)) == n_good - 1
    )  # only the square is compute-bound
    assert f"{n_good} points" in dom and f"{n_good + 1} rows" in dom
    # hostile names are text, never markup: no injected element and the title unchanged
    assert "<img" not in dom and "<title>Roofline of shapes.csv</title>" in dom
    assert "&lt;img src=x onerror=" in dom and "document.title=2" in dom
    assert len(re.findall(r"<tr data-row=", dom)) == n_good + 1  # every row in the table
    shot = tmp_path / "shot.png"
    _browse(out, tmp_path, "--window-size=1000,900", f"--screenshot={shot}")
    image = pytest.importorskip("matplotlib.image").imread(shot)
    rgb = (image[..., :3] * 255).round().astype(int)
    green = (
        (abs(rgb[..., 0] - 0x2E) < 8)
        & (abs(rgb[..., 1] - 0x9E) < 8)
        & (abs(rgb[..., 2] - 0x44) < 8)
    ).sum()
    orange = (
        (abs(rgb[..., 0] - 0xE8) < 8)
        & (abs(rgb[..., 1] - 0x77) < 8)
        & (abs(rgb[..., 2] - 0x2E) < 8)
    ).sum()
    assert green > 20 and orange > 20  # points drawn in both colours


def test_report_of_a_workload_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _chromium()
    toml = tmp_path / "w.toml"
    toml.write_text(
        'name = "two layers"\nrepeat = 4\n[dims]\nM = 4096\n'
        '[[layer]]\nname = "up"\nm = 4096\nk = 4096\nn = 16384\n'
        '[[layer]]\nname = "down <b>"\nm = 4096\nk = 16384\nn = 4096\n',
        encoding="utf-8",
    )
    out, code = _report(tmp_path, capsys, toml, "--hw", "h100-sxm")
    assert code == 0
    dom = _browse(out, tmp_path, "--dump-dom").stdout
    assert 'data-points="2"' in dom and "<b>" not in dom and "down &lt;b&gt;" in dom


def test_report_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sheet = _sheet(tmp_path)
    assert main(["report", str(sheet), "--html", str(sheet)]) == 2
    assert main(["report", str(sheet), "--html", str(tmp_path / "nodir" / "r.html")]) == 2
    assert main(["report", str(sheet), "--html", str(tmp_path / "r.txt")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)


# ------------------------------------------------------------------------------------------------
# notebooks


def test_html_view_escapes_and_shows_the_numbers() -> None:
    from shardline.ops.roofline import einsum, matmul
    from shardline.report.notebook import to_html

    r = matmul(16, 4096, 16384, hw="a100-40gb")
    table = to_html(r)
    assert "<table" in table and f"{2 * 16 * 4096 * 16384:,}" in table and ">memory<" in table
    assert "a[M,K] * b[K,N] -&gt; out[M,N]" in table  # the spec's '>' is escaped
    named = einsum("Xx[B,D] * W[D,F] -> Y[B,F]", {"B": 2, "D": 3, "F": 4}, "a100-40gb")
    assert "-&gt;" in to_html(named)


def test_vectorized_result_tabulates_one_row_per_element() -> None:
    import numpy as np

    from shardline.ops.roofline import matmul
    from shardline.report.frames import to_records
    from shardline.report.notebook import to_html

    r = matmul(np.array([1, 256, 4096]), 4096, 4096, hw="a100-40gb")
    records = to_records(r.to_dict())
    assert [rec["M"] for rec in records] == [1, 256, 4096]
    assert [rec["flops"] for rec in records] == [2 * m * 4096 * 4096 for m in (1, 256, 4096)]
    assert records[0]["bytes_b"] == 2 * 4096 * 4096 and records[0]["hardware"] == "a100-40gb"
    assert to_html(r).count("<tr>") == 4  # the header and three rows


def test_to_pandas_or_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from shardline.errors import InputError
    from shardline.ops.roofline import matmul
    from shardline.report.notebook import to_pandas

    r = matmul(64, 64, 64, hw="a100-40gb")
    monkeypatch.setitem(sys.modules, "pandas", None)  # as if pandas were not installed
    with pytest.raises(InputError, match="pip install pandas"):
        to_pandas(r)
    monkeypatch.undo()
    require("pandas", "pip install pandas")
    frame = to_pandas(r)
    assert frame.shape[0] == 1 and int(frame["flops"][0]) == 2 * 64**3


def test_sheet_result_renders_in_a_notebook(tmp_path: Path) -> None:
    from shardline.io.sheet_results import roofline_rows
    from shardline.io.sheets import read_shape_rows
    from shardline.report.notebook import to_html, to_pandas

    src = tmp_path / "s.csv"
    src.write_text(
        'name,M,K,N,count\n"<b>decode</b>",8,4096,16384,4\nsquare,4096,4096,4096,1\n',
        encoding="utf-8",
    )
    result = roofline_rows(read_shape_rows(src), "a100-40gb")
    page = to_html(result)
    assert "<b>" not in page and "&lt;b&gt;decode&lt;/b&gt;" in page  # user text escaped
    assert page.count("<tr>") == 3  # the header and two rows
    assert f"{2 * 8 * 4096 * 16384:,}" in page and ">memory<" in page and ">compute<" in page
    require("pandas", "pip install pandas")
    frame = to_pandas(result)
    assert list(frame["name"]) == ["<b>decode</b>", "square"]
    assert list(frame["flops"]) == [2 * 8 * 4096 * 16384, 2 * 4096**3]
    # Q = s(MK + KN + MN), bf16 s = 2 B
    assert int(frame["bytes"][1]) == 2 * 3 * 4096**2 and list(frame["count"]) == [4, 1]


class _HtmlFormatter:
    """IPython's `display_formatter.formatters["text/html"]`, as far as `for_type` goes."""

    def __init__(self) -> None:
        self.by_type: dict[type, Any] = {}

    def for_type(self, typ: type, func: Any) -> None:
        self.by_type[typ] = func


class _Shell:
    def __init__(self) -> None:
        self.display_formatter = SimpleNamespace(formatters={"text/html": _HtmlFormatter()})


def test_importing_shardline_leaves_the_core_classes_alone() -> None:
    """No import side effects: `import shardline` loads no report module and gives no class a
    notebook method; the views are functions of the report layer."""
    code = (
        "import sys, shardline\n"
        "from shardline.ops.roofline import RooflineResult\n"
        "from shardline.workload.stack import StackResult\n"
        "edges = ('shardline.report', 'shardline.io')\n"
        "print(sorted(m for m in sys.modules if m.startswith(edges)))\n"
        "print([hasattr(c, n) for c in (RooflineResult, StackResult)"
        " for n in ('_repr_html_', 'to_pandas')])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True
    )
    assert proc.stdout.splitlines() == ["[]", "[False, False, False, False]"]


def test_load_ext_shardline_shows_results_as_tables() -> None:
    """`%load_ext shardline` registers the report's HTML view for each result class."""
    import shardline
    from shardline.answers.sheet_model import SheetResult
    from shardline.ops.roofline import RooflineResult
    from shardline.planning.results import PlanSet
    from shardline.report.notebook import VIEWS, to_html
    from shardline.workload.stack import StackResult

    shell = _Shell()
    shardline.load_ipython_extension(shell)
    formatter = shell.display_formatter.formatters["text/html"]
    classes = {RooflineResult, SheetResult, StackResult, PlanSet}
    assert set(formatter.by_type) == classes == set(VIEWS)
    assert all(func is to_html for func in formatter.by_type.values())
    r = shardline.matmul(2, 3, 4, hw="a100-40gb")
    assert f'<td class="">{2 * 2 * 3 * 4}' in formatter.by_type[RooflineResult](r)  # F = 2·M·K·N
    with pytest.raises(TypeError, match="no notebook view of a str"):
        to_html("not a result")


def test_report_names_do_not_overlap_and_the_curves_have_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # issue 28: the seed 003 sheet's point names piled up on the roofline, and the "Achieved
    # FLOP/s versus M" legend had names in colour but no keys
    _chromium()
    out, code = _report(tmp_path, capsys, ROOT / "examples" / "seed003_shapes.csv", "--hw", "h100")
    assert code == 0
    dom = _browse(out, tmp_path, "--dump-dom").stdout
    assert 'data-ready="1"' in dom
    assert 'data-label-overlaps="0"' in dom  # measured in the browser (getBBox)
    assert len(re.findall(r'<text[^>]*class="ptlabel"', dom)) >= 5  # names are still shown
    curves = int(re.search(r"(\d+) curves", dom).group(1))  # type: ignore[union-attr]
    assert curves >= 1
    assert len(re.findall(r'<line[^>]*class="key"', dom)) == curves
    assert len(re.findall(r'<circle[^>]*class="key"', dom)) == curves
