"""make test-vllm-own's own pieces, without network or vLLM: the sdist check and extraction,
the Hugging Face cache layout of a made model, and the comparison of junit XML runs."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import tarfile
from pathlib import Path

import pytest

from labkit.errors import UsageError
from scripts.vllm_own import own_tests, run, sdist
from scripts.vllm_own.hub_models import repo_folder, write_hub_model
from scripts.vllm_own.own_tests import compare_runs, counts, parse_junit, run_row


# --------------------------------------------------------------------------------------
# the sdist: digest, download, extraction of tests/ only
# --------------------------------------------------------------------------------------


def _sdist(path: Path) -> Path:
    """A small vllm-9.9.9.tar.gz: tests/ with two files and a folder, plus files outside tests/."""
    members = {
        "vllm-9.9.9/setup.py": b"print('not a test')\n",
        "vllm-9.9.9/vllm/__init__.py": b"",
        "vllm-9.9.9/tests/__init__.py": b"",
        "vllm-9.9.9/tests/v1/core/test_x.py": b"def test_x():\n    assert True\n",
        "vllm-9.9.9/testsuite/other.py": b"x = 1\n",
    }
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_extract_takes_only_tests(tmp_path):
    archive = _sdist(tmp_path / "vllm-9.9.9.tar.gz")
    dest = sdist.extract_tests(archive, tmp_path / "src", _digest(archive))
    files = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
    assert files == ["tests/__init__.py", "tests/v1/core/test_x.py"]
    assert (dest / "tests/v1/core/test_x.py").read_text() == "def test_x():\n    assert True\n"


def test_sha_mismatch_is_one_line_and_writes_nothing(tmp_path):
    archive = _sdist(tmp_path / "vllm-9.9.9.tar.gz")
    wrong = "0" * 64
    with pytest.raises(UsageError) as err:
        sdist.extract_tests(archive, tmp_path / "src", wrong)
    message = str(err.value)
    assert "\n" not in message and wrong in message and _digest(archive) in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vllm-9.9.9.tar.gz"]  # no tree, no temporary


def test_fetch_keeps_only_a_matching_download(tmp_path):
    archive = _sdist(tmp_path / "vllm-9.9.9.tar.gz")
    cache = tmp_path / "cache"
    bad = sdist.SdistFile("vllm-9.9.9.tar.gz", archive.as_uri(), "f" * 64)
    with pytest.raises(UsageError, match="does not match"):
        sdist.fetch_sdist(bad, cache)
    assert list(cache.iterdir()) == []
    good = sdist.SdistFile("vllm-9.9.9.tar.gz", archive.as_uri(), _digest(archive))
    got = sdist.fetch_sdist(good, cache)
    assert got == cache / "vllm-9.9.9.tar.gz" and got.read_bytes() == archive.read_bytes()
    got.write_bytes(b"tampered")  # a cached file that no longer matches is fetched again
    assert sdist.fetch_sdist(good, cache).read_bytes() == archive.read_bytes()


def test_cli_sha_mismatch_exits_2_with_one_line(tmp_path, monkeypatch, capsys):
    archive = _sdist(tmp_path / "vllm-9.9.9.tar.gz")
    monkeypatch.setattr(run, "installed_vllm_version", lambda: "9.9.9")
    monkeypatch.setattr(sdist, "registry_sdist",
                        lambda version: sdist.SdistFile(f"vllm-{version}.tar.gz", archive.as_uri(), "a" * 64))
    cache, work = tmp_path / "cache", tmp_path / "work"
    code = run.cli(["--variants", "early-return", "--files", "core", "--cache-dir", str(cache), "--work", str(work),
                    "--no-save"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "sha256" in err and "a" * 64 in err
    assert list(cache.iterdir()) == [] and list(work.iterdir()) == []


def test_registry_listing_picks_the_sdist():
    listing = {"files": [
        {"filename": "vllm-0.32.0-cp38-abi3-manylinux1_x86_64.whl", "url": "u1", "hashes": {"sha256": "11"}},
        {"filename": "vllm-0.32.0.tar.gz", "url": "u2", "hashes": {"sha256": "AB" * 32}, "size": 5},
        {"filename": "vllm-0.31.0.tar.gz", "url": "u3", "hashes": {"sha256": "33"}},
    ]}
    got = sdist.parse_simple_listing(listing, "vllm", "0.32.0")
    assert (got.url, got.sha256, got.size) == ("u2", "ab" * 32, 5)
    with pytest.raises(UsageError, match="no source distribution vllm-0.30.0.tar.gz"):
        sdist.parse_simple_listing(listing, "vllm", "0.30.0")


# --------------------------------------------------------------------------------------
# the hub cache layout
# --------------------------------------------------------------------------------------


def test_hub_layout_for_a_name(tmp_path):
    hub = tmp_path / "hub"
    config = b'{"model_type": "opt"}\n'
    snap = write_hub_model(hub, "facebook/opt-125m", lambda out: (out / "config.json").write_bytes(config))
    # the revision: SHA-1 over each file's relative name and bytes, worked out here by hand
    rev = hashlib.sha1(b"config.json\0" + config + b"\0").hexdigest()
    assert snap == hub / "models--facebook--opt-125m" / "snapshots" / rev
    assert (snap / "config.json").read_bytes() == config
    assert (hub / "models--facebook--opt-125m" / "refs" / "main").read_text() == rev
    # written again with other contents: one snapshot, refs/main follows
    snap2 = write_hub_model(hub, "facebook/opt-125m", lambda out: (out / "config.json").write_bytes(b"{}"))
    assert [p.name for p in (hub / "models--facebook--opt-125m" / "snapshots").iterdir()] == [snap2.name]
    assert (hub / "models--facebook--opt-125m" / "refs" / "main").read_text() == snap2.name != rev
    assert sorted(p.name for p in hub.iterdir()) == ["models--facebook--opt-125m"]


def test_hub_layout_read_by_huggingface_hub(tmp_path):
    hf = pytest.importorskip("huggingface_hub")
    hub = tmp_path / "hub"
    snap = write_hub_model(hub, "llava-hf/llava-1.5-7b-hf", lambda out: (out / "config.json").write_text("{}"))
    found = hf.try_to_load_from_cache("llava-hf/llava-1.5-7b-hf", "config.json", cache_dir=str(hub))
    assert Path(found) == snap / "config.json"


@pytest.mark.parametrize("name", ["opt-125m", "a/b/c", "../x", "a/..", "/x"])
def test_hub_bad_names(tmp_path, name):
    with pytest.raises(UsageError, match="ORG/NAME"):
        repo_folder(tmp_path, name)


def test_models_named_reads_the_test_files(tmp_path):
    (tmp_path / "tests/v1").mkdir(parents=True)
    (tmp_path / "tests/v1/test_a.py").write_text('create(model="llava-hf/llava-1.5-7b-hf")\n')
    (tmp_path / "tests/v1/utils.py").write_text("def f(model: str = 'facebook/opt-125m'): ...\n")
    (tmp_path / "tests/v1/test_b.py").write_text('x = "org/unused"\n')
    known = {"facebook/opt-125m": None, "llava-hf/llava-1.5-7b-hf": None, "org/other": None}
    assert run.models_named(tmp_path, ["tests/v1/test_a.py"], known) == [
        "facebook/opt-125m", "llava-hf/llava-1.5-7b-hf"]
    assert run.models_named(tmp_path, ["tests/v1/test_b.py"], {"org/other": None}) == []


# --------------------------------------------------------------------------------------
# junit XML and the comparison
# --------------------------------------------------------------------------------------


def _junit(path: Path, cases: dict[str, str]) -> Path:
    """junit XML as pytest writes it; ``cases``: name -> passed | failed | error | skipped | fail+error."""
    body = []
    for name, outcome in cases.items():
        inner = {
            "passed": "",
            "failed": '<failure message="assert 1 == 2">trace</failure>',
            "error": '<error message="failed on setup with &quot;boom&quot;">trace</error>',
            "skipped": '<skipped type="pytest.skip" message="Skipped: needs CUDA">reason</skipped>',
            "fail+error": '<failure message="assert 0">t</failure><error message="teardown">t</error>',
        }[outcome]
        body.append(f'<testcase classname="tests.v1.core.test_s" name="{name}" time="0.1">{inner}</testcase>')
    path.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest" tests="1">'
                    + "".join(body) + "</testsuite></testsuites>", encoding="utf-8")
    return path


def test_parse_junit_outcomes(tmp_path):
    run = parse_junit(_junit(tmp_path / "a.xml", {"t1": "passed", "t2[x]": "failed", "t3": "error",
                                                  "t4": "skipped", "t5": "fail+error"}))
    assert {k.split("::")[1]: v.outcome for k, v in run.items()} == {
        "t1": "passed", "t2[x]": "failed", "t3": "error", "t4": "skipped", "t5": "failed"}
    assert run["tests.v1.core.test_s::t4"].message == "Skipped: needs CUDA"
    assert counts(run) == {"passed": 1, "failed": 2, "error": 1, "skipped": 1, "total": 5}


def test_parse_junit_rejects_other_files(tmp_path):
    (tmp_path / "x.xml").write_text("<html></html>")
    with pytest.raises(UsageError, match="not junit XML"):
        parse_junit(tmp_path / "x.xml")
    (tmp_path / "y.xml").write_text("not xml")
    with pytest.raises(UsageError, match="cannot read junit XML"):
        parse_junit(tmp_path / "y.xml")


def test_passes_stock_fails_under_variant_is_a_difference(tmp_path, monkeypatch):
    stock = parse_junit(_junit(tmp_path / "s.xml", {"a": "passed", "b": "passed", "c": "failed", "d": "skipped",
                                                    "e": "passed", "f": "passed", "g": "passed"}))
    variant = parse_junit(_junit(tmp_path / "v.xml", {"a": "passed", "b": "failed", "c": "passed", "d": "skipped",
                                                      "f": "error", "g": "skipped"}))
    # an explanation for the variants that run vLLM 0.20's loop (baseline does, merged does not)
    monkeypatch.setattr(own_tests, "EXPLAINED", (
        own_tests.Explanation("tests.v1.core.test_s::f", "scheduler", "loop", "older rule"),))
    got = compare_runs(stock, variant, "baseline")
    p = "tests.v1.core.test_s::"
    assert [(d["test"], d["outcome"], d["explained"]) for d in got["differences"]] == [
        (p + "b", "failed", None), (p + "f", "error", "older rule")]
    assert got["missing"] == [{"test": p + "e"}]
    assert got["fixed"] == [{"test": p + "c"}]
    # the same runs under another variant: nothing explained
    assert all(d["explained"] is None for d in compare_runs(stock, variant, "merged")["differences"])
    row = run_row("baseline", variant, 12.34, 1, stock)
    assert (row["passed"], row["failed"], row["error"], row["skipped"], row["unexplained"]) == (2, 1, 1, 2, 1)
    assert [f["test"] for f in row["failing"]] == [p + "b", p + "f"]
    assert row["skip_reasons"] == {"Skipped: needs CUDA": 2}
    assert "differences" not in run_row("stock", stock, 1.0, 1, stock)


def test_choices():
    assert own_tests.choose_variants("") == (["stock", "baseline", "pr40143", "early-return"], ["merged"])
    # merged patches nothing: stock is its run, the control, not a variant that passed
    assert own_tests.choose_variants("merged,early-return,merged") == (["stock", "early-return"], ["merged"])
    runs, controls = own_tests.choose_variants("all")
    assert "pr38794" in runs and controls == ["merged"] and "merged" not in runs
    with pytest.raises(UsageError, match="unknown vLLM A/B variant"):
        own_tests.choose_variants("nope")
    assert own_tests.choose_files("core") == list(own_tests.FILE_SETS["core"])
    assert own_tests.choose_files("core,tests/v1/test_x.py")[-1] == "tests/v1/test_x.py"
    for bad in ("nope", "tests/../x.py", "/etc/passwd"):
        with pytest.raises(UsageError):
            own_tests.choose_files(bad)


def test_the_pytest_plugin_each_run_loads_resolves():
    # ``pytest -p scripts.vllm_own.pytest_ab`` (recorded in vllm_own_tests results) names this path
    assert "(pytest -p scripts.vllm_own.pytest_ab)" in Path(run.__file__).read_text(encoding="utf-8")
    assert importlib.util.find_spec("scripts.vllm_own.pytest_ab") is not None
