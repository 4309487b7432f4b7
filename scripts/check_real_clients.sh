#!/usr/bin/env bash
# Real OpenAI clients against `iterserve serve` on the built-in tiny model:
# guidellm 0.8.1 (unpatched; completions and chat, 24 requests at 4 streams
# each) and langchain-openai's OpenAI / ChatOpenAI plus the openai SDK.
# Installs the clients into a scratch venv ($CLIENTS_VENV, default
# /tmp/iterserve-clients-venv), never into the project's. Exit 0 only when
# every client request succeeded.
#
#   bash scripts/check_real_clients.sh [PORT]
set -euo pipefail
cd "$(dirname "$0")/.."
port="${1:-8765}"
venv="${CLIENTS_VENV:-/tmp/iterserve-clients-venv}"
work="$(mktemp -d)"
if [ ! -x "$venv/bin/guidellm" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q "guidellm==0.8.1" "langchain-openai>=1.6"
fi
.venv/bin/iterserve serve --port "$port" --model-cache-dir "$work/cache" > "$work/server.log" 2>&1 &
server=$!
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true' EXIT
for _ in $(seq 120); do
  curl -sf "http://127.0.0.1:$port/health" > /dev/null && break
  sleep 1
done
model_dir="$work/cache/tiny"
model="$(curl -sf "http://127.0.0.1:$port/v1/models" | python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')"
for format in /v1/completions /v1/chat/completions; do
  log="$work/guidellm$(echo "$format" | tr / _).log"
  HF_HUB_OFFLINE=1 "$venv/bin/guidellm" run \
    --backend "kind=openai_http,target=http://127.0.0.1:$port,model=$model,request_format=$format" \
    --profile kind=concurrent,streams=4 \
    --data kind=synthetic_text,prompt_tokens=64,output_tokens=16 \
    --tokenizer "kind=huggingface_auto,model=$model_dir" \
    --constraint kind=max_requests,count=24 \
    --disable-console-interactive > "$log" 2>&1
  summary="$(grep -o 'completed | .*successful=[0-9]* errored=[0-9]*' "$log" | tail -1)"
  echo "guidellm $format: $summary"
  case "$summary" in *"successful=24 errored=0"*) ;; *) echo "FAILED, see $log"; exit 1;; esac
done
"$venv/bin/python" - "$port" "$model" <<'PY'
import sys
import openai
from langchain_openai import ChatOpenAI, OpenAI

base, model = f"http://127.0.0.1:{sys.argv[1]}/v1", sys.argv[2]
assert len(OpenAI(model=model, base_url=base, api_key="x", max_tokens=4).batch(["a", "b"])) == 2
chat = ChatOpenAI(model=model, base_url=base, api_key="x", max_tokens=4)
assert isinstance(chat.invoke("Hello").content, str)
assert len(list(chat.stream("Hello"))) > 1
scored = ChatOpenAI(model=model, base_url=base, api_key="x", max_completion_tokens=4,
                    logprobs=True, top_logprobs=2).invoke([("system", "brief"), ("human", "hi")])
assert scored.response_metadata["logprobs"]["content"][0]["top_logprobs"]
client = openai.OpenAI(base_url=base, api_key="x")
assert client.models.retrieve(model).id == model
reply = client.completions.create(model=model, prompt=["a", "b"], n=2, max_tokens=3, logprobs=2)
assert [c.index for c in reply.choices] == [0, 1, 2, 3]
print("langchain-openai OpenAI/ChatOpenAI and the openai SDK: ok")
PY
