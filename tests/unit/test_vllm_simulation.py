"""The simulated vLLM server: same families, types, labels and buckets as the real capture; scripted truth."""

from __future__ import annotations

import re
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from otel_bridge.prometheus.exposition import ExpositionFamily, parse_exposition
from otel_bridge.tools.simulation import (
    MetricsHTTPServer,
    SimulatedWorkload,
    VLLMServer,
    VLLMSimulator,
    vllm_family_specs,
)

CAPTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "vllm"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def capture() -> str:
    path = CAPTURE_DIR / "metrics-after-requests.txt"
    if not path.is_file():
        pytest.fail(f"the real vLLM captures are missing from {CAPTURE_DIR}")
    return path.read_text(encoding="utf-8")


@pytest.fixture
def sim() -> VLLMSimulator:
    return VLLMSimulator(model_name="tiny", engine="0")


@pytest.fixture
def server(sim: VLLMSimulator) -> Iterator[MetricsHTTPServer]:
    server = MetricsHTTPServer(sim.exposition)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def scrape(server: MetricsHTTPServer) -> str:
    response = requests.get(server.url, timeout=10)
    response.raise_for_status()
    return response.text


def raw_structure(text: str) -> tuple[set[tuple[str, str]], dict[str, set[frozenset[str]]]]:
    """Independent of the parser: the `vllm:` (TYPE name, type) pairs and, per sample name, its label-name sets."""
    types = set(re.findall(r"^# TYPE (vllm:\S+) (\S+)$", text, re.MULTILINE))
    labels: dict[str, set[frozenset[str]]] = {}
    for name, block in re.findall(r"^(vllm:[^{ ]+)(?:\{(.*)\})? \S+$", text, re.MULTILINE):
        labels.setdefault(name, set()).add(frozenset(re.findall(r'(\w+)="', block)))
    return types, labels


def label_values(text: str, label: str) -> dict[str, list[str]]:
    """Per `vllm:` sample name, the values of ``label`` in order of appearance."""
    values: dict[str, list[str]] = {}
    for name, value in re.findall(rf'^(vllm:[^{{ ]+)\{{.*\b{label}="([^"]*)"', text, re.MULTILINE):
        values.setdefault(name, []).append(value)
    return values


