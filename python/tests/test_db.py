"""fusetune.open_db on copies of a database the real sweep wrote: read-only (the file is never
changed, a missing one never created, an older schema never upgraded), rows as dataclasses or
a pandas frame."""

import hashlib
import os
import shutil
import sqlite3
import subprocess

import pytest

import fusetune
from conftest import TUNED


def digest(path):
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture
def copy(tmp_path, swept_db):
    path = str(tmp_path / "copy.db")
    shutil.copy(swept_db, path)
    os.chmod(path, 0o444)
    return path


def test_reads_the_rows_the_sweep_recorded(copy, fusetune_binary):
    before = digest(copy)
    with fusetune.open_db(copy) as db:
        (best,) = db.best_configs()
        assert best.problem_key == fusetune.Problem(**TUNED).key()  # the C++ key, byte for byte
        assert best.device_class == fusetune.device_class()
        assert best.config == fusetune.Config.from_key(best.config_key)
        report = subprocess.run([fusetune_binary, "report", "--db", copy, "--json"], check=True,
                                stdout=subprocess.PIPE).stdout.decode()
        assert f'"config": "{best.config_key}"' in report
        assert db.best_configs("cuda/NVIDIA-H200/sm90") == []

        trials = db.trials(best.run_id)
        assert trials and {t.problem_key for t in trials} == {best.problem_key}
        assert best.config_key in {t.config_key for t in trials if t.outcome == "ok"}
        ok = next(t for t in trials if t.outcome == "ok")
        assert ok.median_us > 0 and len(ok.samples_us) >= 1 and isinstance(ok.samples_us[0], float)
        assert len(db.trials(problem_key=best.problem_key, device_class=best.device_class, limit=1000)) == len(trials)
        with pytest.raises(fusetune.InvalidArgumentError, match="run_id"):
            db.trials()
        assert db.regressions() == [] and db.audits() == []
    assert digest(copy) == before


def test_pandas_frames(copy):
    pandas = pytest.importorskip("pandas", reason="frames need pandas (Debian: python3-pandas)")
    with fusetune.open_db(copy) as db:
        frame = db.best_configs(frame=True)
        assert isinstance(frame, pandas.DataFrame) and list(frame["problem_key"]) == [fusetune.Problem(**TUNED).key()]
        trials = db.trials(1, frame=True)
        assert {"trial_id", "config_key", "median_us", "outcome"} <= set(trials.columns)
        assert len(trials) == len(db.trials(1))


def test_a_missing_file_is_not_found_and_not_created(tmp_path):
    path = tmp_path / "typo.db"
    with pytest.raises(fusetune.NotFoundError, match=str(path)):
        fusetune.open_db(path)
    assert not path.exists()


def test_an_older_schema_is_refused_and_left_as_it_is(tmp_path, swept_db):
    path = str(tmp_path / "old.db")
    shutil.copy(swept_db, path)
    with sqlite3.connect(path) as c:
        version = c.execute("PRAGMA user_version").fetchone()[0]
        c.execute(f"PRAGMA user_version = {version - 1}")
    with pytest.raises(fusetune.FailedPreconditionError, match="older"):
        fusetune.open_db(path)
    with sqlite3.connect(path) as c:
        assert c.execute("PRAGMA user_version").fetchone()[0] == version - 1


def test_reads_in_a_directory_it_cannot_write(tmp_path, swept_db):
    directory = tmp_path / "readonly"
    directory.mkdir()
    path = directory / "fusetune.db"
    shutil.copy(swept_db, path)
    if os.geteuid() == 0:
        # Root writes anywhere the mode bits forbid; the immutable attribute stops it too.
        if subprocess.run(["chattr", "+i", str(directory)], stderr=subprocess.DEVNULL).returncode != 0:
            pytest.skip("cannot make a directory root cannot write (chattr +i needs CAP_LINUX_IMMUTABLE)")
    else:
        directory.chmod(0o555)
    try:
        with fusetune.open_db(path) as db:
            assert len(db.best_configs()) == 1
        assert sorted(os.listdir(directory)) == ["fusetune.db"]
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(directory)])
        else:
            directory.chmod(0o755)


def test_a_closed_database_says_so(copy):
    db = fusetune.open_db(copy)
    db.close()
    with pytest.raises(fusetune.InvalidArgumentError, match="closed"):
        db.best_configs()
