"""Physics-first runtime model: analytical time over a bounded, learned efficiency, plus a launch floor.

    runtime_ms = floor[harness, group] + physics_ms / efficiency(x),    efficiency = e_max * sigmoid(f(x) - log e_max)

``physics_ms`` is the tile/wave-quantised roofline of ``features.physics`` (the math mode's peak from the spec
registry, tensor cores included, DRAM bandwidth, SMs, the interconnect); ``f`` reads only the dimensionless columns
``features.physics.FEATURES``, so a faster GPU or a bigger shape moves the prediction through the physics and the
efficiency saturates at its bound instead of a tree's last leaf capping the runtime. The model is fitted on all
training hardware jointly (NeuSight's form, ASPLOS'25, learns a bounded per-tile utilisation the same way).

The parts, one file each:

* ``frame.py``: the physics frame the model reads and the keys its rows group by (family, hardware, mode, shape);
* ``floors.py``: the launch floor per timing harness and floor group, fitted from the training rows;
* ``learner.py``: the bounded efficiency learner (XGBoost with a custom objective and monotone constraints, or a
  small MLP), one per device class;
* ``corrections.py``: each measured GPU's own correction, a sibling's borrowed by an unseen variant of its chip, and
  :meth:`PhysicsModel.calibrate` (a new GPU from a few of its measurements);
* ``intervals.py``: the domain of validity and the interval of each prediction (:meth:`PhysicsModel.predict_domain`);
* ``io.py``: the artifact; one fitted against other physics laws is refused;
* ``model.py``: :class:`PhysicsModel`, which composes them.

Fitted numbers the model starts from (launch-floor priors, the borrowing distance, calibrate's repeats) are in
``conf/physics.yaml`` with their provenance; the design decisions behind the parts are in ``docs/decisions/``.
"""

from models.physics.corrections import (
    BORROW_MAX_DISTANCE,
    CALIBRATION_METHODS,
    MIN_CALIBRATION_ROWS,
    NEW_ROW_REPEATS,
)
from models.physics.floors import (
    FLOOR_GROUPS,
    FLOOR_OP_PRIOR,
    FLOOR_OPS,
    FLOOR_REGIMES,
    GRAPH_FLOORS_MS,
    GRAPH_PRIOR_ROWS,
    MIN_FLOOR_MS,
    OVER_PER_CALL,
    estimate_floors,
    family_floors,
    floor_groups_of,
    regime_index,
    unseen_family_floor,
)
from models.physics.frame import families_of, hardware_keys, mode_keys, physics_frame, shape_keys
from models.physics.io import PhysicsVersionError
from models.physics.model import PhysicsModel

__all__ = [
    "BORROW_MAX_DISTANCE",
    "CALIBRATION_METHODS",
    "FLOOR_GROUPS",
    "FLOOR_OPS",
    "FLOOR_OP_PRIOR",
    "FLOOR_REGIMES",
    "GRAPH_FLOORS_MS",
    "GRAPH_PRIOR_ROWS",
    "MIN_CALIBRATION_ROWS",
    "MIN_FLOOR_MS",
    "NEW_ROW_REPEATS",
    "OVER_PER_CALL",
    "PhysicsModel",
    "PhysicsVersionError",
    "estimate_floors",
    "families_of",
    "family_floors",
    "floor_groups_of",
    "hardware_keys",
    "mode_keys",
    "physics_frame",
    "regime_index",
    "shape_keys",
    "unseen_family_floor",
]
