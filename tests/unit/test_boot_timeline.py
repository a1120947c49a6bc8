"""The boot timeline's rule (engine/report/boot.py): durations from the marks, steps never
reached shown as such (None, never 0 s), the total from entering provisioning to the join,
and the same result from a run's folded datastream; and the marks a join adds
(engine/run/bootmarks.py): the node-timed install put on our clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace

from agent.protocol import BootReport
from engine.report import events as ev
from engine.report.boot import STEPS, boot_timeline, provisioning_start
from engine.report.runbook import apply, fold, new_view
from engine.run.bootmarks import BootMarks, inferred_marks, join_marks

T0 = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
P = ev.BootPhase


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def mark(phase: ev.BootPhase, t: float, since: float | None = None, detail: str | None = None):
    return ev.Boot(
        run_id="r",
        phase=phase,
        at=at(t),
        since=at(since) if since is not None else None,
        detail=detail,
    )


VAST = [
    mark(P.OFFER_CHOSEN, 1.5, detail="offer 103"),
    mark(P.INSTANCE_CREATED, 2.0),
    mark(P.IMAGE_LOADING, 4.0),
    mark(P.CONTAINER_RUNNING, 40.0),
    mark(P.AGENT_INSTALLED, 47.0, since=42.0),
    mark(P.AGENT_JOINED, 48.0),
]


def test_each_step_took_from_the_previous_mark_or_its_own_start() -> None:
    timeline = boot_timeline(T0, VAST)
    took = {s.phase: s.seconds for s in timeline.steps}
    assert took == {
        P.OFFER_CHOSEN: 1.5,
        P.INSTANCE_CREATED: 0.5,
        P.IMAGE_LOADING: 2.0,
        P.CONTAINER_RUNNING: 36.0,
        P.AGENT_INSTALLED: 5.0,  # timed on the node: not the 7 s since "running" was seen
        P.AGENT_JOINED: 1.0,
        P.PREFLIGHT: None,  # a step after the boot: none was asked here
    }
    assert timeline.total_s == 48.0
    assert timeline.not_seen == []
    assert timeline.step(P.OFFER_CHOSEN).detail == "offer 103"


def test_a_step_never_reached_is_not_seen_and_the_next_counts_from_the_one_before() -> None:
    local = [mark(P.INSTANCE_CREATED, 0.02), mark(P.AGENT_JOINED, 0.3)]
    timeline = boot_timeline(T0, local)
    assert [s.label for s in timeline.not_seen] == [
        "offer chosen",
        "image loading",
        "container running",
        "agent installed",
    ]
    for step in timeline.not_seen:
        assert step.seconds is None and step.at is None  # shown as such, never 0 s
    assert round(timeline.step(P.AGENT_JOINED).seconds or 0, 3) == 0.28
    assert timeline.total_s == 0.3


def test_while_booting_there_is_no_total_and_later_steps_are_not_missing_yet() -> None:
    timeline = boot_timeline(T0, VAST[:3])
    assert timeline.total_s is None
    assert timeline.not_seen == []
    assert [s.label for s in timeline.seen] == ["offer chosen", "instance created", "image loading"]


def test_a_run_that_waited_for_a_pool_slot_boots_from_when_it_got_one() -> None:
    queued = [mark(P.SLOT_TAKEN, 30.0), mark(P.INSTANCE_CREATED, 30.1), mark(P.AGENT_JOINED, 31.0)]
    timeline = boot_timeline(T0, queued)  # entered provisioning at 0, queued until 30
    assert round(timeline.step(P.INSTANCE_CREATED).seconds or 0, 3) == 0.1
    assert timeline.total_s == 1.0
    assert P.SLOT_TAKEN not in [s.phase for s in timeline.steps]  # a clock start, not a step


def test_an_offer_chosen_again_counts_at_its_last_mark() -> None:
    marks = [mark(P.OFFER_CHOSEN, 1.0), mark(P.OFFER_CHOSEN, 3.0, detail="offer 104")]
    marks.append(mark(P.INSTANCE_CREATED, 3.5))
    timeline = boot_timeline(T0, marks)
    assert timeline.step(P.OFFER_CHOSEN).seconds == 3.0
    assert timeline.step(P.OFFER_CHOSEN).detail == "offer 104"
    assert timeline.step(P.INSTANCE_CREATED).seconds == 0.5


def test_a_node_clock_behind_ours_never_makes_a_negative_step() -> None:
    marks = [mark(P.CONTAINER_RUNNING, 10.0), mark(P.AGENT_INSTALLED, 9.0, since=12.0)]
    assert boot_timeline(T0, marks).step(P.AGENT_INSTALLED).seconds == 0.0


def test_the_folded_datastream_gives_the_same_timeline_and_run_json_form() -> None:
    events: list[ev.Event] = [
        ev.Submitted(run_id="r", job_name="j", pool="gpu", run_dir="/tmp/r", ts=T0),
        ev.Transition(
            run_id="r",
            cause="JobSubmitted",
            from_state=None,
            to_state="PENDING",
            from_phase="new",
            to_phase="provisioning",
            ts=T0,
        ),
        *VAST,
    ]
    view = fold([ev.parse_event(e.model_dump_json()) for e in events])  # as from events.jsonl
    assert view is not None and len(view.boot) == len(VAST)
    summary = boot_timeline(provisioning_start(view.timeline), view.boot).summary()
    assert summary["total_s"] == 48.0
    steps = summary["steps"]
    assert isinstance(steps, list)
    assert [s["phase"] for s in steps] == [p.value for p in STEPS]
    assert steps[4] == {
        "phase": "agent_installed",
        "at": at(47.0).isoformat(),
        "seconds": 5.0,
        "detail": None,
        "inferred": False,
    }


def test_a_node_clock_minutes_off_still_shows_the_install_where_it_happened() -> None:
    """The node timed its install on its own clock, 300 s behind ours; the hello says what
    that clock read when it was sent, so the install lands on our clock."""
    skew = -300.0
    report = BootReport(
        install_started=at(42.0).timestamp() + skew,
        install_ended=at(47.0).timestamp() + skew,
        sent_at=at(48.0).timestamp() + skew,
    )
    installed, joined = join_marks("r", report, received=at(48.0))
    assert installed.phase is P.AGENT_INSTALLED and joined.phase is P.AGENT_JOINED
    assert installed.since == at(42.0) and installed.at == at(47.0)
    assert joined.at == at(48.0)


def test_install_times_no_clock_gives_are_dropped_and_the_join_still_counts() -> None:
    nonsense = [
        BootReport(sent_at=1e9),  # a node that installed nothing (the local pool)
        BootReport(install_started=5e8, install_ended=4e8, sent_at=1e9),  # ends before it began
        BootReport(install_started=float("nan"), install_ended=4e8, sent_at=1e9),
        BootReport(install_started=4e8, install_ended=2e9, sent_at=1e9),  # ends after the hello
    ]
    for report in [None, *nonsense]:
        assert [m.phase for m in join_marks("r", report, received=at(1.0))] == [P.AGENT_JOINED]


class _Driver:
    """What BootMarks needs of a run's driver: its view, publish and redact."""

    def __init__(self, provider: str = "local") -> None:
        self.view = new_view(ev.Submitted(run_id="r", job_name="j", pool="gpu", run_dir="/r"))
        self.pool = SimpleNamespace(provider=provider)

    def publish(self, event: ev.Event) -> None:
        self.view = apply(self.view, event)

    def redact(self, text: str) -> str:
        return text.replace("s3cret", "***")


