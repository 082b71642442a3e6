"""fusetune.Client against a real `fusetune serve` (started by the test, over a database the
real sweep wrote): exact, nearest and default answers, jobs, results, status codes as
exceptions; a server that goes away while a ConfigCache uses it."""

import json
import subprocess

import pytest

import fusetune
from conftest import TOKEN, TUNED


@pytest.fixture
def recorded(swept_db):
    with fusetune.open_db(swept_db) as db:
        (best,) = db.best_configs()
    return best


def test_exact_nearest_and_default(server, recorded, fusetune_binary):
    with fusetune.Client(server.address, token=TOKEN) as client:
        exact = client.best_config(fusetune.Problem(**TUNED), recorded.device_class)
        assert exact.provenance == "exact"
        assert exact.config.key() == recorded.config_key
        assert exact.problem_key == recorded.problem_key == fusetune.Problem(**TUNED).key()
        assert exact.distance == 0 and exact.median_us == pytest.approx(recorded.median_us)

        longer = fusetune.Problem(**dict(TUNED, q_len=128, kv_len=128))
        nearest = client.best_config(longer, recorded.device_class)
        assert nearest.provenance == "nearest"
        assert nearest.source_problem_key == recorded.problem_key
        assert nearest.distance == 2.0  # one doubling of q and one of k
        assert nearest.config.key() == recorded.config_key

        other = fusetune.Problem(**dict(TUNED, head_dim=64))  # nothing tuned at d64
        default = client.best_config(other, recorded.device_class)
        assert default.provenance == "default" and default.source_problem_key == ""
        assert default.config == fusetune.config_cache.default_config(other, recorded.device_class)

        # The CLI asks the same server and gets the same answer.
        cli = subprocess.run([fusetune_binary, "best", "--server", server.address, "--device-class",
                              recorded.device_class, "--problem", longer.key(), "--json"],
                             env={"FUSETUNE_TOKEN": TOKEN}, check=True, stdout=subprocess.PIPE).stdout
        assert TUNED["head_dim"] == 32 and nearest.config.key() in cli.decode()

        bad = fusetune.Problem(**dict(TUNED, kv_heads=3))
        answers = client.best_configs([fusetune.Problem(**TUNED), bad, other], recorded.device_class)
        assert [type(a) for a in answers] == [fusetune.BestConfigAnswer, fusetune.InvalidArgumentError,
                                              fusetune.BestConfigAnswer]
        assert "kv_heads" in str(answers[1])
        assert (answers[0].provenance, answers[2].provenance) == ("exact", "default")


def test_jobs_and_problem_keys_as_the_server_computes_them(server, recorded):
    problems = [
        fusetune.Problem(**TUNED),
        fusetune.Problem(batch=2, q_heads=4, kv_heads=2, q_len=5, kv_len=9, head_dim=32, causal=True,
                         cu_seqlens_q=[0, 5, 8], cu_seqlens_k=[0, 9, 10]),
        fusetune.Problem(kind="decode", batch=2, q_heads=8, kv_heads=2, q_len=1, kv_len=300, head_dim=64,
                         kv_valid_lens=[300, 17], page_block_size=16, kv_pool_pages=40),
    ]
    with fusetune.Client(server.address, token=TOKEN) as client:
        job_id = client.submit(problems, recorded.device_class, max_trials=2)
        job = client.job(job_id)
        assert (job.job_id, job.kind, job.state) == (job_id, "tune", "queued")
        # Keys with length hashes too: byte for byte the server's (C++) keys.
        assert list(job.problem_keys) == [p.key() for p in problems]
        assert job_id in [j.job_id for j in client.jobs(state="queued")]
        audit_id = client.submit(problems[:1], recorded.device_class, kind="audit")
        assert client.job(audit_id).kind == "audit"
        with pytest.raises(fusetune.InvalidArgumentError):
            client.submit(problems, recorded.device_class, kind="retune")
        with pytest.raises(fusetune.NotFoundError):
            client.job(999999)
        assert client.regressions() == []
        assert client.audits() == []


