"""Hydra entry points that compose the stages (data -> features -> models -> MLflow)."""
