"""MLIR with dynamic dimensions (``tensor<?x?xf32>``): the user binds the sizes, MLIR's own passes propagate them.

A module exported for any batch size (IREE's samples, ``torch.export`` with dynamic shapes, JAX shape
polymorphism) has no static workload until its sizes are known. The entry function's arguments are bound by
``dims`` (the CLI's ``--dim``):

* ``{"%lhs:0": 1024}``: dimension 0 of argument ``%lhs``; ``{"%lhs": "1024x512"}`` (or a tuple): its whole shape;
* an argument is named as the text names it (``%lhs``; ``lhs`` also works), or by position ``%arg<i>`` when no
  argument of the text has that name. The entry function is ``@main`` if there is one, else the only public
  function, else the first.

The bound types are set on the entry block's arguments and MLIR's passes carry them through ``tensor.dim``,
``tensor.empty``, ``linalg`` ops, ``tensor.cast`` and index arithmetic: ``canonicalize`` with torch-mlir's MLIR
(upstream dialects: linalg, tensor, arith; each argument enters through a ``tensor.cast`` back to its dynamic type,
which canonicalization folds into every consumer that accepts the static type) or, for StableHLO,
``stablehlo-refine-shapes`` + ``canonicalize`` with jaxlib's MLIR (the StableHLO dialect and passes ship with jax).
The result is printed in the generic op form and parsed again like any module.

Errors are one line: an unbound dynamic dimension (``%rhs dim 1 is dynamic: bind it with --dim %rhs:1=<size>``),
an unknown argument, a dimension out of range, a size that contradicts a static one, sizes the module's verifier
rejects (e.g. a matmul whose inner sizes then disagree).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from features.tabular import FeatureError

STABLEHLO_DIALECTS = ("stablehlo", "chlo", "mhlo", "sdy", "vhlo")


# --------------------------------------------------------------------------------------------- bindings
def parse_dim_specs(specs: list[str] | None) -> dict[str, object]:
    """CLI ``--dim`` strings -> a ``dims`` mapping: ``%arg0:0=1024`` (one dim) or ``%arg0=1024x512`` (a shape)."""
    dims: dict[str, object] = {}
    for spec in specs or []:
        key, sep, value = str(spec).partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not key or not value:
            raise FeatureError(
                f"--dim {spec!r}: expected %arg:dim=size (e.g. %arg0:0=1024) or %arg=shape (e.g. %arg0=1024x512)"
            )
        if ":" in key:
            name, _, dim = key.rpartition(":")
            if not dim.isdigit() or not value.isdigit():
                raise FeatureError(f"--dim {spec!r}: dimension and size must be integers (e.g. %arg0:0=1024)")
        elif not re.fullmatch(r"\d+(x\d+)*", value):
            raise FeatureError(f"--dim {spec!r}: a shape is sizes joined by x (e.g. %arg0=1024x512)")
        dims[key] = value
    return dims


def _norm(name: str) -> str:
    return name if name.startswith("%") else "%" + name


def _shape_of(value, key: str) -> tuple[int, ...]:
    if isinstance(value, str):
        if not re.fullmatch(r"\d+(x\d+)*", value.strip()):
            raise FeatureError(f"--dim {key}={value}: a shape is sizes joined by x (e.g. 1024x512)")
        return tuple(int(v) for v in value.strip().split("x"))
    try:
        return tuple(int(v) for v in value)
    except (TypeError, ValueError):
        raise FeatureError(f"--dim {key}={value!r}: a shape is a sequence of sizes") from None


def _size(value, key: str) -> int:
    try:
        size = int(value)
    except (TypeError, ValueError):
        raise FeatureError(f"--dim {key}={value!r}: the size must be an integer") from None
    if size < 1 or size != float(value):
        raise FeatureError(f"--dim {key}={value}: the size must be an integer >= 1")
    return size


# --------------------------------------------------------------------------------------------- entry function
def _funcs(module) -> list:
    return [op.operation for op in module.body.operations if op.operation.name == "func.func"]


def _sym(op, attr: str) -> str | None:
    if attr not in op.attributes:
        return None
    return str(op.attributes[attr]).strip('"')


def entry_function(module):
    """``@main``, else the only public function, else the first ``func.func`` (None without one)."""
    funcs = _funcs(module)
    if not funcs:
        return None
    for f in funcs:
        if _sym(f, "sym_name") == "main":
            return f
    public = [f for f in funcs if _sym(f, "sym_visibility") in (None, "public")]
    return public[0] if len(public) == 1 else funcs[0]


def _balanced(text: str, start: int) -> str:
    """The text inside the parentheses that open at ``text[start]``."""
    depth = 0
    for i in range(start, len(text)):
        depth += text[i] in "(<[{"
        depth -= text[i] in ")>]}" and not (text[i] == ">" and text[i - 1] == "-")
        if depth == 0:
            return text[start + 1 : i]
    return text[start + 1 :]


def _split_top(text: str) -> list[str]:
    parts, depth, cur = [], 0, []
    for i, ch in enumerate(text):
        if ch in "(<[{":
            depth += 1
        elif ch in ")>]}" and not (ch == ">" and i and text[i - 1] == "-"):
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return [p.strip() for p in parts if p.strip()]


def argument_names(text: str, func_name: str, count: int) -> list[str]:
    """The entry function's argument names as the text writes them (``%lhs``), else ``%arg<i>``."""
    names = None
    pretty = re.search(r"func\.func\s+(?:public\s+|private\s+|nested\s+)?@" + re.escape(func_name) + r"\s*\(", text)
    if pretty:
        names = [p.split(":", 1)[0].strip() for p in _split_top(_balanced(text, pretty.end() - 1))]
    else:  # generic form: "func.func"() <{... sym_name = "main" ...}> ({ ^bb0(%arg0: ..., ...):
        generic = re.search(r'sym_name\s*=\s*"' + re.escape(func_name) + r'"', text)
        block = re.compile(r"\^bb0\s*\(").search(text, generic.end()) if generic else None
        if block:
            names = [p.split(":", 1)[0].strip() for p in _split_top(_balanced(text, block.end() - 1))]
    if not names or len(names) != count or not all(n.startswith("%") for n in names):
        return [f"%arg{i}" for i in range(count)]
    return names


