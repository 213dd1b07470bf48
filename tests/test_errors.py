"""Every user mistake in a `.tir` file is one located error line, the source line and a caret.

`tests/bad_inputs/*.tir` each hold one mistake; the first line of each file says what must be
reported: `// expect: LINE:COL: MESSAGE-SUBSTRING`. The tests check the library (`load`), the CLI
in-process (`main(["check", ...])`) and, once, a real `python -m eqsat_nb` process.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eqsat_nb.cli import main
from eqsat_nb.errors import Loc, ShapeError, TirError
from eqsat_nb.ir.parse import load, parse

REPO = Path(__file__).resolve().parent.parent
BAD = Path(__file__).resolve().parent / "bad_inputs"
BAD_FILES = sorted(BAD.glob("*.tir"))
EXPECT = re.compile(r"// expect: (\d+):(\d+): (.+)")

VALID = """\
// a residual block
func @block(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w1 = weight @w1 : tensor<4x4x3x3xf32>
  %0 = conv2d(%x, %w1) {stride = [1, 1], pad = "same", act = "relu"} : tensor<1x4x8x8xf32>
  %1 = ewadd(%0, %x) : tensor<1x4x8x8xf32>
  %a, %b = split(%1) {axis = 1, sizes = [2, 2]} : tensor<1x2x8x8xf32>, tensor<1x2x8x8xf32>
  %2 = concat(%b, %a) {axis = 1} : tensor<1x4x8x8xf32>
  return %2
}
"""


def expectation(path: Path) -> tuple[int, int, str]:
    first = path.read_text(encoding="utf-8").split("\n", 1)[0]
    m = EXPECT.fullmatch(first)
    assert m, f"{path.name}: first line must be `// expect: LINE:COL: MESSAGE`, got {first!r}"
    return int(m[1]), int(m[2]), m[3]


def assert_located(text: str, path: Path | str, line: int, col: int, message: str,
                   source: str) -> None:
    """`text` is exactly: head line, two-space-indented source line, caret under `col`."""
    lines = text.split("\n")
    assert len(lines) == 3, text
    head = f"{path}:{line}:{col}: error: "
    assert lines[0].startswith(head), f"want {head!r}...\n got {lines[0]!r}"
    assert message in lines[0][len(head):], f"want {message!r} in\n {lines[0]!r}"
    src_lines = source.split("\n")
    src = src_lines[line - 1] if line <= len(src_lines) else ""
    assert lines[1] == "  " + src.rstrip("\r").expandtabs(1)
    assert lines[2] == "  " + " " * (col - 1) + "^"


def test_bad_inputs_cover_enough_cases():
    assert len(BAD_FILES) >= 30
    for path in BAD_FILES:
        expectation(path)


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_load_reports_located_error(path: Path):
    line, col, message = expectation(path)
    with pytest.raises(TirError) as info:
        load(path)
    err = info.value
    assert err.loc == Loc(line, col)
    assert err.file == str(path)
    assert_located(str(err), path, line, col, message, path.read_text(encoding="utf-8"))
    if path.stem.startswith("shape_"):
        assert isinstance(err, ShapeError)


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_cli_check_reports_error(path: Path, capsys):
    line, col, message = expectation(path)
    assert main(["check", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert "Traceback" not in err
    assert err.endswith("\n")
    assert_located(err[:-1], path, line, col, message, path.read_text(encoding="utf-8"))


def test_parse_without_file_name_says_input():
    with pytest.raises(TirError) as info:
        parse("func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %y\n}\n")
    assert str(info.value).split("\n")[0] == "<input>:2:10: error: value %y is not defined"


def test_check_several_files_reports_each(tmp_path, capsys):
    good = tmp_path / "good.tir"
    good.write_text(VALID)
    bad1, bad2 = BAD / "op_unknown.tir", BAD / "shape_ewadd.tir"
    assert main(["check", str(bad1), str(good), str(bad2)]) == 1
    out, err = capsys.readouterr()
    assert out.startswith(f"{good}: ok: ")
    heads = [ln for ln in err.split("\n") if ": error: " in ln]
    assert [h.split(": error: ")[0] for h in heads] == [f"{bad1}:4:8", f"{bad2}:3:8"]


def test_no_traceback_from_a_real_process(tmp_path):
    good = tmp_path / "good.tir"
    good.write_text(VALID)
    files = [BAD / "syntax_missing_rbrace.tir", BAD / "shape_conv_channels.tir", good,
             tmp_path / "missing.tir"]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-m", "eqsat_nb", "check", *map(str, files)],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.stdout.startswith(f"{good}: ok: ")
    assert f"{files[0]}:6:12: error: unexpected end of file, expected ',', '}}'" in proc.stderr
    assert f"{files[1]}:4:8: error: conv2d: input has 64 channels" in proc.stderr
    assert f"{files[3]}: error: cannot read file: No such file or directory" in proc.stderr


# ------------------------------------------------------------------ files that cannot be read

def test_missing_file(tmp_path, capsys):
    path = tmp_path / "nope.tir"
    with pytest.raises(TirError) as info:
        load(path)
    assert str(info.value) == f"{path}: error: cannot read file: No such file or directory"
    assert main(["check", str(path)]) == 1
    assert main(["print", str(path)]) == 1
    assert main(["interp", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.count(f"{path}: error: cannot read file") == 3
    assert "Traceback" not in err


def test_directory_instead_of_file(tmp_path, capsys):
    assert main(["check", str(tmp_path)]) == 1
    _, err = capsys.readouterr()
    assert err.startswith(f"{tmp_path}: error: cannot read file: ")
    assert "Traceback" not in err


def test_non_utf8_file(tmp_path, capsys):
    path = tmp_path / "latin1.tir"
    path.write_bytes("// r\xe9seau\nfunc @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n"
                     "  return %x\n}\n".encode("latin-1"))
    with pytest.raises(TirError) as info:
        load(path)
    assert str(info.value) == f"{path}: error: file is not UTF-8 text"
    assert main(["check", str(path)]) == 1
    _, err = capsys.readouterr()
    assert err == f"{path}: error: file is not UTF-8 text\n"


def test_empty_file(tmp_path):
    path = tmp_path / "empty.tir"
    path.write_text("")
    with pytest.raises(TirError) as info:
        load(path)
    assert str(info.value) == (f"{path}:1:1: error: unexpected end of file, expected 'func'\n"
                               "  \n  ^")


def test_tabs_and_crlf_keep_the_caret_aligned(tmp_path):
    path = tmp_path / "crlf.tir"
    path.write_bytes(b"func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\r\n"
                     b"\t%0 = relu(%y)\r\n\treturn %0\r\n}\r\n")
    with pytest.raises(TirError) as info:
        load(path)
    assert str(info.value) == (f"{path}:2:12: error: value %y is not defined\n"
                               "   %0 = relu(%y)\n"
                               "             ^")


def test_unicode_line_separators_do_not_shift_the_source_line():
    text = ("// a \u2028 separator and a \x0c form feed in a comment\n"
            "func @f(%x: tensor<2xf32>) -> tensor<2xf32> {\n  return %q\n}\n")
    with pytest.raises(TirError) as info:
        parse(text, "u.tir")
    assert str(info.value) == "u.tir:3:10: error: value %q is not defined\n    return %q\n           ^"


# ------------------------------------------------------------------ robustness

_NOISE = st.sampled_from(list("%@(){}[]<>=,:\"#$x0123456789-.e \n") +
                         ["tensor<", "f32", "relu", "weight", "return", "func", "//", "\t", "é"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_mutated_text_gives_a_located_error_or_a_graph(data):
    """Deleting, inserting or duplicating pieces of a valid file never raises anything but a
    TirError, and a located error always shows a source line and a caret within it."""
    text = VALID
    for _ in range(data.draw(st.integers(1, 3), label="edits")):
        i = data.draw(st.integers(0, len(text)), label="at")
        kind = data.draw(st.sampled_from(["delete", "insert", "duplicate"]), label="kind")
        if kind == "delete":
            j = data.draw(st.integers(i, min(len(text), i + 12)), label="to")
            text = text[:i] + text[j:]
        elif kind == "insert":
            text = text[:i] + data.draw(_NOISE, label="noise") + text[i:]
        else:
            j = data.draw(st.integers(i, min(len(text), i + 40)), label="to")
            text = text[:j] + text[i:j] + text[j:]
    try:
        parse(text, "m.tir")
    except TirError as err:
        msg = str(err)
        assert "Traceback" not in msg and "$END" not in msg and "__ANON" not in msg
        assert err.loc is not None, msg
        lines = msg.split("\n")
        assert len(lines) == 3, msg
        assert lines[0].startswith(f"m.tir:{err.loc.line}:{err.loc.col}: error: ")
        src = text.split("\n")[err.loc.line - 1].rstrip("\r").expandtabs(1)
        assert lines[1] == "  " + src
        assert lines[2] == "  " + " " * (err.loc.col - 1) + "^"
        assert err.loc.col - 1 <= len(src)
