"""Datasets: the card-driven generic loader (identical parses to the former per-dataset loaders), CSV and ARFF,
row-count and group checks, checksums and the parse cache, the derived discrete view, split warnings."""

import hashlib
import os
import re
import shutil

import numpy as np
import pandas as pd
import pytest

from privfair_cli import datasets as data_lib
from privfair_cli.datasets import tabular
from privfair_cli.errors import DataError
from tests.conftest import card, needs_data, require_data


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def copy_dataset(tmp_path, monkeypatch, subdir: str):
    """The dataset folder copied into a private PRIVFAIR_DATA_DIR (writable, so a test may damage it)."""
    src = os.path.join(os.environ["PRIVFAIR_DATA_DIR"], subdir)
    dst = tmp_path / "data" / subdir
    shutil.copytree(src, dst)
    for f in dst.iterdir():
        f.chmod(0o644)
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path / "data"))
    return dst


# ------------------------------------------------------------------------------------------ parses
def classifier_digest(t) -> str:
    h = hashlib.sha256()
    for a in (t.X, t.y, t.s):
        if a is not None:
            h.update(np.ascontiguousarray(a).tobytes())
    h.update("|".join(t.feature_names).encode())
    return h.hexdigest()[:16]


def frame_digest(t) -> str:
    h = hashlib.sha256(np.ascontiguousarray(t.frame.to_numpy(np.int64)).tobytes())
    h.update("|".join(t.frame.columns).encode())
    return h.hexdigest()[:16]


# Digests of the tables the per-dataset loaders (adult.py, bank.py, dutch.py, german.py, kdd.py, before the generic
# loader replaced them) produced: the generic loader must parse every number identically. None: that loader had
# no discrete view (it is now derived from the features).
FORMER_PARSES = {
    "adult": ("adult", "9648311b41254006", "3d4b77af682707b0"),
    "adult_pc": ("adult", "50b534dd2b1ff4f9", "1028ec5420d466e0"),
    "bank": ("bank_marketing", "5f7764eac9a08d8e", None),
    "compas": ("compas", "ef05bbf8944edecf", "bcc5d8bb930b2277"),
    "dutch": ("dutch_census", "0de9d4e99c7372ef", None),
    "german": ("german_credit", "8535389ca5dff1aa", None),
    "kdd": ("kdd_census_income", "eedb22df69a029b3", "155272b527045946"),
}


@pytest.mark.parametrize("name", sorted(FORMER_PARSES))
def test_generic_loader_parses_as_the_former_loaders(name):
    subdir, digest, frame = FORMER_PARSES[name]
    require_data(subdir)
    t = data_lib.load(card(name))
    assert classifier_digest(t) == digest
    if frame is not None:
        assert frame_digest(t) == frame


@needs_data("adult")
def test_adult_card():
    t = data_lib.load(card("adult"))
    assert len(t) == 45222
    assert t.d == 40
    assert int(t.s.sum()) == 30527  # male, thesis Table 9.1
    assert 0.24 < t.y.mean() < 0.26
    assert t.X.min() >= 0 and t.X.max() <= 1
    np.testing.assert_array_equal(t.meta["row_id"], np.arange(len(t)))


@pytest.mark.parametrize("name,subdir,rows", [("dutch", "dutch_census", 60420), ("german", "german_credit", 1000),
                                              ("bank", "bank_marketing", 45211)])
def test_other_cards_with_derived_discrete_view(name, subdir, rows):
    require_data(subdir)
    c = card(name)
    t = data_lib.load(c)
    assert len(t) == rows
    assert set(np.unique(t.s)) == {0, 1}
    assert t.X.min() >= 0 and t.X.max() <= 1
    assert list(t.frame.columns) == list(data_lib.discrete_spec(c))
    for col, k in t.domain.items():
        assert 0 <= t.frame[col].min() and t.frame[col].max() < k
    np.testing.assert_array_equal(t.frame[c["label"]].to_numpy(), t.y)  # code 1 = the positive label
    roles = c["roles"]
    assert set(roles["protected"] + roles["admissible"] + roles["outcome"]) <= set(t.frame.columns)


def test_bin_edges_one_code_per_value_or_equal_width():
    assert data_lib.bin_edges(4, 15) == list(map(float, range(4, 17)))
    edges = data_lib.bin_edges(250, 18424)
    assert len(edges) == 101 and edges[0] == 250 and edges[-1] == 18424
    assert len(data_lib.bin_edges(0.0, 1.0)) == 3  # integer bounds two values apart: codes 0, 1
    assert len(data_lib.bin_edges(0.0, 0.5)) == 101