def _resolve(key: str, names: list[str], func_name: str, spec: str) -> int:
    name = _norm(key)
    if name in names:
        return names.index(name)
    m = re.fullmatch(r"%arg(\d+)", name)
    if m and int(m[1]) < len(names):
        return int(m[1])
    raise FeatureError(f"--dim {spec}: no argument {name} in @{func_name} (arguments: {', '.join(names)})")


def bound_shapes(
    arg_shapes: list[tuple[int, ...] | None], names: list[str], dims: Mapping[str, object], func_name: str
) -> list[tuple[int, ...] | None]:
    """Per argument, its shape with every bound size filled in (-1 = still dynamic); None for non-tensors."""
    shapes = [list(s) if s is not None else None for s in arg_shapes]
    for key, value in dims.items():
        arg_key, _, dim = str(key).rpartition(":") if ":" in str(key) else (str(key), "", "")
        i = _resolve(arg_key, names, func_name, str(key))
        shape, name = shapes[i], names[i]
        if shape is None:
            raise FeatureError(f"--dim {key}: {name} is not a ranked tensor")
        if dim:  # one dimension
            d, size = int(dim), _size(value, key)
            if d >= len(shape):
                raise FeatureError(f"--dim {key}: {name} has rank {len(shape)} (dims 0..{len(shape) - 1})")
            wanted = {d: size}
        else:  # the whole shape
            full = _shape_of(value, key)
            if len(full) != len(shape):
                raise FeatureError(f"--dim {key}={value}: {name} has rank {len(shape)}, the shape has {len(full)}")
            wanted = {d: _size(s, key) for d, s in enumerate(full)}
        for d, size in wanted.items():
            if shape[d] >= 0 and shape[d] != size:
                raise FeatureError(f"--dim {key}: {name} dim {d} is static {shape[d]}, not {size}")
            shape[d] = size
    return [tuple(s) if s is not None else None for s in shapes]


