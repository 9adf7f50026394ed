"""piper-launch and the multi-process side of piper-run: a world-size-1 plan
directory runs with prefixed output and the losses of piper-run itself; a bad
plan, a rank given the wrong plan, a directory without plans and --plan are
refused naming the rank or the file; %r in --plan and --metrics; Ctrl-C reaches
the ranks. With multi-rank plans (the zero directive): a rank killed mid-run or
stopped (SIGSTOP) makes the others exit non-zero within the timeout + 2 s naming it
(and piper-launch names the stopped rank), plans of two planning runs refuse to
start, and the rendezvous store admits only holders of the job's token: strangers
read no key, take no rank, and 60 of them neither grow rank 0's memory nor stop the
job. Under torchrun (TORCHELASTIC_RUN_ID) the store listens on MASTER_PORT + 1 beside
torchrun's c10d TCPStore on MASTER_PORT. Only rank 0 prints each step's line."""
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import unittest

import harness
from harness import Tools

GLOBAL_BATCH = 32
SGD = {"type": "sgd", "lr": 0.05, "momentum": 0.9}


def launch_path():
    return os.path.join(os.path.dirname(Tools.run), "piper-launch")


def children_of(pid):
    """The pids whose parent is pid, with their command lines."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        if ppid == pid:
            found[int(entry)] = cmdline
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resident_bytes(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def store_request(op, *strings, tail=b""):
    """A framed request of the store's wire format (engine/comm/tcp_store.h): op, strings
    (each u32 length + bytes), then `tail` as it is."""
    payload = bytes([op]) + b"".join(struct.pack("<I", len(s)) + s for s in strings) + tail
    return struct.pack("<I", len(payload)) + payload


def talk_without_the_token(port, data):
    """Connects as a stranger, sends data at once and returns every byte the store sends
    back before it hangs up (or b"" when it does not within 10 s)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        received = b""
        try:
            while chunk := s.recv(65536):
                received += chunk
        except (ConnectionResetError, socket.timeout):
            pass
        return received


