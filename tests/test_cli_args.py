"""Every CLI mistake ends in one line naming the argument, before any work starts; never a traceback."""

from __future__ import annotations

import argparse

import pytest

from streamgnn.cli import main
from streamgnn.cli._args import device, output_dir, output_file, positive_float, topic_name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["bench", "store", "--repeats", "-1"], "--repeats: must be a positive integer"),
        (["bench", "store", "--repeats", "0"], "--repeats: must be a positive integer"),
        (["bench", "store", "--batch-size", "0"], "--batch-size: must be a positive integer"),
        (["bench", "store", "--plot", "/no/such/dir/x.png"], "folder '/no/such/dir' does not exist"),
        (["bench", "sampler", "--events", "-5"], "--events: must be a positive integer"),
        (["bench", "sampler", "--runs", "0"], "--runs: must be a positive integer"),
        (["bench", "sampler", "--batches", "-1"], "--batches: must be a positive integer"),
        (["bench", "train", "--threads", "-1"], "--threads: must be a positive integer"),
        (["bench", "train", "--device", "bogus"], "'bogus' is not a torch device"),
        (["bench", "ingest", "--repeats", "-2"], "--repeats: must be a positive integer"),
        (["bench", "partition", "--plot", "/"], "'/' is a folder; name a file"),
        (["bench", "snapshots", "--plot", "/no/such/dir/x.png"], "folder '/no/such/dir' does not exist"),
        (["bench", "agents", "--plot", "/dev/null"], "'/dev/null' is a file; name a folder"),
        (["produce", "x", "--bootstrap", "b", "--topic", "t", "--rate", "nan"], "--rate: must be a finite"),
        (["produce", "x", "--bootstrap", "b", "--topic", "t", "--rate", "inf"], "--rate: must be a finite"),
        (["produce", "x", "--bootstrap", "b", "--topic", "bad topic!"], "not a Kafka topic name"),
        (["produce", "x", "--bootstrap", "b", "--topic", ""], "not a Kafka topic name"),
    ],
)
def test_a_bad_argument_is_one_line_before_any_work(argv, message, capsys):
    """The argument parser refuses it (``error: argument --name: ...``), and parsing is the first thing each
    command does, so nothing ran: a benchmark with a bad ``--plot`` no longer runs to the end first."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1 and "error: argument --" in errors[0], err
    assert message in errors[0] and "Traceback" not in err, err


def test_demo_refuses_an_output_folder_that_is_a_file(tmp_path, capsys):
    taken = tmp_path / "report"
    taken.write_text("not a folder")
    for out in (taken, taken / "inside"):
        with pytest.raises(SystemExit):
            main(["demo", "--out", str(out)])
        assert "is a file" in capsys.readouterr().err
    assert taken.read_text() == "not a folder"


def test_argument_types_accept_what_they_should():
    assert topic_name("edges.v2_raw-1") == "edges.v2_raw-1" and topic_name("a" * 249) == "a" * 249
    for bad in ("a" * 250, ".", "..", "ä", "a/b"):
        with pytest.raises(argparse.ArgumentTypeError):
            topic_name(bad)
    assert positive_float("2500.5") == 2500.5
    for bad in ("0", "-1", "nan", "-inf", "x"):
        with pytest.raises(argparse.ArgumentTypeError):
            positive_float(bad)
    assert device("cpu") == "cpu"
    for bad in ("meta", "cpu:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            device(bad)


def test_output_paths_are_checked(tmp_path):
    assert output_file(str(tmp_path / "plot.png")) == tmp_path / "plot.png"
    assert output_dir(str(tmp_path / "new" / "deeper")) == tmp_path / "new" / "deeper"
    with pytest.raises(argparse.ArgumentTypeError, match="is a folder"):
        output_file(str(tmp_path))
