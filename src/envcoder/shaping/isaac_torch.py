"""PyTorch as IsaacGymEnvs rewards use it, on jax.numpy: what a reward file written for Isaac Gym (Eureka's format)
runs on in envcoder, without torch installed.

`torch` is a namespace of torch's functions, dtypes and `torch.jit.script` (a no-op); every array it makes or takes is
a `Tensor`, a thin wrapper of a jax array with torch's methods and in-place item assignment (`x[:, 2] = 0.0` replaces
the wrapper's array, as torch changes the tensor). The quaternion helpers of `isaacgym.torch_utils` and
`isaacgymenvs.utils.torch_jit_utils` follow Isaac's order **(x, y, z, w)**, unlike `envcoder.shaping.helpers`
(MuJoCo's w, x, y, z).

What it does not know is refused by name before anything runs (`envcoder.candidates.isaac` checks a file's names
against `TORCH_FUNCTIONS`, `TENSOR_METHODS` and `HELPERS`); what cannot be traced (a shape that depends on the data,
`x[mask]` read, `.item()` as a Python number) fails with torch's name of the operation in its message.
"""

from __future__ import annotations

import math
import types
from typing import Any, Mapping, NamedTuple

import jax
import jax.numpy as jnp


# ---- the tensor ---------------------------------------------------------------------------------

def unwrap(x):
    """The jax array (or nest of them) inside `x`; other values as they are."""
    if isinstance(x, Tensor):
        return x._a
    if isinstance(x, (list, tuple)) and not _is_size(x):
        return type(x)(unwrap(v) for v in x) if not hasattr(x, "_fields") else type(x)(*(unwrap(v) for v in x))
    if isinstance(x, dict):
        return {k: unwrap(v) for k, v in x.items()}
    return x


