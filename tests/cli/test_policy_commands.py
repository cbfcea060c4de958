"""``context-proxy policy show|set|clear|validate`` (``proxy.cli.policy_commands``), run in process
on the suite's store: the admin API's rules apply, and nothing refused is written."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy.cli import main
from proxy.cli.policy_commands import parse_assignments

TRIGGER = "compaction.trigger_ratio"


@dataclass
class Ran:
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
        database_url: str | None) -> Any:
    """``cli(tmp_path, *args, platform=...)``: ``context-proxy policy ARGS`` in process, on the
    suite's store (``database_url``: ``CONTEXT_PROXY_DATABASE_URL`` comes before the file)."""
    def run(tmp_path: Path, *args: str, platform: str | None = None) -> Ran:
        folder = tmp_path / "policies"
        folder.mkdir(exist_ok=True)
        if platform is not None:
            (folder / "platform.yaml").write_text(platform)
        monkeypatch.setenv("CONTEXT_PROXY_DB", str(tmp_path / "proxy.db"))
        monkeypatch.setenv("CONTEXT_PROXY_POLICIES", str(folder))
        code = main(["policy", *args])
        out = capsys.readouterr()
        return Ran(code, out.out, out.err)

    return run


def fields(out: Ran) -> dict[str, Any]:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["fields"]  # type: ignore[no-any-return]


def test_set_show_clear(tmp_path: Path, cli: Any) -> None:
    f = fields(cli(tmp_path, "show", "--org", "acme", platform=""))
    assert f[TRIGGER]["effective"] == 0.8 and f[TRIGGER]["org"] is None
    f = fields(cli(tmp_path, "set", "--org", "acme", f"{TRIGGER}=0.7",
                   "masking.exclude_tools=[grep, read_file]", "compaction.summary_model=mini"))
    assert f[TRIGGER]["effective"] == 0.7
    assert f["masking.exclude_tools"]["org"] == ["grep", "read_file"]
    assert f["compaction.summary_model"]["effective"] == "mini"
    fields(cli(tmp_path, "set", "--org", "acme", "--user", "alice", f"{TRIGGER}=0.6"))
    f = fields(cli(tmp_path, "show", "--org", "acme", "--user", "alice"))
    assert (f[TRIGGER]["effective"], f[TRIGGER]["org"], f[TRIGGER]["user"]) == (0.6, 0.7, 0.6)
    f = fields(cli(tmp_path, "set", "--org", "acme", "compaction.summary_model=null"))
    assert f["compaction.summary_model"]["org"] is None  # null unsets the field
    f = fields(cli(tmp_path, "clear", "--org", "acme"))
    assert f[TRIGGER]["effective"] == 0.8 and f["masking.exclude_tools"]["org"] is None
    f = fields(cli(tmp_path, "show", "--org", "acme", "--user", "alice"))
    assert (f[TRIGGER]["effective"], f[TRIGGER]["org"]) == (0.6, None)


def test_set_applies_the_api_rules(tmp_path: Path, cli: Any) -> None:
    platform = ("locks: [masking.enabled]\n"
                "bounds: {compaction.trigger_ratio: {min: 0.5}}\n"
                "orgs: {yamlco: {policy: {}}}\n")
    cli(tmp_path, "show", "--org", "x", platform=platform)
    for args, needle in (
        (("--org", "acme", "bogus.field=1"), "bogus.field"),
        (("--org", "acme", f"{TRIGGER}=high"), TRIGGER),
        (("--org", "acme", f"{TRIGGER}=7"), TRIGGER),
        (("--org", "acme", "masking.enabled=false"), "masking.enabled"),
        (("--org", "acme", "--user", "bob", "masking.enabled=false"), "masking.enabled"),
        (("--org", "yamlco", f"{TRIGGER}=0.7"), "YAML"),
        (("--org", "acme", "no-equals-sign"), "FIELD=VALUE"),
        (("--org", "acme", f"{TRIGGER}=[unclosed"), "not valid YAML"),
    ):
        out = cli(tmp_path, "set", *args)
        assert out.returncode == 1, (args, out.stdout)
        assert needle in out.stderr, (needle, out.stderr)
    out = cli(tmp_path, "clear", "--org", "yamlco")
    assert out.returncode == 1 and "YAML" in out.stderr
    f = fields(cli(tmp_path, "show", "--org", "acme"))
    assert all(v["org"] is None for v in f.values())  # nothing was written
    f = fields(cli(tmp_path, "set", "--org", "acme", f"{TRIGGER}=0.3"))
    assert (f[TRIGGER]["effective"], f[TRIGGER]["org"], f[TRIGGER]["clamped"]) == (0.5, 0.3, True)


def test_validate(tmp_path: Path, cli: Any) -> None:
    out = cli(tmp_path, "validate", platform="locks: [masking.enabled]\n")
    assert out.returncode == 0 and out.stdout.startswith("ok:"), out.stderr
    (tmp_path / "policies" / "teams.yaml").write_text(
        "orgs: {beta: {policy: {compaction: {keep_ratio: 3}}}}\n")
    out = cli(tmp_path, "validate")
    assert out.returncode == 1
    assert "teams.yaml" in out.stderr and "orgs.beta.policy.compaction.keep_ratio" in out.stderr
    other = tmp_path / "other"
    other.mkdir()
    (other / "platform.yaml").write_text("defaults: {masking: {keep_recent: -2}}\n")
    out = cli(tmp_path, "validate", str(other))
    assert out.returncode == 1 and "defaults.masking.keep_recent" in out.stderr
    out = cli(tmp_path, "validate", str(tmp_path / "missing"))
    assert out.returncode == 1 and "not a folder" in out.stderr


def test_assignments_are_read_as_yaml() -> None:
    assert parse_assignments(["a.b=0.7", "c=[x, y]", "d=null", "e = true", "f="]) == {
        "a.b": 0.7, "c": ["x", "y"], "d": None, "e": True, "f": None}
    for bad, says in (("novalue", "FIELD=VALUE"), ("=1", "FIELD=VALUE"),
                      ("a=[open", "not valid YAML")):
        with pytest.raises(ValueError, match=says):
            parse_assignments([bad])
