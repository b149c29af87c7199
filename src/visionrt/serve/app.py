"""The service's HTTP API and live view (Starlette): list, add, remove and restart cameras, their
previews, the last events and the Prometheus metrics, behind the guard (serve.guard); served by
uvicorn on a socket bound before the service starts."""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Mapping
from importlib import resources
from typing import TYPE_CHECKING, Any

from visionrt.errors import ConfigError, SinkError, SourceError, VisionRTError
from visionrt.pipeline.roster import NameInUse
from visionrt.serve.guard import LOCAL_NAMES, MAX_BODY, MAX_DEPTH, Guard, json_depth
from visionrt.serve.preview import BOUNDARY, mjpeg_chunks
from visionrt.serve.requests import check_name
from visionrt.serve.service import Camera, Service

if TYPE_CHECKING:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.types import ASGIApp, Receive, Scope, Send

log = logging.getLogger("visionrt")


def make_app(
    service: Service, token: str = "", metrics: Any = None, host: str = "127.0.0.1"
) -> Starlette:
    """The routes over `service`, served on `host` (the address bound) behind the guard
    (serve.guard: this service's Host and Origin only; `token`, when set, asked of every
    request); `metrics` a MetricsServer whose registry `/metrics` exposes. Every error, an
    unknown route and a wrong method included, is `{"error": "one line"}`."""
    from starlette.applications import Starlette
    from starlette.background import BackgroundTask
    from starlette.exceptions import HTTPException
    from starlette.middleware import Middleware
    from starlette.requests import ClientDisconnect
    from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Route

    page = resources.files("visionrt.serve").joinpath("static/index.html").read_text("utf-8")

    def error(status: int, message: str, headers: Mapping[str, str] | None = None) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=headers)

    class GuardMiddleware:
        def __init__(self, app: ASGIApp) -> None:
            self.app = app

        async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                from starlette.requests import Request

                request = Request(scope)
                port = int((scope.get("server") or ("", 0))[1] or 0)
                refusal = Guard(host, port, token).refuse(
                    request.method, request.url.path, request.headers, request.query_params
                )
                if refusal is not None:
                    bearer = {"WWW-Authenticate": "Bearer"} if refusal.status == 401 else None
                    await error(refusal.status, refusal.message, bearer)(scope, receive, send)
                    return
            await self.app(scope, receive, send)

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        path = request.url.path
        allowed = ", ".join(sorted((exc.headers or {}).get("Allow", "").split(", ")))
        message = {
            404: f"no route {path} (docs/serve.md lists them)",
            405: f"{request.method} {path}: expected {allowed}",
        }.get(exc.status_code, str(exc.detail))
        return error(exc.status_code, message, exc.headers)

    async def internal_error(request: Request, exc: Exception) -> Response:
        # The traceback goes to the log as for any failure; the client gets one line.
        return error(500, f"internal error: {type(exc).__name__}")

    async def index(request: Request) -> Response:
        return HTMLResponse(page, headers={"Cache-Control": "no-store"})

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "sources": len(service.cameras)})

    async def sources(request: Request) -> Response:
        if request.method == "POST":
            return await add_source(request)
        return JSONResponse(service.describe())

    async def add_source(request: Request) -> Response:
        try:
            body = await _body(request)
        except ClientDisconnect:  # one line: nothing failed here
            log.warning("serve: POST /sources: the client went away before its body was sent")
            return Response(status_code=400)  # (nobody reads it)
        if body is None:
            return error(413, f"request body over {MAX_BODY} bytes")
        if json_depth(body) > MAX_DEPTH:
            return error(400, f"body: JSON nested over {MAX_DEPTH} levels deep")
        try:
            request_json = json.loads(body or b"null")
        except (ValueError, UnicodeDecodeError) as err:
            return error(400, f"body: expected JSON, {err}")
        if not isinstance(request_json, dict):
            return error(400, "body: expected a JSON object {name, uri, tasks, zones, lines}")
        unknown = sorted(set(request_json) - {"name", "uri", "tasks", "zones", "lines"})
        if unknown:
            return error(400, f"body: unknown key '{unknown[0]}' (name, uri, tasks, zones, lines)")
        analytics = {k: request_json[k] for k in ("zones", "lines") if k in request_json}
        # Opening a stream can take seconds: on a worker thread, not the event loop.
        from starlette.concurrency import run_in_threadpool

        try:
            camera = await run_in_threadpool(
                service.add,
                request_json.get("name"),
                request_json.get("uri"),
                request_json.get("tasks", ["detect"]),
                analytics or None,
            )
        except SourceError as err:
            return error(422, str(err))
        except NameInUse as err:
            return error(409, str(err))
        except ConfigError as err:
            return error(400, str(err))
        except RuntimeError as err:  # the service is stopping
            return error(503, str(err))
        return JSONResponse(_camera(camera), status_code=201)

    def named(request: Request) -> str:
        name = request.path_params["name"]
        check_name(name)
        return str(name)

    def remove_source(request: Request) -> Response:
        try:
            camera = service.remove(named(request))
        except ConfigError as err:
            return error(400, str(err))
        except KeyError:
            return error(404, f"no source named '{request.path_params['name']}'")
        return JSONResponse(_camera(camera))

    def restart_source(request: Request) -> Response:
        try:
            camera = service.restart(named(request))
        except KeyError:
            return error(404, f"no source named '{request.path_params['name']}'")
        except SourceError as err:
            return error(422, f"removed, and could not be opened again: {err}")
        except VisionRTError as err:
            return error(400, str(err))
        return JSONResponse(_camera(camera))

    def preview_jpeg(request: Request) -> Response:
        try:
            name = named(request)
        except ConfigError as err:
            return error(400, str(err))
        if name not in service.cameras:
            return error(404, f"no source named '{name}'")
        preview = service.preview.latest(name)
        if preview is None:
            return error(404, f"no preview of '{name}' yet")
        headers = {
            "X-Frame-Index": str(preview.frame),
            "X-Preview-Seq": str(preview.seq),
            "Cache-Control": "no-store",
        }
        return Response(preview.jpeg, media_type="image/jpeg", headers=headers)

    def preview_mjpeg(request: Request) -> Response:
        try:
            name = named(request)
        except ConfigError as err:
            return error(400, str(err))
        if name not in service.cameras:
            return error(404, f"no source named '{name}'")
        stop = threading.Event()
        stream = mjpeg_chunks(service.preview, name, stop)
        media = f"multipart/x-mixed-replace; boundary={BOUNDARY}"
        return StreamingResponse(stream, media_type=media, background=BackgroundTask(_Setter(stop)))

    def events(request: Request) -> Response:
        try:
            limit = min(1000, max(0, int(request.query_params.get("limit", "50"))))
        except ValueError:
            return error(400, "limit: expected an integer")
        return JSONResponse(service.events(limit))

    def prometheus(request: Request) -> Response:
        if metrics is None:
            return error(404, "metrics are off")
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    get = ["GET"]  # and HEAD
    routes = [
        Route("/", index, methods=get),
        Route("/health", health, methods=get),
        Route("/sources", sources, methods=["GET", "POST"]),
        Route("/sources/{name}", remove_source, methods=["DELETE"]),
        Route("/sources/{name}/restart", restart_source, methods=["POST"]),
        Route("/sources/{name}/preview.jpg", preview_jpeg, methods=get),
        Route("/sources/{name}/preview.mjpg", preview_mjpeg, methods=get),
        Route("/events", events, methods=get),
        Route("/metrics", prometheus, methods=get),
    ]
    return Starlette(
        routes=routes,
        middleware=[Middleware(GuardMiddleware)],
        exception_handlers={HTTPException: http_error, Exception: internal_error},
    )