def series(families: dict[str, ExpositionFamily], name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``."""
    family_name = re.sub(r"_(bucket|count|sum)$", "", name)
    matches = [
        s.value
        for s in families[family_name].samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (name, labels, matches)
    return matches[0]


def run_request(sim: VLLMSimulator, **overrides: object) -> None:
    args: dict[str, object] = {
        "prompt_tokens": 7,
        "generation_tokens": 16,
        "ttft_s": 0.03,
        "e2e_s": 0.2,
        "queue_s": 0.01,
        "itl_s": 0.01,
    }
    args.update(overrides)
    sim.complete_request(**args)  # type: ignore[arg-type]


# --- same metric surface as the real vLLM 0.32 -------------------------------------------------------------


def test_families_types_and_label_names_equal_the_capture(server: MetricsHTTPServer, capture: str) -> None:
    served = scrape(server)
    assert raw_structure(served) == raw_structure(capture)
    ours = {(n, f.kind) for n, f in parse_exposition(served).items() if n.startswith("vllm:")}
    real = {(n, f.kind) for n, f in parse_exposition(capture).items() if n.startswith("vllm:")}
    assert ours == real
    assert len(ours) == 39


def test_fixed_label_values_and_cache_config_equal_the_capture(server: MetricsHTTPServer, capture: str) -> None:
    served = scrape(server)
    for label in ("finished_reason", "source", "reason", "sleep_state", "model_name", "engine"):
        assert label_values(served, label) == label_values(capture, label), label
    families = parse_exposition(served, ["vllm:cache_config_info", "vllm:engine_sleep_state"])
    real = parse_exposition(capture, ["vllm:cache_config_info", "vllm:engine_sleep_state"])
    assert families == real


def test_histogram_bucket_bounds_equal_the_capture(server: MetricsHTTPServer, capture: str) -> None:
    def bounds(text: str) -> dict[str, list[str]]:
        return {
            name: [s.labels["le"] for s in family.samples if s.name.endswith("_bucket")]
            for name, family in parse_exposition(text).items()
            if family.kind == "histogram" and name.startswith("vllm:")
        }

    ours, real = bounds(scrape(server)), bounds(capture)
    assert ours == real
    assert len(ours) == 16
    assert ours["vllm:time_to_first_token_seconds"][0] == "0.001"
    table = {spec.name: [*spec.buckets, float("inf")] for spec in vllm_family_specs() if spec.kind == "histogram"}
    assert {name: [float(le) for le in les] for name, les in ours.items()} == table


def test_a_fresh_simulator_serves_the_before_requests_capture_byte_for_byte_on_vllm_lines(
    server: MetricsHTTPServer, capture: str
) -> None:
    before = (CAPTURE_DIR / "metrics-before-requests.txt").read_text(encoding="utf-8")

    def vllm_lines(text: str) -> list[str]:
        return [
            line
            for line in text.splitlines()
            if "vllm:" in line and "_created" not in line.split(" ")[0 if line[0] != "#" else 2]
        ]

    assert vllm_lines(scrape(server)) == vllm_lines(before)


# --- the scripted truth ------------------------------------------------------------------------------------


def test_complete_request_adds_exactly_what_it_was_given(sim: VLLMSimulator, server: MetricsHTTPServer) -> None:
    before = parse_exposition(scrape(server))
    itls = [0.01] * 10 + [0.02] * 5
    run_request(sim, prompt_tokens=40, cached_prompt_tokens=32, itl_s=itls, finished_reason="stop", max_tokens=64)
    after = parse_exposition(scrape(server))

    def delta(name: str, **labels: str) -> float:
        return series(after, name, **labels) - series(before, name, **labels)

    assert delta("vllm:prompt_tokens_total") == 40
    assert delta("vllm:generation_tokens_total") == 16
    assert delta("vllm:request_success_total", finished_reason="stop") == 1
    assert delta("vllm:request_success_total", finished_reason="length") == 0
    assert delta("vllm:prefix_cache_queries_total") == 40
    assert delta("vllm:prefix_cache_hits_total") == 32
    assert delta("vllm:prompt_tokens_cached_total") == 32
    assert delta("vllm:prompt_tokens_by_source_total", source="local_compute") == 8
    assert delta("vllm:prompt_tokens_by_source_total", source="local_cache_hit") == 32
    assert delta("vllm:inter_token_latency_seconds_count") == 15
    assert delta("vllm:inter_token_latency_seconds_sum") == pytest.approx(0.2)
    assert delta("vllm:request_decode_time_seconds_sum") == pytest.approx(0.2)
    assert delta("vllm:request_prefill_time_seconds_sum") == pytest.approx(0.02)
    assert delta("vllm:request_inference_time_seconds_sum") == pytest.approx(0.22)
    assert delta("vllm:request_time_per_output_token_seconds_sum") == pytest.approx(0.2 / 15)
    assert delta("vllm:time_to_first_token_seconds_sum") == pytest.approx(0.03)
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.04") == 1
    assert delta("vllm:time_to_first_token_seconds_bucket", le="0.02") == 0
    assert delta("vllm:e2e_request_latency_seconds_count") == 1
    assert delta("vllm:request_queue_time_seconds_sum") == pytest.approx(0.01)
    assert delta("vllm:request_params_max_tokens_sum") == 64
    assert delta("vllm:request_prefill_kv_computed_tokens_sum") == 8
    assert delta("vllm:iteration_tokens_total_sum") == 8 + 16
    assert delta("vllm:iteration_tokens_total_count") == 16


def test_totals_track_the_script_and_agree_with_the_exposition(sim: VLLMSimulator) -> None:
    for prompt in (3, 5, 11):
        run_request(sim, prompt_tokens=prompt, generation_tokens=4, itl_s=[0.01, 0.02, 0.03])
    sim.preempt(2)
    totals = sim.totals()
    assert totals["vllm:prompt_tokens_total"] == 19
    assert totals["vllm:generation_tokens_total"] == 12
    assert totals["vllm:request_success_total"] == 3
    assert totals["vllm:num_preemptions_total"] == 2
    assert totals["vllm:time_to_first_token_seconds_count"] == 3
    assert totals["vllm:inter_token_latency_seconds_sum"] == pytest.approx(0.18)
    families = parse_exposition(sim.exposition().decode())
    flat: dict[str, float] = {}
    for family in families.values():
        for sample in family.samples:
            flat[sample.name] = flat.get(sample.name, 0.0) + sample.value
    assert {name: flat[name] for name in totals} == totals


def test_the_capture_script_reproduces_the_real_token_counters(sim: VLLMSimulator, capture: str) -> None:
    # The capture: 20 completions with max_tokens 16 and 126 prompt tokens (6 of <= 5 tokens, all <= 10).
    for prompt in [5] * 6 + [7] * 12 + [6] * 2:
        run_request(sim, prompt_tokens=prompt, generation_tokens=16, max_tokens=16, finished_reason="length")
    ours, real = parse_exposition(sim.exposition().decode()), parse_exposition(capture)
    for name in (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_success_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prompt_tokens_by_source_total",
        "vllm:request_prompt_tokens",
        "vllm:request_generation_tokens",
        "vllm:request_params_max_tokens",
        "vllm:request_max_num_generation_tokens",
        "vllm:request_params_n",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_num_preemptions",
    ):
        assert ours[name] == real[name], name
    assert series(ours, "vllm:iteration_tokens_total_sum") == series(real, "vllm:iteration_tokens_total_sum")
    assert series(ours, "vllm:inter_token_latency_seconds_count") == 300


def test_gauges_follow_the_setters(sim: VLLMSimulator) -> None:
    sim.set_running(3)
    sim.set_waiting(2)
    sim.set_kv_cache_usage(0.25)
    families = parse_exposition(sim.exposition().decode())
    assert series(families, "vllm:num_requests_running") == 3
    assert series(families, "vllm:num_requests_waiting") == 2
    assert series(families, "vllm:num_requests_waiting_by_reason", reason="capacity") == 2
    assert series(families, "vllm:num_requests_waiting_by_reason", reason="deferred") == 0
    assert series(families, "vllm:kv_cache_usage_perc") == 0.25


def test_restart_resets_counters_histograms_and_gauges(sim: VLLMSimulator, server: MetricsHTTPServer) -> None:
    run_request(sim)
    sim.preempt()
    sim.set_running(4)
    assert sim.totals()["vllm:generation_tokens_total"] == 16
    sim.restart()
    assert set(sim.totals().values()) == {0.0}
    families = parse_exposition(scrape(server))
    assert series(families, "vllm:num_requests_running") == 0
    assert series(families, "vllm:engine_sleep_state", sleep_state="awake") == 1
    assert series(families, "vllm:cache_config_info") == 1
    assert series(families, "vllm:time_to_first_token_seconds_count") == 0
    run_request(sim, generation_tokens=2, itl_s=0.01)
    assert sim.totals()["vllm:generation_tokens_total"] == 2


def test_a_restarted_server_refuses_connections_then_counts_from_zero_with_a_new_start(sim: VLLMSimulator) -> None:
    def created(text: str) -> float:  # the parser drops _created gauges: read the line itself
        match = re.search(r"^vllm:generation_tokens_created\{[^}]*\} (\S+)$", text, re.MULTILINE)
        assert match is not None
        return float(match.group(1))

    with VLLMServer(sim) as server:
        run_request(sim)
        text = requests.get(server.url, timeout=10).text
        started = series(parse_exposition(text), "process_start_time_seconds")
        created_before = created(text)
        assert started == sim.started
        server.go_down()
        assert not server.up
        with pytest.raises(requests.ConnectionError):
            requests.get(server.url, timeout=10)
        time.sleep(0.01)  # a new process starts later
        assert server.come_up() > started
        text = requests.get(server.url, timeout=10).text
    after = parse_exposition(text)
    assert series(after, "vllm:generation_tokens_total") == 0
    assert series(after, "process_start_time_seconds") == sim.started > started
    assert created(text) > created_before


def test_the_server_process_restarts_on_sighup_after_its_down_time() -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_bridge.tools.simulation.vllm",
            "--restart-down-s",
            "0.5",
            "--workload",
            "--rps",
            "50",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().split()[1]
        first = parse_exposition(requests.get(url, timeout=10).text)
        process.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        refused = False
        while time.monotonic() < deadline:
            try:
                page = parse_exposition(requests.get(url, timeout=10).text)
            except requests.ConnectionError:
                refused = True
                time.sleep(0.05)
                continue
            if refused:
                break
            time.sleep(0.01)
        else:
            pytest.fail("the server was not down, then up again, within 10 s of SIGHUP")
        assert series(page, "process_start_time_seconds") > series(first, "process_start_time_seconds")
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"finished_reason": "done"}, "finished_reason"),
        ({"cached_prompt_tokens": 8}, "cached_prompt_tokens"),
        ({"itl_s": [0.01, 0.02]}, "15 gaps"),
        ({"ttft_s": -1.0}, ">= 0"),
        ({"prompt_tokens": -1}, ">= 0"),
        ({"max_tokens": 8}, "max_tokens"),
    ],
)
def test_impossible_requests_are_rejected(sim: VLLMSimulator, overrides: dict[str, object], fragment: str) -> None:
    with pytest.raises(ValueError, match=re.escape(fragment)):
        run_request(sim, **overrides)
    assert sim.totals()["vllm:request_success_total"] == 0


def test_concurrent_requests_are_all_counted(sim: VLLMSimulator, server: MetricsHTTPServer) -> None:
    def worker() -> None:
        for _ in range(50):
            run_request(sim, generation_tokens=3, itl_s=0.01)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for _ in range(5):
        parse_exposition(scrape(server))  # scrapes during the updates see consistent text
    for thread in threads:
        thread.join()
    assert sim.totals()["vllm:request_success_total"] == 200
    assert sim.totals()["vllm:generation_tokens_total"] == 600


# --- workload ----------------------------------------------------------------------------------------------


def test_workload_steps_are_determined_by_the_seed() -> None:
    runs = []
    for seed in (7, 7, 8):
        sim = VLLMSimulator()
        workload = SimulatedWorkload(sim, rng_seed=seed, requests_per_s=1.0)
        for _ in range(5):
            workload.step()
        runs.append(sim.totals())
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert runs[0]["vllm:request_success_total"] == 5


def test_workload_thread_drives_the_simulator_until_stopped(sim: VLLMSimulator) -> None:
    workload = SimulatedWorkload(sim, rng_seed=1, requests_per_s=200.0)
    workload.start()
    try:
        deadline = time.monotonic() + 30
        while workload.requests < 5 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        workload.stop()
    assert workload.requests >= 5
    assert sim.totals()["vllm:request_success_total"] == workload.requests
    # stop() returned only after its thread ended: nothing drives the simulator any more
    assert not [t for t in threading.enumerate() if t.name == "vllm-sim-workload"]
    workload.stop()  # idempotent
    assert sim.totals()["vllm:request_success_total"] == workload.requests


# --- HTTP server -------------------------------------------------------------------------------------------


def test_http_server_content_type_404_and_restart_on_the_same_port(server: MetricsHTTPServer) -> None:
    response = requests.get(server.url, timeout=10)
    assert response.status_code == 200
    assert response.headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    assert requests.get(server.url.replace("/metrics", "/other"), timeout=10).status_code == 404
    assert requests.get(server.url + "?x=1", timeout=10).status_code == 200
    url = server.url
    server.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(url, timeout=10)
    server.start()
    assert server.url == url
    assert requests.get(url, timeout=10).status_code == 200


def test_http_server_answers_500_when_rendering_fails() -> None:
    def broken() -> bytes:
        raise RuntimeError("boom")

    with MetricsHTTPServer(broken) as server:
        assert requests.get(server.url, timeout=10).status_code == 500


def test_http_server_is_quiet_when_a_client_goes_away_mid_answer(capfd: pytest.CaptureFixture[str]) -> None:
    """A scraper that hangs up before the answer (a timed-out Prometheus scrape, a scrape process that exits) is
    routine for a server: no traceback on stderr (the demo printed one per such scrape), and it keeps serving."""
    gone = threading.Event()
    answered = threading.Event()

    def render() -> bytes:
        gone.wait(10)  # answer only once the client has reset the connection
        answered.set()
        return b"x" * 1_000_000

    with MetricsHTTPServer(render) as server:
        client = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        client.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        client.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close with a reset
        client.close()
        gone.set()
        assert answered.wait(10)
        time.sleep(0.3)  # the handler's write fails now
        assert requests.get(server.url, timeout=10).status_code == 200
    assert capfd.readouterr().err == ""


def test_module_runs_as_a_separate_process_printing_one_line() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "otel_bridge.tools.simulation.vllm", "--port", "0", "--model", "m1", "--workload"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.fullmatch(r"serving (http://127\.0\.0\.1:\d+/metrics)\n", line)
        assert match, line
        text = requests.get(match.group(1), timeout=10).text
        assert 'vllm:generation_tokens_total{engine="0",model_name="m1"}' in text
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
        assert out == ""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


def test_sleep_and_wake_up_over_vllms_dev_api_set_the_engine_sleep_state_as_vllm_does() -> None:
    """Issue 39: ``vllm:engine_sleep_state{sleep_state}`` (vllm/v1/metrics/loggers.py ``record_sleep_state``): awake 1
    while awake; asleep, awake 0 and weights_offloaded (level 1) or discard_all (level 2) 1; driven through vLLM's
    ``POST /sleep?level=N``, ``POST /wake_up`` and ``GET /is_sleeping``."""
    with VLLMServer(VLLMSimulator(model_name="tiny")) as server:
        base = server.url.removesuffix("/metrics")

        def states() -> dict[str, float]:
            families = parse_exposition(requests.get(server.url, timeout=10).text)
            names = ("awake", "weights_offloaded", "discard_all")
            return {s: series(families, "vllm:engine_sleep_state", sleep_state=s) for s in names}

        assert states() == {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
        assert requests.get(f"{base}/is_sleeping", timeout=10).json() == {"is_sleeping": False}
        assert requests.post(f"{base}/sleep?level=1", timeout=10).status_code == 200
        assert states() == {"awake": 0, "weights_offloaded": 1, "discard_all": 0}
        assert requests.get(f"{base}/is_sleeping", timeout=10).json() == {"is_sleeping": True}
        assert requests.post(f"{base}/sleep?level=2", timeout=10).status_code == 200
        assert states() == {"awake": 0, "weights_offloaded": 0, "discard_all": 1}
        assert requests.post(f"{base}/sleep?level=3", timeout=10).status_code == 400
        assert requests.post(f"{base}/wake_up", timeout=10).status_code == 200
        assert states() == {"awake": 1, "weights_offloaded": 0, "discard_all": 0}
        assert server.sim.sleeping is False
        server.sim.sleep()
        server.sim.restart()  # a new process starts awake
        assert server.sim.sleeping is False
        assert states()["awake"] == 1
