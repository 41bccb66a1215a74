"""DTensor layouts for the ops capture: which part of a whole tensor each
recorded tensor holds, so ``actdiff compare`` can combine the shards of a
tensor-parallel run into whole-tensor values and compare it with a run of
another layout (``docs/capture.md``, "Tensor parallelism").

A layout token (the log's ``Layout:``, ``Output layouts:``, ``Input
layouts:`` lines; ``actdiff::layout`` reads them):

- ``-``: a plain tensor, not known to be part of a DTensor;
- ``R``: a DTensor replicated on every mesh dimension;
- ``tp:S(1)``: sharded along tensor dimension 1 over mesh dimension ``tp``
  (``dp:R tp:S(1)`` on a 2-D mesh: every non-replicated dimension named);
- ``tp:P``: a pending sum over ``tp`` (``Partial``): no whole-tensor value;
- ``?``: computed from a shard in a way this module cannot follow: not
  comparable across layouts.

DTensor ops are recorded once, at the DTensor level (the mode sees the
DTensor op; its local ops run inside it). The local tensor of a DTensor
result (``to_local()``, the default output of ``ColwiseParallel``) keeps
its shard's layout through the plain ops that follow: same-shape ops,
views that split or merge the sharded dimension, transposes and
permutes, and ops that keep every dimension up to the sharded one (a
batched matmul over sharded heads, attention's log-sum-exp)."""

from __future__ import annotations

import math
import sys
import weakref

import torch

PLAIN = "-"
UNKNOWN = "?"

_TRANSPOSES = frozenset({"transpose", "transpose_", "t", "t_", "permute", "swapdims", "swapaxes"})
# Collectives whose result is whole on every rank (a plain replica).
_WHOLE = frozenset({"all_reduce", "all_reduce_", "all_gather_into_tensor", "_allgather_base", "broadcast_", "broadcast"})

# The Layouts of the armed capture, for ``DTensor.to_local`` (see ``install``).
_current: list = []
_installed = False


def install() -> None:
    """Wraps ``DTensor.to_local`` (once per process) so that the local
    tensor it returns keeps its DTensor's layout in the armed capture:
    ``to_local`` runs outside any DTensor op (``ColwiseParallel``'s output,
    a redistribution's result), where the dispatch mode sees only a view."""
    global _installed
    d = _dtensor_type()
    if _installed or d is None:
        return
    _installed = True
    orig = d.to_local

    def to_local(self, *args, **kwargs):
        out = orig(self, *args, **kwargs)
        # FSDP's own use (a parameter's shard for its all-gather) makes no
        # activation a shard: only the caller outside torch.distributed's
        # FSDP code is followed.
        if _current and isinstance(out, torch.Tensor) and "/fsdp/" not in sys._getframe(1).f_code.co_filename:
            lay = _current[-1]
            lay._keep(out, lay._dtensor_tag(self))
        return out

    to_local.__doc__ = orig.__doc__
    to_local.__wrapped__ = orig
    d.to_local = to_local


def arm(lay: "Layouts") -> None:
    _current.append(lay)


def disarm(lay: "Layouts") -> None:
    if lay in _current:
        _current.remove(lay)


def _dtensor_type():
    try:
        from torch.distributed.tensor import DTensor

        return DTensor
    except Exception:  # noqa: BLE001 - torch built without distributed
        return None


class _Tag:
    """A shard of a whole tensor: ``token`` and the whole ``shape``; for a
    shard on one mesh dimension, that dimension's name, the tensor
    dimension, the number of shards and this rank's coordinate on that
    mesh dimension (None otherwise)."""

    __slots__ = ("token", "shape", "shard")

    def __init__(self, token: str, shape, shard):
        self.token = token
        self.shape = tuple(shape)
        self.shard = shard  # (mesh_dim_name, tensor_dim, count, coord) or None


