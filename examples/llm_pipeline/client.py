"""Talk to the example LLM pipeline: a streamed completion and a chat over the OpenAI API
(the official `openai` client), then the same prompt over Triton's generate_stream.

    modelyard serve examples/llm_pipeline/model_repository --openai-port 9000
    python examples/llm_pipeline/client.py --openai-url http://127.0.0.1:9000/v1 \
        --http-url 127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import json
import urllib.request

import openai


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--openai-url", default="http://127.0.0.1:9000/v1")
    parser.add_argument("--http-url", default="127.0.0.1:8000")
    parser.add_argument("--api-key", default="none", help="the server's --openai-api-key")
    args = parser.parse_args()

    client = openai.OpenAI(base_url=args.openai_url, api_key=args.api_key)
    print("completion:", end="", flush=True)
    stream = client.completions.create(
        model="llm", prompt="The fox", max_tokens=8, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    for chunk in stream:
        if chunk.choices:
            print(chunk.choices[0].text, end="", flush=True)
            if chunk.choices[0].finish_reason:
                print(f"  [{chunk.choices[0].finish_reason}]", end="")
        if chunk.usage:
            print(f"  usage: {chunk.usage.prompt_tokens} in, {chunk.usage.completion_tokens} out")

    chat = client.chat.completions.create(
        model="llm", messages=[{"role": "user", "content": "Where does the bird sing?"}]
    )
    print("chat:", chat.choices[0].message.content, f"[{chat.choices[0].finish_reason}]")

    body = json.dumps({
        "text_input": "The fox", "stream": True, "exclude_input_in_output": True,
        "sampling_parameters": json.dumps({"max_tokens": 8}),
    }).encode()  # fmt: skip
    request = urllib.request.Request(
        f"http://{args.http_url}/v2/models/llm/generate_stream", data=body, method="POST"
    )
    print("generate_stream:", end="", flush=True)
    with urllib.request.urlopen(request, timeout=60) as response:
        for line in response:
            if line.startswith(b"data: "):
                print(json.loads(line[6:]).get("text_output", ""), end="", flush=True)
    print()


if __name__ == "__main__":
    main()
