"""How much of the expert-parallel communication in a Piper CPU trace (piper-run --trace)
hides behind the other compute stream's computation: DualPipe's overlapped pairs run a
forward and a backward of two microbatches at once on streams `compute` and `compute2`, and
each one's expert all-to-alls run on a communication stream of their own, `a2a_compute` and
`a2a_compute2` (planner/expert_exchanges.h), so an all-to-all of one microbatch can run while
the other microbatch computes.

`each_pair_hidden_share` measures what issue 16 asks of the overlapped pairs: of the exchanges
of each task that the schedule pairs with another (an order group of two tasks), the share of
time under the paired task's own computation. `hidden_share` measures every exchange
of the rank against any computation on another stage's stream, warm-up and cool-down included,
where no microbatch is paired.

Shared by bench/dualpipe_overlap.py and tests/integration/test_dualpipe.py.
"""
import json

COLLECTIVES = {"ALL_TO_ALL", "ALL_TO_ALL_V", "ALL_TO_ALL_V_RETURN", "ALL_REDUCE", "ALL_GATHER",
               "REDUCE_SCATTER"}
EXCHANGES = {"ALL_TO_ALL", "ALL_TO_ALL_V", "ALL_TO_ALL_V_RETURN"}
EXCHANGE_STREAM = "a2a_"  # the prefix of an exchange stream's name: "a2a_" + its compute stream


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


def own_compute_stream(name):
    """The compute stream whose microbatch an exchange on stream `name` belongs to: the stream
    an a2a_ stream was cut from, or the stream itself (plans that run exchanges inline)."""
    return name[len(EXCHANGE_STREAM):] if name.startswith(EXCHANGE_STREAM) else name


def load_events(trace_path):
    """The trace's events and its streams' names by thread id."""
    with open(trace_path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    streams = {e["tid"]: e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    return events, streams


def task_of_kernels(events, streams, stages):
    """Each kernel event's task, as (stage, microbatch, pass) from the task event (piper-run's
    trace writes one per run of a task's instructions) that holds it on its stream. `stages`
    maps the plan's task numbers (the task events' "task") to their pipeline stage
    (stages_of_tasks). It lacks the pieces the planner cuts a task into around its exchanges:
    those take the stage of the compute stream they run for when all its listed tasks have one
    (a DualPipe device computes each of its two stages on a stream of its own), else None."""
    tasks = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("compute", "comm"):
            tasks.setdefault(e["tid"], []).append(e)
    listed = {}  # each compute stream's stages, from the tasks `stages` lists
    for tid, held in tasks.items():
        for task in held:
            if task["args"]["task"] in stages:
                listed.setdefault(own_compute_stream(streams[tid]), set()).add(
                    stages[task["args"]["task"]])
    stream_stage = {stream: next(iter(s)) for stream, s in listed.items() if len(s) == 1}
    owner = {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        for task in tasks.get(e["tid"], []):
            if task["ts"] <= e["ts"] and e["ts"] + e["dur"] <= task["ts"] + task["dur"] + 1e-3:
                args = task["args"]
                stage = stages.get(args["task"],
                                   stream_stage.get(own_compute_stream(streams[e["tid"]])))
                owner[id(e)] = (stage, args["microbatch"], args["pass"])
                break
    return owner


def stages_of_tasks(plan_json):
    """{task number: pipeline stage} of one rank's plan as `piper-dump --json` prints it (its
    planned tasks; tasks outside pipelines have none)."""
    return {t["task"]: t["stage"] for t in plan_json.get("planned_tasks", []) if "stage" in t}


def each_pair_hidden_share(trace_path, pairs, stages):
    """Per overlapped pair, (exchange microseconds of its two tasks, of them under the
    partner's kernels) of one rank's trace, keyed by the pair as listed. `pairs` lists the
    rank's overlapped pairs as ((PP, MB, PASS), (PP, MB, PASS)) from its `order` (piper-plan
    --expand): the filters of a group of two; `stages` maps the rank's tasks to their stage
    (stages_of_tasks). A pair's two tasks run on the rank's two compute streams, so an exchange
    of one counts as hidden only under the kernels of the other. The same microbatch and pass
    of the rank's other stage (a task outside the pair) neither counts nor hides."""
    events, streams = load_events(trace_path)
    partner = {}
    for a, b in pairs:
        for one, other in ((a, b), (b, a)):
            if partner.setdefault(one, other) != other:
                raise ValueError(f"{trace_path}: {one} is paired with both {partner[one]} and "
                                 f"{other}; the pairs cannot tell which one an exchange hides "
                                 f"under")
    compute = sorted({name for name in streams.values() if name.startswith("compute")})
    owner = task_of_kernels(events, streams, stages)
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    work = {}
    for e in kernels:
        stream = streams[e["tid"]]
        if e["name"] not in COLLECTIVES and stream in compute and id(e) in owner:
            work.setdefault((stream,) + owner[id(e)], []).append((e["ts"], e["ts"] + e["dur"]))
    shares = {pair: [0.0, 0.0] for pair in pairs}
    pair_of = {one: pair for pair in pairs for one in pair}
    for e in kernels:
        key = owner.get(id(e))
        if e["name"] not in EXCHANGES or key not in partner:
            continue
        own = own_compute_stream(streams[e["tid"]])
        under = [span for stream in compute if stream != own
                 for span in work.get((stream,) + partner[key], [])]
        share = shares[pair_of[key]]
        share[0] += e["dur"]
        share[1] += covered((e["ts"], e["ts"] + e["dur"]), under)
    return {pair: tuple(share) for pair, share in shares.items()}


def hidden_share(trace_path):
    """(all-to-all microseconds, of them under a kernel that is not a collective on a compute
    stream other than the exchange's own microbatch's) of one rank's trace."""
    events, streams = load_events(trace_path)
    compute = {tid for tid, name in streams.items() if name.startswith("compute")}
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    exchanges = [e for e in kernels if e["name"] in EXCHANGES]
    work = [e for e in kernels if e["tid"] in compute and e["name"] not in COLLECTIVES]
    total = hidden = 0.0
    for exchange in exchanges:
        own = own_compute_stream(streams[exchange["tid"]])
        span = (exchange["ts"], exchange["ts"] + exchange["dur"])
        others = [(w["ts"], w["ts"] + w["dur"]) for w in work if streams[w["tid"]] != own]
        total += exchange["dur"]
        hidden += covered(span, others)
    return total, hidden
