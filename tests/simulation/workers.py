"""Workers in the simulation: remote steps and remote workflow turns, over a network the rules
control (see cluster.py for the engines and the store).

The engines are real (``Cluster``'s, with a transport now); the network between them and the
workers is the simulation's: every task an engine sends, every result and decision a worker
answers, every heartbeat, sits in it until a rule delivers it, to one engine or (a beat) to
several, loses it, duplicates it, or leaves it there while other rules run (it is late then).
Workers are the real ``Worker``'s pieces, driven one step at a time: taking a task (its fence
checked by the worker's own ``_fenced_out``; a beat goes out as it takes it), beating, finishing
it (``Worker._outcome`` runs a step's body with its step context; a turn is replayed with
``replay``), freezing and thawing mid-step, dying with what it holds. An engine's results
consumer is modelled by ``deliver_answer`` (``RemoteDispatch._land_all``: what an outage keeps
back is held by that engine) and ``land_held`` (its retry, whenever it comes); a crashed engine
loses what it held. Time in ``runlane.remote`` (``dispatch``, ``steps``, ``turns``) is the simulation's
clock, so the heartbeat persist throttle and the turns' beat windows run on it.

What every operation is checked against:

* **Each re-send is forced.** When an engine sends a task of a step (or a turn of a run) that it
  sent before and did not see answered, under a new fence, every copy of the dispatch it
  replaces must have been lost or late: its task lost, refused or still queued, its worker dead
  or frozen, silent (no beat of it heard for half the redispatch window), or its answer lost,
  on its way, held through an outage or dropped. A re-send of a step whose worker an engine heard beating within half the window, or
  whose result was recorded, is a defect, and so is a fence sent twice.
* **At most once more per forced re-send.** A remote step executes at most once per copy of its
  task a worker admitted: at most ``1 + forced re-sends + duplicated copies`` times.
* **No stale fence is accepted.** A remote step's record completed by a result holds the result
  of its last dispatch (the token's fence is the record's), and the system it wrote to (the
  ``Ledger``) has taken no higher fence for it; a remote workflow's local step recorded by a
  decision holds the result of the execution with the highest fence the ledger took.
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ClassVar, cast

from hypothesis import strategies as st
from hypothesis.stateful import invariant, precondition, rule

import runlane
import runlane.remote.dispatch
import runlane.remote.steps
import runlane.remote.turns
from runlane import Engine, FatalError, StepContext, Worker
from runlane.fences import fence_of
from runlane.models import StepStatus
from runlane.remote.replay import replay
from runlane.remote.tasks import decision_doc, expired
from runlane.stores.base import Store
from runlane.testing import ManualClock
from runlane.transports import InProcessTransport
from runlane.transports.base import Message
from tests.outages import FlakyStore

from .cluster import (
    ENGINES,
    LEASE,
    QUEUES,
    WORKFLOWS,
    Cluster,
    Expected,
    MemoryCluster,
    PostgresCluster,
    SqliteCluster,
    work,
)

GROUP = "sim.remote"  # the workers of remote steps
TURNS = "sim.turns"  # the workers of the remote workflow's turns
REDISPATCH = 3.0  # the chaos run's remote_redispatch
SILENCE = 10.0  # remote_advance_silence: a turn silent this long is sent again
WORKERS = 2

remote_executions: Counter[tuple[str, int]] = Counter()  # remote steps, by (run id, seq)
turn_executions: Counter[tuple[str, int]] = Counter()  # a remote workflow's local steps


class Ledger:
    """The system remote steps write to: it keeps the highest fence it has taken per step and
    refuses a lower one. A write returns a token naming its fence."""

    def __init__(self) -> None:
        self.highest: dict[str, int] = {}
        self.refused: Counter[str] = Counter()
        self._serial = itertools.count(1)

    def write(self, context: StepContext) -> str:
        key, fence = context.step_id, context.fence
        if fence < self.highest.get(key, -1):
            self.refused[key] += 1
            raise FatalError(f"{key}: fence {fence} is below {self.highest[key]}")
        self.highest[key] = fence
        return f"{fence}.{next(self._serial)}"


def token_fence(token: Any) -> int:
    return int(str(token).split(".", 1)[0])


ledger = Ledger()


@runlane.step(name="sim.charge", group=GROUP)
async def charge(args: list[Any]) -> str:
    return ledger.write(runlane.step_context())


@runlane.step(name="sim.note")
async def note(args: list[Any]) -> str:
    """A remote workflow's local step: it runs in its turn's replay, on the worker."""
    context = runlane.step_context()
    turn_executions[(context.run_id, context.seq)] += 1
    return ledger.write(context)


@runlane.workflow(name="sim.remote")
async def remote_flow(ctx: runlane.Context, _: Any) -> list[Any]:
    paid = await ctx.step(charge, [ctx.run_id, 1])
    return [paid, await ctx.step(work, [ctx.run_id, 2])]


@runlane.workflow(name="sim.rwf", group=TURNS)
async def remote_turn_flow(ctx: runlane.Context, _: Any) -> list[Any]:
    noted = await ctx.step(note, [ctx.run_id, 1])
    return [noted, await ctx.step(charge, [ctx.run_id, 2])]


REMOTE_KINDS = {"remote": remote_flow, "rwf": remote_turn_flow}
CLOCKED = (
    runlane.remote.dispatch,
    runlane.remote.steps,
    runlane.remote.turns,
)  # their ``time.monotonic`` is the simulation's


class SimTime:
    """``time.monotonic`` of the simulation's clock (for ``runlane.remote``'s ``dispatch``, ``steps`` and ``turns``:
    the persist throttles and windows run on simulated time, as the turns' clock does)."""

    def __init__(self, clock: ManualClock) -> None:
        self._clock = clock
        self._origin = clock.now()

    def monotonic(self) -> float:
        return (self._clock.now() - self._origin).total_seconds() + 1_000_000.0