@needs_data("dutch_census")
def test_arff_file_reads_as_its_csv_twin(tmp_path):
    """PROVENANCE: dutch.csv is the ARFF with sex 1/2 -> male/female and occupation 2_1/5_4_9 -> 1/0."""
    folder = os.path.join(os.environ["PRIVFAIR_DATA_DIR"], "dutch_census")
    arff = tabular.read([os.path.join(folder, "dutch_census_2001.arff")], {
        "name": "dutch_arff", "files": {"dutch_census_2001.arff": {}},
        "derive": {"sex": {"from": "sex", "map": {1: "male", 2: "female"}},
                   "occupation": {"from": "occupation", "map": {"2_1": 1, "5_4_9": 0}}}})
    csv = tabular.read([os.path.join(folder, "dutch.csv")], {"name": "dutch", "files": {"dutch.csv": {}}})
    arff.columns = csv.columns  # the ARFF spells Marital_status with a capital
    pd.testing.assert_frame_equal(arff, csv)


# ------------------------------------------------------------------------------------------ a card-only dataset
TOY = """id;age;colour;income;group
1;23;red;high;a
2;?;blue;low;b
3;41;red;low;a
4;67;green;high;b
"""


def toy_card(tmp_path, **extra) -> dict:
    (tmp_path / "toy").mkdir(exist_ok=True)
    (tmp_path / "toy" / "toy.csv").write_text(TOY)
    return {"name": "toy", "subdir": "toy", "files": {"toy.csv": {}}, "label": "income", "positive": ["high"],
            "sensitive": "group", "privileged": "a",
            "format": {"sep": ";", "na_values": ["?"], "types": {"age": "int"}},
            "derive": {"old": {"from": "age", "cut": [-float("inf"), 40, float("inf")], "labels": ["no", "yes"]}},
            "features": {"numeric": {"age": [18, 90]}, "onehot": ["colour"]}} | extra


def test_card_only_dataset(tmp_path, cache, monkeypatch):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path))
    t = data_lib.load(toy_card(tmp_path))
    assert len(t) == 3  # the row with a missing age is dropped
    np.testing.assert_allclose(t.X[:, 0], [5 / 72, 23 / 72, 49 / 72])
    assert t.feature_names == ["age", "colour=green", "colour=red"]
    np.testing.assert_array_equal(t.y, [1, 0, 1])
    np.testing.assert_array_equal(t.s, [1, 1, 0])
    assert list(t.frame.columns) == ["age", "colour", "group", "income"] and t.domain["age"] == 73
    raw = tabular.read([tmp_path / "toy" / "toy.csv"], toy_card(tmp_path))
    assert raw["old"].tolist() == ["no", "yes", "yes"] and raw["age"].dtype == np.int64


@pytest.mark.parametrize("extra,message", [
    ({"rows": 4}, r"3 rows after parsing, the card expects 4 \(`rows`"),
    ({"privileged": "Martian"}, r"data.privileged='Martian' matches no row of group \(its values: a, b\)"),
    ({"format": {"sep": ";", "na_values": ["?"], "missing": "error"}}, r"row 2 has a missing age"),
    ({"format": {"sep": ";", "types": {"age": "int"}}}, r"column age holds '\?', not an integer"),
    ({"format": {"sep": ",", "header": False, "columns": ["a", "b"]}}, r"toy.csv: line 1 is incomplete"),
])
def test_card_only_dataset_errors(tmp_path, cache, monkeypatch, extra, message):
    monkeypatch.setenv("PRIVFAIR_DATA_DIR", str(tmp_path))
    with pytest.raises(DataError, match=message):
        data_lib.load(toy_card(tmp_path, **extra))


# ------------------------------------------------------------------------------------------ checksums and cache
def test_cache_files_are_written_whole_or_not_at_all_and_a_bad_one_is_rebuilt(cache):
    """write_cache: the file appears only complete, a save that fails leaves nothing behind (an OSError is
    swallowed: an unwritable cache is skipped; any other error is raised); read_cache removes what fails to load."""
    path = cache / "x" / "a.npy"
    data_lib.write_cache(path, lambda f: np.save(f, np.arange(3)))
    np.testing.assert_array_equal(data_lib.read_cache(path, np.load), np.arange(3))

    def fails(error):
        def save(f):
            f.write(b"partial")
            raise error
        return save

    data_lib.write_cache(cache / "x" / "b.npy", fails(OSError(28, "No space left on device")))
    with pytest.raises(ValueError, match="not serialisable"):
        data_lib.write_cache(cache / "x" / "c.npy", fails(ValueError("not serialisable")))
    assert sorted(p.name for p in (cache / "x").iterdir()) == ["a.npy"]  # no partial file, no temporary left
    assert data_lib.read_cache(cache / "x" / "b.npy", np.load) is None
    path.write_bytes(b"damaged")
    assert data_lib.read_cache(path, np.load) is None and not path.exists()
    if os.geteuid() != 0:  # root writes anywhere
        (cache / "x").chmod(0o500)
        try:
            data_lib.write_cache(cache / "x" / "d.npy", lambda f: np.save(f, np.arange(3)))  # skipped, no error
        finally:
            (cache / "x").chmod(0o700)
        assert not (cache / "x" / "d.npy").exists()


