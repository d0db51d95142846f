"""Classifier runs save their test-set predictions (issue 12 item 8): any metric can be recomputed from the file
with fairlearn and gives the run's own numbers; `save_predictions=false` turns the artifact off."""

import json

import numpy as np
import pytest

from privfair_cli import evaluate
from privfair_cli.main import main
from tests.conftest import needs_data


@needs_data("german_credit")
@pytest.mark.parametrize("algo", ["lr", "pflr"])
def test_predictions_recompute_the_run_metrics_with_fairlearn(algo, tmp_path, monkeypatch):
    fl = pytest.importorskip("fairlearn.metrics")
    monkeypatch.chdir(tmp_path)
    assert main(["run", f"algo={algo}", "data=german", "hydra.run.dir=out"]) == 0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())["metrics"]
    pred = evaluate.read_predictions(tmp_path / "out")
    # then every sensitive attribute of the card (data.sensitive, roles.protected), as in the data
    assert list(pred.columns) == ["row_id", "label", "group", "score", "prediction", "sex", "age", "foreign_worker"]
    assert ((pred.sex == "male") == (pred.group == 1)).all()
    assert len(pred) == metrics["n_test"] and pred.row_id.is_unique and pred.row_id.between(0, 999).all()
    y, yhat, s = pred.label.to_numpy(), pred.prediction.to_numpy(), pred.group.to_numpy()
    assert np.mean(y == yhat) == pytest.approx(metrics["accuracy"])
    dp = fl.demographic_parity_difference(y, yhat, sensitive_features=s)
    assert dp == pytest.approx(abs(metrics["risk_difference"]))
    assert ((pred.score >= 0.5) == (pred.prediction == 1)).all()
    tpr = fl.MetricFrame(metrics=fl.true_positive_rate, y_true=y, y_pred=yhat, sensitive_features=pred.sex).by_group
    assert tpr["female"] == pytest.approx(metrics["tpr[sex=female]"])


@needs_data("german_credit")
def test_predictions_can_be_switched_off(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["run", "algo=lr", "data=german", "save_predictions=false", "hydra.run.dir=out"]) == 0
    assert (tmp_path / "out" / "metrics.json").is_file()
    assert not list((tmp_path / "out").glob("artifacts/predictions.*"))
