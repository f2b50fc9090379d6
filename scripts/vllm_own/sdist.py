"""vLLM's source distribution from PyPI, checked against the registry, and its ``tests/`` tree.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tarfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from labkit.errors import UsageError

logger = logging.getLogger(__name__)

__all__ = ["SdistFile", "SIMPLE_INDEX", "parse_simple_listing", "registry_sdist", "sha256_file",
           "check_sha256", "fetch_sdist", "extract_tests"]

#: PyPI's simple index (PEP 503 / 691); ``$LABKIT_PYPI_SIMPLE`` overrides it (a mirror)
SIMPLE_INDEX = "https://pypi.org/simple"
_JSON_ACCEPT = "application/vnd.pypi.simple.v1+json"


@dataclass(frozen=True)
class SdistFile:
    """One source distribution as the registry lists it."""

    filename: str
    url: str
    sha256: str
    size: int | None = None


def parse_simple_listing(listing: dict, project: str, version: str) -> SdistFile:
    """The ``<project>-<version>.tar.gz`` entry of a PEP 691 JSON listing (``UsageError`` when absent)."""
    filename = f"{project}-{version}.tar.gz"
    for entry in listing.get("files", []):
        if entry.get("filename") != filename:
            continue
        digest = (entry.get("hashes") or {}).get("sha256")
        if not digest:
            raise UsageError(f"the registry lists {filename} without a sha256")
        if entry.get("yanked"):
            logger.warning("%s is yanked on the registry: %s", filename, entry.get("yanked"))
        return SdistFile(filename, entry["url"], digest.lower(), entry.get("size"))
    raise UsageError(f"the registry lists no source distribution {filename} for {project}")


def registry_sdist(version: str, project: str = "vllm", timeout_s: float = 60.0) -> SdistFile:
    """Address and SHA-256 of ``<project>-<version>.tar.gz`` from the simple index (network)."""
    index = os.environ.get("LABKIT_PYPI_SIMPLE", SIMPLE_INDEX).rstrip("/")
    req = urllib.request.Request(f"{index}/{project}/", headers={"Accept": _JSON_ACCEPT})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            listing = json.loads(resp.read().decode("utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read {index}/{project}/ ({exc}); the sdist check needs the registry") from None
    return parse_simple_listing(listing, project, version)


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def check_sha256(path: str | Path, expected: str) -> str:
    """``expected`` when ``path``'s SHA-256 matches it, else a one-line ``UsageError`` naming both."""
    got = sha256_file(path)
    if got != expected.lower():
        raise UsageError(f"{Path(path).name}: sha256 {got} does not match the registry's {expected.lower()}")
    return got


def fetch_sdist(sdist: SdistFile, cache_dir: str | Path, timeout_s: float = 600.0) -> Path:
    """The checked file ``cache_dir/<filename>``, downloaded when missing; ``UsageError`` on a mismatch.

    A cached file that no longer matches is removed and fetched again; a download that does
    not match is removed, so the cache only ever holds a file with the registry's digest.
    """
    cache = Path(cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    target = cache / sdist.filename
    if target.is_file():
        if sha256_file(target) == sdist.sha256:
            return target
        logger.warning("%s in the cache does not match the registry: fetching it again", target)
        target.unlink()
    part = cache / f".{sdist.filename}.part"
    try:
        logger.info("downloading %s", sdist.url)
        with urllib.request.urlopen(sdist.url, timeout=timeout_s) as resp, open(part, "wb") as out:
            shutil.copyfileobj(resp, out, 1 << 20)
    except OSError as exc:
        part.unlink(missing_ok=True)
        raise UsageError(f"cannot download {sdist.url} ({exc})") from None
    try:
        check_sha256(part, sdist.sha256)
    except UsageError:
        part.unlink(missing_ok=True)
        raise
    part.rename(target)
    return target


def _tests_member(name: str) -> PurePosixPath | None:
    """The path below the archive's top folder of a member under ``<top>/tests/``, else None."""
    parts = PurePosixPath(name).parts
    if len(parts) < 2 or parts[1] != "tests":
        return None
    rel = PurePosixPath(*parts[1:])
    if name.startswith("/") or ".." in rel.parts:
        raise UsageError(f"unsafe path in the source distribution: {name!r}")
    return rel


def extract_tests(archive: str | Path, dest: str | Path, expected_sha256: str) -> Path:
    """Unpack only ``<top>/tests/`` of the checked ``archive`` into ``dest/tests``; returns ``dest``.

    The digest is checked first (a mismatch: ``UsageError``, nothing written). Files and
    folders only (no links); the tree is written beside ``dest`` and renamed into place, so
    ``dest`` is complete or absent. An existing ``dest`` is replaced.
    """
    check_sha256(archive, expected_sha256)
    dest = Path(dest)
    tmp = dest.parent / f".{dest.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    count = 0
    try:
        with tarfile.open(archive, "r:gz") as tar:
            for member in tar:
                rel = _tests_member(member.name)
                if rel is None:
                    continue
                out = tmp / rel
                if member.isdir():
                    out.mkdir(parents=True, exist_ok=True)
                elif member.isfile():
                    out.parent.mkdir(parents=True, exist_ok=True)
                    with tar.extractfile(member) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
                    count += 1
        if count == 0:
            raise UsageError(f"{Path(archive).name} holds no tests/ folder")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    logger.info("extracted %d files of tests/ into %s", count, dest)
    return dest
