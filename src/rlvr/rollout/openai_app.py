"""The FastAPI app of the OpenAI-compatible endpoint (`rlvr.rollout.openai_server`): the routes at /v1 and, per
episode, at /episodes/{episode}/v1. Imported only when a server starts, so rlvr runs without the `serve` extra.
(No `from __future__ import annotations` here: FastAPI reads the handlers' annotations as objects.)"""

import logging
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

log = logging.getLogger("rlvr.rollout.openai_server")


def build_app(server: Any, APIError: type) -> FastAPI:  # noqa: N803  (openai_server.APIError, passed in: no cycle)
    app = FastAPI(title="rlvr policy endpoint", docs_url=None, redoc_url=None, openapi_url=None)

    async def handle(request: Request, run: Any, episode: Optional[str]) -> JSONResponse:
        try:
            try:
                body = await request.json()
            except ValueError:
                raise APIError("the request body is not valid JSON") from None
            if not isinstance(body, dict):
                raise APIError("the request body must be a JSON object")
            return JSONResponse(await run(body, episode))
        except APIError as err:
            return JSONResponse(err.body(), status_code=err.status)
        except Exception as err:  # a bug here must fail one request, not the server
            log.exception("request failed")
            body = APIError(f"internal error: {type(err).__name__}: {err}", 500, kind="server_error").body()
            return JSONResponse(body, status_code=500)

    async def chat(request: Request, episode: Optional[str] = None) -> JSONResponse:
        return await handle(request, server.chat, episode)

    async def completions(request: Request, episode: Optional[str] = None) -> JSONResponse:
        return await handle(request, server.completion, episode)

    async def models(episode: Optional[str] = None) -> JSONResponse:
        return JSONResponse(server.models())

    for prefix in ("/v1", "/episodes/{episode}/v1"):
        app.add_api_route(f"{prefix}/chat/completions", chat, methods=["POST"])
        app.add_api_route(f"{prefix}/completions", completions, methods=["POST"])
        app.add_api_route(f"{prefix}/models", models, methods=["GET"])
    return app
