"""Every statistic of the Rust core equals PyTorch's own computation
(float64 sums: relative 1e-12; min/max exactly), on CPU tensors, through
both paths: the fused Rust pass and the libtorch ops a GPU gets."""

import math

import pytest
import torch

import actdiff_capture
from logs import reference_stats as reference


def close(what, got, want, scale=0.0):
    if math.isnan(want):
        assert math.isnan(got), f"{what}: {got} vs nan"
    elif math.isinf(want) or want == 0.0:
        assert got == want, f"{what}: {got} vs {want}"
    else:
        tol = 1e-12 * max(abs(want), scale)
        assert abs(got - want) <= tol, f"{what}: {got!r} vs {want!r}"


def same(what, got, want):
    assert got == want or (math.isnan(got) and math.isnan(want)), f"{what}: {got} vs {want}"


def tensors():
    g = torch.Generator().manual_seed(5)
    out = {}
    for n in (1, 7, 256, 257, 4096, 1 << 20):
        out[f"randn{n}"] = torch.randn(n, generator=g) * 2 + 0.5
    out["0-d"] = torch.tensor(-1.25)
    out["0-d inf"] = torch.tensor(float("inf"))
    out["2-d transposed"] = torch.randn(130, 70, generator=g).t()
    x = torch.randn(3000, generator=g)
    x[5] = float("nan")
    x[6] = float("inf")
    x[2000:2003] = float("-inf")
    out["nan+inf"] = x
    y = torch.randn(3000, generator=g)
    y[17] = float("-inf")
    out["-inf"] = y
    out["all nan"] = torch.full((1500,), float("nan"))
    out["zeros"] = torch.zeros(1024)
    out["-0.0"] = torch.full((1024,), -0.0)
    out["float16"] = (torch.randn(5000, generator=g) * 100).half()
    out["float16 overflow"] = (torch.randn(5000, generator=g) * 1e5).half()
    out["bfloat16"] = (torch.randn(4, 500, generator=g) * 3).bfloat16()
    out["bfloat16 strided"] = torch.randn(64, 64, generator=g).bfloat16()[:, ::3]
    out["empty"] = torch.zeros(0)
    out["empty 2-d"] = torch.zeros(4, 0)
    return out


HASH_ONLY = {
    "int64": torch.randint(0, 2000, (2, 64), generator=torch.Generator().manual_seed(1)),
    "int64 > 2^24": torch.tensor([2**24 + 1, -(2**40) - 3]),
    "bool": torch.tensor([True, False, True]),
    "float64": torch.randn(999, dtype=torch.float64),
    "complex64": torch.randn(50, dtype=torch.complex64),
    "empty int": torch.zeros(0, dtype=torch.int64),
}


@pytest.mark.parametrize("device_path", [False, True], ids=["fused", "libtorch"])
@pytest.mark.parametrize("name", sorted(tensors()))
def test_stats_equal_torch(name, device_path):
    t = tensors()[name]
    l1, want = reference(t)
    got_l1, got = actdiff_capture.tensor_stats(t, device_path=device_path)
    close("l1", got_l1, l1)
    if want is None:
        assert got is None  # empty: no stats (the reference's min() raises)
        assert t.numel() == 0
        return
    l2, mn, mx, mean, nans, infs = got
    close("l2", l2, want[0])
    same("min", mn, want[1])
    same("max", mx, want[2])
    n = max(t.numel(), 1)
    close("mean", mean, want[3], scale=(l1 / n if math.isfinite(l1) else 0.0))
    assert (nans, infs) == (want[4], want[5])


@pytest.mark.parametrize("device_path", [False, True], ids=["fused", "libtorch"])
@pytest.mark.parametrize("name", sorted(HASH_ONLY))
def test_hash_of_any_dtype(name, device_path):
    t = HASH_ONLY[name]
    l1, _ = reference(t)
    got_l1, got = actdiff_capture.tensor_stats(t, moments=False, device_path=device_path)
    assert got is None
    close("l1", got_l1, l1)


def test_extension_rejects_non_tensors():
    with pytest.raises(TypeError):
        actdiff_capture.tensor_stats([1.0, 2.0])


def test_a_view_whose_storage_was_freed_is_an_error_not_a_read():
    """A view whose storage no longer holds it (FSDP1 frees an unsharded
    flat parameter's storage after use; the parameter views made of it keep
    their sizes, trial 71 F5: the capture read freed memory and the process
    died of SIGSEGV): the statistics raise, naming the storage, rather
    than read past it."""
    base = torch.arange(1 << 16, dtype=torch.float32)
    view = base[1024:].view(63, 1024)
    base.untyped_storage().resize_(0)
    for device_path in (False, True):
        with pytest.raises(RuntimeError, match="bytes of its storage, which holds 0"):
            actdiff_capture.tensor_stats(view, device_path=device_path)
