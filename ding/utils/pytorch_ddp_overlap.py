"""Gradient averaging that overlaps the backward pass: bucketed asynchronous all-reduces over ``torch.distributed``.

``sync_gradients`` (``pytorch_ddp_dist_helper``) waits for the whole backward, then sends every gradient in one
all-reduce. ``OverlappedGradientSync`` sends them in buckets of about ``bucket_bytes`` while the backward is still
running: a hook on each parameter copies its gradient, times this rank's weight, into its bucket as soon as the
gradient is accumulated, and a full bucket's all-reduce starts at once (gloo and NCCL run it on their own threads or
streams). The result is the same weighted mean ``sum_i(w_i * g_i) / sum_i(w_i)`` with the same rules for a missing
gradient, a weight of 0 and non-finite gradients.

``comm_dtype='bfloat16'`` (or ``'float16'``) compresses as ``sync_gradients`` does: the weights' sum travels first,
each gradient goes into its bucket times this rank's weight divided by that sum, and the bucket travels cast to
``comm_dtype`` (half the bytes); the mean is cast back into the bucket on exit. Lossy, identical on every rank.

    sync = OverlappedGradientSync(model.parameters())
    with sync.averaging(weight=batch_size):
        loss.backward()
    # every rank's gradients are now the weighted mean; clip, step

Buckets are launched in a fixed order on every rank (bucket k only after buckets 0..k-1), as collectives must
be: a gradient that arrives early waits in its bucket, and the buckets still open when the backward ends (a
parameter without a gradient this step) are filled and launched on exit.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from numbers import Real

import torch
import torch.distributed as dist

from .pytorch_ddp_dist_helper import get_world_size, grad_sync_dtype

DEFAULT_BUCKET_BYTES = 1 << 20
_EXACT_COUNT_DTYPES = (torch.float32, torch.float64)  # hold a sum of sample counts exactly (up to 2**24 in float32)


class _Bucket:
    """Consecutive parameters (in backward order) whose gradients travel in one flat all-reduce."""

    def __init__(self, params: list[torch.nn.Parameter], extra: int = 0, wire_dtype: torch.dtype | None = None) -> None:
        self.params = params
        numel = sum(p.numel() for p in params)
        self.flat = torch.empty(numel + extra, dtype=params[0].dtype, device=params[0].device)
        self.values = self.flat[:numel]  # the gradients; the ``extra`` cells after them carry other numbers
        # compressed: what the all-reduce carries in place of ``flat`` (None: ``flat`` itself)
        self.wire = None if wire_dtype in (None, self.flat.dtype) else torch.empty_like(self.flat, dtype=wire_dtype)
        self.views: list[torch.Tensor] = []  # the parameters' .grad after averaging
        self.wire_views: list[torch.Tensor] = []  # where their scaled gradients go: ``views`` or, compressed, ``wire``
        offset = 0
        for p in params:
            self.views.append(self.flat[offset : offset + p.numel()].view_as(p))
            if self.wire is not None:
                self.wire_views.append(self.wire[offset : offset + p.numel()].view_as(p))
            offset += p.numel()
        if self.wire is None:
            self.wire_views = self.views
        self.filled = [False] * len(params)
        self.missing = len(params)
        self.work: dist.Work | None = None

    def reset(self) -> None:
        self.filled = [False] * len(self.params)
        self.missing = len(self.params)
        self.work = None


class OverlappedGradientSync:
    """Weighted mean of ``parameters``' gradients over the ranks, computed while ``backward()`` runs.

    A bucket closes once its gradients reach ``bucket_bytes`` (or the dtype or device changes). The hooks stay on the
    parameters until ``stop()``; outside ``averaging(...)`` they do nothing. With one rank ``averaging`` only runs
    the body. After ``averaging`` each parameter's ``.grad`` is a view into its bucket (as DDP's
    ``gradient_as_bucket_view``): the next ``averaging`` overwrites it, so copy a gradient to keep it.
    """

    def __init__(
        self,
        parameters: Iterable[torch.Tensor],
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
        comm_dtype: str | torch.dtype | None = None,
    ) -> None:
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise ValueError(f'OverlappedGradientSync: bucket_bytes must be an int >= 1, got {bucket_bytes!r}')
        self._wire_dtype = grad_sync_dtype(comm_dtype, 'OverlappedGradientSync: comm_dtype')
        params: list[torch.nn.Parameter] = []
        seen: set[int] = set()
        for p in parameters:
            if p.requires_grad and id(p) not in seen:  # a shared parameter is listed once
                seen.add(id(p))
                params.append(p)  # type: ignore[arg-type]
        if not params:
            raise ValueError('OverlappedGradientSync: no parameter requires a gradient')
        # The backward produces the last layers' gradients first: buckets follow the parameters in reverse.
        self._buckets: list[_Bucket] = []
        group: list[torch.nn.Parameter] = []
        size = 0
        for p in reversed(params):
            if group and (p.dtype, p.device) != (group[0].dtype, group[0].device):
                self._buckets.append(_Bucket(group, wire_dtype=self._wire_dtype))
                group, size = [], 0
            group.append(p)
            size += p.numel() * p.element_size()
            if size >= bucket_bytes:  # a bucket closes once it holds bucket_bytes: no bucket of crumbs in between
                self._add_bucket(group)
                group, size = [], 0
        if group:
            self._add_bucket(group)
        self._slot = {id(p): (b, i) for b, bucket in enumerate(self._buckets) for i, p in enumerate(bucket.params)}
        self._weight: float | None = None  # set while averaging
        # what a gradient is multiplied by in its bucket: the weight, or (compressed) the weight / the weights' sum,
        # known once the sum's all-reduce (``_total_work``, into ``_total``) is done
        self._scale: float | None = None
        self._total = torch.zeros(1, dtype=torch.float64, device=params[0].device)
        self._total_work: dist.Work | None = None
        self._launched = 0  # buckets 0.._launched-1 have started their all-reduce this step
        self._handles = [p.register_post_accumulate_grad_hook(self._on_gradient) for p in params]

    def _add_bucket(self, params: list[torch.nn.Parameter]) -> None:
        # The first bucket launched carries the weights' sum in one extra cell: one collective less per step. Not when
        # compressing: the gradients are divided by the sum before they travel.
        carries_weight = not self._buckets and params[0].dtype in _EXACT_COUNT_DTYPES and self._wire_dtype is None
        self._buckets.append(_Bucket(params, extra=int(carries_weight), wire_dtype=self._wire_dtype))

    @property
    def bucket_sizes(self) -> list[int]:
        """Number of gradient elements in each bucket, in launch order."""
        return [b.values.numel() for b in self._buckets]

    def stop(self) -> None:
        """Remove the hooks from the parameters."""
        for handle in self._handles:
            handle.remove()
        self._handles = []

    @contextmanager
    def averaging(self, weight: float = 1.0) -> Iterator[None]:
        """Run the body (one ``backward()``), then leave every rank's gradients at the weighted mean.

        ``weight`` is this rank's share, as in ``sync_gradients`` (its sample count for a mean loss; 0 for a rank
        with nothing to train, which still has to take part). Each call is a collective: every rank makes it.
        """
        if isinstance(weight, bool) or not isinstance(weight, Real) or not math.isfinite(weight) or weight < 0:
            raise ValueError(f'OverlappedGradientSync: weight must be a finite number >= 0, got {weight!r}')
        if get_world_size() == 1:
            yield
            return
        if self._weight is not None:
            raise RuntimeError('OverlappedGradientSync: averaging(...) is already running (nested or concurrent)')
        if not self._handles:
            raise RuntimeError('OverlappedGradientSync: stop() removed the hooks; make a new one')
        for bucket in self._buckets:
            bucket.reset()
        self._launched = 0
        self._weight = float(weight)
        # The weights' sum rides in the first bucket's extra cell; a half-precision bucket has none (it would round
        # the sum), nor does a compressed sync (the sum is needed first), so then the sum travels alone (float64:
        # exact for any count), started now.
        first = self._buckets[0]
        self._total_work = None
        self._scale = None if self._wire_dtype is not None else self._weight
        if first.flat.numel() > first.values.numel():
            first.flat[-1] = self._weight
            total = first.flat[-1:]
        else:
            total = self._total
            total.fill_(self._weight)
            self._total_work = dist.all_reduce(total, async_op=True)
        try:
            yield
            for bucket in self._buckets:  # parameters the backward did not reach: their .grad as it is, or zeros
                for i, p in enumerate(bucket.params):
                    if not bucket.filled[i]:
                        self._fill(bucket, i, p, self._current_scale())
            self._launch_ready()
        finally:
            self._weight = None
        if self._total_work is not None:
            self._total_work.wait()
        total_weight = -1.0
        for bucket in self._buckets:
            assert bucket.work is not None
            bucket.work.wait()
            if self._wire_dtype is not None:  # already the mean: divided before it travelled
                if bucket.wire is not None:
                    bucket.values.copy_(bucket.wire)  # no extra cell when compressing
                continue
            if total_weight < 0:
                total_weight = float(total.item())
            if total_weight > 0:
                bucket.values.div_(total_weight)
            else:
                bucket.values.zero_()

    def _current_scale(self) -> float:
        """What this rank's gradients are multiplied by in the buckets this step (waits for the weights' sum once)."""
        if self._scale is None:
            assert self._total_work is not None and self._weight is not None
            self._total_work.wait()
            total = float(self._total.item())
            self._scale = self._weight / total if total > 0 else 0.0
        return self._scale

    def _on_gradient(self, param: torch.Tensor) -> None:
        if self._weight is None:
            return  # a backward outside averaging(...): nothing to do
        b, i = self._slot[id(param)]
        bucket = self._buckets[b]
        if bucket.filled[i]:
            raise RuntimeError(
                'OverlappedGradientSync: a parameter got a second gradient in one averaging(...); run one backward()'
            )
        self._fill(bucket, i, param, self._current_scale())
        self._launch_ready()

    @staticmethod
    def _fill(bucket: _Bucket, i: int, param: torch.Tensor, scale: float) -> None:
        """Parameter ``i`` of ``bucket``: its gradient times ``scale`` into the bucket (rounded to the wire's dtype
        when compressing), and ``.grad`` a view of the bucket (where the mean lands)."""
        share = bucket.wire_views[i]
        grad = param.grad
        if grad is None or scale == 0:
            share.zero_()  # not a multiplication: an empty batch's gradients may be NaN, and 0 * NaN is NaN
        else:
            torch.mul(grad, scale, out=share)
        param.grad = bucket.views[i]
        bucket.filled[i] = True
        bucket.missing -= 1

    def _launch_ready(self) -> None:
        while self._launched < len(self._buckets) and self._buckets[self._launched].missing == 0:
            bucket = self._buckets[self._launched]
            bucket.work = dist.all_reduce(bucket.flat if bucket.wire is None else bucket.wire, async_op=True)
            self._launched += 1
