"""How much of the expert-parallel communication in a Piper CPU trace (piper-run --trace)
hides behind the other compute stream's computation: DualPipe's overlapped pairs run a
forward and a backward of two microbatches at once on streams `compute` and `compute2`, so
an all-to-all kernel of one can run while the other computes.

Shared by bench/dualpipe_overlap.py and tests/integration/test_dualpipe.py.
"""
import json

COLLECTIVES = {"ALL_TO_ALL", "ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER"}


def covered(span, others):
    """Microseconds of `span` (start, end) that the union of the spans `others` covers."""
    start, end = span
    total, reached = 0.0, start
    for a, b in sorted((max(start, a), min(end, b)) for a, b in others):
        a = max(a, reached)
        if b > a:
            total += b - a
            reached = b
    return total


def hidden_share(trace_path):
    """(all-to-all microseconds, of them under a kernel that is not a collective on another
    compute stream) of one rank's trace."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    streams = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    compute = {tid for tid, name in streams.items() if name.startswith("compute")}
    kernels = [e for e in events
               if e.get("ph") == "X" and e.get("cat") == "kernel" and e["tid"] in compute]
    exchanges = [e for e in kernels if e["name"] == "ALL_TO_ALL"]
    work = [e for e in kernels if e["name"] not in COLLECTIVES]
    total = hidden = 0.0
    for exchange in exchanges:
        span = (exchange["ts"], exchange["ts"] + exchange["dur"])
        others = [(w["ts"], w["ts"] + w["dur"]) for w in work if w["tid"] != exchange["tid"]]
        total += exchange["dur"]
        hidden += covered(span, others)
    return total, hidden
