"""A fake LLM server on 127.0.0.1 that speaks the OpenAI chat-completions and the Anthropic messages wire
formats, so the real SDKs can be pointed at it. It plays a script: each request takes the next step.

Steps: `("text", str)` answers with that text; `("status", code)` answers an HTTP error (429 and 5xx carry a
short retry-after, so the SDKs' own backoff retries quickly); `("stall", seconds)` answers nothing for that
long (past the client's timeout); `("raw", dict)` answers that JSON body as it is; `("bytes", bytes)` answers
those bytes as a 200 (not JSON, say); `("drip", seconds)` answers a valid body one byte every `seconds` (each read
within the client's timeout, the whole far past it). Past the end of the script every request gets a 500.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

USAGE = (120, 40)
"""Input and output tokens reported for every answer."""


class FakeLLMServer:
    def __init__(self, script):
        self.script = list(script)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    step = server.script.pop(0) if server.script else ("status", 500)
                    headers = {k.lower(): v for k, v in self.headers.items()}
                    server.requests.append({"path": self.path, "body": body, "headers": headers, "step": step[0]})
                kind, value = step
                if kind == "stall":
                    time.sleep(value)
                    return
                if kind == "status":
                    self._send(value, {"error": {"type": "fake_error", "message": f"fake status {value}"}},
                               {"retry-after-ms": "20"})
                    return
                if kind == "raw":
                    self._send(200, value)
                    return
                if kind == "bytes":
                    self._send(200, None, data=value)
                    return
                if kind == "drip":
                    self._drip(value)
                    return
                model = body.get("model", "fake")
                if self.path.endswith("/messages"):  # Anthropic
                    self._send(200, {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                                     "content": [{"type": "text", "text": value}], "stop_reason": "end_turn",
                                     "stop_sequence": None,
                                     "usage": {"input_tokens": USAGE[0], "output_tokens": USAGE[1]}})
                else:  # OpenAI chat completions
                    self._send(200, {"id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
                                     "choices": [{"index": 0, "finish_reason": "stop",
                                                  "message": {"role": "assistant", "content": value}}],
                                     "usage": {"prompt_tokens": USAGE[0], "completion_tokens": USAGE[1],
                                               "total_tokens": sum(USAGE)}})

            def _drip(self, seconds):
                data = json.dumps({"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]})
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    for byte in data.encode():
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(seconds)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _send(self, status, payload, headers=None, data=None):
                data = json.dumps(payload).encode() if data is None else data
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._server.shutdown()
        self._server.server_close()
