"""`gateway_history`: a gateway's /admin/history answer read as a Recording, and every failure
one LlmtopError line (httpx.MockTransport: no sockets)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from llmtop.core.base.raw import RawEngine, RawPoll, Sample
from llmtop.core.record.encode import Encoder, header
from llmtop.errors import GatewayReadError, RecordingError
from llmtop.sources.history import gateway_history

URL = "http://gw.test:9000"


def _body(n: int = 3) -> bytes:
    enc = Encoder()
    lines = [header(1.0, {"gateway": URL}, 100.0)]
    for i in range(n):
        samples = (Sample("vllm:num_requests_waiting", (), float(i)),)
        raw = RawPoll(time=100.0 + i, engines=(RawEngine("http://e:8000", samples),))
        lines.append(enc.encode(raw))
    return b"".join(json.dumps(x).encode() + b"\n" for x in lines)


def _client(status: int, body: bytes, seen: list[httpx.Request]) -> httpx.AsyncClient:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(status, content=body)

    return httpx.AsyncClient(transport=httpx.MockTransport(handle))


async def test_reads_the_polls_and_sends_since_and_the_token() -> None:
    seen: list[httpx.Request] = []
    async with _client(200, gzip.compress(_body()), seen) as c:
        rec = await gateway_history(URL, "s3cret", 3600, until=200.0, client=c)
    assert [r.engines[0].samples[0].value for r in rec] == [0.0, 1.0, 2.0]  # type: ignore[index]
    (req,) = seen
    assert req.url.path == "/admin/history"
    assert req.url.params["since"] == "3600.000"
    assert req.url.params["until"] == "200.000"
    assert req.headers["authorization"] == "Bearer s3cret"


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "refused the admin token"), (403, "forbids"), (404, "has no history")],
)
async def test_refusals_are_one_line(status: int, words: str) -> None:
    async with _client(status, b"{}", []) as c:
        with pytest.raises(GatewayReadError, match=words) as e:
            await gateway_history(URL, None, 60, client=c)
    assert "\n" not in str(e.value)


async def test_garbled_answer_is_a_recording_error() -> None:
    async with _client(200, b"<html>hello</html>\n", []) as c:
        with pytest.raises(RecordingError, match="not an llmtop recording"):
            await gateway_history(URL, None, 60, client=c)


async def test_unreachable_is_one_line() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    async with httpx.AsyncClient(transport=httpx.MockTransport(refuse)) as c:
        with pytest.raises(GatewayReadError, match="not answering"):
            await gateway_history(URL, None, 60, client=c)


def test_a_fetched_recording_saved_for_the_replay_reads_back_the_same(tmp_path: Path) -> None:
    from llmtop.core.record.decode import read_recording_bytes
    from llmtop.recording.reader import read_recording
    from llmtop.recording.writer import save_recording

    rec = read_recording_bytes(_body(130) + _body(5))  # two segments
    path = save_recording(rec, tmp_path, "http://gw.test:9000 history")
    assert path.name == "gw.test-9000-history.jsonl.gz"
    assert list(read_recording(path)) == list(rec)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["report"], "give one of"),
        (["report", "x.jsonl", "--gateway", URL], "give one of"),
        (["replay", "--gateway", URL, "--prometheus", URL], "give one of"),
        (["report", "x.jsonl", "--since", "1h"], "--since goes with"),
        (["report", "--gateway", URL, "--since", "soon"], "a duration"),
    ],
)
def test_report_and_replay_take_one_source(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from llmtop.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err
    assert err.count("\n") == 1
