"""Request and response bodies of the OpenAI-compatible API (pydantic).

Requests forbid unknown fields, so a typo is a 400 naming the field rather
than a silently ignored knob. iterserve's extensions (``top_k``,
``ignore_eos``, ``priority``, ``ttft_ms``, ``tbt_ms``) are declared here, so
the OpenAPI document FastAPI serves is exact. vLLM's ``repetition_penalty``
is accepted only as 1.0 (no penalty): vLLM's own load tool sends it on every
request.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_STOP_STRINGS = 4
NonNegInt = Annotated[int, Field(ge=0, le=2**31 - 1)]
TokenId = Annotated[int, Field(ge=0, le=2**31 - 1)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class StreamOptions(_Strict):
    include_usage: bool = False


class SamplingFields(_Strict):
    """Fields shared by both endpoints (OpenAI's and iterserve's extensions)."""

    model: str = Field(min_length=1, max_length=256)
    max_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] | None = None
    top_p: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    seed: NonNegInt | None = None
    stop: Annotated[str, Field(min_length=1, max_length=256)] | Annotated[
        list[Annotated[str, Field(min_length=1, max_length=256)]],
        Field(max_length=MAX_STOP_STRINGS)] | None = None
    n: Annotated[int, Field(ge=1, le=1)] = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    # iterserve extensions
    top_k: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    ignore_eos: bool = False
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    ttft_ms: Annotated[float, Field(gt=0.0, le=1e9)] | None = None
    tbt_ms: Annotated[float, Field(gt=0.0, le=1e9)] | None = None
    # vLLM's extension, sent as 1.0 by `vllm bench serve`; only "no penalty" is served
    repetition_penalty: Annotated[float, Field(ge=1.0, le=1.0)] | None = None


class CompletionRequest(SamplingFields):
    prompt: Annotated[str, Field(max_length=1_000_000)] | Annotated[
        list[TokenId], Field(min_length=1, max_length=1_000_000)] | Annotated[
        list[str], Field(min_length=1, max_length=1)]
    logprobs: Annotated[int, Field(ge=0, le=0)] | None = None


class ChatMessage(_Strict):
    role: Literal["system", "user", "assistant"]
    content: Annotated[str, Field(max_length=1_000_000)]


class ChatCompletionRequest(SamplingFields):
    messages: Annotated[list[ChatMessage], Field(min_length=1, max_length=1024)]
    max_completion_tokens: Annotated[int, Field(ge=1, le=2**31 - 1)] | None = None
    logprobs: bool = False


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    finish_reason: str | None = None
    logprobs: CompletionLogprobs | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ChatTokenLogprob(BaseModel):
    token: str
    logprob: float


class ChatLogprobs(BaseModel):
    content: list[ChatTokenLogprob]


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    finish_reason: str | None = None
    logprobs: ChatLogprobs | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "iterserve"
    max_model_len: int


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class Health(BaseModel):
    status: Literal["ok", "draining"]


class Version(BaseModel):
    version: str
