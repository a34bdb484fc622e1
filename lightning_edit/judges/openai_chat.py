"""An LLM judge behind an OpenAI-compatible chat-completions endpoint (OpenAI, DeepSeek, vLLM, ...).

Requests go through the ``openai`` client: ``timeout`` seconds each, retried ``max_retries`` times with exponential
backoff (the client's: 0.5 s doubling, up to 8 s, or the server's ``Retry-After``) on 408, 409, 429, 5xx, timeouts
and connection errors; at most ``concurrency`` at a time. A request that still fails, or whose response is not a
chat completion, is a missing verdict, counted as failed, and not cached (a rerun asks again). SIGTERM stops the
requests at once: the verdicts already given are cached, the others are failed ones, and the run stops.

The API key is read from the environment variable ``api_key_env`` when the client is made; it is never stored in
the judge's settings, the cache, results or logs, and where an endpoint echoes it (in an error, in a reply) it is
masked before the text is logged or cached (:func:`~lightning_edit.redaction.mask`). The judge's identity (cache key)
is its model and template and parameters, not the endpoint: the same model behind another URL reuses the verdicts.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from typing import TYPE_CHECKING, Any

from lightning_edit.errors import ConfigError, require
from lightning_edit.judges.base import Scale
from lightning_edit.judges.llm import LLMJudge
from lightning_edit.redaction import add_secrets, mask, secret_field
from lightning_edit.stopping import stop_requested

if TYPE_CHECKING:
    import openai

log = logging.getLogger(__name__)


class OpenAIChatJudge(LLMJudge):
    """An LLM judge served by an OpenAI-compatible ``/chat/completions`` endpoint.

    Args:
        model: the model name the endpoint serves (``gpt-4o-2024-11-20``, ``deepseek-chat``).
        base_url: the endpoint (None: OpenAI's), e.g. ``https://api.deepseek.com``.
        api_key_env: the environment variable that holds the API key.
        timeout: seconds per request.
        max_retries: retries of a failed request (429, 5xx, timeout), with backoff.
        concurrency: requests in flight at most.
        template, scale, key, max_tokens, temperature, cache_dir: see :class:`~lightning_edit.judges.llm.LLMJudge`.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 2,
        concurrency: int = 4,
        template: str = "answer_correct",
        scale: Scale | None = None,
        key: str | None = None,
        max_tokens: int = 256,
        temperature: float = 0.0,
        cache_dir: str | None = None,
    ):
        super().__init__(template, scale, key, max_tokens, temperature, cache_dir)
        require(timeout > 0, "timeout", timeout, "seconds per request, more than 0")
        require(max_retries >= 0, "max_retries", max_retries, "retries of a failed request, 0 or more")
        require(concurrency >= 1, "concurrency", concurrency, "requests in flight at most, 1 or more")
        if secret_field("api_key_env", api_key_env):
            raise ConfigError(
                "api_key_env names the environment variable that holds the key, in capitals (OPENAI_API_KEY); the "
                "value given is no such name and is not shown: it may be the key itself"
            )
        self.model = model
        self.base_url = base_url
        self.api_key_env = api_key_env
        self.timeout = timeout
        self.max_retries = max_retries
        self.concurrency = concurrency
        self._client: openai.OpenAI | None = None

    def settings(self) -> dict[str, Any]:
        return {"model": self.model, **super().settings()}

    def describe(self) -> dict[str, Any]:
        return {**super().describe(), "base_url": self.base_url, "api_key_env": self.api_key_env}

    def check(self) -> None:
        """The cache (:meth:`~lightning_edit.judges.base.Judge.check`) and the API key: its variable must be set."""
        super().check()
        if not os.environ.get(self.api_key_env):
            raise ConfigError(
                f"its API key is read from ${self.api_key_env}, which is not set: export it, or name another variable "
                "with api_key_env"
            )

    def client(self) -> openai.OpenAI:
        """The client, made on first use with the key from the environment (``openai`` is imported then: a run
        without this judge does not pay for it)."""
        import openai

        if self._client is None:
            self.check()
            add_secrets([os.environ[self.api_key_env]])  # masked in what is printed, logged or cached
            self._client = openai.OpenAI(
                api_key=os.environ[self.api_key_env],
                base_url=self.base_url,
                timeout=self.timeout,
                max_retries=self.max_retries,
            )
        return self._client

    def _ask(self, messages: list[dict[str, str]]) -> tuple[str | None, str]:
        import openai

        try:
            response = self.client().chat.completions.create(
                model=self.model, messages=messages, max_tokens=self.max_tokens, temperature=self.temperature
            )
            reply = response.choices[0].message.content
            if not isinstance(reply, str):
                raise TypeError("the response has no message content")
            return reply, ""  # stored masked (VerdictCache.put_many)
        except (openai.OpenAIError, AttributeError, IndexError, KeyError, TypeError, ValueError) as error:
            reason = f"{type(error).__name__}: {mask(str(error))[:200]}"  # an endpoint may echo the key
            log.warning("judge request to model %s failed: %s", self.model, reason)
            return None, reason

    def complete(self, conversations: list[list[dict[str, str]]]) -> list[tuple[str | None, str]]:
        """The replies, from ``concurrency`` threads. Once the process is asked to stop (SIGTERM,
        :func:`~lightning_edit.stopping.stop_requested`), no request starts and none is waited for (a thread in flight
        ends with the process): within a fraction of a second, every conversation without a reply is a failed one."""
        self.client()  # a missing key is an error here, before any request
        replies: list[tuple[str | None, str] | None] = [None] * len(conversations)
        errors: list[BaseException] = []  # a bug in a thread, raised here rather than lost with the thread
        waiting: queue.SimpleQueue[int] = queue.SimpleQueue()
        for index in range(len(conversations)):
            waiting.put(index)

        def work() -> None:
            try:
                while stop_requested() is None:
                    try:
                        index = waiting.get_nowait()
                    except queue.Empty:
                        return
                    replies[index] = self._ask(conversations[index])
            except BaseException as error:
                errors.append(error)

        workers = [threading.Thread(target=work, daemon=True) for _ in range(min(self.concurrency, len(conversations)))]
        for worker in workers:
            worker.start()
        for worker in workers:
            while worker.is_alive() and stop_requested() is None:
                worker.join(0.1)
        if errors:
            raise errors[0]
        stopped = (None, "the run was asked to stop before the judge answered")
        return [reply or stopped for reply in replies]
