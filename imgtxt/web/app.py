"""`imgtxt serve`: a small local web app over a Library (Starlette + Jinja2, run by uvicorn).

A search box, results as a grid of thumbnails with scores; a photo's page shows it larger with its captions
and the photos that look like it. Photos are served only by their row id in the index, through the
thumbnail cache (JPEG, so HEIC photos show too): a request can never name a file, so there is no path to
traverse. Bound to 127.0.0.1 unless --host says otherwise.

It answers only requests whose Host header names this machine as the user does (localhost, 127.0.0.1, [::1],
the bound address, --allow-host names): a web page cannot read it through DNS rebinding. Every response
forbids framing and content sniffing (SECURITY_HEADERS). It listens before anything slow: the caption bank's
vectors are read (or, for a model that ships none, embedded) in the background, and photo pages show captions
once they are ready.
"""
from __future__ import annotations

import importlib.util
import socket
import sys
import threading
from pathlib import Path

from imgtxt.errors import ImgtxtError, install_hint
from imgtxt.safe_text import printable

THUMB, LARGE = 256, 1024
TEMPLATES = Path(__file__).parent / "templates"
SERVE_PACKAGES = ("starlette", "uvicorn", "jinja2")
LOCAL_HOSTS = ("localhost", "127.0.0.1", "[::1]")
SECURITY_HEADERS = [
    (b"x-frame-options", b"DENY"),
    (b"content-security-policy", b"default-src 'self'; img-src 'self'; style-src 'self'; script-src 'none'; "
                                 b"object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),                 # queries are in URLs
    (b"cross-origin-resource-policy", b"same-origin"),    # another site cannot even show a thumbnail
]


def check_installed() -> None:
    """The serve extra, checked before anything slow is loaded."""
    missing = [name for name in SERVE_PACKAGES if importlib.util.find_spec(name) is None]
    if missing:
        raise ImgtxtError(f"`imgtxt serve` needs the serve extra ({', '.join(missing)} missing): "
                          f"{install_hint('serve')}")


def allowed_hosts(bound: str, extra=()) -> frozenset[str]:
    """Host header values (without port, lower case) this server answers to."""
    names = {*LOCAL_HOSTS, *extra, bound}
    return frozenset(f"[{n.strip('[]')}]" if ":" in n else n for n in (n.strip().lower().rstrip(".")
                                                                        for n in names) if n)


def host_name(header: str) -> str:
    """The host part of a Host header ("[::1]:8000" -> "[::1]", "Example.com.:80" -> "example.com")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[:header.find("]") + 1] if "]" in header else header
    return (header.rsplit(":", 1)[0] if header.count(":") == 1 else header).rstrip(".")


class Guard:
    """ASGI middleware around the app: refuses a Host not in `hosts` (421), adds SECURITY_HEADERS to every
    response, and turns an unexpected error into a 500 and one line on stderr (never a traceback)."""

    def __init__(self, app, hosts: frozenset[str]):
        self.app, self.hosts = app, hosts

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def send_secured(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                message = {**message, "headers": [*message.get("headers", []), *SECURITY_HEADERS]}
            await send(message)

        hosts = [value.decode("latin-1") for name, value in scope["headers"] if name == b"host"]
        if len(hosts) != 1 or host_name(hosts[0]) not in self.hosts:
            return await _plain(send_secured, 421, "This imgtxt server answers only to the host names it was "
                                                   "started for (imgtxt serve --allow-host NAME).")
        try:
            await self.app(scope, receive, send_secured)
        except Exception as e:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            print(f"imgtxt: error answering {printable(scope.get('path', ''))[:200]}: {type(e).__name__}: "
                  f"{printable(str(e))[:300]}", file=sys.stderr)
            if not started:
                await _plain(send_secured, 500, "imgtxt could not answer this request.")


async def _plain(send, status: int, text: str) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"), (b"cache-control", b"no-store")]})
    await send({"type": "http.response.body", "body": text.encode() + b"\n"})


def create_app(library, hosts: frozenset[str] = frozenset(LOCAL_HOSTS), captions_ready: threading.Event | None = None):
    """The ASGI app. captions_ready: set once the caption bank is ready; until then photo pages show no
    captions and reload themselves (None: captions are computed on demand)."""
    check_installed()
    from starlette.applications import Starlette
    from starlette.responses import FileResponse, Response
    from starlette.routing import Route
    from starlette.templating import Jinja2Templates

    from imgtxt.library.query import QueryError
    from imgtxt.library.results import row_id_of
    from imgtxt.library.thumbnails import ThumbnailCacheError

    def requested_id(request) -> int:
        """The URL's photo id as a row id; anything SQLite cannot hold is a 404, like an id not indexed."""
        raw = request.path_params["photo_id"]
        row_id = row_id_of(raw)
        if row_id is None:
            raise QueryError(f"no indexed photo with id {printable(str(raw))[:40]}")
        return row_id

    templates = Jinja2Templates(directory=str(TEMPLATES))
    templates.env.finalize = _displayable  # before the first template compiles: it applies to every {{ }}

    def page(request, name: str, status: int = 200, **context):
        defaults = {"index_dir": library.index_dir, "query": "", "filters": {}, "like": None}
        return templates.TemplateResponse(request, name, {**defaults, **context}, status_code=status)

    def home(request):  # sync endpoints run in a thread pool: searching never blocks the server
        params = request.query_params
        query = params.get("q", "").strip()
        n = _int(params.get("n"), 24)
        filters = {k: params.get(k, "").strip() or None for k in ("after", "before", "in", "near")}
        like = params.get("like", "").strip() or None
        form = {"query": query, "filters": filters, "like": like}
        if not query and not like and not any(filters.values()):
            return page(request, "home.html", overview=_overview(library), examples=EXAMPLE_QUERIES, **form)
        try:
            like_photo = library.photo(row_id_of(like) or 0) if like else None
            matches = library.search(query, n, after=filters["after"], before=filters["before"],
                                     folder=filters["in"], near=filters["near"],
                                     like=like_photo.path if like_photo else None)
        except ImgtxtError as e:
            return page(request, "search.html", 400, matches=None, error=str(e), **form)
        return page(request, "search.html", matches=matches, reading=library.reading, **form)

    def photo(request):
        try:
            record = library.photo(requested_id(request))
            facts = library.facts(record.id)
        except ImgtxtError as e:
            return page(request, "search.html", 404, query="", matches=None, error=str(e))
        captions, similar, errors = None, [], []
        if captions_ready is None or captions_ready.is_set():
            try:
                captions = library.caption(record.path, 5)
            except ImgtxtError as e:
                captions = []
                errors.append(str(e))
        try:
            similar = library.similar(record.path, 12)
        except ImgtxtError as e:
            if str(e) not in errors:
                errors.append(str(e))
        return page(request, "photo.html", photo=record, facts=facts, captions=captions, similar=similar,
                    error="; ".join(errors) or None, query=request.query_params.get("q", ""))

    def duplicates(request):
        try:
            groups = library.duplicates()
        except ImgtxtError as e:
            return page(request, "search.html", 400, query="", matches=None, error=str(e))
        return page(request, "duplicates.html", query="", groups=groups[:200], total=len(groups))

    def image(size: int):
        def endpoint(request):
            try:
                path = library.thumbnail(requested_id(request), size)
                # Named by the photo's current content: the browser revalidates, so an edit shows at once
                headers = {"Cache-Control": "private, no-cache", "ETag": f'"{path.stem}"'}
                if request.headers.get("if-none-match") == headers["ETag"]:
                    return Response(status_code=304, headers=headers)
                data = path.read_bytes()
            except ThumbnailCacheError as e:  # disk full: the picture made in memory, not kept
                return Response(e.jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})
            except ImgtxtError as e:
                return page(request, "search.html", 404, query="", matches=None, error=str(e))
            except OSError:  # the cached file went away just now (a cache cleaner): not an error of the photo
                return Response("thumbnail cache unavailable, try again\n", 503, media_type="text/plain")
            return Response(data, media_type="image/jpeg", headers=headers)
        return endpoint

    def style(request):
        return FileResponse(TEMPLATES / "style.css", media_type="text/css")

    app = Starlette(routes=[
        Route("/", home),
        Route("/duplicates", duplicates),
        Route("/style.css", style),
        # ids as text: the int convertor turns 5,000 digits or 2**63 into a 500; Library.photo says 404
        Route("/photo/{photo_id}", photo),
        Route("/thumb/{photo_id}", image(THUMB)),
        Route("/large/{photo_id}", image(LARGE)),
    ])
    return Guard(app, hosts)