@needs_data("german_credit")
def test_parsed_dataset_is_cached_and_hashed_once(cache, monkeypatch):
    first = data_lib.load(card("german"))
    monkeypatch.setattr(tabular, "read", lambda *a: pytest.fail("second load re-parsed the files"))
    monkeypatch.setattr(data_lib, "_sha256", lambda *a: pytest.fail("second load hashed the file again"))
    second = data_lib.load(card("german"))
    np.testing.assert_array_equal(first.X, second.X)


@needs_data("german_credit")
def test_unverified_parse_never_serves_a_verified_run(tmp_path, cache, monkeypatch):
    """Issue 11 item 9: a `verify=false` run over a changed file, then a default run, must refuse; so must an
    in-place change with the mtime restored, in a new process."""
    folder = copy_dataset(tmp_path, monkeypatch, "german_credit")
    path = folder / "german.data"
    good = path.read_bytes()
    data_lib.load(card("german"))  # a verified parse in the cache
    stat = path.stat()
    path.write_bytes(good.replace(b"A11 6 A34", b"A11 7 A34", 1))  # same size: one duration 6 -> 7
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    data_lib._DIGESTS.clear()  # a new process: nothing remembered
    with pytest.raises(DataError, match="sha256 differs"):
        data_lib.load(card("german"))
    changed = data_lib.load(card("german", verify=False))  # parses the changed file, caches it apart
    assert changed.X[0, 0] == pytest.approx((7 - 4) / (72 - 4))  # duration of row 1, scaled by its bounds
    with pytest.raises(DataError, match=r"sha256 differs.*set data\.verify=false"):
        data_lib.load(card("german"))
    assert len(list((cache / "parsed").glob("german-*.npz"))) == 2


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


def test_hint_is_the_override_that_works():
    assert data_lib.hint({"verify": True}, "verify", False) == "data.verify=false"
    assert data_lib.hint({}, "verify", False) == "+data.verify=false"


# ------------------------------------------------------------------------------------------ encoding, splits
def test_encode_uses_declared_bounds_not_data():
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


def test_split_warnings_say_why_numbers_mean_nothing():
    s = np.r_[np.ones(100, int), np.zeros(100, int)]
    t = data_lib.Table("toy", np.zeros((200, 1)), np.zeros(200, int), s, ["x"])
    assert data_lib.split_warnings(*data_lib.split(t, 0.2, np.random.default_rng(0)), "classifier") == []
    assert "test_size=0" in data_lib.split_warnings(t, t, "classifier")[0]
    assert data_lib.split_warnings(t, t, "graph") == []
    small = data_lib.split_warnings(*data_lib.split(t.subset(range(10)), 0.2, np.random.default_rng(0)), "classifier")
    assert any("fewer than 30" in w for w in small) and any("no test row has s=0" in w for w in small)


# ------------------------------------------------------------------------------------------ hints
def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    from privfair_cli.main import main

    try:
        code = main(argv)
    except SystemExit as stop:  # a failure after composing exits from inside the Hydra job
        code = stop.code
    return code, capsys.readouterr().err


@needs_data("german_credit")
def test_printed_hints_work_as_printed(tmp_path, cache, monkeypatch, capsys):
    """Issue 12 item 5: the overrides an error suggests run when typed as printed."""
    monkeypatch.chdir(tmp_path)
    base = ["run", "algo=lr", "data=german"]
    code, err = run_cli(base + ["data.expected_d=58", "hydra.run.dir=a"], capsys)
    hint = re.search(r"\(set (\S+) to run anyway\)", err)
    assert code == 2 and hint, err
    assert run_cli(base + ["data.expected_d=58", hint.group(1), "hydra.run.dir=b"], capsys)[0] == 0
    path = copy_dataset(tmp_path, monkeypatch, "german_credit") / "german.data"
    path.write_bytes(path.read_bytes().replace(b"A11 6 A34", b"A11 7 A34", 1))
    code, err = run_cli(base + ["hydra.run.dir=c"], capsys)
    hint = re.search(r"set (\S+)$", err.strip())
    assert code == 2 and "sha256 differs" in err and hint, err
    assert run_cli(base + [hint.group(1), "hydra.run.dir=d"], capsys)[0] == 0
