"""The demo's script decides each quota start once and holds its second wave for the first,
so what it reports does not depend on the machine's speed or on where a kill cut it short."""

from __future__ import annotations

from pathlib import Path

from runlane import Engine
from runlane.demo import Progress, Story, build_workflows
from runlane.stores import MemoryStore

FIRST_WAVE = {"acme": range(1, 9), "globex": [1, 2]}


def parked_engine() -> Engine:
    """Runs are started and stay active: nothing executes them."""
    return Engine(MemoryStore(), workflows=build_workflows(4.0, lambda _: None), drive=False)


def story_on(engine: Engine, progress: Progress) -> Story:
    return Story(engine, progress, speed=4.0, log=lambda _: None)


async def test_a_burst_asked_again_after_a_kill_counts_each_start_once(tmp_path: Path) -> None:
    path = tmp_path / "progress.json"
    async with parked_engine() as engine:
        progress = Progress()
        await story_on(engine, progress).quota_burst(FIRST_WAVE)
        assert progress.accepted == {"acme": 3, "globex": 2}
        assert progress.refused == {"acme": 5, "globex": 0}
        progress.save(path)

        # killed before the phase was marked done: the rerun asks for the same burst again
        again = Progress.load(path)
        await story_on(engine, again).quota_burst(FIRST_WAVE)
        assert again.accepted == {"acme": 3, "globex": 2}
        assert again.refused == {"acme": 5, "globex": 0}
        assert len(await engine.list_runs(workflow="demo.render_report")) == 5


async def test_the_second_wave_waits_until_the_first_has_drained() -> None:
    async with parked_engine() as engine:
        progress = Progress()
        story = story_on(engine, progress)
        await story.quota_burst(FIRST_WAVE)
        assert await story.second_wave() is False
        await story.advance(elapsed=100.0)  # every phase is due; the second wave is not ready
        assert "quota-wave-2" not in progress.done

        for run in await engine.list_runs(workflow="demo.render_report"):
            if run.input["tenant"] == "acme":
                await engine.cancel(run.id)
        await story.advance(elapsed=100.0)
        assert "quota-wave-2" in progress.done
        assert progress.accepted["acme"] == 6
        assert progress.refused["acme"] == 5
