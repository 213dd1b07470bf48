"""Every measured cost table shipped in eqsat_nb/cost/tables/ (whatever GPUs and precisions are
there: a newly shipped `h200-measured-bf16.json` is covered without editing this file) loads,
carries a valid precision, holds its float operands in that precision's type, and is the table
`--device <gpu> --precision <precision>` prices by (cost/select.py). No torch, no GPU."""
from __future__ import annotations

import re

import pytest

from eqsat_nb.cost.analytic import FLOAT_TYPES
from eqsat_nb.cost.select import MEASURED, make_cost_model, measured_table
from eqsat_nb.cost.table import TableCostModel, load_table, shipped_tables
from eqsat_nb.precision import IR_TYPE, PRECISIONS

SHIPPED = sorted(shipped_tables().items())
NAME = re.compile(r"^(?P<gpu>[a-z0-9]+)-measured(?:-(?P<precision>[a-z0-9]+))?$")


def test_tables_are_shipped():
    assert {"h100-measured", "h200-measured"} <= {name for name, _ in SHIPPED}


@pytest.mark.parametrize("name,path", SHIPPED, ids=[name for name, _ in SHIPPED])
def test_a_shipped_table_loads_and_is_picked_for_its_device_and_precision(name, path):
    table = load_table(path)
    assert table.name == name == path.stem
    match = NAME.match(name)
    assert match, f"{name}: shipped tables are named <gpu>-measured[-<precision>]"
    gpu, suffix = match["gpu"], match["precision"]
    assert table.precision in PRECISIONS
    assert table.precision == (suffix or "fp32"), "the name's precision is the table's"
    assert suffix != "fp32", "the fp32 table is <gpu>-measured"
    want = IR_TYPE[table.precision]
    floats = {o[1] for row in table.rows for o in row["operands"] if o[1] in FLOAT_TYPES}
    assert floats == {want}, f"{name} ({table.precision}) holds {floats} operands"
    assert len(table) > 0 and len(table.samples()) == len(table)
    assert gpu in MEASURED and measured_table(gpu, table.precision) == name
    model = make_cost_model("analytic", gpu, precision=table.precision)
    assert isinstance(model, TableCostModel) and model.table.name == name
    assert model.precision == table.precision
    if table.precision == "fp32":           # also the default when no precision is given
        assert make_cost_model("analytic", gpu).table.name == name
