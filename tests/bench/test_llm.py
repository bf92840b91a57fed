"""`modelyard bench --endpoint` (LLM mode) against the example LLM pipeline on a real server,
over generate_stream and the OpenAI API, in both execution modes. The pipeline continues a
fixed story, so every request's tokens are known: the records' counts are checked exactly
(timings only for being there and ordered)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.bench.helpers import BenchRun, bench
from tests.conftest import Serving
from tests.frontends.openai.rawhttp import OPENAI_FLAGS
from tests.helpers import MODES, ROOT
from tests.serverproc import ServerProcess

pytestmark = pytest.mark.timeout(400)

EXAMPLE = ROOT / "examples" / "llm_pipeline" / "model_repository"
ENDPOINTS = ("generate_stream", "openai-completions", "openai-chat")
# "warm den" is near the story's end: 7 tokens, then [EOS] (finish_reason stop)
SHORT_PROMPT, SHORT_TOKENS = "warm den", 7


@pytest.fixture(scope="module", params=MODES)
def server(request: pytest.FixtureRequest, serving: Serving) -> Iterator[ServerProcess]:
    with serving.server(
        EXAMPLE, *OPENAI_FLAGS, mode=request.param, endpoints=("http", "openai")
    ) as srv:
        yield srv


def url(server: ServerProcess, endpoint: str) -> str:
    if endpoint == "generate_stream":
        return server.http_url
    return f"127.0.0.1:{server.ports['openai']}"


def llm_bench(tmp_path: Path, server: ServerProcess, endpoint: str, *args: str) -> BenchRun:
    return bench(
        tmp_path, "llm", "--endpoint", endpoint, "--url", url(server, endpoint),
        "--warmup", "0", "--workers", "1", *args,
    )  # fmt: skip


def check_counts(run: BenchRun, requests: int, tokens_each: list[int]) -> dict[str, object]:
    assert run.returncode == 0, str(run)
    [r] = run.records
    assert r["errors"] == r["warmup_errors"] == r["unanswered"] == 0, r["error_samples"]
    assert r["requests"] == requests
    assert r["output_tokens"] == sum(tokens_each)
    assert r["responses"] == sum(tokens_each)  # one token per event from this pipeline
    assert r["requests_with_tokens"] == requests and r["requests_without_tokens"] == 0
    assert r["output_sequence_length_min"] == min(tokens_each)
    assert r["output_sequence_length_max"] == max(tokens_each)
    assert r["output_token_throughput"] == pytest.approx(
        r["output_tokens"] / r["duration_s"], rel=1e-4
    )
    for prefix in ("ttft", "itl"):
        values = [r[f"{prefix}_{k}_us"] for k in ("min", "p50", "p90", "p99", "max")]
        assert all(v is not None for v in values) and values == sorted(values), values
    assert 0 < r["ttft_min_us"] <= r["min_us"]  # the first token comes before the end
    return r


@pytest.mark.parametrize("endpoint", ENDPOINTS)
def test_counts_tokens_and_requests(server: ServerProcess, endpoint: str, tmp_path: Path) -> None:
    run = llm_bench(
        tmp_path, server, endpoint, "--concurrency", "2", "--requests", "12", "--max-tokens", "5"
    )
    r = check_counts(run, 12, [5] * 12)
    assert r["endpoint"] == endpoint and r["protocol"] == "http" and r["streaming"] is True
    assert r["output_sequence_length_avg"] == 5.0
    assert r["concurrency"] == 2 and r["mode"] == "concurrency"
    assert "TTFT p50" in run.stdout and f"llm over {endpoint}" in run.stdout


def test_prompts_round_robin_and_a_story_that_ends(server: ServerProcess, tmp_path: Path) -> None:
    """Two prompts in turn: one hits --max-tokens, one the story's end (fewer tokens)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(f'{{"text": "The fox"}}\n\n{SHORT_PROMPT}\n')
    run = llm_bench(
        tmp_path, server, "openai-chat", "--prompts-file", str(prompts), "--requests", "10",
        "--max-tokens", "20",
    )  # fmt: skip
    check_counts(run, 10, [20, SHORT_TOKENS] * 5)


def test_request_rate_csv_and_plot(server: ServerProcess, tmp_path: Path) -> None:
    csv_path, png = tmp_path / "llm.csv", tmp_path / "llm.png"
    run = llm_bench(
        tmp_path, server, "generate_stream", "--request-rate", "20", "--duration", "1",
        "--prompt", SHORT_PROMPT, "--max-tokens", "50", "--csv", str(csv_path), "--plot", str(png),
    )  # fmt: skip
    assert run.returncode == 0, str(run)
    [r] = run.records
    assert r["mode"] == "request_rate" and r["requests"] > 0
    assert r["output_tokens"] == SHORT_TOKENS * r["requests"]
    header = csv_path.read_text().splitlines()[0].split(",")
    assert {"endpoint", "output_token_throughput", "ttft_p99_us", "itl_p50_us"} <= set(header)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_setup_errors_are_one_line(server: ServerProcess, tmp_path: Path) -> None:
    run = llm_bench(tmp_path, server, "openai-chat", "--requests", "1")
    assert run.returncode == 0, str(run)
    unknown = bench(tmp_path, "nope", "--endpoint", "openai-completions",
                    "--url", url(server, "openai-chat"), "--requests", "1")  # fmt: skip
    assert unknown.returncode == 2, str(unknown)
    assert "model 'nope' is not served at" in unknown.stderr and "(served: llm)" in unknown.stderr
    # generate_stream needs a text_input input: the generator takes token ids
    ids = bench(tmp_path, "generator", "--endpoint", "generate_stream",
                "--url", server.http_url, "--requests", "1")  # fmt: skip
    assert ids.returncode == 2, str(ids)
    assert "model 'generator' has no 'text_input' input" in ids.stderr
    # the OpenAI endpoints against Triton's HTTP port
    wrong = bench(tmp_path, "llm", "--endpoint", "openai-chat", "--url", server.http_url,
                  "--requests", "1")  # fmt: skip
    assert wrong.returncode == 2 and "/v1/models: HTTP 404" in wrong.stderr, str(wrong)


def test_a_model_error_counts_as_failed_requests(server: ServerProcess, tmp_path: Path) -> None:
    # sampling_parameters that are no JSON: the pipeline answers each request with an error
    run = llm_bench(
        tmp_path, server, "generate_stream", "--requests", "3",
        "--extra-inputs", "sampling_parameters:not json",
    )  # fmt: skip
    assert run.returncode == 1, str(run)
    [r] = run.records
    assert r["errors"] == 3 and r["requests"] == 0
    assert r["error_samples"] and "3x" in r["error_samples"][0]
