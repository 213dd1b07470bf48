"""Every ONNX model in the given folders/files through `eqsat-nb run --onnx`, measured in
onnxruntime against its input, with onnxslim beside it when installed (the tables of
docs/onnx.md). `--zoo` adds the onnx wheel's model-zoo copies with random weights.

    python tools/onnx_table.py models/ [--zoo] [--device a100] [-- extra run options]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx

from eqsat_nb.onnx_io.table import markdown, table_row
from eqsat_nb.onnx_io.zoo import light_models, reseeded


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("paths", nargs="*", type=Path)
    p.add_argument("--zoo", action="store_true", help="the onnx wheel's model-zoo copies")
    p.add_argument("--device", default=None)
    p.add_argument("--budget", type=float, default=6.0, help="seconds per timing (default 6)")
    args, extra = p.parse_known_args()
    files: list[Path] = []
    for path in args.paths:
        files += sorted(path.glob("*.onnx")) if path.is_dir() else [path]
    tmp = tempfile.TemporaryDirectory()
    if args.zoo:
        for z in light_models():
            dst = Path(tmp.name) / z.name.replace("light_", "")
            onnx.save(reseeded(z), str(dst))
            files.append(dst)
    run_args = [a for a in extra if a != "--"] + (["--device", args.device] if args.device else [])
    rows = []
    for f in files:
        rows.append(table_row(f, run_args, args.budget))
        print("|", " | ".join(rows[-1].cells()), "|", file=sys.stderr, flush=True)
    print(markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