class Layouts:
    """Per capture: the mesh seen, and the layout tags of plain tensors that
    are DTensor shards (weakly keyed by identity)."""

    def __init__(self):
        self.dtensor = _dtensor_type()
        self.mesh = None  # (dims text, coords text) of the first DTensor's root mesh
        self.tags: dict = {}  # id(t) -> (weakref, _Tag)

    # -- tokens -----------------------------------------------------------

    def _mesh_names(self, mesh) -> list:
        names = mesh.mesh_dim_names
        return list(names) if names else [f"dim{i}" for i in range(mesh.ndim)]

    def _note_mesh(self, mesh) -> None:
        if self.mesh is not None:
            return
        root = getattr(mesh, "_get_root_mesh", lambda: mesh)()
        names = self._mesh_names(root)
        coords = root.get_coordinate()
        if coords is None:
            return
        self.mesh = (
            " ".join(f"{n}={s}" for n, s in zip(names, root.shape)),
            " ".join(f"{n}={c}" for n, c in zip(names, coords)),
        )

    def _dtensor_tag(self, t) -> _Tag:
        mesh = t.device_mesh
        self._note_mesh(mesh)
        names = self._mesh_names(mesh)
        coords = mesh.get_coordinate()
        parts = []
        shard = None
        for name, p in zip(names, t.placements):
            if p.is_replicate():
                continue
            if p.is_shard():
                d = p.dim if p.dim >= 0 else p.dim + t.ndim
                parts.append(f"{name}:S({d})")
                i = names.index(name)
                shard = (name, d, mesh.size(i), coords[i] if coords else None) if shard is None else None
            else:
                parts.append(f"{name}:P")
                shard = None
        token = " ".join(parts) if parts else "R"
        if any(x.endswith(":P") for x in parts):
            shard = None
        return _Tag(token, t.shape, shard)

    def tag(self, t):
        """The layout of tensor ``t``: a ``_Tag``, or None for a plain tensor."""
        d = self.dtensor
        if d is not None and isinstance(t, d):
            return self._dtensor_tag(t)
        e = self.tags.get(id(t))
        if e is not None and e[0]() is t:
            return e[1]
        return None

    def _written(self, t):
        """The tag written for ``t``: its tag, or ``?`` for a shard whose
        place in the whole tensor cannot be stated (so that no digest
        indexed by its own elements is ever combined)."""
        g = self.tag(t)
        if g is not None and g.shard is not None and self._place(t) is None:
            return _Tag(UNKNOWN, g.shape, None)
        return g

    def token(self, t) -> str:
        g = self._written(t)
        return PLAIN if g is None else g.token

    def stats_line(self, t):
        """The ``Layout:`` value of the stats tensor ``t``, or None."""
        g = self._written(t)
        if g is None:
            return None
        line = f"{g.token} [{', '.join(str(int(s)) for s in g.shape)}]"
        p = self._place(t)
        if p is not None:
            offset = [0] * len(p[2])
            offset[p[0]] = p[1]
            line += f" at [{', '.join(map(str, offset))}]"
        return line

    def _place(self, t):
        """For a shard over one mesh dimension (a DTensor or its local
        tensor): ``(dim, start, local shape, whole shape)``, ``start`` where
        it begins along ``dim`` in the whole tensor (``torch.chunk``'s
        split, as ``Shard`` splits: shard ``c`` starts at ``c * ceil(n /
        count)``); None for anything else or a shard whose place does not
        add up."""
        g = self.tag(t)
        if g is None or g.shard is None:
            return None
        _, d, count, coord = g.shard
        local = getattr(t, "_local_tensor", t) if self.dtensor is not None and isinstance(t, self.dtensor) else t
        ls, ws = tuple(local.shape), tuple(g.shape)
        if coord is None or len(ls) != len(ws) or d >= len(ls):
            return None
        if any(a != b for i, (a, b) in enumerate(zip(ls, ws)) if i != d):
            return None
        start = coord * -(-ws[d] // count)
        if start + ls[d] > ws[d]:
            return None
        return d, start, ls, ws

    def digest_index(self, t):
        """Where shard ``t``'s elements sit in the whole tensor, as the
        digest's ``(run, stride, offset)`` (``actdiff::capture::digest::
        Index``: the local tensor's elements, in row-major order, are runs
        of ``run`` elements, run ``r`` starting at whole element ``r *
        stride + offset``); None when ``t`` is no shard over one mesh
        dimension."""
        p = self._place(t)
        if p is None:
            return None
        d, start, ls, ws = p
        inner = math.prod(ls[d + 1 :])
        return (ls[d] * inner, ws[d] * inner, start * inner)

    def active(self) -> bool:
        return self.mesh is not None or bool(self.tags)

    # -- propagation --------------------------------------------------------

    def _set(self, t, g: _Tag) -> None:
        self.tags[id(t)] = (weakref.ref(t), g)

    def _keep(self, t, g) -> None:
        """Tags plain tensor ``t`` with ``g``; a replica (``R``, or None)
        is a plain tensor: no tag."""
        if g is None or g.token == "R":
            self.tags.pop(id(t), None)
        else:
            self._set(t, g)

    def follow(self, name: str, args, ins: list, outs: list) -> None:
        """Tags plain results of an op from the tagged inputs: a DTensor
        result's local tensor gets the DTensor's layout, a plain result the
        layout its first shard input implies (``?`` when it cannot be
        followed)."""
        d = self.dtensor
        src = None
        for t in ins:
            if d is not None and isinstance(t, d):
                continue
            g = self.tag(t)
            if g is not None:
                src = (t, g)
                break
        whole = name in _WHOLE
        for o in outs:
            if whole:
                self.tags.pop(id(o), None)
                continue
            if d is not None and isinstance(o, d):
                g = self._dtensor_tag(o)
                loc = getattr(o, "_local_tensor", None)
                if loc is not None:
                    self._keep(loc, g)
                continue
            if src is None or not isinstance(o, torch.Tensor):
                continue
            self._keep(o, _derive(name, args, src[0], src[1], o))


def _derive(name: str, args, t, g: _Tag, o) -> _Tag:
    """The layout of plain result ``o`` computed from shard ``t`` (``g``)."""
    if g.shard is None:
        # Anything from a pending sum (or a 2-D shard) is not followed.
        return _Tag(UNKNOWN, o.shape, None)
    mname, dim, count, coord = g.shard
    ls, os_ = tuple(t.shape), tuple(o.shape)

    def shard_on(nd: int) -> _Tag:
        whole = list(os_)
        whole[nd] *= count
        return _Tag(f"{mname}:S({nd})", whole, (mname, nd, count, coord))

    if os_ == ls:
        return shard_on(dim)
    if name in _TRANSPOSES and len(os_) == len(ls):
        perm = _permutation(name, args, len(ls))
        if perm is not None:
            return shard_on(perm.index(dim))
    if o.numel() == t.numel() and o.numel() > 0:
        outer = math.prod(ls[:dim])
        acc = 1
        for nd, size in enumerate(os_):
            if acc == outer and size != 1 and (ls[dim] % size == 0 or size % ls[dim] == 0):
                return shard_on(nd)
            acc *= size
            if acc > outer:
                break
    if len(os_) > dim and os_[: dim + 1] == ls[: dim + 1]:
        return shard_on(dim)
    return _Tag(UNKNOWN, os_, None)


def _permutation(name: str, args, ndim: int):
    """The dims of the result in terms of the input's (``perm[i]`` is the
    input dim at result dim ``i``), or None."""
    perm = list(range(ndim))
    try:
        if name in ("t", "t_"):
            perm.reverse()
        elif name == "permute":
            perm = [int(p) % ndim for p in args[1]]
        else:
            a, b = int(args[1]) % ndim, int(args[2]) % ndim
            perm[a], perm[b] = perm[b], perm[a]
    except (IndexError, TypeError, ValueError):
        return None
    return perm
