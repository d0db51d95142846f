"""The tools' one Markdown table writer and mean ± std formatter (privfair_cli.tools.tables)."""

import math

from privfair_cli.tools import tables


def test_a_pipe_inside_a_cell_does_not_split_it():
    text = tables.table(["metric", "reason"], [["dtpr", "|s_i - s_bar| x_i"], ["accuracy", ""]])
    assert text == ("| metric | reason |\n|---|---|\n| dtpr | \\|s_i - s_bar\\| x_i |\n| accuracy |  |\n")


def test_mean_std_leaves_out_what_is_missing():
    assert tables.mean_std(0.5, 0.01) == "0.5000 ± 0.0100"
    assert tables.mean_std(0.5, math.nan) == tables.mean_std(0.5, None) == "0.5000"
    assert tables.mean_std(math.nan, 0.1) == tables.mean_std(None, None) == "–"
