"""Cost-model hooks for the autotuners people run: each an optional extra (``pip install -e '.[triton]'`` /
``'.[tvm]'``), imported only by whoever uses it.

* :mod:`models.hooks.triton`: a ``perf_model`` for ``triton.autotune(prune_configs_by=...)``;
* :mod:`models.hooks.tvm`: a ``PyCostModel`` for TVM's meta-schedule.
"""
