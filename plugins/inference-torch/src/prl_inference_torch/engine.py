"""The generation engine: one thread that runs the model over a continuously changing batch.

Each loop turn does, in order:

1. run queued admin calls (weight swap, LoRA load). A weight swap waits until the running
   rows have finished so in-flight requests complete on the weights they started with;
   while it waits no new request is admitted. When the engine is paused the swap happens at
   once and the paused rows continue on the new weights after resume (the pause contract of
   ``docs/inference.md``); ``weight_versions`` on each completion records which tokens came
   from which version.
2. prefill the waiting requests that fit (``max_batch_size`` rows, ``max_prefill_tokens``
   padded prompt tokens per forward). A request with ``n`` completions is prefilled once
   and its cache row repeated ``n`` times. On the slot path (a GPU) arrivals are gathered
   for a few decode steps first, so one prefill forward serves several of them.
3. one decode step for every running row, then finished rows leave the batch.

So requests join and leave between decode steps and never wait for each other's end.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import torch

from prl_inference_torch.hybrid_kv import HybridKV, cache_class
from prl_inference_torch.kv import BatchKV
from prl_inference_torch.request import Completion, GenParams, Request  # noqa: F401 (GenParams: re-exported)
from prl_inference_torch.routes import RouteRecorder
from prl_inference_torch.sampling import prompt_logprobs, sample
from prl_inference_torch.slots import SlotDecoder, plain_head, supports_slots
from prl_inference_torch.vision import decode_positions, is_vision_model, prefill_inputs

log = logging.getLogger(__name__)

# Slot path (GPU): a decode step is one graph replay, a prefill an eager forward that costs
# several decode steps, so arrivals are gathered: a prefill runs once the waiting rows reach
# 1/PREFILL_GATHER of the running ones, or after PREFILL_HOLD decode steps of waiting.
PREFILL_GATHER = 8
PREFILL_HOLD = 8


def _text_config(config: Any) -> Any:
    """The decoder's config (a vision-language model nests it as ``text_config``)."""
    get = getattr(config, "get_text_config", None)
    return get() if get is not None else config


@dataclass
class _Admin:
    fn: Callable[[], Any]
    drain: bool
    future: Future


