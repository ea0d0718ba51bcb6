"""An SDK that reads a stream to its [DONE] and closes is not a client abort."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from tailreplay.sim.launcher import sim_process
from tailreplay.traces.archive.reader import ArchiveReader
from tests.proxy_helpers import exit_line_counts, start_proxy_process


def test_an_sdk_that_closes_after_done_got_the_whole_answer(tmp_path: Path) -> None:
    # With the usage the proxy asks for (--inject-usage), the SDK reads [DONE] and
    # closes while the proxy still reads the end of the upstream's chunked body: 5 of
    # 300 such streams were recorded as client_abort.
    with sim_process(["--profile", "fast"]) as production:
        proc, url, _ = start_proxy_process(production, tmp_path / "c")
        try:
            client = openai.OpenAI(base_url=f"{url}/v1", api_key="sk-x", max_retries=0)

            def one(i: int) -> int:
                stream = client.chat.completions.create(
                    model="m",
                    messages=[{"role": "user", "content": f"q {i}"}],
                    max_tokens=20,
                    stream=True,
                )
                return sum(1 for _ in stream)

            with ThreadPoolExecutor(8) as pool:
                assert all(n > 0 for n in pool.map(one, range(300)))
        finally:
            proc.terminate()
            out, _ = proc.communicate(timeout=60)
    served, written, _ = exit_line_counts(out)
    records = list(ArchiveReader(sorted((tmp_path / "c").iterdir())))
    assert len(records) == written == served == 300
    assert [r.error for r in records if r.error] == []