def wrap(x):
    """`x` as torch code sees it: arrays as `Tensor`s (tuples and dicts of them too)."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (jax.Array, jnp.ndarray)) or hasattr(x, "aval"):
        return Tensor(x)
    if isinstance(x, tuple) and hasattr(x, "_fields"):
        return type(x)(*(wrap(v) for v in x))
    if isinstance(x, (list, tuple)):
        return type(x)(wrap(v) for v in x)
    if isinstance(x, dict):
        return {k: wrap(v) for k, v in x.items()}
    return x


def _is_size(x) -> bool:
    return isinstance(x, Size)


class Size(tuple):
    """`torch.Size`: a tuple of ints."""

    def numel(self):
        return math.prod(self)


def _dtype(dtype):
    return None if dtype is None else _DTYPES.get(dtype, dtype)


def _axis(dim):
    return tuple(dim) if isinstance(dim, (list, tuple)) else dim


def _index(key):
    if isinstance(key, tuple):
        return tuple(_index(k) for k in key)
    if isinstance(key, list):
        return jnp.asarray(unwrap(key))
    return unwrap(key)


class MinMax(NamedTuple):
    """What `torch.max(x, dim)` returns: `(values, indices)`."""

    values: Any
    indices: Any


def _reduce(fn):
    def method(self, dim=None, keepdim=False, dtype=None, **kwargs):
        if "axis" in kwargs:
            dim = kwargs.pop("axis")
        if kwargs:
            raise TypeError(f"unexpected arguments {', '.join(kwargs)}")
        out = fn(self._a, axis=_axis(dim), keepdims=keepdim)
        return Tensor(out.astype(_dtype(dtype)) if dtype is not None else out)
    return method


def _extreme(fn, arg_fn, pair_fn):
    def method(self, dim=None, keepdim=False, **kwargs):
        if isinstance(dim, Tensor) or (dim is not None and not isinstance(dim, int)):
            return Tensor(pair_fn(self._a, unwrap(dim)))  # torch.max(a, b): elementwise
        if dim is None:
            return Tensor(fn(self._a))
        return MinMax(Tensor(fn(self._a, axis=dim, keepdims=keepdim)),
                      Tensor(arg_fn(self._a, axis=dim, keepdims=keepdim)))
    return method


def _unary(fn):
    def method(self):
        return Tensor(fn(self._a))
    return method


def _binary(fn, reverse=False):
    def method(self, other):
        other = unwrap(other)
        return Tensor(fn(other, self._a) if reverse else fn(self._a, other))
    return method


def _in_place(name):
    def method(self, *args, **kwargs):
        self._a = getattr(self, name)(*args, **kwargs)._a
        return self
    return method


def _norm(a, p=2, dim=None, keepdim=False, dtype=None):
    if p == "fro" or p is None:
        p = 2
    if dim is None:
        a = a.reshape(-1)
        dim = 0
    if p == 2:
        return jnp.sqrt(jnp.sum(a * a, axis=_axis(dim), keepdims=keepdim))
    if p == 1:
        return jnp.sum(jnp.abs(a), axis=_axis(dim), keepdims=keepdim)
    if p in (math.inf, float("inf")):
        return jnp.max(jnp.abs(a), axis=_axis(dim), keepdims=keepdim)
    return jnp.sum(jnp.abs(a) ** p, axis=_axis(dim), keepdims=keepdim) ** (1.0 / p)


def _shape_args(shape):
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    return tuple(int(s._a) if isinstance(s, Tensor) else s for s in shape)  # a traced batch size stays symbolic


class Tensor:
    """A jax array with torch's methods. Item assignment and the `_` methods (`add_`, `clamp_`, ...) replace the array
    this object holds: every name bound to the object sees the change, as in torch."""

    __slots__ = ("_a",)
    __array_priority__ = 1000

    def __init__(self, array):
        self._a = jnp.asarray(array)

    # -- what it is
    @property
    def shape(self):
        return Size(self._a.shape)

    def size(self, dim=None):
        return Size(self._a.shape) if dim is None else self._a.shape[dim]

    @property
    def dtype(self):
        return self._a.dtype

    @property
    def ndim(self):
        return self._a.ndim

    def dim(self):
        return self._a.ndim

    ndimension = dim

    def numel(self):
        return self._a.size

    nelement = numel

    @property
    def device(self):
        return "cpu"

    @property
    def is_cuda(self):
        return False

    @property
    def requires_grad(self):
        return False

    @property
    def data(self):
        return self

    @property
    def T(self):
        return Tensor(self._a.T)

    @property
    def mT(self):
        return Tensor(jnp.swapaxes(self._a, -1, -2))

    def __len__(self):
        return self._a.shape[0]

    def __iter__(self):
        return (Tensor(self._a[i]) for i in range(self._a.shape[0]))

    def __repr__(self):
        return f"Tensor({self._a!r})"

    def __bool__(self):
        return bool(self._a)

    def __float__(self):
        return float(self._a)

    def __int__(self):
        return int(self._a)

    def __index__(self):
        return int(self._a)

    def __hash__(self):
        return id(self)

    # -- indexing
    def __getitem__(self, key):
        key = _index(key)
        if isinstance(key, jax.Array) and key.dtype == jnp.bool_:
            raise TypeError("tensor[mask] with a boolean mask makes a shape that depends on the data, which a program "
                            "traced for every environment at once cannot have: use torch.where(mask, x, other)")
        return Tensor(self._a[key])

    def __setitem__(self, key, value):
        key, value = _index(key), unwrap(value)
        if isinstance(key, jax.Array) and key.dtype == jnp.bool_:
            mask = key.reshape(key.shape + (1,) * (self._a.ndim - key.ndim))
            self._a = jnp.where(mask, jnp.asarray(value, self._a.dtype), self._a)
        else:
            self._a = self._a.at[key].set(jnp.asarray(value).astype(self._a.dtype))

    # -- arithmetic
    __add__, __radd__ = _binary(jnp.add), _binary(jnp.add, True)
    __sub__, __rsub__ = _binary(jnp.subtract), _binary(jnp.subtract, True)
    __mul__, __rmul__ = _binary(jnp.multiply), _binary(jnp.multiply, True)
    __truediv__, __rtruediv__ = _binary(jnp.true_divide), _binary(jnp.true_divide, True)
    __floordiv__, __rfloordiv__ = _binary(jnp.floor_divide), _binary(jnp.floor_divide, True)
    __mod__, __rmod__ = _binary(jnp.remainder), _binary(jnp.remainder, True)
    __pow__, __rpow__ = _binary(jnp.power), _binary(jnp.power, True)
    __matmul__, __rmatmul__ = _binary(jnp.matmul), _binary(jnp.matmul, True)
    __and__, __rand__ = _binary(jnp.logical_and), _binary(jnp.logical_and, True)
    __or__, __ror__ = _binary(jnp.logical_or), _binary(jnp.logical_or, True)
    __xor__, __rxor__ = _binary(jnp.logical_xor), _binary(jnp.logical_xor, True)
    __lt__, __le__ = _binary(jnp.less), _binary(jnp.less_equal)
    __gt__, __ge__ = _binary(jnp.greater), _binary(jnp.greater_equal)
    __eq__, __ne__ = _binary(jnp.equal), _binary(jnp.not_equal)
    __neg__, __pos__, __abs__ = _unary(jnp.negative), _unary(jnp.positive), _unary(jnp.abs)

    def __invert__(self):
        return Tensor(jnp.logical_not(self._a) if self._a.dtype == jnp.bool_ else jnp.invert(self._a))

    def __iadd__(self, other):
        self._a = (self + other)._a
        return self

    def __isub__(self, other):
        self._a = (self - other)._a
        return self

    def __imul__(self, other):
        self._a = (self * other)._a
        return self

    def __itruediv__(self, other):
        self._a = (self / other)._a
        return self

    def __ipow__(self, other):
        self._a = (self ** other)._a
        return self

    def __iand__(self, other):
        self._a = (self & other)._a
        return self

    def __ior__(self, other):
        self._a = (self | other)._a
        return self

    add = lambda self, other, alpha=1: Tensor(self._a + alpha * unwrap(other))  # noqa: E731
    sub = lambda self, other, alpha=1: Tensor(self._a - alpha * unwrap(other))  # noqa: E731
    subtract = sub
    mul = multiply = _binary(jnp.multiply)
    div = divide = true_divide = _binary(jnp.true_divide)
    floor_divide = _binary(jnp.floor_divide)
    remainder, fmod = _binary(jnp.remainder), _binary(jnp.fmod)
    pow = _binary(jnp.power)
    matmul = mm = bmm = _binary(jnp.matmul)

    def dot(self, other):  # torch's: two 1-D tensors of one length
        a, b = self._a, jnp.asarray(unwrap(other))
        if a.ndim != 1 or b.ndim != 1:
            raise RuntimeError(f"torch.dot takes two 1-D tensors, as in torch; got shapes {tuple(a.shape)} and "
                               f"{tuple(b.shape)}: for a dot product per row use (a * b).sum(dim=-1)")
        return Tensor(jnp.dot(a, b))
    maximum, minimum = _binary(jnp.maximum), _binary(jnp.minimum)
    atan2 = arctan2 = _binary(jnp.arctan2)
    eq, ne, lt, le, gt, ge = (_binary(jnp.equal), _binary(jnp.not_equal), _binary(jnp.less),
                              _binary(jnp.less_equal), _binary(jnp.greater), _binary(jnp.greater_equal))
    logical_and, logical_or, logical_xor = _binary(jnp.logical_and), _binary(jnp.logical_or), _binary(jnp.logical_xor)
    logical_not = _unary(jnp.logical_not)
    add_, sub_, mul_, div_, pow_ = (_in_place("add"), _in_place("sub"), _in_place("mul"), _in_place("div"),
                                    _in_place("pow"))

    # -- elementwise
    abs = absolute = _unary(jnp.abs)
    neg = negative = _unary(jnp.negative)
    exp, exp2, expm1 = _unary(jnp.exp), _unary(jnp.exp2), _unary(jnp.expm1)
    log, log2, log10, log1p = _unary(jnp.log), _unary(jnp.log2), _unary(jnp.log10), _unary(jnp.log1p)
    sqrt, square = _unary(jnp.sqrt), _unary(jnp.square)
    rsqrt = _unary(jax.lax.rsqrt)
    reciprocal = _unary(jnp.reciprocal)
    sin, cos, tan, tanh = _unary(jnp.sin), _unary(jnp.cos), _unary(jnp.tan), _unary(jnp.tanh)
    sinh, cosh = _unary(jnp.sinh), _unary(jnp.cosh)
    asin = arcsin = _unary(jnp.arcsin)
    acos = arccos = _unary(jnp.arccos)
    atan = arctan = _unary(jnp.arctan)
    sigmoid = _unary(jax.nn.sigmoid)
    relu = _unary(jax.nn.relu)
    sign, sgn = _unary(jnp.sign), _unary(jnp.sign)
    floor, ceil, trunc, frac = _unary(jnp.floor), _unary(jnp.ceil), _unary(jnp.trunc), _unary(lambda a: a - jnp.trunc(a))
    isnan, isinf, isfinite = _unary(jnp.isnan), _unary(jnp.isinf), _unary(jnp.isfinite)
    erf = _unary(jax.scipy.special.erf)
    deg2rad, rad2deg = _unary(jnp.deg2rad), _unary(jnp.rad2deg)
    signbit = _unary(jnp.signbit)
    hypot = _binary(jnp.hypot)
    bitwise_and, bitwise_or = _binary(jnp.bitwise_and), _binary(jnp.bitwise_or)
    exp_, abs_, sqrt_, neg_ = _in_place("exp"), _in_place("abs"), _in_place("sqrt"), _in_place("neg")
    square_, unsqueeze_, squeeze_ = _in_place("square"), _in_place("unsqueeze"), _in_place("squeeze")

    def round(self, decimals=0):
        return Tensor(jnp.round(self._a, decimals))

    def clamp(self, min=None, max=None):  # noqa: A002 - torch's names
        return Tensor(jnp.clip(self._a, unwrap(min), unwrap(max)))

    clip = clamp
    clamp_ = clip_ = _in_place("clamp")

    def clamp_min(self, min):  # noqa: A002
        return self.clamp(min=min)

    def clamp_max(self, max):  # noqa: A002
        return self.clamp(max=max)

    def lerp(self, end, weight):
        return Tensor(self._a + unwrap(weight) * (unwrap(end) - self._a))

    def where(self, condition, other):
        return Tensor(jnp.where(unwrap(condition), self._a, unwrap(other)))

    def masked_fill(self, mask, value):
        mask = unwrap(mask)
        return Tensor(jnp.where(mask, jnp.asarray(unwrap(value), self._a.dtype), self._a))

    masked_fill_ = _in_place("masked_fill")

    def nan_to_num(self, nan=0.0, posinf=None, neginf=None):
        return Tensor(jnp.nan_to_num(self._a, nan=nan, posinf=posinf, neginf=neginf))

    def zero_(self):
        self._a = jnp.zeros_like(self._a)
        return self

    def fill_(self, value):
        self._a = jnp.full_like(self._a, unwrap(value))
        return self

    def copy_(self, other):
        self._a = jnp.broadcast_to(jnp.asarray(unwrap(other), self._a.dtype), self._a.shape)
        return self

    # -- reductions
    sum = _reduce(jnp.sum)
    mean = _reduce(jnp.mean)
    prod = _reduce(jnp.prod)
    amax, amin = _reduce(jnp.max), _reduce(jnp.min)
    logsumexp = _reduce(jax.scipy.special.logsumexp)
    max = _extreme(jnp.max, jnp.argmax, jnp.maximum)
    min = _extreme(jnp.min, jnp.argmin, jnp.minimum)

    def any(self, dim=None, keepdim=False):
        return Tensor(jnp.any(self._a, axis=_axis(dim), keepdims=keepdim))

    def all(self, dim=None, keepdim=False):
        return Tensor(jnp.all(self._a, axis=_axis(dim), keepdims=keepdim))

    def argmax(self, dim=None, keepdim=False):
        return Tensor(jnp.argmax(self._a, axis=dim, keepdims=keepdim))

    def argmin(self, dim=None, keepdim=False):
        return Tensor(jnp.argmin(self._a, axis=dim, keepdims=keepdim))

    def std(self, dim=None, unbiased=True, keepdim=False, correction=None):
        ddof = correction if correction is not None else int(bool(unbiased))
        return Tensor(jnp.std(self._a, axis=_axis(dim), ddof=ddof, keepdims=keepdim))

    def var(self, dim=None, unbiased=True, keepdim=False, correction=None):
        ddof = correction if correction is not None else int(bool(unbiased))
        return Tensor(jnp.var(self._a, axis=_axis(dim), ddof=ddof, keepdims=keepdim))

    def norm(self, p=2, dim=None, keepdim=False, dtype=None):
        return Tensor(_norm(self._a, p, dim, keepdim))

    def cumsum(self, dim, dtype=None):
        return Tensor(jnp.cumsum(self._a, axis=dim))

    def cumprod(self, dim, dtype=None):
        return Tensor(jnp.cumprod(self._a, axis=dim))

    def softmax(self, dim):
        return Tensor(jax.nn.softmax(self._a, axis=dim))

    def log_softmax(self, dim):
        return Tensor(jax.nn.log_softmax(self._a, axis=dim))

    def sort(self, dim=-1, descending=False, stable=False):
        a = -self._a if descending else self._a
        order = jnp.argsort(a, axis=dim, stable=True)
        return MinMax(Tensor(jnp.take_along_axis(self._a, order, axis=dim)), Tensor(order))

    def topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - torch's names
        values, indices = self.sort(dim, descending=largest)
        return MinMax(values.narrow(dim, 0, k), indices.narrow(dim, 0, k))

    def median(self, dim=None, keepdim=False):
        if dim is None:  # torch's median of an even count is the lower of the two middle values
            flat = jnp.sort(self._a.reshape(-1))
            return Tensor(flat[(flat.shape[0] - 1) // 2])
        values, indices = self.sort(dim)
        middle = (self._a.shape[dim] - 1) // 2
        pick = lambda x: jax.lax.index_in_dim(x, middle, axis=dim, keepdims=keepdim)  # noqa: E731
        return MinMax(Tensor(pick(values._a)), Tensor(pick(indices._a)))

    def narrow(self, dim, start, length):
        return Tensor(jax.lax.slice_in_dim(self._a, start, start + length, axis=dim))

    def flip(self, *dims):
        return Tensor(jnp.flip(self._a, axis=_axis(dims[0] if len(dims) == 1 else dims)))

    def roll(self, shifts, dims=None):
        return Tensor(jnp.roll(self._a, shifts, axis=_axis(dims)))

    def diff(self, n=1, dim=-1):
        return Tensor(jnp.diff(self._a, n=n, axis=dim))

    def count_nonzero(self, dim=None):
        return Tensor(jnp.count_nonzero(self._a, axis=_axis(dim)))

    def nansum(self, dim=None, keepdim=False):
        return Tensor(jnp.nansum(self._a, axis=_axis(dim), keepdims=keepdim))

    def nanmean(self, dim=None, keepdim=False):
        return Tensor(jnp.nanmean(self._a, axis=_axis(dim), keepdims=keepdim))

    def repeat_interleave(self, repeats, dim=None):
        return Tensor(jnp.repeat(self._a if dim is not None else self._a.reshape(-1), repeats,
                                 axis=dim if dim is not None else 0))

    def tile(self, *dims):
        return Tensor(jnp.tile(self._a, _shape_args(dims)))

    def broadcast_to(self, *shape):
        return Tensor(jnp.broadcast_to(self._a, _shape_args(shape)))

    def outer(self, other):
        return Tensor(jnp.outer(self._a, unwrap(other)))

    def cross(self, other, dim=-1):
        return Tensor(jnp.cross(self._a, unwrap(other), axis=dim))

    # -- shape
    def view(self, *shape):
        if len(shape) == 1 and not isinstance(shape[0], (int, tuple, list, Size)):
            return self.to(shape[0])  # x.view(dtype)
        return Tensor(self._a.reshape(_shape_args(shape)))

    reshape = view

    def view_as(self, other):
        return Tensor(self._a.reshape(unwrap(other).shape))

    reshape_as = view_as

    def unsqueeze(self, dim):
        return Tensor(jnp.expand_dims(self._a, dim))

    def squeeze(self, dim=None):
        if dim is None:
            return Tensor(jnp.squeeze(self._a))
        return Tensor(jnp.squeeze(self._a, dim) if self._a.shape[dim] == 1 else self._a)

    def flatten(self, start_dim=0, end_dim=-1):
        shape = self._a.shape
        if not shape:
            return Tensor(self._a.reshape(1))
        start, end = start_dim % len(shape), end_dim % len(shape)
        return Tensor(self._a.reshape(shape[:start] + (-1,) + shape[end + 1:]))

    def permute(self, *dims):
        return Tensor(jnp.transpose(self._a, _shape_args(dims)))

    def transpose(self, dim0, dim1):
        return Tensor(jnp.swapaxes(self._a, dim0, dim1))

    def t(self):
        return Tensor(self._a.T)

    def expand(self, *sizes):
        sizes = _shape_args(sizes)
        lead = len(sizes) - self._a.ndim
        shape = tuple(self._a.shape[i - lead] if s == -1 else s for i, s in enumerate(sizes))
        return Tensor(jnp.broadcast_to(self._a, shape))

    def expand_as(self, other):
        return Tensor(jnp.broadcast_to(self._a, unwrap(other).shape))

    def repeat(self, *sizes):
        return Tensor(jnp.tile(self._a, _shape_args(sizes)))

    def contiguous(self):
        return self

    def index_select(self, dim, index):
        return Tensor(jnp.take(self._a, unwrap(index), axis=dim))

    def gather(self, dim, index):
        return Tensor(jnp.take_along_axis(self._a, unwrap(index), axis=dim))

    def chunk(self, chunks, dim=0):
        return tuple(Tensor(a) for a in jnp.array_split(self._a, chunks, axis=dim))

    def split(self, size, dim=0):
        n = self._a.shape[dim]
        if isinstance(size, int):
            edges = list(range(size, n, size))
        else:
            edges = list(jnp.cumsum(jnp.asarray(size))[:-1].tolist())
        return tuple(Tensor(a) for a in jnp.split(self._a, edges, axis=dim))

    def unbind(self, dim=0):
        return tuple(Tensor(a) for a in jnp.moveaxis(self._a, dim, 0))

    # -- type and place
    def to(self, *args, **kwargs):
        dtype = kwargs.get("dtype")
        for arg in args:
            if not isinstance(arg, str) and arg in _DTYPES or isinstance(arg, jnp.dtype):
                dtype = arg
        return Tensor(self._a.astype(_dtype(dtype))) if dtype is not None else self

    def type(self, dtype=None):
        return self.to(dtype) if dtype is not None else str(self._a.dtype)

    def type_as(self, other):
        return Tensor(self._a.astype(unwrap(other).dtype))

    def float(self):
        return Tensor(self._a.astype(jnp.float32))

    double = half = float

    def int(self):
        return Tensor(self._a.astype(jnp.int32))

    long = short = int

    def bool(self):
        return Tensor(self._a.astype(jnp.bool_))

    def clone(self, memory_format=None):
        return Tensor(self._a)

    def detach(self):
        return Tensor(self._a)

    def cpu(self):
        return self

    def cuda(self, device=None):
        return self

    def requires_grad_(self, requires_grad=True):
        return self

    def item(self):
        return Tensor(self._a.reshape(()))

    def new_zeros(self, *size, dtype=None, device=None):
        return Tensor(jnp.zeros(_shape_args(size), _dtype(dtype) or self._a.dtype))

    def new_ones(self, *size, dtype=None, device=None):
        return Tensor(jnp.ones(_shape_args(size), _dtype(dtype) or self._a.dtype))

    def new_full(self, size, fill_value, dtype=None, device=None):
        return Tensor(jnp.full(_shape_args((size,)), unwrap(fill_value), _dtype(dtype) or self._a.dtype))

    def new_tensor(self, data, dtype=None, device=None):
        return tensor(data, dtype=dtype or self._a.dtype)


# ---- torch's functions ------------------------------------------------------------------------------

def _function(method_name):
    """`torch.NAME(x, ...)`: the tensor method of that name."""
    def call(x, *args, **kwargs):
        kwargs.pop("out", None)
        return getattr(as_tensor(x), method_name)(*args, **kwargs)
    call.__name__ = method_name
    return call


def tensor(data, dtype=None, device=None, requires_grad=False):
    data = unwrap(data)
    if isinstance(data, (list, tuple)):
        data = jnp.stack([jnp.asarray(unwrap(v)) for v in data]) if data else jnp.zeros((0,))
    array = jnp.asarray(data)
    if dtype is None and jnp.issubdtype(array.dtype, jnp.floating):
        array = array.astype(jnp.float32)
    return Tensor(array.astype(_dtype(dtype)) if dtype is not None else array)


def as_tensor(data, dtype=None, device=None):
    return data if isinstance(data, Tensor) and dtype is None else tensor(data, dtype=dtype)


def _maker(fn):
    def make(*size, dtype=None, device=None, requires_grad=False, **kwargs):
        return Tensor(fn(_shape_args(size), _dtype(dtype) or jnp.float32))
    return make


def full(size, fill_value, dtype=None, device=None, requires_grad=False):
    return Tensor(jnp.full(_shape_args((size,)), unwrap(fill_value), _dtype(dtype)))


def _like(fn):
    def make(x, dtype=None, device=None, requires_grad=False, **kwargs):
        return Tensor(fn(unwrap(x), dtype=_dtype(dtype)))
    return make


def full_like(x, fill_value, dtype=None, device=None, requires_grad=False):
    return Tensor(jnp.full_like(unwrap(x), unwrap(fill_value), dtype=_dtype(dtype)))


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False):
    return Tensor(jnp.arange(start, end, step, dtype=_dtype(dtype)))


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False):
    return Tensor(jnp.linspace(unwrap(start), unwrap(end), steps, dtype=_dtype(dtype)))


def eye(n, m=None, dtype=None, device=None, requires_grad=False):
    return Tensor(jnp.eye(n, m, dtype=_dtype(dtype) or jnp.float32))


def cat(tensors, dim=0, out=None):
    return Tensor(jnp.concatenate([unwrap(as_tensor(t)) for t in tensors], axis=dim))


def stack(tensors, dim=0, out=None):
    return Tensor(jnp.stack([unwrap(as_tensor(t)) for t in tensors], axis=dim))


def where(condition, x=None, y=None):
    if x is None:
        raise TypeError("torch.where(condition) with one argument makes a shape that depends on the data: give it "
                        "the values for true and false, torch.where(condition, x, y)")
    return Tensor(jnp.where(unwrap(condition), unwrap(x), unwrap(y)))


def _clamp(x, min=None, max=None, out=None):  # noqa: A002 - torch's names
    return as_tensor(x).clamp(min, max)


def _max(x, dim=None, keepdim=False, out=None):
    return as_tensor(x).max(dim, keepdim)


def _min(x, dim=None, keepdim=False, out=None):
    return as_tensor(x).min(dim, keepdim)


def norm(x, p="fro", dim=None, keepdim=False, out=None, dtype=None):
    return as_tensor(x).norm(p, dim, keepdim)


def vector_norm(x, ord=2, dim=None, keepdim=False, dtype=None):  # noqa: A002
    return as_tensor(x).norm(ord, dim, keepdim)


def einsum(equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = operands[0]
    return Tensor(jnp.einsum(equation, *(unwrap(o) for o in operands)))


def cross(a, b, dim=-1):
    return as_tensor(a).cross(b, dim)


def atan2(a, b, out=None):
    return Tensor(jnp.arctan2(unwrap(a), unwrap(b)))


def _pair(fn):
    def call(a, b, out=None):
        return Tensor(fn(unwrap(a), unwrap(b)))
    return call


def cosine_similarity(a, b, dim=1, eps=1e-8):
    a, b = unwrap(a), unwrap(b)
    dot = jnp.sum(a * b, axis=dim)
    return Tensor(dot / jnp.maximum(jnp.linalg.norm(a, axis=dim) * jnp.linalg.norm(b, axis=dim), eps))


def normalize_vector(x, p=2.0, dim=1, eps=1e-12):
    """`torch.nn.functional.normalize`."""
    x = unwrap(x)
    return Tensor(x / jnp.maximum(_norm(x, p, dim, True), eps))


def softplus(x, beta=1.0, threshold=20.0):
    x = unwrap(x)
    return Tensor(jnp.where(x * beta > threshold, x, jax.nn.softplus(beta * x) / beta))


def _mean_loss(fn):
    def loss(a, b, reduction="mean"):
        out = fn(unwrap(a), unwrap(b))
        return Tensor({"mean": jnp.mean, "sum": jnp.sum}.get(reduction, lambda v: v)(out))
    return loss


def _no_grad():
    class NoGrad:
        def __enter__(self):
            return None

        def __exit__(self, *exc):
            return False

        def __call__(self, fn):
            return fn
    return NoGrad()


def _script(fn=None, *args, **kwargs):
    return fn


def _refuse(what, why):
    def call(*args, **kwargs):
        raise TypeError(f"{what} {why}")
    call.refused = why  # listed apart by `envcoder tasks --isaac`
    return call


_DTYPES = {}
float32 = float64 = double = half = float16 = bfloat16 = jnp.dtype(jnp.float32)
int32 = int64 = long = int16 = int8 = short = jnp.dtype(jnp.int32)
uint8 = jnp.dtype(jnp.uint8)
bool_ = jnp.dtype(jnp.bool_)

functional = types.SimpleNamespace(
    relu=_function("relu"), sigmoid=_function("sigmoid"), tanh=_function("tanh"), softplus=softplus,
    softmax=lambda x, dim=-1, **k: as_tensor(x).softmax(dim), log_softmax=lambda x, dim=-1, **k:
    as_tensor(x).log_softmax(dim), normalize=normalize_vector, cosine_similarity=cosine_similarity,
    mse_loss=_mean_loss(lambda a, b: (a - b) ** 2), l1_loss=_mean_loss(lambda a, b: jnp.abs(a - b)),
    smooth_l1_loss=_mean_loss(lambda a, b: jnp.where(jnp.abs(a - b) < 1.0, 0.5 * (a - b) ** 2,
                                                     jnp.abs(a - b) - 0.5)),
    elu=lambda x, alpha=1.0: Tensor(jax.nn.elu(unwrap(x), alpha)),
    leaky_relu=lambda x, negative_slope=0.01: Tensor(jax.nn.leaky_relu(unwrap(x), negative_slope)),
    silu=lambda x: Tensor(jax.nn.silu(unwrap(x))), gelu=lambda x, **k: Tensor(jax.nn.gelu(unwrap(x))),
)

_UNARY = ("abs", "absolute", "neg", "negative", "exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt",
          "rsqrt", "square", "reciprocal", "sin", "cos", "tan", "tanh", "sinh", "cosh", "asin", "arcsin", "acos",
          "arccos", "atan", "arctan", "sigmoid", "relu", "sign", "sgn", "floor", "ceil", "trunc", "frac", "round",
          "isnan", "isinf", "isfinite", "logical_not", "sum", "mean", "prod", "amax", "amin", "logsumexp", "any",
          "all", "argmax", "argmin", "std", "var", "cumsum", "cumprod", "softmax", "log_softmax", "flatten",
          "squeeze", "unsqueeze", "reshape", "permute", "transpose", "t", "index_select", "gather", "chunk", "split",
          "unbind", "clip", "lerp", "masked_fill", "nan_to_num", "clamp_min", "clamp_max", "matmul", "mm", "bmm",
          "dot", "pow", "add", "sub", "subtract", "mul", "multiply", "div", "divide", "true_divide", "floor_divide",
          "remainder", "fmod", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or", "logical_xor",
          "maximum", "minimum", "arctan2", "clone", "sort", "topk", "median", "narrow", "flip", "roll", "diff",
          "count_nonzero", "nansum", "nanmean", "repeat_interleave", "tile", "broadcast_to", "outer", "erf",
          "deg2rad", "rad2deg", "signbit", "bitwise_and", "bitwise_or")

torch = types.SimpleNamespace(
    Tensor=Tensor, Size=Size, tensor=tensor, as_tensor=as_tensor, from_numpy=as_tensor,
    zeros=_maker(jnp.zeros), ones=_maker(jnp.ones), empty=_maker(jnp.zeros), full=full,
    zeros_like=_like(jnp.zeros_like), ones_like=_like(jnp.ones_like), empty_like=_like(jnp.zeros_like),
    full_like=full_like, arange=arange, linspace=linspace, eye=eye,
    cat=cat, concat=cat, concatenate=cat, stack=stack, where=where, clamp=_clamp, max=_max, min=_min, norm=norm,
    einsum=einsum, cross=cross, atan2=atan2, hypot=_pair(jnp.hypot), heaviside=_pair(jnp.heaviside),
    hstack=lambda tensors, out=None: Tensor(jnp.hstack([unwrap(t) for t in tensors])),
    vstack=lambda tensors, out=None: Tensor(jnp.vstack([unwrap(t) for t in tensors])),
    greater=_pair(jnp.greater), less=_pair(jnp.less), greater_equal=_pair(jnp.greater_equal),
    less_equal=_pair(jnp.less_equal), dist=lambda a, b, p=2: norm(as_tensor(a) - as_tensor(b), p),
    copysign=_pair(jnp.copysign), cosine_similarity=cosine_similarity,
    linalg=types.SimpleNamespace(norm=lambda x, ord=None, dim=None, keepdim=False: norm(x, ord or 2, dim, keepdim),
                                 vector_norm=vector_norm),
    nn=types.SimpleNamespace(functional=functional), jit=types.SimpleNamespace(script=_script, ignore=_script),
    no_grad=_no_grad, float=float32, float32=float32, float64=float64, double=double, half=half, float16=float16,
    bfloat16=bfloat16, int=int32, int32=int32, int64=int64, long=long, int16=int16, int8=int8, short=short,
    uint8=uint8, bool=bool_, pi=math.pi, e=math.e, inf=math.inf, nan=math.nan,
    device=lambda *args, **kwargs: "cpu", is_tensor=lambda x: isinstance(x, Tensor),
    rand=_refuse("torch.rand", "draws random numbers: a reward must be a function of the state"),
    randn=_refuse("torch.randn", "draws random numbers: a reward must be a function of the state"),
    randint=_refuse("torch.randint", "draws random numbers: a reward must be a function of the state"),
    rand_like=_refuse("torch.rand_like", "draws random numbers: a reward must be a function of the state"),
    randn_like=_refuse("torch.randn_like", "draws random numbers: a reward must be a function of the state"),
    nonzero=_refuse("torch.nonzero", "makes a shape that depends on the data: use torch.where(mask, x, y)"),
    **{name: _function(name) for name in _UNARY},
)
torch.nn.functional = functional
_DTYPES.update({torch.float: jnp.float32, torch.bool: jnp.bool_})

TORCH_FUNCTIONS = frozenset(vars(torch))
"""The names `torch.NAME` that a reward file may use."""

TENSOR_METHODS = frozenset(name for name in dir(Tensor) if not name.startswith("_"))
"""The tensor methods and properties a reward file may use."""


# ---- isaacgym.torch_utils and isaacgymenvs.utils.torch_jit_utils, quaternions (x, y, z, w) ----------------

def _on_arrays(fn):
    """`fn` written on jax arrays, called with tensors: its arguments unwrapped, its results wrapped."""
    def call(*args, **kwargs):
        return wrap(fn(*unwrap(args), **unwrap(kwargs)))
    call.__name__, call.__doc__ = fn.__name__, fn.__doc__
    return call


def _quat_mul(a, b):
    ax, ay, az, aw = (a[..., i] for i in range(4))
    bx, by, bz, bw = (b[..., i] for i in range(4))
    return jnp.stack([aw * bx + ax * bw + ay * bz - az * by,
                      aw * by - ax * bz + ay * bw + az * bx,
                      aw * bz + ax * by - ay * bx + az * bw,
                      aw * bw - ax * bx - ay * by - az * bz], axis=-1)


def _quat_conjugate(q):
    return jnp.concatenate([-q[..., :3], q[..., 3:]], axis=-1)


def _quat_rotate(q, v):
    xyz, w = q[..., :3], q[..., 3:]
    t = 2.0 * jnp.cross(xyz, v)
    return v + w * t + jnp.cross(xyz, t)


def _quat_rotate_inverse(q, v):
    return _quat_rotate(_quat_conjugate(q), v)


def _normalize(x, eps=1e-9):
    return x / jnp.maximum(jnp.linalg.norm(x, axis=-1, keepdims=True), eps)


def _get_euler_xyz(q):
    x, y, z, w = (q[..., i] for i in range(4))
    roll = jnp.arctan2(2.0 * (w * x + y * z), 1.0 - 2.0 * (x * x + y * y))
    sin_pitch = 2.0 * (w * y - z * x)
    pitch = jnp.where(jnp.abs(sin_pitch) >= 1, jnp.copysign(jnp.pi / 2.0, sin_pitch),
                      jnp.arcsin(jnp.clip(sin_pitch, -1.0, 1.0)))
    yaw = jnp.arctan2(2.0 * (w * z + x * y), 1.0 - 2.0 * (y * y + z * z))
    two_pi = 2.0 * jnp.pi
    return roll % two_pi, pitch % two_pi, yaw % two_pi


def _quat_from_euler_xyz(roll, pitch, yaw):
    cy, sy = jnp.cos(yaw * 0.5), jnp.sin(yaw * 0.5)
    cr, sr = jnp.cos(roll * 0.5), jnp.sin(roll * 0.5)
    cp, sp = jnp.cos(pitch * 0.5), jnp.sin(pitch * 0.5)
    return jnp.stack([cy * sr * cp - sy * cr * sp, cy * cr * sp + sy * sr * cp,
                      sy * cr * cp - cy * sr * sp, cy * cr * cp + sy * sr * sp], axis=-1)


def _quat_from_angle_axis(angle, axis):
    half = angle / 2.0
    return _normalize(jnp.concatenate([axis * jnp.sin(half)[..., None], jnp.cos(half)[..., None]], axis=-1))


def _normalize_angle(x):
    return jnp.arctan2(jnp.sin(x), jnp.cos(x))


def _unscale(x, lower, upper):
    return (2.0 * x - upper - lower) / (upper - lower)


def _scale(x, lower, upper):
    return 0.5 * (x + 1.0) * (upper - lower) + lower


def _tensor_clamp(t, min_t, max_t):
    return jnp.maximum(jnp.minimum(t, max_t), min_t)


def _quat_axis(q, axis=0):
    basis = jnp.zeros(q.shape[:-1] + (3,)).at[..., axis].set(1.0)
    return _quat_rotate(q, basis)


def _quat_diff_rad(a, b):
    diff = _quat_mul(a, _quat_conjugate(b))
    return 2.0 * jnp.arcsin(jnp.clip(jnp.linalg.norm(diff[..., :3], axis=-1), None, 1.0))


def _quat_to_angle_axis(q):
    sin_half = jnp.linalg.norm(q[..., :3], axis=-1)
    angle = 2.0 * jnp.arctan2(sin_half, q[..., 3])
    angle = _normalize_angle(angle)
    axis = q[..., :3] / jnp.maximum(sin_half, 1e-5)[..., None]
    small = sin_half <= 1e-5
    axis = jnp.where(small[..., None], jnp.array([0.0, 0.0, 1.0]), axis)
    return jnp.where(small, 0.0, angle), axis


def _calc_heading(q):
    forward = _quat_rotate(q, jnp.zeros(q.shape[:-1] + (3,)).at[..., 0].set(1.0))
    return jnp.arctan2(forward[..., 1], forward[..., 0])


def _compute_heading_and_up(torso_rotation, inv_start_rot, to_target, vec0, vec1, up_idx):
    torso_quat = _quat_mul(torso_rotation, inv_start_rot)
    up_vec = _quat_rotate(torso_quat, vec1)
    heading_vec = _quat_rotate(torso_quat, vec0)
    target_dir = _normalize(to_target)
    up_proj = up_vec[..., up_idx]
    heading_proj = jnp.sum(heading_vec * target_dir, axis=-1)
    return torso_quat, up_proj, heading_proj, up_vec, heading_vec


def _compute_rot(torso_quat, velocity, ang_velocity, targets, torso_positions):
    vel_loc = _quat_rotate_inverse(torso_quat, velocity)
    angvel_loc = _quat_rotate_inverse(torso_quat, ang_velocity)
    roll, pitch, yaw = _get_euler_xyz(torso_quat)
    walk_target_angle = jnp.arctan2(targets[..., 1] - torso_positions[..., 1], targets[..., 0] - torso_positions[..., 0])
    angle_to_target = walk_target_angle - yaw
    return vel_loc, angvel_loc, roll, pitch, yaw, angle_to_target


def _copysign(a, b):
    return jnp.copysign(jnp.broadcast_to(jnp.asarray(a, jnp.float32), jnp.shape(b)), b)


def _to_torch(x, dtype=None, device=None, requires_grad=False):
    return jnp.asarray(x, _dtype(dtype) or jnp.float32)


def _get_axis_params(value, axis_idx, x_value=0.0, dtype=None, n_dims=3):
    params = [0.0] * n_dims
    params[axis_idx] = value
    params[0] = x_value  # as Isaac Gym's: the first entry is always x_value
    return params


def _saturate(x, lower, upper):
    return jnp.clip(x, lower, upper)


def _local_to_world_space(pos_offset_local, pose_global):
    offset = jnp.concatenate([pos_offset_local, jnp.zeros_like(pos_offset_local[..., :1])], axis=-1)
    rotated = _quat_mul(_quat_mul(pose_global[..., 3:7], offset), _quat_conjugate(pose_global[..., 3:7]))
    return rotated[..., :3] + pose_global[..., :3]


def _tf_inverse(q, t):
    q_inv = _quat_conjugate(q)
    return q_inv, -_quat_rotate(q_inv, t)


def _tf_apply(q, t, v):
    return _quat_rotate(q, v) + t


def _tf_combine(q1, t1, q2, t2):
    return _quat_mul(q1, q2), _quat_rotate(q1, t2) + t1


def _normalise_quat_in_pose(pose):
    return jnp.concatenate([pose[..., :3], _normalize(pose[..., 3:7])], axis=-1)


def _angle_axis_to_exp_map(angle, axis):
    return angle[..., None] * axis


def _quat_to_exp_map(q):
    angle, axis = _quat_to_angle_axis(q)
    return _angle_axis_to_exp_map(angle, axis)


def _quat_to_tan_norm(q):
    """The quaternion as two of its frame's axes: x (tangent) and z (normal), 6 numbers."""
    return jnp.concatenate([_quat_axis(q, 0), _quat_axis(q, 2)], axis=-1)


