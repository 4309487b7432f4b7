"""Request bodies of the OpenAI-compatible API (pydantic).

Lenient like vLLM's server: a field no model here declares is kept aside
(``model_extra``) and the app ignores it with one logged warning per name
(server/fields.py), or refuses it when the server runs with strict fields.
Declared fields accept ``null`` wherever OpenAI does, meaning "the default".
Fields that would change the output and are not served are declared too,
so :func:`refused_field` can name them in a 400 instead of silently
ignoring them. iterserve's extensions (``top_k``, ``ignore_eos``,
``priority``, ``ttft_ms``, ``tbt_ms``) and vLLM's (``repetition_penalty``,
``min_tokens``, ``stop_token_ids``, ...) are declared, so the OpenAPI
document FastAPI serves is exact.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from iterserve.records.sampling_params import MAX_PENALTY, MAX_TOP_LOGPROBS

MAX_STOP_STRINGS = 4
MAX_STOP_TOKEN_IDS = 64
MAX_N = 16  # parallel samples per prompt
MAX_PROMPTS = 256  # prompts in one batched completion request
MAX_CHOICES = 256  # prompts x n
MaxInt = 2**31 - 1
NonNegInt = Annotated[int, Field(ge=0, le=MaxInt)]
PosInt = Annotated[int, Field(ge=1, le=MaxInt)]
TokenId = Annotated[int, Field(ge=0, le=MaxInt)]
Penalty = Annotated[float, Field(ge=-MAX_PENALTY, le=MAX_PENALTY)]
Text = Annotated[str, Field(max_length=1_000_000)]
StopString = Annotated[str, Field(min_length=1, max_length=256)]


class Body(BaseModel):
    """Every request model: unknown fields kept aside, never an error here."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)


class StreamOptions(Body):
    include_usage: bool | None = None
    continuous_usage_stats: bool | None = None  # vLLM: usage on every chunk


class SamplingFields(Body):
    """Fields shared by both endpoints (OpenAI's, vLLM's and iterserve's)."""

    model: str = Field(min_length=1, max_length=256)
    max_tokens: PosInt | None = None
    max_completion_tokens: PosInt | None = None  # OpenAI's newer name; wins when both are sent
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: NonNegInt | None = None
    stop: StopString | Annotated[list[StopString], Field(max_length=MAX_STOP_STRINGS)] | None = None
    n: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    # vLLM's extensions
    repetition_penalty: Annotated[float, Field(gt=0.0, le=2.0)] | None = None
    min_tokens: NonNegInt | None = None
    stop_token_ids: Annotated[list[TokenId], Field(max_length=MAX_STOP_TOKEN_IDS)] | None = None
    # top_k -1 or 0 means "no top-k" in vLLM's API
    top_k: Annotated[int, Field(ge=-1, le=MaxInt)] | None = None
    ignore_eos: bool | None = None
    # iterserve's extensions
    priority: Annotated[int, Field(ge=-1000, le=1000)] | None = None
    ttft_ms: Annotated[float, Field(gt=0.0, le=1e9)] | None = None
    tbt_ms: Annotated[float, Field(gt=0.0, le=1e9)] | None = None
    # declared so that a value that would change the output is a 400 (refused_field)
    logit_bias: dict[str, float] | None = None
    best_of: Annotated[int, Field(ge=1, le=MAX_N)] | None = None
    min_p: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    use_beam_search: bool | None = None
    include_stop_str_in_output: bool | None = None
    skip_special_tokens: bool | None = None
    prompt_logprobs: NonNegInt | None = None
    response_format: dict[str, Any] | None = None
    guided_json: Any = None
    guided_regex: Any = None
    guided_choice: Any = None
    guided_grammar: Any = None
    structured_outputs: Any = None

    @property
    def num_choices_per_prompt(self) -> int:
        return 1 if self.n is None else self.n

    @property
    def wants_stream(self) -> bool:
        return bool(self.stream)

    @property
    def max_output_tokens(self) -> int | None:
        """``max_completion_tokens`` when sent (guidellm sends both), else ``max_tokens``."""
        return self.max_completion_tokens if self.max_completion_tokens is not None \
            else self.max_tokens


TokenIds = Annotated[list[TokenId], Field(min_length=1, max_length=1_000_000)]