# ---------------------------------------------------------------- the network


@dataclass(eq=False)
class Copy:
    """One copy of a task on the network (a duplicate is a copy of its own), and what became of
    it: queued, lost, refused, expired, running (on ``worker``), dead (its worker died),
    answered (its answer on its way), held (by an engine, through an outage), answer-lost,
    landed (recorded or applied), dropped (by the engine: stale, a duplicate, its run ended)."""

    kind: str  # "step" or "turn"
    key: tuple[str, int]  # (run id, seq); seq 0 for a turn
    fence: int
    message: Message
    sent_at: datetime
    duplicate: bool = False
    state: str = "queued"
    worker: SimWorker | None = None
    heard_at: datetime | None = None  # when an engine last heard a beat of it
    answer: Message | None = None

    @property
    def window(self) -> float:
        return REDISPATCH if self.kind == "step" else SILENCE

    def beat(self, worker: str) -> Message:
        if self.kind == "turn":
            task = self.message
            return {"kind": "workflow", "task_id": task["task_id"], "run_id": task["run_id"]}
        return {
            key: self.message[key] for key in ("step_id", "run_id", "seq", "attempt", "fence")
        } | {"worker": worker}


SILENT_BECAUSE = {
    "queued": "its task was still queued",
    "lost": "its task was lost",
    "refused": "a worker refused its task",
    "expired": "a worker dropped its task as expired",
    "dead": "its worker died holding it",
    "answered": "its answer was on its way",
    "held": "its answer was held by an engine through an outage",
    "answer-lost": "its answer was lost",
    "dropped": "its answer was dropped",
}


class Network:
    """Every task sent, every answer and beat not delivered yet; and the re-sends' causes."""

    def __init__(self, clock: ManualClock) -> None:
        self.clock = clock
        self.queued: defaultdict[str, list[Copy]] = defaultdict(list)
        self.answers: list[Copy] = []
        self.beats: list[tuple[Copy, Message]] = []
        self.sent: defaultdict[tuple[str, int], list[Copy]] = defaultdict(list)
        self.forced: Counter[tuple[str, int]] = Counter()  # re-sends of each step, all forced
        self.causes: Counter[str] = Counter()  # why the earlier copies were silent, over all
        self.defects: list[str] = []

    def send(self, group: str, message: Message) -> None:
        kind = "turn" if message.get("kind") == "workflow" else "step"
        key = (str(message["run_id"]), int(message.get("seq") or 0) if kind == "step" else 0)
        fence = fence_of(message)
        assert fence is not None, f"an engine sent {message} without a fence"
        copy = Copy(kind, key, fence, message, self.clock.now())
        earlier = self.sent[key]
        if kind == "turn":  # a turn whose decision was applied is over: this is the next one
            applied = max((c.fence for c in earlier if c.state == "landed"), default=-1)
            earlier = [c for c in earlier if c.fence > applied]
        if earlier:
            self._check_resend(copy, earlier)
        self.sent[key].append(copy)
        self.queued[group].append(copy)

    def _check_resend(self, copy: Copy, earlier: list[Copy]) -> None:
        """``copy`` goes out while ``earlier`` copies were not answered: the fence must be new,
        and each copy of the dispatch it replaces (the last one; older ones were replaced
        already, whatever their workers do) lost or late."""
        last = max(c.fence for c in earlier)
        if last >= copy.fence:
            self.defects.append(f"{copy.key} sent under fence {copy.fence} after {last}")
        for before in (c for c in earlier if c.fence == last):
            why = self._silent(before)
            if why is None:
                self.defects.append(
                    f"{copy.kind} {copy.key} sent again under fence {copy.fence} at "
                    f"{self.clock.now():%H:%M:%S.%f} although its copy under fence "
                    f"{before.fence} was {before.state} (beat heard at {before.heard_at})"
                )
            else:
                self.causes[why] += 1
        if copy.kind == "step":
            self.forced[copy.key] += 1

    def _silent(self, copy: Copy) -> str | None:
        """Why the engines could take ``copy`` for lost (None: they could not)."""
        if copy.state == "landed":
            return None
        if copy.state != "running":
            return SILENT_BECAUSE[copy.state]
        assert copy.worker is not None
        if copy.worker.frozen:
            return "its worker was frozen"
        heard = copy.heard_at
        if heard is not None and self.clock.now() - heard < timedelta(seconds=copy.window / 2):
            return None
        return "its worker's beats did not reach an engine"