def test_status_codes_are_exceptions(server, recorded):
    with fusetune.Client(server.address, token="wrong") as client:
        with pytest.raises(fusetune.UnauthenticatedError):
            client.best_config(fusetune.Problem(**TUNED), recorded.device_class)
    with fusetune.Client(server.address, token=TOKEN) as client:
        with pytest.raises(fusetune.InvalidArgumentError):
            client.best_config(fusetune.Problem(**TUNED), "no-such-backend/x/y")
        with pytest.raises(fusetune.InvalidArgumentError):
            client.jobs(limit=-1)
    with pytest.raises(fusetune.InvalidArgumentError, match="^target"):
        fusetune.Client("no-port-here")
    with fusetune.Client(server.address, token=TOKEN) as client:
        with pytest.raises(fusetune.InvalidArgumentError, match="^device_class"):
            client.best_config(fusetune.Problem(**TUNED))
    with fusetune.Client(server.address, token=TOKEN, device_class=recorded.device_class) as client:
        assert client.best_config(fusetune.Problem(**TUNED)).provenance == "exact"


def test_a_server_that_goes_away_leaves_the_cache_answering(server, recorded, tmp_path):
    snapshot = str(tmp_path / "configs.json")
    tuned = fusetune.Problem(**TUNED)
    cache = fusetune.ConfigCache(server.address, token=TOKEN, snapshot=snapshot, retry_initial=0.01,
                                 retry_max=0.1, deadline=1.0)
    try:
        assert cache.lookup(tuned, recorded.device_class).provenance == "fallback"
        assert cache.flush(30)
        assert cache.lookup(tuned, recorded.device_class).provenance == "exact"

        server.stop()
        hit = cache.lookup(tuned, recorded.device_class)
        assert (hit.provenance, hit.config.key()) == ("exact", recorded.config_key)
        new = fusetune.Problem(**dict(TUNED, q_len=256, kv_len=256))
        assert cache.lookup(new, recorded.device_class).provenance == "fallback"
        assert not cache.flush(1.0)  # the fetch of `new` cannot succeed
        assert cache.stats().fetches_failed >= 1
        assert cache.lookup(tuned, recorded.device_class).config.key() == recorded.config_key
    finally:
        cache.close()

    with fusetune.Client(server.address, token=TOKEN, timeout=2.0) as client:
        with pytest.raises(fusetune.UnavailableError):
            client.best_config(tuned, recorded.device_class)

    # A process started while the server is away answers from the snapshot at once.
    with fusetune.ConfigCache(server.address, token=TOKEN, snapshot=snapshot, retry_initial=0.01,
                              retry_max=0.1, deadline=1.0) as restarted:
        hit = restarted.lookup(tuned, recorded.device_class)
        assert (hit.provenance, hit.config.key(), hit.from_snapshot) == ("exact", recorded.config_key, True)
    assert json.load(open(snapshot))["entries"][0]["config_key"] == recorded.config_key


def _closed_port() -> int:
    """A port nothing listens on (bound, then released)."""
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_several_addresses_fail_over_to_the_one_that_answers(server, recorded):
    tuned = fusetune.Problem(**TUNED)
    gone = f"127.0.0.1:{_closed_port()}"
    with fusetune.Client(f"{gone}, {server.address}", token=TOKEN, timeout=5.0) as client:
        assert client.addresses == (gone, server.address)
        assert client.current_address == gone
        assert client.best_config(tuned, recorded.device_class).provenance == "exact"
        assert client.current_address == server.address
        assert client.best_config(tuned, recorded.device_class).provenance == "exact"
        assert client.current_address == server.address
    with fusetune.Client(f"{gone},{server.address}", token=TOKEN, timeout=5.0) as client:
        # A submit is not repeated (it may have been queued): it raises, and the next call goes on.
        with pytest.raises(fusetune.UnavailableError):
            client.submit([tuned], recorded.device_class)
        assert client.current_address == server.address
        assert client.submit([tuned], recorded.device_class) > 0
    with pytest.raises(fusetune.InvalidArgumentError, match="^target"):
        fusetune.Client(f"{server.address},")
    cache = fusetune.ConfigCache(f"{gone},{server.address}", token=TOKEN, retry_initial=0.01, retry_max=0.1,
                                 deadline=5.0)
    try:
        cache.lookup(tuned, recorded.device_class)
        assert cache.flush(30)
        assert cache.lookup(tuned, recorded.device_class).provenance == "exact"
    finally:
        cache.close()
