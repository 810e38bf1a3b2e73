"""The shared behaviour scenarios (clients/vectors/scenarios.json, SCENARIOS.md), run against
``Client`` and ``AsyncClient``: for each scenario, the fake nodes ``$IDGEN_FAKE_NODES_BIN``
serves, its steps and what each node saw afterwards. One test per scenario and client
(``Scenarios.test_<name>``, ``AsyncScenarios.test_<name>``), so a failure names it.

``IDGEN_FAKE_NODES_BIN`` is the test kit's ``idgen-fake-nodes`` (run_tests.sh sets it; default
``target/debug/idgen-fake-nodes``); the tests FAIL, never skip, when it is missing.
"""

import asyncio
import os
import queue
import subprocess
import tempfile
import threading
import unittest

import _support
from idgen_client import AsyncClient, Client, IdgenError, ServerError

SCENARIOS_FILE = _support.REPO / "clients" / "vectors" / "scenarios.json"
SCENARIOS = _support.load_json("clients/vectors/scenarios.json")["scenarios"]
SCENARIO_TIMEOUT = 20.0  # each scenario, start to `check`
LINE_TIMEOUT = 10.0  # one answer line from the fake nodes


def fake_nodes_bin():
    return os.environ.get("IDGEN_FAKE_NODES_BIN") or str(
        _support.REPO / "target" / "debug" / "idgen-fake-nodes"
    )


def outcome(result):
    """The scenario vocabulary's name for what a call returned or raised: (kind, status)."""
    if isinstance(result, list):
        return "ok", None
    if isinstance(result, (ValueError, TypeError)):
        return "invalid_argument", None
    if isinstance(result, ServerError) and not (
        result.retry_elsewhere or result.closes_connection
    ):
        return "server_error", result.status
    if isinstance(result, IdgenError):
        return "unavailable", None
    return f"unexpected {type(result).__name__}", None


class FakeNodes:
    """One `idgen-fake-nodes SCENARIOS.json NAME` process, driven over stdin/stdout, stopped
    by its PID."""

    def __init__(self, path, name):
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [path, str(SCENARIOS_FILE), name],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            bufsize=1,
        )
        self._lines = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            first = self.line()
            words = first.split()
            if not words or words[0] != "nodes" or len(words) < 2:
                raise AssertionError(f"idgen-fake-nodes printed {first!r}, not `nodes ADDR ...`")
        except BaseException:
            self.stop()
            raise
        self.addrs = words[1:]

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def line(self):
        try:
            line = self._lines.get(timeout=LINE_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"idgen-fake-nodes: no answer in {LINE_TIMEOUT} s") from None
        if line is None:
            self.proc.wait(5)
            self._stderr.seek(0)
            err = self._stderr.read().decode(errors="replace").strip()
            raise AssertionError(
                f"idgen-fake-nodes exited (status {self.proc.returncode}): {err or 'no output'}"
            )
        return line

    def command(self, text):
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return self.line()

    def stop(self):
        try:
            self.proc.stdin.close()
        except OSError:
            pass
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # this test's own process, by its PID
            self.proc.wait(5)
        self._reader.join(5)  # stdout ends with the process
        self.proc.stdout.close()
        self._stderr.close()


async def run_steps(scenario, nodes, next_ids):
    """The scenario's steps, ``next_ids(count)`` (a coroutine) making each call, then the fake
    nodes' ``check``; raises AssertionError naming the step that went wrong."""
    name = scenario["name"]
    for i, step in enumerate(scenario["steps"]):
        if "kill" in step or "revive" in step:
            command = "kill" if "kill" in step else "revive"
            answer = nodes.command(f"{command} {step[command]}")
            if answer != "ok":
                raise AssertionError(f"{name}, step {i}: `{command}` answered {answer!r}")
        elif "sleep_ms" in step:
            await asyncio.sleep(step["sleep_ms"] / 1000.0)
        elif step.get("call") == "next_ids":
            count = step["count"]
            try:
                result = await next_ids(count)
            except Exception as e:  # compared with the expected outcome below
                result = e
            if isinstance(result, list) and len(result) != count:
                raise AssertionError(f"{name}, step {i}: {len(result)} IDs for {count}")
            kind, status = outcome(result)
            want, want_status = step["expect"], step.get("status")
            if kind != want or (want == "server_error" and status != want_status):
                got = result if isinstance(result, list) else f"{type(result).__name__}: {result}"
                raise AssertionError(
                    f"{name}, step {i}: expected {want}"
                    f"{'' if want_status is None else f' {want_status}'}, got {kind}"
                    f"{'' if status is None else f' {status}'} ({got})"
                )
        else:
            raise AssertionError(f"{name}, step {i}: unknown step {step}")
    answer = nodes.command("check")
    if answer != "ok":
        raise AssertionError(f"{name}: {answer}")


def settings(scenario):
    """The client's settings: the scenario's timeouts, everything else the default."""
    given = scenario.get("client", {})
    return {
        "connect_timeout": given.get("connect_timeout_ms", 1000) / 1000.0,
        "timeout": given.get("timeout_ms", 2000) / 1000.0,
    }


async def with_client(scenario, nodes):
    client = Client(nodes.addrs, **settings(scenario))
    try:
        # The calls block this thread's loop, which has nothing else to run.
        async def next_ids(count):
            return client.next_ids(count)

        await run_steps(scenario, nodes, next_ids)
    finally:
        client.close()


async def with_async_client(scenario, nodes):
    client = AsyncClient(nodes.addrs, **settings(scenario))
    try:
        await run_steps(scenario, nodes, client.next_ids)
    finally:
        await client.aclose()


class Scenarios(unittest.TestCase):
    """Every scenario against ``Client``."""

    runner = staticmethod(with_client)

    def test_the_scenarios_are_there(self):
        names = [s["name"] for s in SCENARIOS]
        self.assertGreaterEqual(len(names), 19, names)
        self.assertEqual(len(names), len(set(names)), "scenario names are unique")

    def run_named(self, scenario):
        path = fake_nodes_bin()
        if not (os.path.isfile(path) and os.access(path, os.X_OK)):
            self.fail(
                f"idgen-fake-nodes not found at {path}: build it with `cargo build -p "
                "idgen-testkit --bin idgen-fake-nodes` or set IDGEN_FAKE_NODES_BIN"
            )
        nodes = FakeNodes(path, scenario["name"])
        failure = []

        def body():
            try:
                asyncio.run(self.runner(scenario, nodes))
            except BaseException as e:  # reported by the test thread
                failure.append(e)

        worker = threading.Thread(target=body, daemon=True, name=f"scenario {scenario['name']}")
        try:
            worker.start()
            worker.join(SCENARIO_TIMEOUT)
            if worker.is_alive():
                self.fail(f"{scenario['name']}: took over {SCENARIO_TIMEOUT:g} s")
            if failure:
                if isinstance(failure[0], AssertionError):
                    self.fail(str(failure[0]))
                raise failure[0]
        finally:
            nodes.stop()


class AsyncScenarios(Scenarios):
    """Every scenario against ``AsyncClient``."""

    runner = staticmethod(with_async_client)


def _add(cls, scenario):
    def test(self):
        self.run_named(scenario)

    test.__name__ = f"test_{scenario['name']}"
    test.__doc__ = scenario.get("doc")
    setattr(cls, test.__name__, test)


for _scenario in SCENARIOS:
    _add(Scenarios, _scenario)
    _add(AsyncScenarios, _scenario)


if __name__ == "__main__":
    unittest.main()