class Job:
    """A background process whose output is collected by a thread-free poll."""

    def __init__(self, argv, env=None):
        self.argv = [str(a) for a in argv]
        self.out = tempfile.TemporaryFile(mode="w+")
        self.process = subprocess.Popen(self.argv, stdout=self.out, stderr=subprocess.STDOUT,
                                        text=True, env=env)

    def output(self):
        self.out.seek(0)
        return self.out.read()

    def wait_for(self, pattern, timeout=60):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.output()):
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"{pattern!r} never appeared in the output of "
                             f"{' '.join(self.argv)}:\n{self.output()}")

    def finish(self, timeout):
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"still running after {timeout} s:\n{self.output()}")
        return self.process.returncode

    def kill(self):
        """Ends the process if it still runs, and releases the output file."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self.out.close()


class LaunchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="piper_launch_")
        cls.data = Tools.sample("mlp", "data")
        cls.single = cls.plan("single", [{"op": "place", "filter": {}, "devices": [0]}])

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    @classmethod
    def plan(cls, name, directives):
        work = os.path.join(cls.tmp, name)
        os.makedirs(work, exist_ok=True)
        strategy = harness.write_json(os.path.join(work, "strategy.json"),
                                      harness.strategy(GLOBAL_BATCH, SGD, directives=directives))
        plans = os.path.join(work, "plans")
        result = harness.run([Tools.plan, Tools.sample("mlp", "model.onnx"), strategy,
                              "-o", plans])
        if result.returncode != 0:
            raise AssertionError("planning failed\n" + result.describe())
        return plans

    def dir_with(self, name, files):
        """A plan directory holding files {name: bytes or path to copy}."""
        path = os.path.join(self.tmp, name)
        shutil.rmtree(path, ignore_errors=True)
        os.makedirs(path)
        for file, content in files.items():
            if isinstance(content, bytes):
                with open(os.path.join(path, file), "wb") as f:
                    f.write(content)
            else:
                shutil.copy(content, os.path.join(path, file))
        return path

    def assert_launch_fails(self, plans, *needles, flags=("--steps", "2")):
        result = harness.run([launch_path(), "--plans", plans, *flags], timeout=120)
        self.assertNotEqual(result.returncode, 0, result.describe())
        for needle in needles:
            self.assertIn(needle, result.output, result.describe())
        return result


class WorldSizeOne(LaunchTest):
    def test_runs_the_plan_with_prefixed_output_and_piper_runs_losses(self):
        metrics = os.path.join(self.tmp, "launch_metrics.jsonl")
        launched = harness.run_ok([launch_path(), "--plans", self.single, "--steps", 3,
                                   "--data", self.data, "--metrics", metrics])
        lines = launched.stdout.splitlines()
        self.assertTrue(lines, launched.describe())
        for line in lines:
            self.assertTrue(line.startswith("[rank 0] "), f"unprefixed line {line!r}")
        direct = harness.run_ok([Tools.run, "--plan", os.path.join(self.single, "rank0.plan"),
                                 "--steps", 3, "--data", self.data])
        losses = lambda text: re.findall(r"step \d+ loss (\S+)", text)
        self.assertEqual(len(losses(launched.stdout)), 3, launched.describe())
        self.assertEqual(losses(launched.stdout), losses(direct.stdout))
        self.assertEqual(len(harness.read_metrics(metrics)), 3)

    def test_a_bad_plan_names_its_rank(self):
        plans = self.dir_with("bad", {"rank0.plan": b"PIPRPLAN but not really a plan"})
        result = self.assert_launch_fails(plans, "piper-launch: rank 0 exited with status 1",
                                          "[rank 0] piper-run: error:")
        self.assertIn("rank0.plan", result.stderr)

    def test_a_rank_given_another_ranks_plan_is_named(self):
        single = os.path.join(self.single, "rank0.plan")
        plans = self.dir_with("twice", {"rank0.plan": single, "rank1.plan": single})
        # Each plan says rank 0 of 1: rank 1's is the wrong rank, and neither is of 2 ranks.
        result = self.assert_launch_fails(
            plans, "[rank 1] piper-run: error: the launcher says this is rank 1 (RANK) but",
            "[rank 0] piper-run: error: the launcher started 2 ranks (WORLD_SIZE)")
        self.assertRegex(result.stderr, r"piper-launch: rank [01] exited with status 1 \(")

    def test_directories_without_rank_plans_and_the_plan_flag_are_refused(self):
        empty = self.dir_with("empty", {"notes.txt": b"no plans here"})
        self.assert_launch_fails(empty, "holds no rank<N>.plan files")
        gap = self.dir_with("gap", {"rank1.plan": os.path.join(self.single, "rank0.plan")})
        self.assert_launch_fails(gap, "has rank1.plan but no rank0.plan")
        self.assert_launch_fails(self.single, "do not pass --plan",
                                 flags=("--plan", "x.plan"))

    def test_rank_pattern_in_plan_needs_a_rank_from_the_environment(self):
        pattern = os.path.join(self.single, "rank%r.plan")
        env = {k: v for k, v in os.environ.items()
               if k not in ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK")}
        ok = subprocess.run([Tools.run, "--plan", pattern, "--steps", "1"], capture_output=True,
                            text=True, env=dict(env, RANK="0"), timeout=60)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        self.assertIn("rank0.plan: rank 0 of 1", ok.stdout)
        missing = subprocess.run([Tools.run, "--plan", pattern, "--steps", "1"],
                                 capture_output=True, text=True, env=env, timeout=60)
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("holds %r, but no launcher variable gives this process's rank",
                      missing.stderr)
        wrong = subprocess.run([Tools.run, "--plan", pattern, "--steps", "1"],
                               capture_output=True, text=True,
                               env=dict(env, SLURM_PROCID="0", SLURM_NTASKS="2"), timeout=60)
        self.assertNotEqual(wrong.returncode, 0)
        self.assertIn("the launcher started 2 ranks (SLURM_NTASKS)", wrong.stderr)

    def test_ctrl_c_reaches_the_ranks(self):
        job = Job([launch_path(), "--plans", self.single, "--steps", 100000000])
        try:
            job.wait_for(r"\[rank 0\] step 1 ")
            job.process.send_signal(signal.SIGINT)
            self.assertEqual(job.finish(timeout=20), 128 + signal.SIGINT, job.output())
            self.assertIn("piper-launch: interrupted by", job.output())
        finally:
            job.kill()


class MultiRank(LaunchTest):
    """Two data-parallel ranks; a planning failure fails these tests."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dp2 = cls.plan("dp2", [{"op": "zero", "stage": 0, "devices": [0, 1]}])

    def launch(self, *flags):
        return Job([launch_path(), "--plans", self.dp2, "--data", self.data, *flags])

    def rank_pid(self, job, rank):
        for pid, cmdline in children_of(job.process.pid).items():
            if f"rank{rank}.plan" in cmdline:
                return pid
        raise AssertionError(f"no piper-run of rank {rank} under piper-launch:\n{job.output()}")

    def test_per_rank_metrics_with_rank_pattern(self):
        work = os.path.join(self.tmp, "metrics")
        os.makedirs(work, exist_ok=True)
        job = self.launch("--steps", 2, "--metrics", os.path.join(work, "m%r.jsonl"),
                          "--save-onnx", os.path.join(work, "rank0only.onnx"))
        try:
            self.assertEqual(job.finish(timeout=120), 0, job.output())
        finally:
            job.kill()
        self.assertEqual(sorted(os.listdir(work)), ["m0.jsonl", "m1.jsonl", "rank0only.onnx"])
        losses = [[record["loss"] for record in
                   harness.read_metrics(os.path.join(work, f"m{rank}.jsonl"))]
                  for rank in range(2)]
        self.assertEqual(len(losses[0]), 2)
        self.assertEqual(losses[0], losses[1], "every rank reports the step's global loss")

    def test_a_killed_rank_is_named_and_the_others_exit_keeping_their_metrics(self):
        work = os.path.join(self.tmp, "killed")
        os.makedirs(work, exist_ok=True)
        metrics = os.path.join(work, "m%r.jsonl")
        job = self.launch("--steps", 100000000, "--timeout", 30, "--metrics", metrics)
        try:
            job.wait_for(r"\[rank 0\] step 2 ")
            os.kill(self.rank_pid(job, 1), signal.SIGKILL)
            start = time.monotonic()
            self.assertEqual(job.finish(timeout=60), 1, job.output())
            self.assertLess(time.monotonic() - start, 30, "the others must not wait the timeout")
            output = job.output()
            self.assertIn("piper-launch: rank 1 was killed by signal 9", output)
            self.assertRegex(output, r"\[rank 0\] piper-run: error: .*rank 1")
        finally:
            job.kill()
        # Every step a rank finished is in its metrics, the killed rank's too.
        for rank, at_least in ((0, 2), (1, 1)):
            records = harness.read_metrics(metrics.replace("%r", str(rank)))
            self.assertGreaterEqual(len(records), at_least, f"rank {rank}: {records}")
            self.assertEqual([r["step"] for r in records], list(range(1, len(records) + 1)))

    def test_a_stopped_rank_is_named_within_the_timeout_and_2_s(self):
        """Without piper-launch: rank 0 alone must notice that rank 1 stopped."""
        timeout = 5
        url = f"tcp://127.0.0.1:{free_port()}"
        ranks = [Job([Tools.run, "--plan", os.path.join(self.dp2, f"rank{r}.plan"),
                      "--rendezvous", url, "--steps", 100000000, "--timeout", timeout])
                 for r in range(2)]
        try:
            ranks[0].wait_for(r"step 2 ")
            os.kill(ranks[1].process.pid, signal.SIGSTOP)
            start = time.monotonic()
            code = ranks[0].finish(timeout=timeout + 30)
            elapsed = time.monotonic() - start
            self.assertEqual(code, 1, ranks[0].output())
            # The timeout, then 1 s watching heartbeats; rank 0 does not wait for a stopped
            # rank to leave its store.
            self.assertLess(elapsed, timeout + 2, ranks[0].output())
            # Gloo's clock may close the pair a few milliseconds before the 5 s are up.
            self.assertRegex(ranks[0].output(),
                             r"rank 0 waited (4\.9\d*|5(\.\d+)?) s in all_reduce #\d+ "
                             r".*of group \d+ "
                             r"\(ranks 0,1\) (for data from|to send to) rank 1; "
                             r"rank 1 is not responding")
        finally:
            for job in ranks:
                job.kill()

    def test_launch_names_the_stopped_rank_not_the_first_to_exit(self):
        job = self.launch("--steps", 100000000, "--timeout", 5, "--grace", 1)
        try:
            job.wait_for(r"\[rank 0\] step 2 ")
            os.kill(self.rank_pid(job, 1), signal.SIGSTOP)
            start = time.monotonic()
            self.assertEqual(job.finish(timeout=40), 1, job.output())
            self.assertLess(time.monotonic() - start, 5 + 2 + 1 + 3, job.output())
            self.assertRegex(job.output(),
                             r"piper-launch: rank 1 was not responding, as rank 0 reported; "
                             r"rank 0 exited with status 1 \(.*rank0\.plan\); then rank 1 was "
                             r"killed by signal")
        finally:
            job.kill()

    def launch_on(self, port, *flags):
        return self.launch("--rendezvous", f"tcp://127.0.0.1:{port}", *flags)

    def test_a_stranger_reads_no_key_and_takes_no_rank(self):
        port = free_port()
        job = self.launch_on(port, "--steps", 100000000, "--timeout", 30)
        try:
            job.wait_for(r"\[rank 0\] step 1 ")
            # What today's store answered a stranger: rank 0's entry, a lock-out of rank 1.
            replies = talk_without_the_token(port, b"".join([
                store_request(2, b"piper/rank/0"),
                store_request(3, b"piper/joins/1", tail=struct.pack("<q", 1)),
                store_request(5, b"piper/rank/1", b'{"plan_id": "squatter"}'),
                store_request(1, b"piper/rank/1", b'{"plan_id": "squatter"}')]))
            self.assertNotIn(b"plan_id", replies)
            self.assertIn(b"handshake answer", replies, "refused at the handshake")
            # A guessed answer of the right size is refused too.
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                challenge = s.recv(4096)
                self.assertEqual(len(challenge), 4 + 34, challenge)
                s.sendall(struct.pack("<I", 36) + bytes(32) + struct.pack("<i", 1))
                self.assertIn(b"the rendezvous token does not match", s.recv(4096))
            steps = len(re.findall(r"\[rank 0\] step \d+ ", job.output()))
            job.wait_for(rf"\[rank 0\] step {steps + 3} ")
            self.assertIsNone(job.process.poll(), job.output())
            self.assertNotIn("error", job.output())
        finally:
            job.kill()

    def test_60_hostile_connections_neither_grow_rank_0_nor_stop_the_job(self):
        port = free_port()
        job = self.launch_on(port, "--steps", 100000000, "--timeout", 30)
        hostile = []
        try:
            job.wait_for(r"\[rank 0\] step 2 ")
            rank0 = self.rank_pid(job, 0)
            before = resident_bytes(rank0)
            for i in range(60):
                s = socket.create_connection(("127.0.0.1", port), timeout=10)
                if i % 2 == 0:  # claims 64 MiB and sends 1 KiB
                    s.sendall(struct.pack("<I", 64 << 20) + b"x" * 1024)
                hostile.append(s)  # the others send nothing
            steps = len(re.findall(r"\[rank 0\] step \d+ ", job.output()))
            time.sleep(6)  # past the store's 5 s handshake timeout
            grown = resident_bytes(rank0) - before
            self.assertLess(grown, 64 << 20, f"rank 0 grew by {grown} bytes")
            for s in hostile:  # every one of them was hung up on
                s.settimeout(5)
                try:
                    while s.recv(65536):
                        pass
                except ConnectionResetError:
                    pass
            after = len(re.findall(r"\[rank 0\] step \d+ ", job.output()))
            self.assertGreater(after, steps, "the job trains on")
            self.assertIsNone(job.process.poll(), job.output())
        finally:
            for s in hostile:
                s.close()
            job.kill()

    def test_rank_0_warns_of_an_open_store_on_a_reachable_address(self):
        plan = os.path.join(self.dp2, "rank0.plan")
        env = {k: v for k, v in os.environ.items() if k != "PIPER_RENDEZVOUS_TOKEN"}
        argv = [Tools.run, "--plan", plan, "--timeout", "0.5"]
        for url, token, warned in ((f"tcp://0.0.0.0:{free_port()}", None, True),
                                   (f"tcp://0.0.0.0:{free_port()}", "s3cret", False),
                                   (f"tcp://127.0.0.1:{free_port()}", None, False)):
            run_env = dict(env, PIPER_RENDEZVOUS_TOKEN=token) if token else env
            result = subprocess.run(argv + ["--rendezvous", url], capture_output=True, text=True,
                                    env=run_env, timeout=60)
            self.assertEqual(result.returncode, 1, result.stderr)  # rank 1 never comes
            warning = ("piper-run: warning: the rendezvous store listens on "
                       f"{url[len('tcp://'):]} without a token: any host that reaches the port "
                       "can join the job")
            self.assertEqual(warning in result.stderr, warned, f"{url}:\n{result.stderr}")
            if token:
                self.assertNotIn(token, result.stderr + result.stdout)

    def test_a_second_rank_0_is_named_as_a_duplicate(self):
        url = f"tcp://127.0.0.1:{free_port()}"
        plan = os.path.join(self.dp2, "rank0.plan")
        first = Job([Tools.run, "--plan", plan, "--rendezvous", url, "--timeout", 30])
        try:
            time.sleep(1)  # the first rank 0 listens and registers, waiting for rank 1
            second = subprocess.run([Tools.run, "--plan", plan, "--rendezvous", url,
                                     "--timeout", "30"], capture_output=True, text=True,
                                    timeout=60)
            self.assertEqual(second.returncode, 1, second.stderr)
            self.assertRegex(second.stderr,
                             rf"rank 0 is already running at {re.escape(url)} \(pid "
                             rf"{first.process.pid} on .*\): two processes were started as "
                             r"rank 0")
        finally:
            first.kill()

    def test_under_torchrun_the_store_listens_beside_torchruns_on_master_port_plus_1(self):
        """torchrun's agent holds MASTER_PORT with its c10d TCPStore; with TORCHELASTIC_RUN_ID
        set, rank 0's store takes MASTER_PORT + 1 and the job trains. Without the variable
        rank 0 cannot listen on the port torchrun's store holds."""
        import datetime
        import torch.distributed as dist

        while True:  # a free port whose next is free too
            port = free_port()
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port + 1))
                    break
                except OSError:
                    continue
        torchrun = dist.TCPStore("127.0.0.1", port, 1, True, datetime.timedelta(seconds=30),
                                 wait_for_workers=False)
        torchrun.set("torchrun/key", "held")
        work = os.path.join(self.tmp, "torchrun")
        os.makedirs(work, exist_ok=True)
        base = {k: v for k, v in os.environ.items()
                if k not in ("PIPER_RENDEZVOUS", "SLURM_PROCID", "SLURM_NTASKS")}
        base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                    PIPER_RENDEZVOUS_TOKEN="torchrun-test")

        def ranks(env, *flags):
            return [Job([Tools.run, "--plan", os.path.join(self.dp2, f"rank{r}.plan"),
                         "--data", self.data, *flags], env=dict(env, RANK=str(r)))
                    for r in range(2)]

        jobs = ranks(dict(base, TORCHELASTIC_RUN_ID="piper-test"), "--steps", 3, "--metrics",
                     os.path.join(work, "m%r.jsonl"))
        try:
            for rank, job in enumerate(jobs):
                self.assertEqual(job.finish(timeout=120), 0, f"rank {rank}:\n{job.output()}")
            self.assertEqual(len(re.findall(r"^step \d+ loss ", jobs[0].output(), re.M)), 3)
        finally:
            for job in jobs:
                job.kill()
        losses = [[r["loss"] for r in harness.read_metrics(os.path.join(work, f"m{rank}.jsonl"))]
                  for rank in range(2)]
        self.assertEqual(len(losses[0]), 3)
        self.assertEqual(losses[0], losses[1])
        self.assertEqual(torchrun.get("torchrun/key"), b"held", "torchrun's store is untouched")

        jobs = ranks(base, "--steps", 1, "--timeout", 5)
        try:
            self.assertEqual(jobs[0].finish(timeout=60), 1, jobs[0].output())
            self.assertIn(str(port), jobs[0].output())
        finally:
            for job in jobs:
                job.kill()
        del torchrun

    def test_plans_of_two_planning_runs_refuse_to_start(self):
        other = self.plan("dp2_again", [{"op": "zero", "stage": 0, "devices": [0, 1]}])
        mixed = self.dir_with("mixed", {"rank0.plan": os.path.join(self.dp2, "rank0.plan"),
                                        "rank1.plan": os.path.join(other, "rank1.plan")})
        result = self.assert_launch_fails(
            mixed, "refusing to start: the ranks' plans come from different planning runs",
            flags=("--steps", "2", "--timeout", "30"))
        self.assertRegex(result.output,
                         r"\[rank 1\] .*rank 0 \(.*rank0\.plan\) has plan id '\w+' but rank 1 "
                         r"\(this rank, .*rank1\.plan\) has plan id '\w+'")


if __name__ == "__main__":
    harness.main()