def _exp_map_to_angle_axis(exp_map):
    angle = jnp.linalg.norm(exp_map, axis=-1)
    small = angle <= 1e-5
    axis = jnp.where(small[..., None], jnp.array([0.0, 0.0, 1.0]), exp_map / jnp.maximum(angle, 1e-5)[..., None])
    return jnp.where(small, 0.0, _normalize_angle(angle)), axis


def _exp_map_to_quat(exp_map):
    return _quat_from_angle_axis(*_exp_map_to_angle_axis(exp_map))


def _euler_xyz_to_exp_map(roll, pitch, yaw):
    return _quat_to_exp_map(_quat_from_euler_xyz(roll, pitch, yaw))


def _slerp(q0, q1, t):
    """Spherical interpolation from q0 (t = 0) to q1 (t = 1), the short way round."""
    t = jnp.asarray(t)
    t = t[..., None] if t.ndim == q0.ndim - 1 else t  # one t per quaternion, [E] or [E, 1]
    cos_half = jnp.sum(q0 * q1, axis=-1, keepdims=True)
    q1 = jnp.where(cos_half < 0, -q1, q1)
    cos_half = jnp.abs(cos_half)
    half = jnp.arccos(jnp.clip(cos_half, -1.0, 1.0))
    sin_half = jnp.sqrt(jnp.maximum(1.0 - cos_half ** 2, 0.0))
    near = sin_half < 1e-3
    safe = jnp.where(near, 1.0, sin_half)
    a = jnp.where(near, 1.0 - t, jnp.sin((1.0 - t) * half) / safe)
    b = jnp.where(near, t, jnp.sin(t * half) / safe)
    return jnp.where(cos_half >= 1.0, q0, a * q0 + b * q1)


