"""Downloads that fail fast offline (`unreachable` answers within `PROBE_TIMEOUT_S`, where
downloaders retry for minutes) and never keep a corrupt file."""

import hashlib
import pathlib
import queue
import socket
import threading
import urllib.error
import urllib.parse
import urllib.request

from keras_transformer.atomic_files import atomic_files
from pipelines.errors import DataError

PROBE_TIMEOUT_S = 3.0


def host_reachable(host: str, port: int, timeout: float = PROBE_TIMEOUT_S) -> tuple[bool, str]:
    """``(reachable, reason)``: whether ``host:port`` accepts TCP within ``timeout`` seconds."""
    outcome: queue.Queue = queue.Queue(maxsize=1)

    def attempt() -> None:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                outcome.put((True, ""))
        except OSError as e:
            outcome.put((False, str(e) or type(e).__name__))

    # A daemon thread: a name lookup stuck in the resolver must not hold up interpreter exit.
    threading.Thread(target=attempt, name=f"probe-{host}", daemon=True).start()
    try:
        return outcome.get(timeout=timeout)
    except queue.Empty:
        return False, f"no answer within {timeout:g} s"


def unreachable(urls: list[str], timeout: float) -> dict[str, str]:
    """Map each unreachable host among ``urls`` to the reason; hosts are probed in parallel."""
    targets = sorted({(p.hostname or "", p.port or (443 if p.scheme == "https" else 80))
                      for p in map(urllib.parse.urlparse, urls)})
    results: dict[tuple[str, int], tuple[bool, str]] = {}

    def probe(target: tuple[str, int]) -> None:
        results[target] = host_reachable(target[0], target[1], timeout)

    threads = [threading.Thread(target=probe, args=(t,), daemon=True) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout + 1.0)
    silent = (False, f"no answer within {timeout:g} s")
    outcomes = [(host, results.get((host, port), silent)) for host, port in targets]
    return {host: reason for host, (ok, reason) in outcomes if not ok}


def download_verified(url: str, target: pathlib.Path, sha256: str, where: str) -> pathlib.Path:
    """Downloads `url` to `target` if its sha256 is `sha256`, else raises `DataError` (naming
    `where` a user may put a verified copy) and leaves nothing behind."""
    try:
        with atomic_files(target) as (tmp,):
            digest = hashlib.sha256()
            with urllib.request.urlopen(url, timeout=60) as response, open(tmp, "wb") as out:
                for chunk in iter(lambda: response.read(1 << 16), b""):
                    digest.update(chunk)
                    out.write(chunk)
            if digest.hexdigest() != sha256:
                raise DataError(f"{url}: sha256 {digest.hexdigest()} differs from the expected "
                                f"{sha256}; the download is corrupt or the source changed. Put a "
                                f"verified copy of {target.name} in {where}.")
    except (OSError, urllib.error.URLError) as e:
        raise DataError(f"{url}: download failed ({e}); put {target.name} in {where}") from e
    return target
