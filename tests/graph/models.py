"""The test models: the builders of looptune.graph.zoo, under the name the tests import."""
from __future__ import annotations

from looptune.graph.zoo import MODELS, OPSET, cnn, mlp, random_inputs, residual, transformer

__all__ = ["MODELS", "OPSET", "cnn", "mlp", "random_inputs", "residual", "transformer"]