def _calc_heading_quat(q):
    heading = _calc_heading(q)
    return _quat_from_angle_axis(heading, jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0]), heading.shape + (3,)))


def _calc_heading_quat_inv(q):
    heading = _calc_heading(q)
    return _quat_from_angle_axis(-heading, jnp.broadcast_to(jnp.array([0.0, 0.0, 1.0]), heading.shape + (3,)))


HELPERS = {fn.__name__.lstrip("_"): _on_arrays(fn) for fn in (
    _quat_mul, _quat_conjugate, _quat_rotate, _quat_rotate_inverse, _normalize, _get_euler_xyz, _quat_from_euler_xyz,
    _quat_from_angle_axis, _normalize_angle, _unscale, _scale, _tensor_clamp, _quat_axis, _quat_diff_rad,
    _quat_to_angle_axis, _calc_heading, _compute_heading_and_up, _compute_rot, _copysign, _to_torch, _saturate,
    _local_to_world_space, _tf_inverse, _tf_apply, _tf_combine, _normalise_quat_in_pose, _angle_axis_to_exp_map,
    _quat_to_exp_map, _quat_to_tan_norm, _exp_map_to_angle_axis, _exp_map_to_quat, _euler_xyz_to_exp_map, _slerp,
    _calc_heading_quat, _calc_heading_quat_inv)}
