"""Surrogate models. Every model implements :class:`models.base.CostModel` (fit / predict / save / load)."""

from models.base import CostModel, load_model

__all__ = ["CostModel", "load_model"]