def test_a_step_keeps_its_first_mark_but_the_offer_may_be_chosen_again() -> None:
    driver = _Driver()
    marks = BootMarks(driver)  # type: ignore[arg-type]
    marks.reached(P.OFFER_CHOSEN, "offer 101")
    marks.reached(P.OFFER_CHOSEN, "offer 102")  # 101 was rented away under us
    marks.reached(P.CONTAINER_RUNNING, "success, running img s3cret")
    first = driver.view.boot[-1].at
    marks.reached(P.CONTAINER_RUNNING, "seen again by an adopting engine")
    assert [m.detail for m in driver.view.boot] == [
        "offer 101",
        "offer 102",
        "success, running img ***",  # foreign text is redacted like a reason
    ]
    timeline = boot_timeline(T0, driver.view.boot)
    assert timeline.step(P.OFFER_CHOSEN).detail == "offer 102"
    assert timeline.step(P.CONTAINER_RUNNING).at == first


def test_after_the_first_join_nothing_is_a_boot_step_any_more() -> None:
    driver = _Driver()
    marks = BootMarks(driver)  # type: ignore[arg-type]
    marks.joined(None)
    marks.joined(None)  # a rejoin after the operator was away
    marks.reached(P.IMAGE_LOADING, "an adopting engine's first look")
    assert [m.phase for m in driver.view.boot] == [P.AGENT_JOINED]