"""The helpers of `isaacgym.torch_utils` / `isaacgymenvs.utils.torch_jit_utils` that rewards call, by their names there
(quaternions x, y, z, w)."""
HELPERS.update(quat_apply=HELPERS["quat_rotate"], my_quat_rotate=HELPERS["quat_rotate"],
               get_basis_vector=HELPERS["quat_rotate"], tf_vector=HELPERS["quat_rotate"],
               quat_unit=HELPERS["normalize"], scale_transform=HELPERS["unscale"], unscale_np=HELPERS["unscale"],
               unscale_transform=HELPERS["scale"], get_axis_params=_get_axis_params,
               torch_rand_float=_refuse("torch_rand_float", "draws random numbers: a reward must be a function of "
                                                            "the state"),
               torch_random_dir_2=_refuse("torch_random_dir_2", "draws random numbers: a reward must be a function "
                                                                "of the state"))

globals().update(HELPERS)


# ---- between envcoder's state and an Isaac reward ---------------------------------------------------------

ISAAC_NAMES: dict[str, Mapping] = {}
"""Each task's Isaac names (`Task.isaac_names`) by its name, registered by the task when it is made
(`register_isaac_names`): a converted reward finds them by the task's name, with nothing here importing the tasks."""


def register_isaac_names(task_name: str, names: Mapping) -> None:
    """Record the Isaac names of the task called `task_name` (`envcoder.tasks.base.Task` does, when it is made)."""
    ISAAC_NAMES[task_name] = names


