"""The Lightning trainer the project's torch models fit with (the GNNs, the token transformer, the physics model's
MLP learner): a leaf module, so a model that trains with Lightning imports no other model."""

from __future__ import annotations


def trainer(max_epochs: int, seed: int):
    """A quiet CPU Lightning trainer (no logger, checkpoints or progress bar)."""
    import logging
    import warnings

    import lightning as L

    for name in ("lightning", "lightning.pytorch", "lightning.pytorch.utilities.rank_zero"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module=r"lightning\.")
    warnings.filterwarnings("ignore", ".*(does not have many workers|LeafSpec|number of training batches).*")
    L.seed_everything(seed, workers=True, verbose=False)
    return L.Trainer(
        max_epochs=max_epochs,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
    )