class Engine:
    """Continuous-batching generation over a transformers causal LM."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        max_model_len: int,
        eos_ids: set[int],
        max_batch_size: int = 64,
        max_prefill_tokens: int = 4096,
        seed: int = 0,
        lora: Any = None,
        cuda_graphs: bool = True,
        slots: bool | None = None,
        record_routes: bool = False,
    ) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.device = next(model.parameters()).device
        self.max_model_len = max_model_len
        self.eos_ids = eos_ids
        self.max_batch_size = max_batch_size
        self.max_prefill_tokens = max_prefill_tokens
        self.lora = lora
        # The running batch's cache: attention keys/values, plus linear-attention state for a
        # hybrid model (Qwen3.5); a layer kind neither handles is refused here, at load.
        self._cache_cls = cache_class(_text_config(model.config))
        # a vision-language model: prompts may carry pixels, positions are 3-D (vision.py)
        self._vision = is_vision_model(model)
        # return_routed_experts: the routers' choices of every forward (routing replay)
        self.routes = RouteRecorder(model) if record_routes else None
        self.version = 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        self.paused = False
        self.tokens_generated = 0
        self.mask_tokens = 0  # sampled tokens reported with a sampling mask
        self.mask_bounded = 0  # of those, masks cut by the injected top_k bound (mask_top_k)
        self._cond = threading.Condition()
        self._waiting: deque[Request] = deque()
        self._admin: deque[_Admin] = deque()
        self._rows: list[tuple[Request, Completion]] = []
        self._kv: BatchKV | HybridKV | None = None
        self._last: torch.Tensor | None = None
        # On CUDA a dense model decodes over a slot pool with CUDA graphs (slots.py); the
        # growing BatchKV stays the path on the CPU and for hybrid or MoE models. ``slots``
        # forces the choice (the tests run the slot path on the CPU, eagerly).
        if slots is None:
            slots = cuda_graphs and self.device.type == "cuda" and supports_slots(model) and self._cache_cls is BatchKV
        if record_routes or self._vision:
            # routes are recorded in batch-row order, the slot path's is slot order; the slot
            # decoder keeps 1-D positions, an image row's are 3-D
            slots = False
        self._dec = SlotDecoder(model, max_batch_size, graphs=cuda_graphs) if slots else None
        # prompts prefilled straight into their slots, unless the logits need more than the
        # output embedding (prompt logprobs, and models that scale them, take the padded path)
        self._direct = self._dec is not None and plain_head(model)
        self._slot_of: list[int] = []  # the slot of each running row (slot path)
        self._held = 0  # decode steps the waiting requests were held for (slot path)
        self._stop = False
        self._thread = threading.Thread(target=self._loop, name="prl-engine", daemon=True)

    # ----- called from other threads -------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def shutdown(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify_all()
        # The thread is a daemon: a step stuck on a peer (a broadcast whose sender died) must
        # not hold the process past a SIGTERM, so wait only briefly.
        self._thread.join(timeout=3)

    def submit(self, request: Request) -> None:
        with self._cond:
            self._waiting.append(request)
            self._cond.notify_all()

    def cancel(self, request: Request) -> None:
        with self._cond:
            request.cancelled = True
            self._cond.notify_all()

    def set_paused(self, paused: bool) -> None:
        with self._cond:
            self.paused = paused
            self._cond.notify_all()

    def call(self, fn: Callable[[], Any], drain: bool = False) -> Future:
        """Run ``fn`` on the engine thread between steps; ``drain`` waits for running rows."""
        item = _Admin(fn, drain, Future())
        with self._cond:
            self._admin.append(item)
            self._cond.notify_all()
        return item.future

    @property
    def running(self) -> int:
        return len(self._rows)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    # ----- engine thread ----------------------------------------------------------------
    def _loop(self) -> None:
        torch.set_grad_enabled(False)
        while True:
            with self._cond:
                while not self._stop and not self._has_work():
                    self._cond.wait(timeout=1.0)
                if self._stop:
                    break
                admin = self._ready_admin()
                blocked = self.paused or bool(self._admin)
                new = [] if blocked or self._hold_prefill() else self._take_waiting()
                decode = not self.paused and bool(self._rows)
            for item in admin:
                self._run_admin(item)
            try:
                if new:
                    self._prefill(new)
                if decode:
                    self._decode()
            except Exception as exc:  # keep serving: fail the requests of this step only
                log.exception("engine step failed")
                self._fail_all(new, f"engine error: {exc}")
        self._fail_all([], "server shutting down")

    def _has_work(self) -> bool:
        if self._admin and (self.paused or not self._rows or not self._admin[0].drain):
            return True
        return not self.paused and bool(self._waiting or self._rows)

    def _ready_admin(self) -> list[_Admin]:
        ready = []
        while self._admin and (self.paused or not self._rows or not self._admin[0].drain):
            ready.append(self._admin.popleft())
        return ready

    def _run_admin(self, item: _Admin) -> None:
        if not item.future.set_running_or_notify_cancel():
            return  # its caller gave up waiting (server.admin_timeout) before it started
        try:
            item.future.set_result(item.fn())
        except Exception as exc:
            item.future.set_exception(exc)

    def _hold_prefill(self) -> bool:
        """Whether to leave the waiting requests for a later turn (slot path only)."""
        if self._dec is None or not self._rows or not self._waiting:
            self._held = 0
            return False
        waiting = sum(r.params.n for r in self._waiting)
        free = self.max_batch_size - len(self._rows)
        if waiting * PREFILL_GATHER >= len(self._rows) or waiting >= free or self._held >= PREFILL_HOLD:
            self._held = 0
            return False
        self._held += 1
        return True

    def _take_waiting(self) -> list[Request]:
        taken, rows = [], len(self._rows)
        while self._waiting:
            req = self._waiting[0]
            if req.cancelled:
                self._waiting.popleft()
                self._finish_request(req, "abort")
                continue
            if rows and rows + req.params.n > self.max_batch_size:
                break
            taken.append(self._waiting.popleft())
            rows += req.params.n
        return taken

    def _prefill(self, requests: list[Request]) -> None:
        for chunk in self._chunks(requests):
            self._prefill_chunk(chunk)

    def _chunks(self, requests: list[Request]) -> list[list[Request]]:
        """Group requests so a forward holds at most max_prefill_tokens padded tokens.

        Requests that want prompt logprobs need logits at every position, so they go in
        chunks of their own.
        """
        chunks: list[list[Request]] = []
        for want_all in (False, True):
            group = [r for r in requests if (r.params.prompt_logprobs is not None) == want_all]
            group.sort(key=lambda r: len(r.prompt_ids))
            cur: list[Request] = []
            for req in group:
                longest = max([len(r.prompt_ids) for r in cur] + [len(req.prompt_ids)])
                if cur and longest * (len(cur) + 1) > self.max_prefill_tokens:
                    chunks.append(cur)
                    cur = []
                cur.append(req)
            if cur:
                chunks.append(cur)
        return chunks

    def _prefill_chunk(self, chunk: list[Request]) -> None:
        want_all = chunk[0].params.prompt_logprobs is not None
        if self._direct and not want_all:
            self._prefill_slots(chunk)
            return
        longest = max(len(r.prompt_ids) for r in chunk)
        ids = torch.zeros(len(chunk), longest, dtype=torch.long)
        mask = torch.zeros(len(chunk), longest, dtype=torch.bool)
        for i, req in enumerate(chunk):
            ids[i, longest - len(req.prompt_ids) :] = torch.tensor(req.prompt_ids)
            mask[i, longest - len(req.prompt_ids) :] = True
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.long().cumsum(-1) - 1).clamp(min=0)
        inputs, deltas = prefill_inputs(self.model, ids, mask, positions, [r.pixels for r in chunk])
        self._set_lora([r.adapter for r in chunk])
        out = self.model(
            input_ids=ids, attention_mask=mask.long(), use_cache=True, logits_to_keep=0 if want_all else 1, **inputs
        )
        for i, req in enumerate(chunk):
            req.rope_delta = deltas[i]
            req.version = self.version
            req.seed_rows(self.device)
            if want_all:
                valid = out.logits[i, longest - len(req.prompt_ids) :]
                req.prompt_logprobs = prompt_logprobs(
                    valid, ids[i, longest - len(req.prompt_ids) :], req.params.prompt_logprobs or 0
                )
        counts = torch.tensor([r.params.n for r in chunk], device=self.device)
        logits = out.logits[:, -1].repeat_interleave(counts, dim=0)
        routed = self.routes.last_positions(len(chunk)).repeat_interleave(counts, 0) if self.routes else None
        rows = [(r, c) for r in chunk for c in r.completions]
        if self._dec is not None:
            pads = [longest - len(r.prompt_ids) for r in chunk]
            lengths = [len(r.prompt_ids) for r in chunk]
            slots = self._dec.admit(out.past_key_values, pads, lengths, [r.params.n for r in chunk])
        keep = self._sample_into(rows, logits, routed)
        if self._dec is not None:
            self._slot_of += self._retain(slots, keep)
            self._rows += [rows[i] for i in keep]
            return
        kv = self._cache_cls.from_cache(out.past_key_values, mask, mask.sum(-1)).repeat(counts)
        new_kv = kv.select(torch.tensor(keep, dtype=torch.long, device=self.device))
        if new_kv is None:
            return
        self._rows += [rows[i] for i in keep]
        self._kv = new_kv if self._kv is None else self._kv.join(new_kv)

    def _prefill_slots(self, chunk: list[Request]) -> None:
        """Slot path: the chunk's prompts go straight into their slots (``SlotDecoder.prefill``)."""
        self._set_lora([r.adapter for r in chunk])
        counts = [r.params.n for r in chunk]
        logits, slots = self._dec.prefill([r.prompt_ids for r in chunk], counts)
        for req in chunk:
            req.version = self.version
            req.seed_rows(self.device)
        rows = [(r, c) for r in chunk for c in r.completions]
        keep = self._sample_into(rows, logits.repeat_interleave(torch.tensor(counts, device=self.device), dim=0))
        self._slot_of += self._retain(slots, keep)
        self._rows += [rows[i] for i in keep]

    def _decode(self) -> None:
        self._drop_cancelled()
        if not self._rows:
            return
        last = torch.tensor([c.token_ids[-1] for _, c in self._rows], device=self.device)
        if self._dec is not None:
            # the slot path's batch is in slot order: each slot gets its row's adapter
            by_slot: list[str | None] = [None] * (max(self._slot_of) + 1)
            for (req, _), slot in zip(self._rows, self._slot_of, strict=True):
                by_slot[slot] = req.adapter
            self._set_lora(by_slot)
            eager = any(a is not None for a in by_slot)  # adapter hooks index rows: no graph
            keep = self._sample_into(self._rows, self._dec.step(last, self._slot_of, eager))
            self._keep_slots(keep)
            return
        kv = self._kv
        ones = torch.ones(kv.rows, 1, dtype=torch.bool, device=self.device)
        self._set_lora([r.adapter for r, _ in self._rows])
        cache = kv.as_cache()
        pos = kv.pos[:, None]
        if self._vision:
            pos = decode_positions(kv.pos, torch.tensor([r.rope_delta for r, _ in self._rows], device=self.device))
        out = self.model(
            input_ids=last[:, None],
            position_ids=pos,
            attention_mask=torch.cat([kv.mask, ones], 1).long(),
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        kv = kv.after_step()
        routed = self.routes.last_positions(len(self._rows)) if self.routes else None
        keep = self._sample_into(self._rows, out.logits[:, -1], routed)
        index = torch.tensor(keep, dtype=torch.long, device=self.device)
        self._kv = kv.select(index)
        self._rows = [self._rows[i] for i in keep]

    def _keep_slots(self, keep: list[int]) -> None:
        """Keep the running rows at ``keep`` (slot path) and free the others' slots."""
        self._slot_of = self._retain(self._slot_of, keep)
        self._rows = [self._rows[i] for i in keep]

    def _retain(self, slots: list[int], keep: list[int]) -> list[int]:
        """``slots`` at the indices ``keep``; the slots of the other rows are freed."""
        kept = set(keep)
        self._dec.release([s for i, s in enumerate(slots) if i not in kept])
        return [slots[i] for i in keep]

    def _sample_into(
        self, rows: list[tuple[Request, Completion]], logits: torch.Tensor, routed: torch.Tensor | None = None
    ) -> list[int]:
        """Sample a token for each row, record it (with ``routed``, [rows, layers, top_k], the
        experts of the forward that predicted it), and return the indices of rows still running."""
        top_n = max((r.params.logprobs or 0) for r, _ in rows)
        s = sample(logits, [c.sampling for _, c in rows], self.generator, top_n)
        tokens, lps, ranks = s.tokens.tolist(), s.logprobs.tolist(), s.ranks.tolist()
        top_ids = s.top_ids.tolist() if s.top_ids is not None else None
        top_lps = s.top_logprobs.tolist() if s.top_logprobs is not None else None
        flat = routed.reshape(len(rows), -1).tolist() if routed is not None else None
        keep, touched = [], {}
        for i, (req, comp) in enumerate(rows):
            comp.token_ids.append(tokens[i])
            if flat is not None:
                comp.routed_experts.append(flat[i])
            comp.logprobs.append(lps[i])
            comp.ranks.append(ranks[i])
            if s.kept is not None and s.kept[i] is not None:
                comp.sampling_mask.append(s.kept[i])
                comp.sampling_mask_logprobs.append(s.kept_logprobs[i])
                self.mask_tokens += 1
                # the mask reached the cap: the nucleus was at least that large
                self.mask_bounded += 0 < comp.sampling.cap == len(s.kept[i])
            if req.params.logprobs:
                k = req.params.logprobs
                comp.top.append(list(zip(top_ids[i][:k], top_lps[i][:k], strict=False)))
            self._mark_version(comp)
            self._check_finish(req, comp)
            touched[id(req)] = req
            if comp.finish_reason is None:
                keep.append(i)
        self.tokens_generated += len(rows)
        for req in touched.values():
            req.wake()
        return keep

    def _mark_version(self, comp: Completion) -> None:
        n = len(comp.token_ids)
        if comp.versions and comp.versions[-1][0] == self.version:
            comp.versions[-1][2] = n
        else:
            comp.versions.append([self.version, n - 1, n])

    def _check_finish(self, req: Request, comp: Completion) -> None:
        p, tok = req.params, comp.token_ids[-1]
        if tok in p.stop_token_ids:
            comp.finish_reason, comp.stop_reason = "stop", tok
        elif tok in self.eos_ids and not p.ignore_eos:
            comp.finish_reason = "stop"
        elif p.stop and self._hit_stop_string(comp, p.stop):
            comp.finish_reason = "stop"
        elif len(comp.token_ids) >= p.max_tokens or len(req.prompt_ids) + len(comp.token_ids) >= self.max_model_len:
            comp.finish_reason = "length"

    def _hit_stop_string(self, comp: Completion, stops: list[str]) -> bool:
        # Only the tail can hold a new match (earlier text was checked at earlier steps), so
        # decode a window of tokens that surely covers the longest stop string.
        window = 2 * max(len(s) for s in stops) + 8
        tail = self.tokenizer.decode(comp.token_ids[-window:], skip_special_tokens=True)
        for s in stops:
            if s in tail:
                comp.stop_reason = s
                return True
        return False

    def _drop_cancelled(self) -> None:
        keep = [i for i, (r, _) in enumerate(self._rows) if not r.cancelled]
        if len(keep) == len(self._rows):
            return
        for req, comp in self._rows:
            if req.cancelled and comp.finish_reason is None:
                comp.finish_reason = "abort"
                req.wake()
        if self._dec is not None:
            self._keep_slots(keep)
            return
        self._kv = self._kv.select(torch.tensor(keep, dtype=torch.long, device=self.device))
        self._rows = [self._rows[i] for i in keep]

    def _set_lora(self, adapters: list[str | None]) -> None:
        if self.lora is not None:
            self.lora.set_rows(adapters, self.device)

    def _finish_request(self, req: Request, reason: str) -> None:
        for comp in req.completions:
            comp.finish_reason = comp.finish_reason or reason
        req.wake()

    def _fail_all(self, extra: list[Request], message: str) -> None:
        """Fail the running rows (and ``extra``) after a broken step; the batch starts over."""
        with self._cond:
            doomed = {id(r): r for r, _ in self._rows}
            for r in extra:
                doomed[id(r)] = r
            if self._stop:
                doomed.update({id(r): r for r in self._waiting})
                self._waiting.clear()
            if self._dec is not None:
                self._dec.release(self._slot_of)
            self._rows, self._kv, self._slot_of = [], None, []
        for req in doomed.values():
            req.error = message
            req.wake()
