"""CallerRules for tenant and priority (pure), the key table's settings, and `--hash-key`."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

from llmtop.errors import ConfigError, UsageError
from llmtop.gateway.admission.callers import ANONYMOUS, Caller, CallerRules, bearer_key, hash_key
from llmtop.gateway.admission.controller import PRIORITIES
from llmtop.gateway.server.serve import hash_key_from
from llmtop.settings import GatewaySettings, load, read_config
from llmtop.tenants import GATEWAY_PRIORITIES, ApiKey

KEY = "sk-live-abc"
DIGEST = hashlib.sha256(KEY.encode()).hexdigest()


def test_settings_know_the_admission_priorities() -> None:
    assert GATEWAY_PRIORITIES == PRIORITIES


def test_bearer_key_is_the_token_not_the_scheme() -> None:
    assert bearer_key(b"Bearer sk-1") == b"sk-1"
    assert bearer_key(b"bearer   sk-1 ") == b"sk-1"
    assert bearer_key(b"Basic dXNlcg==") == b"Basic dXNlcg=="
    assert bearer_key(b"sk-raw") == b"sk-raw"


def test_untrusted_headers_ignored_and_claims_clamped() -> None:
    trust = CallerRules((ApiKey(DIGEST, "team-a", "high"), ApiKey("b" * 64, "batch", "low")))
    auth = f"Bearer {KEY}".encode()
    # a key in the table: its tenant, whatever the header says; up to its highest priority
    assert trust.caller(auth, "high", b"other") == Caller("team-a", "high", False)
    assert trust.caller(auth, None, None) == Caller("team-a", "normal", False)
    assert trust.caller(auth, "low", None) == Caller("team-a", "low", False)
    # a key not in the table: a hash of it, never the key; normal at most
    unknown = trust.caller(b"Bearer sk-other", "high", b"spoof")
    assert unknown == Caller("key:" + hash_key("sk-other")[:16], "normal", True)
    assert "sk-other" not in unknown.tenant
    # no key: the shared anonymous bucket
    assert trust.caller(None, "high", b"spoof") == Caller(ANONYMOUS, "normal", True)
    assert trust.clamped == 2


def test_a_low_key_runs_low_without_asking() -> None:
    trust = CallerRules((ApiKey(hash_key("sk-batch"), "batch", "low"),))
    assert trust.caller(b"Bearer sk-batch", None, None) == Caller("batch", "low", False)
    assert trust.caller(b"Bearer sk-batch", "high", None) == Caller("batch", "low", True)
    assert trust.clamped == 1  # only a claim counts, not the default


def test_trusted_headers_win() -> None:
    trust = CallerRules((ApiKey(DIGEST, "team-a", "low"),), trust_headers=True)
    auth = f"Bearer {KEY}".encode()
    assert trust.caller(auth, "high", b"proxy-set") == Caller("proxy-set", "high", False)
    # no header: the key table still names the tenant; priority normal
    assert trust.caller(auth, None, None) == Caller("team-a", "normal", False)
    assert trust.caller(None, None, b"") == Caller(ANONYMOUS, "normal", False)


def test_key_table_from_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "[gateway]\ntrust_client_headers = false\n"
        f'[[gateway.api_keys]]\nsha256 = "{DIGEST.upper()}"\ntenant = "team-a"\n'
        'max_priority = "high"\n'
        f'[[gateway.api_keys]]\nsha256 = "{"c" * 64}"\ntenant = "batch"\n'
    )
    s = load(GatewaySettings, config=read_config(path), environ={})
    assert s.api_keys == (ApiKey(DIGEST, "team-a", "high"), ApiKey("c" * 64, "batch", "normal"))
    assert s.trust_client_headers is False


def test_key_table_from_the_environment() -> None:
    env = {"LLMTOP_API_KEYS": f"{DIGEST}=team-a:high, {'d' * 64}=batch"}
    s = load(GatewaySettings, environ=env)
    assert s.api_keys == (ApiKey(DIGEST, "team-a", "high"), ApiKey("d" * 64, "batch", "normal"))
    t = load(GatewaySettings, environ={"LLMTOP_TRUST_CLIENT_HEADERS": "yes"})
    assert t.trust_client_headers is True


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"sha256": "abc", "tenant": "t"}], "64 hex digits"),
        ([{"sha256": "g" * 64, "tenant": "t"}], "64 hex digits"),
        ([{"sha256": "a" * 64}], "tenant must be"),
        ([{"sha256": "a" * 64, "tenant": "t", "max_priority": "urgent"}], "max_priority"),
        ([{"sha256": "a" * 64, "tenant": "t", "key": "sk-plain"}], "unknown key 'key'"),
        ([{"sha256": "a" * 64, "tenant": "t"}, {"sha256": "A" * 64, "tenant": "u"}], "twice"),
        ({"sha256": "a" * 64}, "list of keys"),
        (["not-a-row"], "64 hex digits"),
    ],
)
def test_bad_key_tables_are_config_errors(rows: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load(GatewaySettings, config={"gateway": {"api_keys": rows}}, environ={})


def test_hash_key_from_stdin_text() -> None:
    assert hash_key_from(KEY + "\n") == DIGEST
    with pytest.raises(UsageError, match="no key on stdin"):
        hash_key_from(" \n")


def test_hash_key_command_prints_the_digest() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "llmtop", "gateway", "--hash-key"],
        input=KEY + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout, done.stderr) == (0, DIGEST + "\n", "")


def test_the_documented_key_table_loads(tmp_path: Path) -> None:
    """docs/gateway.md's config example is a working config, its hashes those of its keys."""
    doc = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    example = doc.split("```toml\n[gateway]\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "config.toml"
    path.write_text("[gateway]\n" + example)
    s = load(GatewaySettings, config=read_config(path), environ={})
    assert s.api_keys == (
        ApiKey(hash_key("sk-test"), "team-a", "high"),
        ApiKey(hash_key("sk-batch"), "batch", "low"),
    )
