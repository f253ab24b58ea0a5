"""``alilama serve``'s server: the library's OpenAI-compatible one with the playground added.

The routes, the answers and the transport are the library's
(``alilama_core.runs.serving``, ``alilama_core.runs.replies``); the command's
options are checked in ``alilama_core.app.serve_cmd``. ``GET /`` is the
playground (``alilama_core.app.playground``) and ``POST /v1/alilama/tape`` the
tape of a text for it, drawn by the app's viz (``alilama_core.app.viz_draw``),
so they are added here.
"""

from __future__ import annotations

import asyncio
import traceback

from alilama_core.base.errors import AlilamaError
from alilama_core.engine.requests import RequestError, TapeRequest, parse
from alilama_core.engine.scheduler import Limits
from alilama_core.runs.replies import ApiError
from alilama_core.runs.serving import ClientGone, Server, listen

__all__ = ["PlaygroundServer", "serve"]


class PlaygroundServer(Server):
    """The API server and the playground's page and tape."""

    def routes(self) -> list:
        from starlette.routing import Route

        return [
            Route("/", self.playground, methods=["GET"]),
            Route("/v1/alilama/tape", self.tape, methods=["POST"]),
            *super().routes(),
        ]

    async def playground(self, request):
        """The playground page (it holds no data: its requests carry the API key when there is one)."""
        from starlette.responses import HTMLResponse

        from alilama_core.app.playground import playground_page

        return HTMLResponse(playground_page(self.model_id))

    async def tape(self, request):
        """The tape of ``{"text": ...}``: attention per layer and head, and the logit lens (the viz page's data)."""
        from starlette.responses import JSONResponse

        from alilama_core.app.viz_draw import read_tape
        from alilama_core.app.viz_page import page_data

        if (denied := self._denied(request)) is not None:
            return denied
        try:
            text = parse(TapeRequest, await self._body(request)).text
            longest = self.limits.max_prompt_tokens + self.limits.max_tokens
            if len(self.tokenizer.encode(text, allowed_special="all")) > longest:
                raise ApiError(413, f"the text is longer than this server's {longest} tokens", "text")
            future = self.scheduler.call(lambda: page_data(read_tape(self.model, self.tokenizer, text)))
            return JSONResponse(await asyncio.wrap_future(future))
        except ApiError as error:
            return JSONResponse(error.body(), status_code=error.status)
        except ClientGone:
            return JSONResponse({}, status_code=400)
        except RequestError as exc:
            error = ApiError.of(exc)
            return JSONResponse(error.body(), status_code=error.status)
        except AlilamaError as exc:
            return JSONResponse(ApiError(400, str(exc), "text").body(), status_code=400)
        except Exception:
            traceback.print_exc()
            return JSONResponse(ApiError(500, "internal error", kind="server_error").body(), status_code=500)


def serve(
    loaded, model_id: str, host: str, port: int, limits: Limits, api_key: str | None = None, decode: str = "auto"
) -> None:
    """Run the server, the playground with it, in this process until it is interrupted."""
    from alilama_core.engine.chat import run_template

    listen(PlaygroundServer(loaded, model_id, limits, api_key, run_template(loaded.path), decode), host, port)
