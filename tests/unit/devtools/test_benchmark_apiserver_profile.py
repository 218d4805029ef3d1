# ruff: noqa: E501  (pprof's lines are kept as it prints them)
"""benchmarks/apiserver_profile.py: what `go tool pprof -top -cum` says, by kind of work."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

# The benchmarks import one another by name, as they run: from their own folder.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))
profile = importlib.import_module("apiserver_profile")

# Lines as kube-apiserver v1.36's profile gave them (2026-12-03, the fabric at 10,000 nodes).
TOP = """\
File: kube-apiserver
Type: cpu
Duration: 60.11s, Total samples = 59.56s (99.09%)
Showing nodes accounting for 59.56s, 100% of 59.56s total
      flat  flat%   sum%        cum   cum%
         0     0%     0%     21.81s 36.62%  k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1
     0.01s 0.017% 0.034%     18.41s 30.91%  k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Update
         0     0%  6.45%      9.29s 15.60%  runtime.gcBgMarkWorker
         0     0%  6.56%      8.64s 14.51%  k8s.io/apiextensions-apiserver/pkg/registry/customresource.(*StatusREST).Update
         0     0%  6.65%      8.32s 13.97%  k8s.io/kubernetes/pkg/registry/core/pod/storage.(*StatusREST).Update
         0     0% 22.68%      4.01s  6.73%  k8s.io/apiserver/pkg/endpoints/handlers.handleWatch
     0.01s 0.017% 30.83%      1.67s  2.80%  crypto/tls.(*Conn).serverHandshake
         0     0% 46.49%      0.96s  1.61%  k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Create
         0     0% 52.96%      0.60s  1.01%  k8s.io/kubernetes/pkg/registry/core/pod/storage.(*BindingREST).Create (inline)
         0     0% 55.04%    560ms  0.94%  k8s.io/apiserver/pkg/registry/generic/registry.(*Store).Get
         0     0% 60.51%      0.44s  0.74%  k8s.io/client-go/tools/cache.handleWatch
"""


def test_each_kind_is_its_functions_cumulative_seconds() -> None:
    got = profile.categories(TOP)
    assert got["totalCpuSeconds"] == 59.56
    assert got["updates"] == 18.41
    assert got["customResourceStatusWrites"] == 8.64
    assert got["podStatusWrites"] == 8.32
    assert got["garbageCollection"] == 9.29
    assert got["watches"] == 4.01  # the API server's handler, not client-go's of the same name
    assert got["tlsHandshakes"] == 1.67
    assert got["creates"] == 0.96
    assert got["bindings"] == 0.6  # an inlined function's line counts too
    assert got["reads"] == 0.56  # milliseconds are converted


def test_a_kind_the_profile_does_not_show_is_zero() -> None:
    got = profile.categories(TOP)
    assert got["nodeStatusWrites"] == 0.0
    assert got["deletes"] == 0.0
    assert set(got) == {"totalCpuSeconds", *profile.CATEGORIES}


def test_text_that_is_not_pprof_output_is_refused() -> None:
    with pytest.raises(ValueError, match="Total samples"):
        profile.categories("no profile here\n")
