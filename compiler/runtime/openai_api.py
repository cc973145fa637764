"""The OpenAI API as `gimletc serve` speaks it: request bodies, OpenAI's error JSON, and text <-> token ids.

`CompletionBody` and `ChatBody` validate a request at the door (pydantic; `validation_error` turns what they
refuse into OpenAI's 400). `ApiError` is any error answered as ``{"error": {"message", "type", "param",
"code"}}``. `Tokens` encodes prompts and stop sequences and decodes what a client sees: the plan's tokenizer in
``DIR/model/`` when there is one, else token ids written as integers. `choice_logprobs` writes a choice's
``logprobs`` field. Nothing here touches the engine; `compiler.runtime.serve` turns bodies into its requests.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from compiler.runtime.engine import Request

#: Choices one HTTP request may ask for (``n`` x prompts): more would starve every other client.
MAX_CHOICES = 64


class StreamOptions(BaseModel):
    include_usage: bool = False


class Body(BaseModel):
    """Fields both endpoints take. Fields of the OpenAI API not listed are ignored, except those in `UNSUPPORTED`,
    which are refused when set to anything but their no-op value."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0, le=1, allow_inf_nan=False)
    n: int = Field(1, ge=1, le=MAX_CHOICES)
    stop: str | list[str] | None = Field(None, max_length=4)
    seed: int | None = Field(None, ge=-(1 << 63), lt=1 << 63)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False


#: OpenAI fields this runtime does not implement, with the value that means "off".
UNSUPPORTED = {"echo": False, "best_of": 1, "suffix": None, "presence_penalty": 0, "frequency_penalty": 0,
               "logit_bias": None, "tools": None, "response_format": None}


class CompletionBody(Body):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(None, ge=0, le=5)


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class ChatBody(Body):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(None, ge=0, le=20)


class ApiError(Exception):
    """An error answered as OpenAI's JSON."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.param, self.code, self.kind = status, param, code, kind

    def response(self):
        from fastapi.responses import JSONResponse

        return JSONResponse({"error": {"message": str(self), "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status)


def validation_error(exc) -> ApiError:
    """OpenAI's 400 for what pydantic refused: the first problem, naming its field."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(x) for x in first.get("loc", ()) if x != "body"]
    if first.get("type") == "json_invalid":
        return ApiError(400, f"the body is not valid JSON ({first.get('ctx', {}).get('error', first['msg'])})")
    field = ".".join(loc) or None
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return ApiError(400, f"{field or 'body'}: {first['msg']}{more}", param=loc[0] if loc else None)