EXAMPLE_QUERIES = ("a dog running on the beach", "children playing in the snow in december", "a city street at night",
                   "mountains 2019", "a birthday cake")


def _overview(library):
    """The home page's counts and recent photos; None when the index cannot say (no run yet: the error shows)."""
    try:
        return library.overview(12)
    except ImgtxtError:
        return None


def _displayable(value):
    """A file name that is not valid UTF-8 (its bad bytes surrogate-escaped) shown with U+FFFD: the page is
    UTF-8, and one such name must not turn it into a 500."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return value


def _int(value, default: int) -> int:
    try:
        return max(1, min(200, int(value)))
    except (TypeError, ValueError):
        return default


def listen(host: str, port: int) -> socket.socket:
    """A socket bound and listening on host:port, or an ImgtxtError with the reason (address already in use)."""
    where = f"{printable(host)}:{port}"
    if not host.strip():  # "" would bind every interface
        raise ImgtxtError("--host must name an address (127.0.0.1, or 0.0.0.0 for every interface)")
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise ImgtxtError(f"cannot listen on {where}: {getattr(e, 'strerror', None) or e}") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: a restart needs no wait
        sock.bind(address)
        sock.listen(2048)
    except OSError as e:
        sock.close()
        raise ImgtxtError(f"cannot listen on {where}: {(e.strerror or str(e)).lower()}") from None
    return sock


def run(library, host: str = "127.0.0.1", port: int = 8000, allow_hosts=(), prepare=None, say=None) -> None:
    """Listen on host:port, say where, then serve until Ctrl-C. `prepare(done)`: the slow start-up work
    (the caption bank's vectors), run in the background once listening; it calls done() when finished."""
    check_installed()
    import uvicorn

    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    ready = threading.Event() if prepare is not None else None
    app = create_app(library, allowed_hosts(host, allow_hosts), ready)
    sock = listen(host, port)
    shown = f"[{host}]" if ":" in host else host
    say(f"imgtxt: serving {printable(str(library.index_dir))} at http://{shown}:{sock.getsockname()[1]}/ "
        f"(Ctrl-C to stop)")
    if prepare is not None:
        threading.Thread(target=prepare, args=(ready.set,), name="imgtxt-prepare", daemon=True).start()
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", server_header=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
