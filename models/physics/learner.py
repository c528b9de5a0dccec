"""The efficiency learner: a bounded efficiency ``e_max * sigmoid(f(x) - log e_max)`` of the physics time, ``f``
learned from the dimensionless columns ``features.physics.FEATURES`` on the loss that matters, (log runtime -
log y)^2, through the launch floor.

* ``xgb``: XGBoost with a custom objective on the margin f (gradient through the sigmoid and the floor) and
  monotone constraints where physics orders the efficiency (:data:`MONOTONE`);
* ``mlp``: a small Lightning MLP with the same sigmoid head and loss (no monotone constraints).

The bound is per family (:meth:`EfficiencyLearner._e_max`): ``e_max`` > 1 for convolutions and memory-bound ops
(the physics counts the direct convolution's FLOPs and DRAM bytes, where cuDNN's Winograd kernels do fewer
multiplications and small inputs are served from L2), ``e_max_gemm`` for GEMMs, attention, MoE and collectives, whose
FLOPs and bytes are the ones done (only a clock above the spec's boost clock beats the peak).
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import xgboost as xgb

from models.physics.frame import families_of, hardware_keys

LEARNERS = ("xgb", "mlp")
# efficiency bound e_max_gemm: the physics counts the FLOPs they do, the bytes a decode reads, the bytes a collective
# sends over its link
BOUNDED_FAMILIES = ("gemm", "attention", "moe", "collective")
# A fuller tail wave, fuller tiles, wider-aligned operands and a longer main loop per CTA (K per split-K slice: the
# prologue / epilogue amortised over more steps) never make a kernel less efficient; more work wasted on the large tile
# (features.physics.BIG_TILE) never makes it more.
MONOTONE = {"tail_occupancy": 1, "tile_fill": 1, "log2_align_bytes": 1, "log2_k_per_split": 1, "log2_big_tile": -1}
# Bytes over L2 is not a learner input of GEMM rows (``gemm_bytes_over_l2=False``): a GEMM's operands are re-read in
# tiles, so whether all of them fit in L2 says little of its rate, while across training GPUs the ratio names the GPU
# (L2 sizes differ by an order of magnitude between generations). Memory-bound ops and convolutions (an input re-read
# k x k times) keep it. Zeroed, and only where the model learned GEMMs: one that never saw a GEMM predicts them as the
# convolutions it knows, which read the ratio. docs/decisions/0013-dimensionless-learner-inputs.md.
L2_INPUT = "log2_bytes_over_l2"
MARGIN_CLIP = 10.0  # efficiency >= e_max * sigmoid(-10) = 1.8e-4 e_max: finite even far outside the training range


def objective(phys, floor, logy, e_max, weight=1.0):
    """Squared log error of ``floor + phys / (e_max sigmoid(f))``, each row times its ``weight``, as an XGBoost
    objective on the margin f."""

    def obj(margin, _dtrain):
        s = 1.0 / (1.0 + np.exp(-margin))
        kernel = phys / (e_max * s)
        pred = floor + kernel
        slope = -(kernel / pred) * (1.0 - s)  # d log(pred) / d margin
        resid = np.log(pred) - logy
        return weight * resid * slope, weight * slope * slope + 1e-6

    return obj


def train(params: dict, F: np.ndarray, base_margin: np.ndarray, rounds: int, obj) -> xgb.Booster:
    """``xgb.train`` with a custom objective on a matrix without feature names (the caller names the booster after):
    each round predicts on the training matrix, and with names XGBoost checks them every round, which costs more than
    the trees on small folds."""
    d = xgb.DMatrix(F)
    d.set_base_margin(base_margin)
    return xgb.train(params, d, rounds, obj=obj)


def weighted_median(values: np.ndarray, weight: np.ndarray) -> float:
    """The value where the cumulative weight of the sorted values first reaches half the total (with equal weights,
    the lower median)."""
    order = np.argsort(values, kind="stable")
    cum = np.cumsum(weight[order])
    return float(values[order][np.searchsorted(cum, 0.5 * cum[-1])])


class EfficiencyLearner:
    """The efficiency part of :class:`models.physics.PhysicsModel` (a mixin: its hyper-parameters, ``floors_`` and
    ``inputs_`` are the model's).

    One learner per device class (``device_learners``): where the training rows hold CPUs and GPUs, the CPU rows get
    a learner of their own (``cpu_learner_``), so the GPU learner never sees them: a CPU and a GPU run no kernel alike
    (a CPU's GELU is bound by its transcendental math, a GPU's by DRAM or L2), and no dimensionless input tells them
    apart (docs/decisions/0015-one-learner-per-device-class.md)."""

    def _fit_learners(self, X: pd.DataFrame, y: np.ndarray) -> None:
        """The GPU learner on the GPU rows and, where the rows hold both device classes, a CPU learner on the CPU
        rows; one learner on every row otherwise."""
        self.cpu_learner_ = None
        cpu = X["hw_is_gpu"].to_numpy(float) <= 0
        if self.device_learners and cpu.any() and not cpu.all():
            self.cpu_learner_ = copy.copy(self)
            self.cpu_learner_._fit_learner(X[cpu].reset_index(drop=True), y[cpu])
            X, y = X[~cpu].reset_index(drop=True), y[~cpu]
        self._fit_learner(X, y)

    def _fit_learner(self, X: pd.DataFrame, y: np.ndarray) -> None:
        """The efficiency learner (and its base margin) on ``X, y`` through the fitted floors."""
        floor = self._floor(X)
        phys = X["physics_ms"].to_numpy(float)
        e_max = self._e_max(X)
        eff0 = np.clip(phys / np.maximum(y - floor, 1e-9) / e_max, 1e-4, 1 - 1e-4)
        shift, weight = self._shift(X), self._group_weights(X)
        self.base_margin_ = weighted_median(np.log(eff0 / (1 - eff0)) - shift, weight)
        F = self._inputs(X)
        if self.learner == "xgb":
            self._fit_xgb(F, phys, floor, y, e_max, self.base_margin_ + shift, weight)
        else:
            self._fit_mlp(F, phys, floor, y, e_max, weight)

    def _group_weights(self, X: pd.DataFrame) -> np.ndarray:
        """Per row its weight in the shared learner's loss: a (hardware, op family) group of n rows counts as at most
        ``group_rows`` rows (``min(1, group_rows / n)``; 0: every row 1), so the efficiency shared by every GPU and
        family is not the one of the most-sampled group (docs/decisions/0016-group-rows-weighting.md). The per-GPU
        corrections see every row at weight 1."""
        if not self.group_rows:
            return np.ones(len(X))
        group = pd.Series(hardware_keys(X)).astype(str) + "|" + pd.Series(families_of(X)).astype(str)
        return np.minimum(1.0, self.group_rows / group.map(group.value_counts()).to_numpy(float))

    def _inputs(self, X: pd.DataFrame) -> np.ndarray:
        """The learners' input matrix (the columns ``inputs_``), bytes over L2 zeroed on GEMM rows where the model
        masks it (:data:`L2_INPUT`)."""
        names = list(self.inputs_)
        F = np.array(X[names], dtype=np.float32)  # a copy: the frame's own values stay as they are
        if self.gemm_l2_masked_:
            F[X["family_gemm"].to_numpy(float) > 0, names.index(L2_INPUT)] = 0.0
        return F

    def _e_max(self, X: pd.DataFrame) -> np.ndarray:
        """Per row the efficiency bound: ``e_max_gemm`` for :data:`BOUNDED_FAMILIES` on GPUs (the physics counts the
        work they do: only a clock above the spec's boost clock beats it), ``e_max`` for convolutions (Winograd does
        fewer FLOPs than counted), memory-bound ops (inputs served from L2) and CPUs (their peak is a measured rate,
        which a BLAS kernel can beat)."""
        gpu = X["hw_is_gpu"].to_numpy(float) > 0
        return np.where(np.isin(families_of(X), BOUNDED_FAMILIES) & gpu, self.e_max_gemm, self.e_max)

    def _shift(self, X: pd.DataFrame) -> np.ndarray:
        """Per row the offset of the learned margin, ``-log(e_max)``: ``e_max sigmoid(f - log e_max)`` is ``exp(f)``
        below the bound whatever the family's bound, so one margin means one efficiency for every family (a family
        held out of training takes its efficiency from the others' at its own scale). 0 for the MLP learner."""
        return -np.log(self._e_max(X)) if self.learner == "xgb" else np.zeros(len(X))

    def _fit_xgb(self, F, phys, floor, y, e_max, base_margin, weight) -> None:
        params = {
            "eta": self.learning_rate,
            "max_depth": self.max_depth,
            "subsample": self.subsample,
            "colsample_bytree": self.colsample_bytree,
            "min_child_weight": self.min_child_weight,
            "seed": self.random_state,
            "nthread": self.n_jobs,
            "tree_method": "hist",
        }
        if self.monotone:
            params["monotone_constraints"] = "(" + ",".join(str(MONOTONE.get(f, 0)) for f in self.inputs_) + ")"
        obj = objective(phys, floor, np.log(y), e_max, weight)
        self.booster_ = train(params, F, base_margin, self.n_estimators, obj)
        self.booster_.feature_names = list(self.inputs_)

    def _fit_mlp(self, F, phys, floor, y, e_max, weight) -> None:
        import torch

        from models.trainer import trainer

        torch.set_num_threads(max(1, self.n_jobs))
        self.mean_, self.std_ = F.mean(axis=0), np.maximum(F.std(axis=0), 1e-6)
        net = mlp(len(self.inputs_), self.hidden, self.base_margin_)
        data = torch.utils.data.TensorDataset(
            *(
                torch.as_tensor(np.asarray(a, np.float32))
                for a in ((F - self.mean_) / self.std_, phys, floor, np.log(y), e_max, weight)
            )
        )
        batches = torch.utils.data.BatchSampler(  # whole batches by one fancy index each (not row by row)
            torch.utils.data.RandomSampler(data, generator=torch.Generator().manual_seed(self.random_state)),
            self.batch_size,
            drop_last=False,
        )
        loader = torch.utils.data.DataLoader(data, sampler=batches, batch_size=None)
        steps = self.epochs * len(loader)
        trainer(self.epochs, self.random_state).fit(mlp_module(net, self.mlp_learning_rate, steps), loader)
        self.net_ = net.eval()

    def _margin(self, X: pd.DataFrame) -> np.ndarray:
        """The efficiency's logit, clipped to +-MARGIN_CLIP (the MLP extrapolates linearly far outside); CPU rows from
        the CPU learner where the model has one."""
        cpu = X["hw_is_gpu"].to_numpy(float) <= 0
        if self.cpu_learner_ is None or not cpu.any():
            return self._learner_margin(X)
        margin = np.empty(len(X))
        margin[cpu] = self.cpu_learner_._learner_margin(X[cpu])
        if not cpu.all():
            margin[~cpu] = self._learner_margin(X[~cpu])
        return margin

    def _learner_margin(self, X: pd.DataFrame) -> np.ndarray:
        F = self._inputs(X)
        if self.learner == "xgb":
            d = xgb.DMatrix(F, feature_names=list(self.inputs_))
            d.set_base_margin(self.base_margin_ + self._shift(X))
            margin = self.booster_.predict(d, output_margin=True)
        else:
            import torch

            with torch.no_grad():
                margin = self.net_(torch.as_tensor((F - self.mean_) / self.std_, dtype=torch.float32)).numpy()
        return np.clip(margin.astype(float), -MARGIN_CLIP, MARGIN_CLIP)

    def _efficiency(self, X: pd.DataFrame) -> np.ndarray:
        return self._e_max(X) / (1.0 + np.exp(-self._margin(X)))


def mlp(n_in: int, hidden: int, base_margin: float):
    """The MLP learner's network: two SiLU layers and a linear head started at the base margin."""
    import torch

    net = torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden),
        torch.nn.SiLU(),
        torch.nn.Linear(hidden, hidden),
        torch.nn.SiLU(),
        torch.nn.Linear(hidden, 1),
        torch.nn.Flatten(0),
    )
    with torch.no_grad():
        net[4].bias.fill_(base_margin)
    return net


def mlp_module(net, lr: float, steps: int):
    """A Lightning module training ``net`` on the weighted squared log error through the floor."""
    import lightning as L
    import torch

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = net

        def training_step(self, batch, _idx):
            F, phys, floor, logy, e_max, weight = batch
            eff = e_max * torch.sigmoid(self.net(F))
            loss = torch.sum(weight * (torch.log(floor + phys / eff) - logy) ** 2) / torch.sum(weight)
            self.log("train_loss", loss, prog_bar=False)
            return loss

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=lr)
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps))
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    return Module()