class SimTransport(InProcessTransport):
    """An engine's transport: what it sends goes into the network (no run queue, as the
    in-process transport); a result an engine hands back on its drain goes back on its way."""

    def __init__(self, network: Network) -> None:
        super().__init__()
        self.network = network

    async def send_tasks(self, group: str, tasks: Any) -> None:
        for task in tasks:
            self.network.send(group, dict(task))


class SimWorker:
    """A worker process: the real ``Worker``'s fence book and step execution, one rule at a time."""

    def __init__(self, name: str, network: Network) -> None:
        self.worker = Worker(
            GROUP,
            InProcessTransport(),
            steps=[charge, note],
            workflows=[remote_turn_flow],
            name=name,
        )
        self.hand: list[Copy] = []
        self.frozen = False

    @property
    def name(self) -> str:
        return self.worker.name


# ---------------------------------------------------------------- the engines' side


class Reporting(FlakyStore):
    """An engine's store (with its outages) that remembers how the last reports landed."""

    def __init__(self, inner: Store) -> None:
        super().__init__(inner)
        self.verdicts: list[str] = []  # record_step_result's, in order
        self.decided: list[bool] = []  # claim_decision's: whether it claimed the run

    async def record_step_result(self, *args: Any, **kwargs: Any) -> str:
        verdict = str(await self.__getattr__("record_step_result")(*args, **kwargs))
        self.verdicts.append(verdict)
        return verdict

    async def claim_decision(self, *args: Any, **kwargs: Any) -> Any:
        claim = await self.__getattr__("claim_decision")(*args, **kwargs)
        self.decided.append(claim is not None)
        return claim


@dataclass
class Held:
    """The answers an engine's consumer holds (the store was unreachable when it landed them)."""

    copies: list[Copy] = field(default_factory=list)