async def _body(request: Request) -> bytes | None:
    """The request's body; None past MAX_BODY bytes, told by its length or as it comes (never
    read whole into memory first). ClientDisconnect when the client goes away mid-way."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


class _Setter:
    """A background task that sets an Event: ends a preview stream's iterator when the response
    is done (the client went away)."""

    def __init__(self, event: threading.Event) -> None:
        self.event = event

    async def __call__(self) -> None:
        self.event.set()


def _camera(camera: Camera) -> dict[str, Any]:
    return {
        "name": camera.name,
        "uri": camera.uri,
        "tasks": list(camera.tasks),
        "state": camera.state,
        "outputs": camera.outputs,
    }


def check_bind(host: str, token: str) -> None:
    """Beyond this machine only with a token."""
    if host not in LOCAL_NAMES and not token:
        raise ConfigError(
            f"serve.host {host}: listening beyond this machine needs a token"
            " (--token or VISIONRT_TOKEN)"
        )


class HttpServer:
    """uvicorn on a socket bound here (a taken port is one line, before anything starts), in a
    thread of its own; `port` is the one bound (0 picks a free one)."""

    def __init__(self, app: Starlette, host: str, port: int) -> None:
        import uvicorn

        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
            self.socket.listen(2048)  # the URL works once printed: uvicorn accepts later
        except OSError as err:
            self.socket.close()
            reason = err.strerror or err
            raise SinkError(f"serve: cannot listen on {host}:{port}: {reason}") from err
        self.host, self.port = host, int(self.socket.getsockname()[1])
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.socket]}, name="http", daemon=True
        )

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> HttpServer:
        self.thread.start()
        return self

    def close(self, timeout: float = 5.0) -> None:
        self.server.should_exit = True
        self.thread.join(timeout)
        self.socket.close()