class CompletionRequest(SamplingFields):
    prompt: Text | Annotated[list[Text], Field(min_length=1, max_length=MAX_PROMPTS)] | Annotated[
        list[TokenId], Field(min_length=1, max_length=1_000_000)] | Annotated[
        list[TokenIds], Field(min_length=1, max_length=MAX_PROMPTS)]
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    echo: bool | None = None
    suffix: str | None = None


class ContentPart(Body):
    type: str = Field(min_length=1, max_length=64)
    text: Text | None = None


Role = Literal["system", "developer", "user", "assistant", "tool"]


class ChatMessage(Body):
    role: Role
    content: Text | Annotated[list[ContentPart], Field(max_length=1024)] | None = None
    name: Annotated[str, Field(max_length=256)] | None = None
    tool_call_id: Annotated[str, Field(max_length=256)] | None = None
    tool_calls: list[dict[str, Any]] | None = None


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=1024)]
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    add_generation_prompt: bool | None = None  # vLLM's; default true
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    functions: list[dict[str, Any]] | None = None
    function_call: str | dict[str, Any] | None = None
    chat_template: str | None = None
    continue_final_message: bool | None = None


class TokenizeRequest(Body):
    """vLLM's ``/tokenize``: a prompt, or chat messages rendered by the template."""

    model: str | None = None
    prompt: Text | None = None
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=1024)] | None = None
    add_special_tokens: bool | None = None
    add_generation_prompt: bool | None = None
    return_token_strs: bool | None = None


class DetokenizeRequest(Body):
    model: str | None = None
    tokens: Annotated[list[TokenId], Field(max_length=1_000_000)]


def refused_field(body: SamplingFields) -> tuple[str, str] | None:
    """The first field whose value would change the output in a way this
    server does not serve, with why; None when every field can be honoured."""
    n = body.num_choices_per_prompt
    checks: list[tuple[str, bool, str]] = [
        ("logit_bias", bool(body.logit_bias), "logit_bias is not supported"),
        ("best_of", body.best_of is not None and body.best_of > n,
         "best_of > n (server-side best-of selection) is not supported"),
        ("min_p", bool(body.min_p), "min_p is not supported"),
        ("use_beam_search", bool(body.use_beam_search), "beam search is not supported"),
        ("include_stop_str_in_output", bool(body.include_stop_str_in_output),
         "include_stop_str_in_output is not supported"),
        ("skip_special_tokens", body.skip_special_tokens is False,
         "skip_special_tokens=false is not supported"),
        ("prompt_logprobs", bool(body.prompt_logprobs), "prompt_logprobs is not supported"),
        ("response_format", _is_structured(body.response_format),
         "response_format other than {\"type\": \"text\"} is not supported"),
    ]
    checks.extend((name, getattr(body, name) is not None,
                   f"{name} (structured output) is not supported")
                  for name in ("guided_json", "guided_regex", "guided_choice", "guided_grammar",
                               "structured_outputs"))
    if isinstance(body, CompletionRequest):
        checks.append(("suffix", bool(body.suffix), "suffix (insertion) is not supported"))
        checks.append(("echo", bool(body.echo) and body.logprobs is not None and bool(body.stream),
                       "echo with logprobs is served without streaming only"))
    if isinstance(body, ChatCompletionRequest):
        checks.extend(_chat_checks(body))
    return next(((name, why) for name, bad, why in checks if bad), None)


def _is_structured(response_format: dict[str, Any] | None) -> bool:
    return response_format is not None and response_format.get("type", "text") != "text"


def _chat_checks(body: ChatCompletionRequest) -> list[tuple[str, bool, str]]:
    return [
        ("tools", bool(body.tools) and body.tool_choice != "none",
         "tool calling is not supported (send tool_choice \"none\" or no tools)"),
        ("functions", bool(body.functions) and body.function_call != "none",
         "function calling is not supported"),
        ("tool_choice", isinstance(body.tool_choice, dict) or body.tool_choice == "required",
         "tool calling is not supported"),
        ("top_logprobs", bool(body.top_logprobs) and not body.logprobs,
         "top_logprobs needs logprobs: true"),
        ("chat_template", body.chat_template is not None,
         "a per-request chat_template is not supported (use --chat-template)"),
        ("continue_final_message", bool(body.continue_final_message),
         "continue_final_message is not supported"),
    ]
