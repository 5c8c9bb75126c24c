"""`imgtxt serve`: a small local web app over a Library (Starlette + Jinja2, run by uvicorn).

A search box, results as a grid of thumbnails with scores; a photo's page shows it larger with its captions
and the photos that look like it. Photos are served only by their row id in the index, through the
thumbnail cache (JPEG, so HEIC photos show too): a request can never name a file, so there is no path to
traverse. Bound to 127.0.0.1 unless --host says otherwise.
"""
from __future__ import annotations

import sys
from pathlib import Path

from imgtxt.errors import ImgtxtError

THUMB, LARGE = 256, 1024


def create_app(library):
    try:
        from starlette.applications import Starlette
        from starlette.responses import FileResponse
        from starlette.routing import Route
        from starlette.templating import Jinja2Templates
    except ImportError as e:
        raise ImgtxtError(f"`imgtxt serve` needs the serve extra: pip install 'imgtxt[serve]' ({e.name} "
                          f"is missing)") from None

    templates = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))

    def page(request, name: str, status: int = 200, **context):
        return templates.TemplateResponse(request, name, {"index_dir": library.index_dir, **context},
                                          status_code=status)

    def home(request):  # sync endpoints run in a thread pool: searching never blocks the server
        query = request.query_params.get("q", "").strip()
        n = _int(request.query_params.get("n"), 24)
        if not query:
            return page(request, "search.html", query="", matches=None)
        try:
            matches = library.search(query, n)
        except ImgtxtError as e:
            return page(request, "search.html", 400, query=query, matches=None, error=str(e))
        return page(request, "search.html", query=query, matches=matches)

    def photo(request):
        photo_id = request.path_params["photo_id"]
        try:
            record = library.photo(photo_id)
        except ImgtxtError as e:
            return page(request, "search.html", 404, query="", matches=None, error=str(e))
        captions, similar, error = [], [], None
        try:
            captions = library.caption(record.path, 5)
            similar = library.similar(record.path, 12)
        except ImgtxtError as e:
            error = str(e)
        return page(request, "photo.html", photo=record, captions=captions, similar=similar, error=error,
                    query=request.query_params.get("q", ""))

    def image(size: int):
        def endpoint(request):
            try:
                path = library.thumbnail(request.path_params["photo_id"], size)
            except ImgtxtError as e:
                return page(request, "search.html", 404, query="", matches=None, error=str(e))
            return FileResponse(path, media_type="image/jpeg", headers={"Cache-Control": "max-age=3600"})
        return endpoint

    return Starlette(routes=[
        Route("/", home),
        Route("/photo/{photo_id:int}", photo),
        Route("/thumb/{photo_id:int}", image(THUMB)),
        Route("/large/{photo_id:int}", image(LARGE)),
    ])


def _int(value, default: int) -> int:
    try:
        return max(1, min(200, int(value)))
    except (TypeError, ValueError):
        return default


def run(library, host: str = "127.0.0.1", port: int = 8000) -> None:
    app = create_app(library)
    library.status()  # a missing or unreadable index: say so now, not on the first request
    import uvicorn

    print(f"imgtxt: serving {library.index_dir} at http://{host}:{port}/ (Ctrl-C to stop)", file=sys.stderr)
    uvicorn.run(app, host=host, port=port, log_level="warning")
