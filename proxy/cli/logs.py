"""The serving process's logging: lines to stderr, as text or JSON (``CONTEXT_PROXY_LOG_FORMAT``).

A handler buffers the lines and a thread flushes them, and the access log's lines skip the
logging machinery (``BufferedStderr.access``): a record made, filtered and formatted per
request costs the event loop more than several of the proxy's own steps do. Both ways give the
same line.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable, Mapping
from typing import TextIO

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def _msecs(created: float) -> int:
    """The milliseconds ``logging.LogRecord`` shows for ``created``."""
    return int((created - int(created)) * 1000)


class _Seconds:
    """``strftime`` of the current second, made once per second and per converter."""

    def __init__(self, fmt: str, convert: Callable[[float], time.struct_time]) -> None:
        self._fmt, self._convert = fmt, convert
        self._second, self._text = -1, ""

    def __call__(self, created: float) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(self._fmt, self._convert(second))
            self._second = second
        return self._text


class TextFormatter(logging.Formatter):
    """``time level logger message``, the time as logging's default (local time, milliseconds
    after a comma)."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)
        self._seconds = _Seconds(self.default_time_format, self.converter)

    def line(self, created: float, level: str, name: str, message: str,
             fields: Mapping[str, object]) -> str:
        """What ``format`` makes of a record with these values (``fields`` are not shown)."""
        return f"{self._seconds(created)},{_msecs(created):03d} {level} {name} {message}"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, and the access fields."""

    FIELDS = ("method", "route", "path", "status", "duration_ms", "conversation", "outcome",
              "request_id", "remote")

    def __init__(self) -> None:
        super().__init__()
        self._seconds = _Seconds("%Y-%m-%dT%H:%M:%S", time.gmtime)

    def format(self, record: logging.LogRecord) -> str:
        fields = {name: record.__dict__[name] for name in self.FIELDS if name in record.__dict__}
        error = self.formatException(record.exc_info) if record.exc_info else None
        return self.line(record.created, record.levelname, record.name, record.getMessage(),
                         fields, error)

    def line(self, created: float, level: str, name: str, message: str,
             fields: Mapping[str, object], error: str | None = None) -> str:
        doc: dict[str, object] = {
            "time": f"{self._seconds(created)}.{_msecs(created):03d}Z",
            "level": level, "logger": name, "message": message}
        for key in self.FIELDS:
            if key in fields:
                doc[key] = fields[key]
        if error is not None:
            doc["error"] = error
        return json.dumps(doc, ensure_ascii=False)


class BufferedStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Lines go to a buffer that a thread flushes every ``every_s``; a warning or worse is
    flushed at once. A write to stderr per access line (or a thread woken per line) would cost
    the event loop more than the rest of a short request's handling. ``stream``: where the
    lines go instead of stderr."""

    def __init__(self, every_s: float = 0.2, stream: TextIO | None = None) -> None:
        if stream is None:
            stream = open(sys.stderr.fileno(), "w", buffering=1 << 16,  # noqa: SIM115
                          closefd=False, encoding="utf-8",
                          errors="backslashreplace")  # closed by close()
        super().__init__(stream)
        self._every_s = every_s
        self._stop = threading.Event()
        self._flusher = threading.Thread(target=self._flush_often, daemon=True,
                                         name="log-flush")
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.stream.write(self.format(record) + "\n")
            if record.levelno >= logging.WARNING:
                self.stream.flush()
        except Exception:
            self.handleError(record)

    def access(self, name: str, message: str, fields: Mapping[str, object],
               created: float) -> bool:
        """Write an INFO line of logger ``name`` as ``emit`` would write its record, without
        making one; False (nothing written) when this handler's formatter is not one of ours
        or a filter would have to see the record."""
        formatter = self.formatter
        if self.filters or type(formatter) not in (TextFormatter, JsonFormatter):
            return False
        line = formatter.line(created, "INFO", name, message, fields)  # type: ignore[union-attr]
        try:
            with self.lock:  # type: ignore[union-attr]
                self.stream.write(line + "\n")
        except Exception:  # a closed stream, say: logging's own way reports it as emit would
            return False
        return True

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]
            self.stream.flush()

    def _flush_often(self) -> None:
        while not self._stop.wait(self._every_s):
            self.flush()

    def close(self) -> None:
        self._stop.set()
        self.flush()
        super().close()


def configure_logging(log_format: str) -> BufferedStderr:
    """Log to stderr, as text lines or JSON lines; the caller closes the returned handler at
    exit (which writes what is left). litellm's loggers stay at WARNING (the proxy does not
    import it, but a deployment may)."""
    handler = BufferedStderr()
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    # What the logging HOWTO's "Optimization" section lists: no caller lookup, thread or process
    # names per record. The lines never show them, and they cost microseconds on every request.
    logging._srcfile = None
    logging.logThreads = logging.logProcesses = logging.logMultiprocessing = False
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("LiteLLM", "LiteLLM Proxy", "LiteLLM Router", "litellm", "httpx"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return handler