# a RunPod boot as its polls saw it: the pod came up between two looks, just before the join
POD = [
    mark(P.SLOT_TAKEN, 0.0),
    mark(P.OFFER_CHOSEN, 0.5, detail="1× RTX 3090 (community cloud)"),
    mark(P.INSTANCE_CREATED, 1.0, detail="RunPod pod p1"),
]
JOINED = join_marks(
    "r",
    BootReport(install_started=at(3.0).timestamp(), install_ended=at(5.0).timestamp(),
               sent_at=at(6.0).timestamp()),
    received=at(6.0),
)  # fmt: skip


def test_container_steps_no_look_saw_are_inferred_done_from_the_join() -> None:
    """Joined implies the container ran (no later than the install began), which implies
    its image was loaded: both done and inferred, never "not seen", with no time of their
    own; the install and the join keep theirs."""
    inferred = inferred_marks(POD, JOINED[0])
    assert [(m.phase, m.at, m.inferred) for m in inferred] == [
        (P.IMAGE_LOADING, at(3.0), True),
        (P.CONTAINER_RUNNING, at(3.0), True),
    ]
    timeline = boot_timeline(T0, [*POD, *inferred, *JOINED])
    assert timeline.not_seen == []
    running = timeline.step(P.CONTAINER_RUNNING)
    assert running.inferred and running.seconds is None and running.took == "inferred"
    assert "its agent ran in it" in (running.detail or "")
    assert timeline.step(P.AGENT_INSTALLED).seconds == 2.0
    assert timeline.step(P.AGENT_JOINED).seconds == 1.0
    assert timeline.total_s == 6.0
    steps = timeline.summary()["steps"]
    assert isinstance(steps, list)
    # offer, created, image, container, installed, joined, pre-flight (still to come)
    assert [s["inferred"] for s in steps] == [False, False, True, True, False, False, False]


def test_a_step_a_look_saw_is_kept_and_only_what_it_proves_is_inferred() -> None:
    running = mark(P.CONTAINER_RUNNING, 2.0, detail="Rented by User: started container")
    inferred = inferred_marks([*POD, running], JOINED[0])
    assert [(m.phase, m.at) for m in inferred] == [(P.IMAGE_LOADING, at(2.0))]
    timeline = boot_timeline(T0, [*POD, running, *inferred, *JOINED])
    assert timeline.step(P.CONTAINER_RUNNING).seconds == 1.0  # from the pod's creation
    assert not timeline.step(P.CONTAINER_RUNNING).inferred
    joined_only = join_marks("r", None, received=at(6.0))
    assert [m.at for m in inferred_marks(POD, joined_only[0])] == [at(6.0), at(6.0)]


def test_nothing_is_inferred_for_a_warm_node_or_a_node_never_created() -> None:
    warm = [mark(P.WARM_REUSED, 0.1)]
    assert inferred_marks(warm, JOINED[-1]) == []
    assert inferred_marks([mark(P.SLOT_TAKEN, 0.0)], JOINED[-1]) == []


def test_a_rented_nodes_join_publishes_the_inferred_steps_a_local_ones_does_not() -> None:
    for provider, inferred in (("runpod", 2), ("local", 0)):
        driver = _Driver(provider)
        marks = BootMarks(driver)  # type: ignore[arg-type]
        marks.reached(P.INSTANCE_CREATED, "created")
        marks.joined(None)
        assert sum(m.inferred for m in driver.view.boot) == inferred
        assert driver.view.boot[-1].phase is P.AGENT_JOINED


def test_a_run_that_moved_pool_shows_the_boot_of_the_node_it_got() -> None:
    """The first pool's slot and offer, then no capacity: the boot begins again at the
    next pool's slot, and a step the first reached does not end the second's."""
    left = [mark(P.SLOT_TAKEN, 0.0), mark(P.OFFER_CHOSEN, 0.2), mark(P.INSTANCE_CREATED, 0.5)]
    got = [mark(P.SLOT_TAKEN, 2.0), mark(P.OFFER_CHOSEN, 2.5), mark(P.AGENT_JOINED, 9.0)]
    timeline = boot_timeline(T0, [*left, *got])
    assert timeline.step(P.INSTANCE_CREATED).at is None
    assert timeline.step(P.OFFER_CHOSEN).seconds == 0.5 and timeline.total_s == 7.0
    driver = _Driver()
    marks = BootMarks(driver)  # type: ignore[arg-type]
    for m in left:
        driver.publish(m)
    driver.publish(mark(P.AGENT_JOINED, 1.0))  # a node that joined, then failed pre-flight
    driver.publish(mark(P.SLOT_TAKEN, 2.0))
    assert not marks.over
    marks.reached(P.INSTANCE_CREATED, "the next pool's node")
    assert driver.view.boot[-1].detail == "the next pool's node"
