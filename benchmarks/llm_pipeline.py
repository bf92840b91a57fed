"""The example LLM pipeline (examples/llm_pipeline) streaming tokens: time to first token and
inter-token latency on modelyard (both execution modes; generate_stream and the OpenAI API)
and on the reference Triton 2.51 (generate_stream), measured by ``modelyard bench --endpoint``
with every server running, the servers alternating cell by cell, round after round.

The example cannot run unchanged on Triton 2.51, for two reasons of its Python backend:
``async_exec(decoupled=True)`` returns a plain ``ResponseIterator`` there (``async for``
fails: iterate it with ``for``), and responses carry no parameters before Triton 25.02
(``InferenceResponse(parameters=...)`` and ``.parameters()``, which the example uses for
``finish_reason``). So the repository every server loads holds the example unchanged plus
``llm_compat`` and ``generator_compat``, made from it with only those lines changed (a sync
``for``, no finish reason: the generator ends with a flag-only final response). The compat
pipeline is what the three servers are compared on; the example's own ``llm`` is measured on
modelyard too.

The reference's Python needs ``tokenizers`` (the example's tokenizer models): when the shared
reference virtualenv lacks it, this script makes its own reference home beside it
(``~/.cache/modelyard-reference-llm``: the same Triton, a virtualenv with numpy 1.26 and
tokenizers) and leaves the shared one as it is.

    python benchmarks/llm_pipeline.py --rounds 5
    python benchmarks/llm_pipeline.py --rounds 1 --requests 10 --servers process,triton
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from startup import _get, _stop, modelyard_cmd, triton_cmd  # noqa: E402
from tests.reference import free_ports, reference_home  # noqa: E402

EXAMPLE = HERE.parent / "examples" / "llm_pipeline" / "model_repository"
READY_S = 180.0
IN_PROCESS = ["--backend-config", "python,execution-mode=in-process"]
SERVERS = ("process", "in-process", "triton")
MODELS = ("tokenizer", "detokenizer", "generator", "llm", "generator_compat", "llm_compat")
# (endpoint, model) measured on each server; Triton has no OpenAI frontend for these models
CELLS: dict[str, tuple[tuple[str, str], ...]] = {
    "process": (
        ("generate_stream", "llm_compat"),
        ("generate_stream", "llm"),
        ("openai-completions", "llm"),
        ("openai-chat", "llm"),
    ),
    "triton": (("generate_stream", "llm_compat"),),
}
CELLS["in-process"] = CELLS["process"]
# Only these lines differ between the example and its compat copy (see the docstring).
GENERATOR_FINAL = """            sender.send(
                pb_utils.InferenceResponse([], parameters={"finish_reason": reason}),
                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
            )"""
GENERATOR_FLAG_ONLY = "            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)"
LLM_EDITS = (
    ('model_name="generator"', 'model_name="generator_compat"'),
    ("async for response in await generate.async_exec(decoupled=True):",
     "for response in await generate.async_exec(decoupled=True):"),
    ('            finish = json.loads(response.parameters() or "{}").get("finish_reason", finish)\n',
     ""),
    ("return pb_utils.InferenceResponse(outputs, parameters=parameters or {})",
     "return pb_utils.InferenceResponse(outputs)"),
)  # fmt: skip


def _edit(text: str, old: str, new: str, what: str) -> str:
    if text.count(old) != 1:
        raise SystemExit(f"the example changed: cannot make {what} (no single '{old.strip()}')")
    return text.replace(old, new)


def build_repository(root: Path) -> Path:
    """The example's models and their Triton-2.51 copies ``generator_compat``, ``llm_compat``."""
    repo = root / "repo"
    shutil.copytree(EXAMPLE, repo, ignore=shutil.ignore_patterns("__pycache__"))
    for name, edits in (
        ("generator", ((GENERATOR_FINAL, GENERATOR_FLAG_ONLY),)),
        ("llm", LLM_EDITS),
    ):
        compat = repo / f"{name}_compat"
        (compat / "1").mkdir(parents=True)
        config = (repo / name / "config.pbtxt").read_text()
        (compat / "config.pbtxt").write_text(
            _edit(config, f'name: "{name}"', f'name: "{name}_compat"', f"{name}_compat")
        )
        code = (repo / name / "1" / "model.py").read_text()
        for old, new in edits:
            code = _edit(code, old, new, f"{name}_compat")
        (compat / "1" / "model.py").write_text(code)
    return repo


def llm_reference_home() -> Path:
    """A reference home whose Python has tokenizers (the shared one, or one made beside it)."""
    shared = reference_home()
    check = [str(shared / "venv" / "bin" / "python"), "-c", "import tokenizers"]
    if subprocess.run(check, capture_output=True).returncode == 0:
        return shared
    home = shared.parent / "modelyard-reference-llm"
    python = home / "venv" / "bin" / "python"
    ready = (
        python.exists() and not subprocess.run([str(python), "-c", "import tokenizers"]).returncode
    )
    if not ready:
        print(f"the reference's Python lacks tokenizers: making {home}", flush=True)
        home.mkdir(parents=True, exist_ok=True)
        if not (home / "wheel").exists():
            (home / "wheel").symlink_to(shared / "wheel")
        subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
        pip = [str(home / "venv" / "bin" / "pip"), "install", "-q"]
        subprocess.run([*pip, "numpy==1.26.4", "tokenizers"], check=True)
    return home


