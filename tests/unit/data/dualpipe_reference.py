#!/usr/bin/env python3
"""Writes dualpipe_orders.txt, the golden per-device orders of tests/unit/pipeline_schedule_test.cc.

    /usr/bin/python3 tests/unit/data/dualpipe_reference.py > tests/unit/data/dualpipe_orders.txt

An independent model of deepseek-ai/DualPipe's `DualPipe.step` (dualpipe/dualpipe.py at
commit bb214e82b5933d4cf4249eb76c27076428061c7c): the same eight phases, with its chunk
counters per phase and its WeightGradStore as a FIFO queue, recording each compute call
instead of running a module. A rank's phase 0 is its own half's direction
(`phase ^= is_in_second_half`); direction 0 runs stage r on rank r, direction 1 stage
P-1-r. Each line is one device: `F<mb>@<stage>` a forward, `B` a whole backward, `BI` the
input half of a zero-bubble backward and `BW` its deferred weight half, `+` joining an
overlapped forward-backward pair.

DualPipeV is modelled the same way from `DualPipeV.step` (dualpipe/dualpipev.py of the same
repository, as vendored at yoyocubano/aigotajob arsenal/deepseek/DualPipe, commit 6abed03f):
no direction flip, rank r's phase 0 is stage r and phase 1 stage 2D-1-r of 2D stages on D
ranks, every microbatch entering at rank 0.
"""
import collections

SHAPES = [(2, 4), (4, 8), (4, 10), (8, 16), (8, 20)]
V_SHAPES = [(1, 2), (2, 8), (4, 10), (4, 16)]


class Rank:
    def __init__(self, ranks, rank, v_shape=False):
        self.ranks = ranks
        self.rank = rank
        self.v_shape = v_shape
        self.second_half = rank >= ranks // 2 and not v_shape
        self.f_chunk = [0, 0]
        self.b_chunk = [0, 0]
        self.weight_queue = collections.deque()
        self.calls = []

    def stage(self, phase):
        if self.v_shape:
            return self.rank if phase == 0 else 2 * self.ranks - 1 - self.rank
        return self.rank if phase == 0 else self.ranks - 1 - self.rank

    def forward_compute(self, phase):
        phase ^= self.second_half
        chunk = self.f_chunk[phase]
        self.f_chunk[phase] += 1
        return f"F{chunk}@{self.stage(phase)}"

    def backward_compute(self, phase, enable_zb=False):
        phase ^= self.second_half
        chunk = self.b_chunk[phase]
        self.b_chunk[phase] += 1
        if enable_zb:
            self.weight_queue.append(f"BW{chunk}@{self.stage(phase)}")
            return f"BI{chunk}@{self.stage(phase)}"
        return f"B{chunk}@{self.stage(phase)}"

    def forward_chunk(self, phase):
        self.calls.append(self.forward_compute(phase))

    def backward_chunk(self, phase, enable_zb=False):
        self.calls.append(self.backward_compute(phase, enable_zb))

    def forward_backward_chunk(self, phase0, phase1):
        f = self.forward_compute(phase0)
        b = self.backward_compute(phase1)
        self.calls.append(f + "+" + b)

    def weight_chunk(self):
        self.calls.append(self.weight_queue.popleft())


def step(ranks, num_chunks, rank):
    r = Rank(ranks, rank)
    num_half_ranks = ranks // 2
    half_rank = min(rank, ranks - 1 - rank)
    half_num_chunks = num_chunks // 2
    is_middle_rank = rank in (num_half_ranks - 1, num_half_ranks)

    return phases(r, num_half_ranks, half_rank, half_num_chunks - ranks + half_rank + 1,
                  is_middle_rank)


def step_v(ranks, num_chunks, rank):
    """DualPipeV.step: the same phases over every rank of the V, all chunks per phase."""
    r = Rank(ranks, rank, v_shape=True)
    return phases(r, ranks, rank, num_chunks - ranks * 2 + rank + 1, rank == ranks - 1)


def phases(r, ranks, rank, step_4, unpaired_first):
    """The eight steps both upstream step() functions run, with DualPipe's half ranks (or
    DualPipeV's ranks) as `ranks`, the rank's place among them as `rank`, the main step's
    length as each computes it, and whether the main step's first pair is not overlapped (its
    middle ranks, DualPipeV's last)."""
    for _ in range((ranks - rank - 1) * 2):  # Step 1: nF0
        r.forward_chunk(0)
    for _ in range(rank + 1):  # Step 2: nF0F1
        r.forward_chunk(0)
        r.forward_chunk(1)
    for _ in range(ranks - rank - 1):  # Step 3: nB1W1F1
        r.backward_chunk(1, enable_zb=True)
        r.weight_chunk()
        r.forward_chunk(1)
    for i in range(step_4):  # Step 4: nF0B1F1B0
        if i == 0 and unpaired_first:
            r.forward_chunk(0)
            r.backward_chunk(1)
        else:
            r.forward_backward_chunk(0, 1)
        r.forward_backward_chunk(1, 0)
    for _ in range(ranks - rank - 1):  # Step 5: nB1F1B0
        r.backward_chunk(1)
        r.forward_backward_chunk(1, 0)
    step_6 = rank + 1  # Step 6: nB1B0
    enable_zb = False
    for i in range(step_6):
        if i == step_6 // 2 and rank % 2 == 1:
            enable_zb = True
        r.backward_chunk(1, enable_zb=enable_zb)
        if i == step_6 // 2 and rank % 2 == 0:
            enable_zb = True
        r.backward_chunk(0, enable_zb=enable_zb)
    for _ in range(ranks - rank - 1):  # Step 7: nWB0
        r.weight_chunk()
        r.backward_chunk(0, enable_zb=True)
    for _ in range(rank + 1):  # Step 8: nW
        r.weight_chunk()
    assert not r.weight_queue
    return r.calls


def main():
    for ranks, chunks in SHAPES:
        for rank in range(ranks):
            print(f"dualpipe {ranks} {chunks} {rank}: " + " ".join(step(ranks, chunks, rank)))
    for ranks, chunks in V_SHAPES:
        for rank in range(ranks):
            print(f"dualpipev {ranks} {chunks} {rank}: " + " ".join(step_v(ranks, chunks, rank)))


if __name__ == "__main__":
    main()
