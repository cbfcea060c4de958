"""Metric labels stay low-cardinality whatever clients send."""

from __future__ import annotations

from proxy.metrics import MAX_MODELS, Metrics


def test_model_labels_are_bounded() -> None:
    m = Metrics()
    names = [m.model_label(f"model-{i}") for i in range(MAX_MODELS + 50)]
    assert len(set(names)) == MAX_MODELS + 1
    assert names[-1] == "other"
    assert m.model_label("model-0") == "model-0"  # known names keep their series
    assert m.model_label("x" * 500) == "other"
