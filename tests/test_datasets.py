"""Real-data loaders: row counts, encodings within declared bounds, caching, clear errors on bad files."""

import shutil

import numpy as np
import pytest
from omegaconf import OmegaConf

from privfair_cli import datasets as data_lib
from privfair_cli.errors import DataError
from privfair_cli.main import config_dir
from tests.conftest import have_data, needs_data


def card(name: str) -> dict:
    return OmegaConf.to_container(OmegaConf.load(config_dir() / "data" / f"{name}.yaml"))


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@needs_data("adult")
def test_adult_card(cache):
    t = data_lib.load(card("adult"))
    assert len(t) == 45222
    assert t.d == 40
    assert int(t.s.sum()) == 30527  # male, thesis Table 9.1
    assert 0.24 < t.y.mean() < 0.26
    assert t.X.min() >= 0 and t.X.max() <= 1


@needs_data("adult")
def test_parsed_dataset_is_cached(cache, monkeypatch):
    first = data_lib.load(card("adult"))
    from privfair_cli.datasets import adult

    monkeypatch.setattr(adult, "read", lambda *a: pytest.fail("second load re-parsed the files"))
    second = data_lib.load(card("adult"))
    np.testing.assert_array_equal(first.X, second.X)


@pytest.mark.parametrize("name,subdir,rows", [("dutch", "dutch_census", 60420), ("german", "german_credit", 1000),
                                              ("bank", "bank_marketing", 45211)])
def test_other_cards(name, subdir, rows, cache):
    if not have_data(subdir):
        pytest.skip(f"{subdir} not available")
    t = data_lib.load(card(name))
    assert len(t) == rows
    assert set(np.unique(t.s)) == {0, 1}
    assert t.X.min() >= 0 and t.X.max() <= 1


@needs_data("adult")
def test_truncated_file_names_file_and_line(tmp_path, cache, monkeypatch):
    src = data_lib.resolve_files(card("adult"))
    bad = tmp_path / "data" / "adult"
    bad.mkdir(parents=True)
    shutil.copy(src[1], bad / "adult.test")
    lines = src[0].read_text().splitlines(keepends=True)
    (bad / "adult.data").write_text("".join(lines[:100]) + lines[100][:30])  # cut mid-line
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(DataError, match=r"adult\.data: sha256 differs"):
        data_lib.load(card("adult"))
    with pytest.raises(DataError, match=r"adult\.data.*(line 101|expected 15)"):
        data_lib.load(card("adult") | {"verify": False})


def test_missing_files_say_what_and_where(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path))
    c = card("adult")
    for spec in c["files"].values():
        spec["url"] = "http://127.0.0.1:9/unreachable"  # offline
    with pytest.raises(DataError, match=r"adult\.data, adult\.test.*PRIVFAIR_DATA_DIR"):
        data_lib.load(c)


def test_encode_uses_declared_bounds_not_data():
    import pandas as pd

    df = pd.DataFrame({"age": ["20", "200"], "c": ["x", "y"], "lab": ["1", "0"], "g": ["a", "b"]})
    c = {"name": "toy", "label": "lab", "positive": ["1"], "sensitive": "g", "privileged": "a",
         "features": {"numeric": {"age": [0, 100]}, "onehot": ["c"]}}
    t = data_lib.encode(df, c)
    np.testing.assert_allclose(t.X[:, 0], [0.2, 1.0])  # clipped to the declared bound
    assert t.feature_names == ["age", "c=x", "c=y"]
    np.testing.assert_array_equal(t.s, [1, 0])
    np.testing.assert_array_equal(t.y, [1, 0])


def test_split_is_seeded_and_disjoint():
    t = data_lib.Table("toy", np.arange(100.0)[:, None], np.zeros(100, int), None, ["x"])
    a, b = data_lib.split(t, 0.2, np.random.default_rng(3))
    a2, _ = data_lib.split(t, 0.2, np.random.default_rng(3))
    assert len(a) == 80 and len(b) == 20
    assert not set(a.X[:, 0]) & set(b.X[:, 0])
    np.testing.assert_array_equal(a.X, a2.X)
