"""The `eqsat-nb` command line: --version, --help, check, print, interp (run in-process)."""
from __future__ import annotations

import re

import pytest

import eqsat_nb
from eqsat_nb.cli import main
from eqsat_nb.ir.parse import load, parse
from eqsat_nb.ir.printer import print_graph

BLOCK = """\
// a residual block, not in canonical form
func @block(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w1 = weight @w1 : tensor<4x4x3x3xf32>
  %0 = conv2d(%x, %w1) {stride = [1, 1], pad = "same", act = "relu"}
  %1 = ewadd(%0, %x)
  return %1
}
"""

TWO_OUTPUTS = """\
func @two(%x: tensor<4x6xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>) {
  %w = weight @w : tensor<6x6xf32>
  %0 = matmul(%x, %w) {act = "tanh"}
  %a, %b = split(%0) {axis = 1, sizes = [3, 3]}
  %s = softmax(%b)
  return %a, %s
}
"""


@pytest.fixture
def block(tmp_path):
    path = tmp_path / "block.tir"
    path.write_text(BLOCK)
    return path


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(list(argv))
    except SystemExit as e:        # argparse's own exits (--help, --version, usage errors)
        rc = e.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def test_version(capsys):
    """The version, and which kernels run (kernels.aot_status)."""
    from eqsat_nb.kernels import aot_status
    rc, out, _ = run(capsys, "--version")
    assert rc == 0
    assert out == f"eqsat-nb {eqsat_nb.__version__}\nkernels: {aot_status()}\n"


def test_help_lists_exactly_the_working_commands(capsys):
    rc, out, _ = run(capsys, "--help")
    assert rc == 0
    assert out.startswith("usage: eqsat-nb ")
    section = out.split("positional arguments:", 1)[1].split("options:", 1)[0]
    commands = re.findall(r"^    (\S+)", section, flags=re.M)
    assert commands == ["check", "print", "interp", "verify-rules", "extract", "run", "bench",
                        "profile"]


def test_no_command_is_a_usage_error(capsys):
    rc, out, err = run(capsys)
    assert rc == 2
    assert "usage: eqsat-nb" in err


@pytest.mark.parametrize("command", ["check", "print", "interp", "verify-rules", "extract"])
def test_each_command_has_help(capsys, command):
    rc, out, _ = run(capsys, command, "--help")
    assert rc == 0
    assert out.startswith(f"usage: eqsat-nb {command} ")


# ------------------------------------------------------------------ check

def test_check_prints_an_ok_summary(capsys, block):
    rc, out, err = run(capsys, "check", str(block))
    assert rc == 0 and err == ""
    # conv2d: 2 * 256 outputs * 4*3*3 + 256 (relu) = 18688; ewadd: 256
    assert out == f"{block}: ok: 2 ops (1 conv2d, 1 ewadd); 144 params, 18.94 kFLOPs\n"


def test_check_counts_ops_by_kind(capsys, tmp_path):
    path = tmp_path / "two.tir"
    path.write_text(TWO_OUTPUTS)
    rc, out, _ = run(capsys, "check", str(path), str(path))
    assert rc == 0
    line = f"{path}: ok: 3 ops (1 matmul, 1 softmax, 1 split); 36 params, "
    assert out.count(line) == 2
    assert len(out.splitlines()) == 2


def test_check_fails_if_any_file_fails(capsys, block, tmp_path):
    bad = tmp_path / "bad.tir"
    bad.write_text(BLOCK.replace("ewadd", "ewnope"))
    rc, out, err = run(capsys, "check", str(block), str(bad))
    assert rc == 1
    assert out.startswith(f"{block}: ok: ")
    assert err.startswith(f"{bad}:5:8: error: unknown op 'ewnope'\n")


# ------------------------------------------------------------------ print

def test_print_writes_the_canonical_form(capsys, block):
    rc, out, err = run(capsys, "print", str(block))
    assert rc == 0 and err == ""
    assert out == print_graph(load(block))
    assert out == """\
func @block(%x: tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32> {
  %w1 = weight @w1 : tensor<4x4x3x3xf32>
  %0 = conv2d(%x, %w1) {act = "relu"} : tensor<1x4x8x8xf32>
  %1 = ewadd(%0, %x) : tensor<1x4x8x8xf32>
  return %1
}
"""
    assert parse(out) == load(block)