class IsaacState:
    """A task's Isaac names of one state, each made when it is read, as tensors."""

    __slots__ = ("_state", "_names", "_task")

    def __init__(self, state, task_name: str, names: Mapping):
        self._state, self._names, self._task = state, names, task_name

    def __getitem__(self, name):
        if name not in self._names:
            raise KeyError(f"{self._task}'s IsaacGymEnvs task has no attribute {name!r} at reward time; it has "
                           f"{', '.join(sorted(self._names))}")
        return wrap(self._names[name].value(self._state))


def isaac_state(state, task_name: str) -> IsaacState:
    """The Isaac names of `state` of the task called `task_name` (registered, `register_isaac_names`)."""
    if task_name not in ISAAC_NAMES:
        raise KeyError(f"task {task_name!r} has no Isaac names here (Cartpole, Ant, Humanoid and Anymal have)")
    return IsaacState(state, task_name, ISAAC_NAMES[task_name])


def to_envcoder(result, state):
    """An Isaac reward's result as envcoder's API returns it: reward `[E]` float32, and its components `{name: [E]}`
    (a number or an `[E, 1]` component is spread over the environments). Isaac Gym only logs a component's mean
    (Eureka: `self.extras[name] = self.rew_dict[name].mean()`), so a component of another shape is kept as that
    mean: an `[E, ...]` one is averaged per environment over its other axes, any other one over all of it."""
    num_envs = state["progress_buf"].shape[0]

    def per_env(value):
        array = jnp.asarray(unwrap(value)).astype(jnp.float32)
        if array.ndim == 2 and array.shape[1] == 1:
            array = array[:, 0]
        return jnp.broadcast_to(array, (num_envs,))

    def component(value):  # the same mean as Isaac logs, per environment
        array = jnp.asarray(unwrap(value)).astype(jnp.float32)
        if array.ndim >= 2 and array.shape[0] == num_envs and array.shape[1:] != (1,):
            return jnp.mean(array.reshape(num_envs, -1), axis=1)
        if array.ndim > 1 or array.ndim == 1 and array.shape[0] not in (1, num_envs):
            return jnp.broadcast_to(jnp.mean(array), (num_envs,))
        return per_env(array)

    if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[1], dict):
        reward, components = result
        components = {str(name): component(value) for name, value in components.items()}
        return (per_env(reward), components) if components else per_env(reward)
    if isinstance(result, (tuple, list)) and result:  # IsaacGymEnvs' own `(reward, reset)`: envcoder's
        return per_env(result[0])                      # compute_terminal ends the episodes
    return per_env(result)


__all__ = ["torch", "Tensor", "wrap", "unwrap", "isaac_state", "to_envcoder", "TORCH_FUNCTIONS", "TENSOR_METHODS",
           "HELPERS", *HELPERS]