class Server:
    def __init__(self, kind: str, repo: Path) -> None:
        self.kind = kind
        load = ["--model-control-mode=explicit", *(f"--load-model={m}" for m in MODELS)]
        self.openai = 0
        if kind == "triton":
            cmd, env, self.http = triton_cmd(repo, load)
            env["REF_HOME"] = str(llm_reference_home())
        else:
            (self.openai,) = free_ports(1)
            extra = [*load, "--openai-port", str(self.openai), "--openai-address", "127.0.0.1"]
            cmd, env, self.http = modelyard_cmd(
                repo, extra + (IN_PROCESS if kind == "in-process" else [])
            )
        self.proc = subprocess.Popen(
            cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )  # fmt: skip
        deadline = time.monotonic() + READY_S
        while any(_get(self.http, f"/v2/models/{m}/ready")[0] != 200 for m in MODELS):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"{kind} did not get ready with {', '.join(MODELS)}")
            time.sleep(0.3)

    def url(self, endpoint: str) -> str:
        return f"127.0.0.1:{self.openai if endpoint.startswith('openai-') else self.http}"

    def stop(self) -> None:
        _stop(self.proc)


def bench(
    server: Server, endpoint: str, model: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """One ``modelyard bench`` run: its records, one per concurrency (none when requests
    failed: bench's output is printed and the cell left out of the round)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            sys.executable, "-m", "modelyard", "bench", model, "--endpoint", endpoint,
            "--url", server.url(endpoint), "--concurrency", args.concurrency,
            "--requests", str(args.requests), "--warmup", "0.5", "--workers", "1",
            "--prompt", args.prompt, "--max-tokens", str(args.max_tokens),
            "--json", out.name, "--no-progress",
        ]  # fmt: skip
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode:
            print(f"{server.kind} {endpoint} {model}: bench failed, left out of this round:",
                  run.stdout, run.stderr, sep="\n", flush=True)  # fmt: skip
            return []
        records: list[dict[str, Any]] = json.loads(Path(out.name).read_text())
    return records


# what each table cell reads from a record
METRICS = (
    ("TTFT p50 ms", lambda r: r["ttft_p50_us"] / 1000),
    ("TTFT p90 ms", lambda r: r["ttft_p90_us"] / 1000),
    ("ITL p50 ms", lambda r: r["itl_p50_us"] / 1000),
    ("ITL p90 ms", lambda r: r["itl_p90_us"] / 1000),
    ("request p50 ms", lambda r: r["p50_us"] / 1000),
    ("tokens/s", lambda r: r["output_token_throughput"]),
)


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main() -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument(
        "--requests", type=int, default=40, help="measured requests per cell and concurrency"
    )
    p.add_argument("--concurrency", default="1:4:3", help="bench's --concurrency (default 1 and 4)")
    p.add_argument(
        "--prompt", default="The fox", help="the prompt (the story goes on past 64 tokens)"
    )
    p.add_argument("--max-tokens", type=int, default=32)
    p.add_argument("--servers", default=",".join(SERVERS), help="subset, in alternating order")
    p.add_argument("--json", default=None, metavar="FILE", help="every sample, as JSON")
    args = p.parse_args()
    order = [s for s in args.servers.split(",") if s]
    print(f"load average at start: {load_average()}", flush=True)
    samples: dict[tuple[str, str, str, int, str], list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="llm-bench-") as tmp:
        repo = build_repository(Path(tmp))
        servers: list[Server] = []
        try:
            for kind in order:
                servers.append(Server(kind, repo))
            for round_no in range(1, args.rounds + 1):
                for server in servers:
                    for endpoint, model in CELLS[server.kind]:
                        for r in bench(server, endpoint, model, args):
                            for label, get in METRICS:
                                key = (server.kind, endpoint, model, r["concurrency"], label)
                                samples.setdefault(key, []).append(get(r))
                            print(f"round {round_no} {server.kind:10s} {endpoint:18s} {model:10s} "
                                  f"c={r['concurrency']} TTFT p50 {r['ttft_p50_us'] / 1000:7.2f} ms "
                                  f"ITL p50 {r['itl_p50_us'] / 1000:6.2f} ms", flush=True)  # fmt: skip
        finally:
            for server in servers:
                server.stop()
    print(f"load average at end: {load_average()}\n")
    rows = sorted({k[:4] for k in samples}, key=lambda k: (k[3], order.index(k[0]), k[1], k[2]))
    labels = [label for label, _ in METRICS]
    print("| server | endpoint | model | c | " + " | ".join(labels) + " |")
    print("|---" * (4 + len(labels)) + "|")
    for kind, endpoint, model, c in rows:
        cells = [statistics.median(samples[(kind, endpoint, model, c, label)]) for label in labels]
        name = "Triton 2.51" if kind == "triton" else f"modelyard {kind}"
        print(
            f"| {name} | {endpoint} | {model} | {c} | "
            + " | ".join(f"{v:.2f}" for v in cells)
            + " |"
        )
    if args.json:
        Path(args.json).write_text(json.dumps([[*k, v] for k, v in samples.items()], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