def test_print_to_a_file_never_overwrites_without_force(capsys, block, tmp_path):
    out_path = tmp_path / "out.tir"
    rc, out, err = run(capsys, "print", str(block), "-o", str(out_path))
    assert (rc, out, err) == (0, "", "")
    canonical = out_path.read_text()
    assert canonical == print_graph(load(block))

    out_path.write_text("precious\n")
    rc, out, err = run(capsys, "print", str(block), "-o", str(out_path))
    assert rc == 1 and out == ""
    assert err == f"{out_path}: error: file exists; pass --force to overwrite it\n"
    assert out_path.read_text() == "precious\n"

    rc, out, err = run(capsys, "print", str(block), "--output", str(out_path), "--force")
    assert (rc, out, err) == (0, "", "")
    assert out_path.read_text() == canonical


def test_print_is_idempotent(capsys, block, tmp_path):
    first, second = tmp_path / "1.tir", tmp_path / "2.tir"
    assert run(capsys, "print", str(block), "-o", str(first))[0] == 0
    assert run(capsys, "print", str(first), "-o", str(second))[0] == 0
    assert first.read_text() == second.read_text()


def test_print_to_an_unwritable_place_is_a_clean_error(capsys, block, tmp_path):
    target = tmp_path / "no" / "such" / "dir.tir"
    rc, out, err = run(capsys, "print", str(block), "-o", str(target))
    assert rc == 1 and out == ""
    assert err == f"{target}: error: cannot write file: No such file or directory\n"


def test_print_of_a_bad_file_reports_it(capsys, tmp_path):
    bad = tmp_path / "bad.tir"
    bad.write_text(BLOCK.replace("ewadd(%0, %x)", "ewadd(%0, %y)"))
    rc, out, err = run(capsys, "print", str(bad))
    assert rc == 1 and out == ""
    assert err.startswith(f"{bad}:5:18: error: value %y is not defined\n")


# ------------------------------------------------------------------ interp

_CHECKSUM = re.compile(r"^(%\S+): (tensor<\S+>)  sum=(\S+)  mean\|x\|=(\S+)  max\|x\|=(\S+)$")


def interp(capsys, path, *extra: str) -> list[str]:
    rc, out, err = run(capsys, "interp", str(path), *extra)
    assert rc == 0 and err == "", err
    lines = out.splitlines()
    assert re.fullmatch(r"ran \d+ ops in \d+\.\d{3} s \(seed -?\d+, f(32|64)\)", lines[-1])
    return lines[:-1]


def test_interp_prints_shapes_and_checksums(capsys, block):
    lines = interp(capsys, block)
    assert len(lines) == 1
    m = _CHECKSUM.match(lines[0])
    assert m, lines[0]
    assert m[1] == "%1" and m[2] == "tensor<1x4x8x8xf32>"
    for value in m.groups()[2:]:
        float(value)
    assert float(m[4]) > 0


def test_interp_one_line_per_output(capsys, tmp_path):
    path = tmp_path / "two.tir"
    path.write_text(TWO_OUTPUTS)
    lines = interp(capsys, path, "--seed", "7")
    assert [_CHECKSUM.match(ln).groups()[:2] for ln in lines] == [("%a", "tensor<4x3xf32>"),
                                                          ("%s", "tensor<4x3xf32>")]
    # softmax rows sum to 1: 4 rows
    assert float(_CHECKSUM.match(lines[1])[3]) == pytest.approx(4.0, rel=1e-5)


def test_interp_is_deterministic_per_seed(capsys, block):
    a = interp(capsys, block, "--seed", "3")
    b = interp(capsys, block, "--seed", "3")
    c = interp(capsys, block, "--seed", "4")
    assert a == b
    assert a != c
    assert interp(capsys, block) == interp(capsys, block, "--seed", "0")   # default seed 0


def test_interp_footer_names_seed_and_dtype(capsys, block):
    rc, out, _ = run(capsys, "interp", str(block), "--seed", "5", "--dtype", "f64")
    assert rc == 0
    assert re.search(r"^ran 2 ops in \d+\.\d{3} s \(seed 5, f64\)$", out, flags=re.M)


def test_interp_rejects_bad_options(capsys, block):
    rc, _, err = run(capsys, "interp", str(block), "--dtype", "f8")
    assert rc == 2 and "invalid choice" in err
    rc, _, err = run(capsys, "interp", str(block), "--seed", "x")
    assert rc == 2 and "invalid int value" in err


def test_closed_pipe_is_not_a_traceback(monkeypatch, block):
    """`eqsat-nb print big.tir | head`: the reader goes away; exit 1 quietly."""
    class ClosedPipe:
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

        def flush(self):
            pass

        def fileno(self):
            raise OSError("no file descriptor")

    monkeypatch.setattr("sys.stdout", ClosedPipe())
    assert main(["print", str(block)]) == 1