class Tokens:
    """Text <-> ids: the tokenizer in DIR/model/ when present, else token ids written as integers."""

    def __init__(self, root: Path) -> None:
        self.tokenizer = None
        if (root / "model" / "tokenizer.json").is_file() or (root / "model" / "tokenizer_config.json").is_file():
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(root / "model"), local_files_only=True)

    @property
    def chat_template(self) -> bool:
        return self.tokenizer is not None and bool(getattr(self.tokenizer, "chat_template", None))

    def encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, list):
            return prompt
        if self.tokenizer is not None:
            return self.tokenizer.encode(prompt)
        try:
            return [int(t) for t in prompt.replace(",", " ").split()]
        except ValueError:
            raise ApiError(400, "prompt: this plan has no tokenizer in DIR/model/; give token ids (a list of "
                                "integers, or a string of integers separated by spaces)", param="prompt") from None

    def prompts(self, prompt: str | list) -> list[list[int]]:
        """A completion's prompts: one (text or token ids) or a batch (a list of either)."""
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], (str, list)):
            return [self.encode(p) for p in prompt]
        return [self.encode(prompt)]

    def chat(self, messages: list[Message]) -> list[int]:
        if self.chat_template:
            ids = self.tokenizer.apply_chat_template([{"role": m.role, "content": m.text()} for m in messages],
                                                     add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
        if len(messages) > 1:
            raise ApiError(400, f"messages: {len(messages)} messages, but this plan has no tokenizer with a chat "
                                f"template in DIR/model/ to format them; send one message (its content as token ids), "
                                f"or put a tokenizer with a chat_template in the plan's model folder", param="messages")
        return self.encode(messages[0].text())

    def stops(self, stop: str | list[str] | None) -> list:
        """Stop sequences: strings with a tokenizer, else token-id tuples (each string a list of integers)."""
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        if any(not s for s in stops):
            raise ApiError(400, "stop: an empty stop sequence; give non-empty strings", param="stop")
        if self.tokenizer is not None:
            return stops
        try:
            return [tuple(int(t) for t in s.replace(",", " ").split()) or None for s in stops]
        except ValueError:
            raise ApiError(400, "stop: this plan has no tokenizer in DIR/model/; give stop sequences as token ids "
                                "(e.g. \"5\" or \"5 6\")", param="stop") from None

    def piece(self, token: int) -> str:
        return self.tokenizer.decode([token]) if self.tokenizer is not None else f" {token}"

    def decode(self, ids: list[int]) -> str:
        if self.tokenizer is not None:
            return self.tokenizer.decode(ids)
        return "".join(f" {t}" for t in ids)

    def visible(self, tokens: list[int], stops: list, final: bool, *, start: int = 0,
                text: str | None = None) -> tuple[int, str]:
        """The tokens and text a client sees: cut before the first stop sequence; while generating (not `final`),
        also without a tail that could still become one (or, with a tokenizer, an incomplete character).

        `start`: tokens already sent, which hold no start of a stop sequence (they were visible); `text`: the
        text of `tokens` when the caller has it (`Detokenizer`), to save decoding them all again."""
        if self.tokenizer is None:
            cut = next((i for i in range(start, len(tokens)) for s in stops if tuple(tokens[i:i + len(s)]) == s),
                       None)
            if cut is None:
                cut = len(tokens)
                if not final:
                    cut -= max((k for s in stops for k in range(1, len(s)) if tuple(tokens[-k:]) == s[:k]),
                               default=0)
            return cut, self.decode(tokens[:cut])
        text = self.decode(tokens) if text is None else text
        found = [i for i in (text.find(s) for s in stops) if i >= 0]
        if found:
            return len(tokens), text[:min(found)]
        if not final:
            hold = max((k for s in stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
            text = text[:len(text) - hold].rstrip("\ufffd")
        return len(tokens), text

    def stop_check(self, stops: list) -> Callable[[Request], bool]:
        """`Request.stop_check` for `stops`: whether the request's tokens now hold one.

        It runs on the engine's thread after every token, so a new match ends in the newest token and only the
        last tokens need decoding: as many as a stop sequence has UTF-8 bytes (a token carries at least one),
        and two more, so that the window starts before the match (a first token's leading space, a split
        character)."""
        if self.tokenizer is None:
            return lambda r: any(tuple(r.tokens[-len(s):]) == s for s in stops)
        window = max(len(s.encode("utf-8")) for s in stops) + 2

        def check(r: Request) -> bool:
            text = self.decode(r.tokens[-window:])
            return any(s in text for s in stops)

        return check


class Detokenizer:
    """The text of a growing list of tokens, decoding only its last few at each token (as vLLM's incremental
    detokenizer): a new token's text is what decoding it after the previous piece's tokens adds to decoding those
    alone, so that a tokenizer's leading-space rule sees its context; a piece that ends in an incomplete
    character (``\ufffd``) waits for the next token."""

    def __init__(self, tokens: Tokens) -> None:
        self.decode = tokens.decode
        self.text = ""
        self._start = self._read = 0  # the previous piece: tokens[_start:_read]; tokens[_read:] are not in `text`

    def update(self, ids: list[int]) -> str:
        """The text of `ids`, the list given last time with tokens appended."""
        before = self.decode(ids[self._start:self._read])
        after = self.decode(ids[self._start:])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before):]
            self._start, self._read = self._read, len(ids)
        return self.text


def choice_logprobs(tokens: Tokens, req: Request, n_visible: int, chat: bool, start: int = 0) -> dict | None:
    """OpenAI's ``logprobs`` of a choice's tokens ``start .. n_visible`` (chat: ``content`` entries; completions:
    parallel lists), or None when not asked for."""
    if req.logprobs is None:
        return None
    rows = [(req.tokens[i], *req.token_logprobs[i]) for i in range(start, min(n_visible, len(req.token_logprobs)))]
    if chat:
        def entry(token, lp):
            text = tokens.piece(token)
            return {"token": text, "logprob": lp, "bytes": list(text.encode())}

        return {"content": [{**entry(t, lp), "top_logprobs": [entry(a, alp) for a, alp in top]}
                            for t, lp, top in rows], "refusal": None}
    pieces = [tokens.piece(t) for t, _, _ in rows]
    offsets, at = [], 0
    for piece in pieces:
        offsets.append(at)
        at += len(piece)
    return {"tokens": pieces, "token_logprobs": [lp for _, lp, _ in rows],
            "top_logprobs": [{tokens.piece(a): alp for a, alp in top} for _, _, top in rows], "text_offset": offsets}