def unbound_error(shapes: list[tuple[int, ...] | None], names: list[str]) -> FeatureError | None:
    """One error naming every dimension still dynamic, with the ``--dim`` that binds it; None when all are bound."""
    open_dims = [(names[i], d) for i, s in enumerate(shapes) if s is not None for d, v in enumerate(s) if v < 0]
    if not open_dims:
        return None
    which = ", ".join(f"{n} dim {d}" for n, d in open_dims)
    how = " ".join(f"--dim {n}:{d}=<size>" for n, d in open_dims)
    verb = "is dynamic: bind it with" if len(open_dims) == 1 else "are dynamic: bind them with"
    return FeatureError(f"{which} {verb} {how}")


# --------------------------------------------------------------------------------------------- specialisation
def _jax_context():
    try:
        from jax._src.interpreters import mlir as jax_mlir
        from jaxlib.mlir.dialects import stablehlo
    except ImportError:
        return None
    ctx = jax_mlir.make_ir_context()
    ctx.allow_unregistered_dialects = True
    stablehlo.register_stablehlo_passes()
    return ctx


def specialise(
    text: str, dims: Mapping[str, object] | None, where: str = "mlir", stablehlo: bool = False
) -> str | None:
    """The module with the entry function's arguments bound to static shapes, sizes propagated; generic form.

    Returns None when the entry function has no dynamic dimension and nothing is bound (nothing to do).
    """
    dims = dict(dims or {})
    if stablehlo:
        ctx = _jax_context()
        if ctx is None:
            raise FeatureError(
                f"{where}: binding sizes in StableHLO needs jax (its MLIR has the StableHLO dialect "
                "and shape refinement): pip install jax"
            )
        from jaxlib.mlir import ir, passmanager

        pipeline = "builtin.module(stablehlo-refine-shapes,canonicalize)"
    else:
        from torch_mlir import ir, passmanager

        from features.mlir.graph import _context

        ctx = _context()
        pipeline = "builtin.module(canonicalize)"
    try:
        module = ir.Module.parse(text, ctx)
    except ir.MLIRError as exc:
        from features.mlir.graph import parse_error

        raise parse_error(exc, where) from None
    func = entry_function(module)
    if func is None:
        if dims:
            raise FeatureError(f"{where}: --dim given but the module has no func.func to bind")
        return None
    name = _sym(func, "sym_name") or "main"
    block = func.regions[0].blocks[0]
    shapes = [_shape(a.type, ir) for a in block.arguments]
    names = argument_names(text, name, len(shapes))
    if not dims and not any(s is not None and -1 in s for s in shapes):
        return None
    bound = bound_shapes(shapes, names, dims, name)
    err = unbound_error(bound, names)
    if err is not None:
        raise FeatureError(f"{where}: {err}")
    with ctx, ir.Location.unknown():
        new_types = []
        for arg, shape in zip(block.arguments, bound):
            if shape is None:
                new_types.append(arg.type)
                continue
            old = ir.RankedTensorType(arg.type)
            static = ir.RankedTensorType.get(shape, old.element_type, old.encoding)
            new_types.append(static)
            if tuple(shape) == tuple(_shape(arg.type, ir)):
                continue
            arg.set_type(static)
            if not stablehlo:  # enter through a cast back to the dynamic type; canonicalize folds it forward
                from torch_mlir.dialects import tensor

                with ir.InsertionPoint.at_block_begin(block):
                    cast = tensor.CastOp(old, arg)
                arg.replace_all_uses_except(cast.result, cast.operation)
        ftype = ir.FunctionType(ir.TypeAttr(func.attributes["function_type"]).value)
        func.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(new_types, ftype.results))
        try:
            if not stablehlo:  # StableHLO: calls see the new types only after stablehlo-refine-shapes
                module.operation.verify()
            passmanager.PassManager.parse(pipeline).run(module.operation)
        except ir.MLIRError as exc:
            msg = " ".join(
                str(
                    getattr(exc, "error_diagnostics", [exc])[0].message
                    if getattr(exc, "error_diagnostics", None)
                    else exc
                ).split()
            )
            raise FeatureError(f"{where}: the bound sizes do not fit the module: {msg[:300]}") from None
    return module.operation.get_asm(print_generic_op_form=True)


def _shape(t, ir) -> tuple[int, ...] | None:
    try:
        shaped = ir.ShapedType(t)
    except (ValueError, TypeError):
        return None
    if not shaped.has_rank:
        return None
    return tuple(-1 if shaped.is_dynamic_dim(i) else int(d) for i, d in enumerate(shaped.shape))