def on_the_network(predicate: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """A precondition on what is on the network or in a worker's hand. Hypothesis requires the
    rules enabled at each step to be a function of the choices made before it. That holds on the
    memory store, which answers on the event loop; the SQLite and PostgreSQL stores answer from
    threads and sockets, so a crash "N event-loop steps into a pass" stops at different points on
    a replay and leaves different tasks on the network. There the rule is always enabled and
    does nothing when it has nothing to act on."""
    return precondition(lambda self: not self.exact_replay or predicate(self))


class WorkerCluster(Cluster):
    """The cluster with workers, and runs with remote steps and a remote workflow."""

    exact_replay: ClassVar[bool] = False  # see on_the_network
    REPORT_CALLS: ClassVar[list[str]] = [
        "record_step_result",
        "record_heartbeat",
        "claim_decision",
        "await_decision",
        "extend_decision",
    ]

    def __init__(self) -> None:
        remote_executions.clear()
        turn_executions.clear()
        global ledger
        ledger = Ledger()
        self.network: Network | None = None  # made with the first engine (the clock is there)
        self.held: list[Held] = []
        super().__init__()
        self.worker_serial = itertools.count(1)
        self.workers = [self._worker() for _ in range(WORKERS)]
        self.times = SimTime(self.clock)
        self.saved = [vars(module)["time"] for module in CLOCKED]
        for module in CLOCKED:
            vars(module)["time"] = self.times

    def _worker(self) -> SimWorker:
        assert self.network is not None
        return SimWorker(f"w{next(self.worker_serial)}", self.network)

    def _engine(self) -> Engine:
        if self.network is None:
            self.network = Network(self.clock)
            self.held = [Held() for _ in range(ENGINES)]
        store = self.new_store()
        self.stores.append(store)
        flaky = Reporting(store)
        self.flaky.append(flaky)
        return Engine(
            cast(Store, flaky),
            workflows=[*WORKFLOWS, remote_flow, remote_turn_flow],
            queues=list(QUEUES.values()),
            transport=SimTransport(self.network),
            clock=self.clock,
            drive=False,
            lease=LEASE,
            poll_interval=1.0,
            remote_redispatch=REDISPATCH,
            remote_advance_silence=SILENCE,
        )

    def teardown(self) -> None:
        try:
            super().teardown()
        finally:
            for module, saved in zip(CLOCKED, self.saved, strict=True):
                vars(module)["time"] = saved

    @property
    def net(self) -> Network:
        assert self.network is not None
        return self.network

    # ---------------------------------------------------------------- starts

    @rule(engine=st.integers(0, ENGINES - 1), kind=st.sampled_from(sorted(REMOTE_KINDS)))
    def start_remote(self, engine: int, kind: str) -> None:
        self.serial += 1
        run_id = f"{kind}-{self.serial}"
        self.run(self.engines[engine].start(REMOTE_KINDS[kind], None, run_id=run_id))
        self.model.runs[run_id] = Expected(kind, None, any_output=True)

    # ---------------------------------------------------------------- workers

    @on_the_network(lambda self: any(self.net.queued.values()))
    @rule(
        worker=st.integers(0, WORKERS - 1),
        group=st.sampled_from([GROUP, TURNS]),
        count=st.integers(1, 3),
    )
    def take(self, worker: int, group: str, count: int) -> None:
        """The worker takes up to ``count`` of its group's oldest tasks (it beats for each)."""
        taker = self.workers[worker]
        queue = self.net.queued[group]
        if taker.frozen:
            return
        for copy in queue[:count]:
            queue.remove(copy)
            self._take(taker, copy)

    def _take(self, taker: SimWorker, copy: Copy) -> None:
        task = copy.message
        if copy.kind == "turn" and expired(task, self.clock.now()):
            copy.state = "expired"
            return
        run_id = str(task["run_id"])
        key = ("turn", run_id) if copy.kind == "turn" else ("step", run_id, str(task["seq"]))
        if taker.worker._fenced_out(key, task):
            copy.state = "refused"
            return
        copy.state, copy.worker = "running", taker
        taker.hand.append(copy)
        if copy.kind == "step":
            remote_executions[copy.key] += 1
        self.net.beats.append((copy, copy.beat(taker.name)))

    @on_the_network(lambda self: any(w.hand for w in self.workers))
    @rule(worker=st.integers(0, WORKERS - 1))
    def beat(self, worker: int) -> None:
        beater = self.workers[worker]
        if not beater.frozen:
            self.net.beats.extend((c, c.beat(beater.name)) for c in beater.hand)

    @on_the_network(lambda self: any(w.hand for w in self.workers))
    @rule(worker=st.integers(0, WORKERS - 1), which=st.integers(0, 3))
    def finish(self, worker: int, which: int) -> None:
        """The worker finishes a task it holds: runs the step (or replays the turn) and sends
        its answer."""
        finisher = self.workers[worker]
        if finisher.frozen or not finisher.hand:
            return
        copy = finisher.hand.pop(which % len(finisher.hand))
        self._finish(finisher, copy)

    def _finish(self, finisher: SimWorker, copy: Copy) -> None:
        task = copy.message
        if copy.kind == "step":
            copy.answer = self.run(finisher.worker._outcome(task))
        else:
            steps = finisher.worker.steps
            decision = self.run(replay(task, finisher.worker.workflows, steps))
            copy.answer = decision_doc(decision, finisher.name)
        copy.state = "answered"
        self.net.answers.append(copy)

    @rule(worker=st.integers(0, WORKERS - 1))
    def freeze_or_thaw(self, worker: int) -> None:
        """The worker's process stops (SIGSTOP, a pause) or goes on: frozen, it takes, beats
        and finishes nothing."""
        self.workers[worker].frozen = not self.workers[worker].frozen

    @on_the_network(lambda self: any(w.hand for w in self.workers))
    @rule(worker=st.integers(0, WORKERS - 1))
    def worker_dies(self, worker: int) -> None:
        """The worker dies with what it holds; a fresh one (who has seen no fence) replaces it."""
        for copy in self.workers[worker].hand:
            copy.state = "dead"
        self.workers[worker] = self._worker()

    # ---------------------------------------------------------------- the network

    @on_the_network(lambda self: self.net.answers)
    @rule(engine=st.integers(0, ENGINES - 1), which=st.integers(0, 5), twice=st.booleans())
    def deliver_answer(self, engine: int, which: int, twice: bool) -> None:
        """An answer on its way reaches an engine's consumer (``twice``: a copy stays on its
        way, a duplicate)."""
        if not self.net.answers:
            return
        copy = self.net.answers[which % len(self.net.answers)]
        if not twice:
            self.net.answers.remove(copy)
        self._land(engine, copy)

    def _land(self, engine: int, copy: Copy) -> None:
        """``engine``'s consumer lands ``copy``'s answer, or holds it (an outage)."""
        self.run(self.engines[engine]._ready())
        execution = self.engines[engine]._execution
        remote = execution.remote
        assert remote is not None and copy.answer is not None
        store = cast(Reporting, self.engines[engine].store)
        if copy.kind == "step":
            verdicts = len(store.verdicts)
            held = self.run(remote._land_all([copy.answer]))
            landed = store.verdicts[verdicts:]
            if held:
                copy.state = "held"
            else:
                copy.state = "landed" if landed and landed[-1] == "recorded" else "dropped"
        else:
            decided = len(store.decided)
            if not self.run(remote._land_decision(copy.answer)):
                copy.state = "held"
            else:
                claims = store.decided[decided:]
                copy.state = "landed" if claims and claims[-1] else "dropped"
            self._turns_run_out(engine)
        if copy.state == "held":
            self.held[engine].copies.append(copy)

    def _turns_run_out(self, engine: int) -> None:
        """The turns a decision's claim started here run to their end."""
        local = self.engines[engine]._execution._local
        assert local is not None
        self.run(local.wait(30.0))

    @on_the_network(lambda self: any(h.copies for h in self.held))
    @rule(engine=st.integers(0, ENGINES - 1))
    def land_held(self, engine: int) -> None:
        """The engine's consumer tries what it holds again (after its pause, whenever)."""
        held, self.held[engine].copies = self.held[engine].copies, []
        for copy in held:
            self._land(engine, copy)

    @on_the_network(lambda self: self.net.beats)
    @rule(to=st.lists(st.integers(0, ENGINES - 1), min_size=0, max_size=ENGINES, unique=True))
    def hear_beats(self, to: list[int]) -> None:
        """The beats on their way reach the engines ``to`` (broadcast; the others miss them,
        and so does everyone when ``to`` is empty: beats are lossy)."""
        beats, self.net.beats = self.net.beats, []
        for copy, beat in beats:
            for engine in to:
                self._hear(engine, copy, beat)

    def _hear(self, engine: int, copy: Copy, beat: Message) -> None:
        """``engine`` hears the beat; unless its store met an outage taking it, the engines
        know from now on that the copy's worker is alive (a throttled beat counts: what the
        throttle holds back is the engines' own lag)."""
        self.run(self.engines[engine]._ready())
        execution = self.engines[engine]._execution
        assert execution.remote is not None and execution.remote_turns is not None
        store = cast(FlakyStore, self.engines[engine].store)
        fired = store.fired
        heard = (
            execution.remote._heard_beat(beat)
            if copy.kind == "step"
            else execution.remote_turns.heard_beat(beat)
        )
        self.run(heard)
        if store.fired == fired:
            copy.heard_at = self.clock.now()

    @on_the_network(lambda self: any(self.net.queued.values()) or self.net.answers)
    @rule(task=st.booleans(), which=st.integers(0, 5))
    def lose(self, task: bool, which: int) -> None:
        """A task (or an answer) on its way is lost."""
        if task:
            queued = [c for q in self.net.queued.values() for c in q]
            if queued:
                copy = queued[which % len(queued)]
                self.net.queued[self._group(copy)].remove(copy)
                copy.state = "lost"
        elif self.net.answers:
            copy = self.net.answers.pop(which % len(self.net.answers))
            copy.state = "answer-lost"

    @on_the_network(lambda self: any(self.net.queued.values()))
    @rule(which=st.integers(0, 5))
    def duplicate_task(self, which: int) -> None:
        """A task is delivered twice (a send retried after an error that hid its success)."""
        queued = [c for q in self.net.queued.values() for c in q]
        if not queued:
            return
        original = queued[which % len(queued)]
        copy = Copy(
            original.kind,
            original.key,
            original.fence,
            original.message,
            self.clock.now(),
            duplicate=True,
        )
        self.net.sent[copy.key].append(copy)
        self.net.queued[self._group(copy)].append(copy)

    @staticmethod
    def _group(copy: Copy) -> str:
        return TURNS if copy.kind == "turn" else GROUP

    @precondition(lambda self: self.model.runs)
    @rule(
        engine=st.integers(0, ENGINES - 1),
        call=st.sampled_from(REPORT_CALLS),
        when=st.sampled_from(["before", "after"]),
        after=st.integers(0, 1),
    )
    def report_outage(self, engine: int, call: str, when: Any, after: int) -> None:
        """The engine's next call of ``call`` (a result, a beat, a decision's) after ``after``
        more meets an outage ``when`` (before the store takes it, or after it committed)."""
        cast(FlakyStore, self.engines[engine].store).fail(call, when=when, after=after)

    def _lost_with(self, engine: int) -> None:
        """A crashed engine also loses the answers its consumer held."""
        for copy in self.held[engine].copies:
            copy.state = "answer-lost"
        self.held[engine].copies = []

    # ---------------------------------------------------------------- at every instant

    @invariant()
    def every_resend_was_forced(self) -> None:
        assert not self.net.defects, self.net.defects

    @invariant()
    def a_remote_step_runs_at_most_once_more_per_forced_resend(self) -> None:
        for key, n in remote_executions.items():
            duplicates = sum(1 for c in self.net.sent[key] if c.duplicate)
            allowed = 1 + self.net.forced[key] + duplicates
            assert n <= allowed, f"remote step {key} ran {n} times (at most {allowed})"

    @invariant()
    def no_stale_fence_is_accepted(self) -> None:
        for run_id, expected in self.model.runs.items():
            if expected.kind in REMOTE_KINDS:
                for record in self.run(self.observer.list_steps(run_id)):
                    self._check_record(run_id, record)

    def _check_record(self, run_id: str, record: Any) -> None:
        if record.status != StepStatus.COMPLETED or record.name not in ("sim.charge", "sim.note"):
            return
        fence, step = token_fence(record.output), f"{run_id}:{record.seq}"
        assert fence == ledger.highest.get(step), (
            f"{step} recorded fence {fence}'s result; the ledger took {ledger.highest.get(step)}"
        )
        if record.name == "sim.charge":
            assert fence == record.fence, f"{step} recorded fence {fence}'s, sent {record.fence}"

    # ---------------------------------------------------------------- at rest

    def _come_to_rest(self) -> None:
        """Every worker thawed and diligent, every answer and beat delivered, every held answer
        landed, between the passes that advance past every timer and lease."""
        for worker in self.workers:
            worker.frozen = False
        for _ in range(60):
            self.clock.advance(LEASE + 1)
            self._drain_network()
            for engine in self.engines:
                self._tick(engine)
            self._drain_network()
            if not self._unsettled():
                return
        raise AssertionError(f"the cluster never came to rest: {self._unsettled()}")

    def _drain_network(self) -> None:
        for _ in range(10):
            for engine in range(ENGINES):
                self.land_held(engine)
            for queue in list(self.net.queued.values()):
                while queue:
                    self._take(self.workers[0], queue.pop(0))
            for worker in self.workers:
                while worker.hand:
                    self._finish(worker, worker.hand.pop(0))
            self.hear_beats(list(range(ENGINES)))
            while self.net.answers:
                self._land(0, self.net.answers.pop(0))
            if not any(h.copies for h in self.held) and not any(self.net.queued.values()):
                return

    def _check_final(self) -> None:
        super()._check_final()
        self.every_resend_was_forced()
        self.a_remote_step_runs_at_most_once_more_per_forced_resend()
        self.no_stale_fence_is_accepted()


class MemoryWorkerCluster(WorkerCluster, MemoryCluster):
    exact_replay = True


class SqliteWorkerCluster(WorkerCluster, SqliteCluster):
    pass


class PostgresWorkerCluster(WorkerCluster, PostgresCluster):
    pass


__all__ = [
    "Ledger",
    "MemoryWorkerCluster",
    "Network",
    "PostgresWorkerCluster",
    "SqliteWorkerCluster",
    "WorkerCluster",
    "ledger",
    "remote_executions",
]
