"""The bundle's small helpers, by example (issue 23: the doctests they carried, moved here)."""

from datetime import datetime, timezone

from kvplan.evidence.reading import path_problem
from kvplan.evidence.record import bundle_name, input_names, json_value
from kvplan.evidence.verify import user_paths


def test_bundle_name_is_the_utc_date_and_12_digits_of_the_inputs_digest() -> None:  # issue 23
    created = datetime(2026, 11, 29, 10, 40, tzinfo=timezone.utc)
    assert bundle_name(created, "0123456789abcdef") == "2026-11-29-0123456789ab"


def test_path_problem_names_what_leaves_the_bundle() -> None:  # issue 23
    assert path_problem("inputs/boot.log") is None
    assert path_problem("../etc/passwd") == "'..' leaves the bundle"
    assert path_problem("/etc/passwd") == "an absolute path"
    assert path_problem("charts//x.png") == "an empty or '.' part"
    assert path_problem(3) == "not a string"


def test_input_names_are_numbered_only_when_they_clash() -> None:  # issue 23
    assert input_names(["a/reference.log", "b/canary.log"]) == ["inputs/reference.log", "inputs/canary.log"]
    assert input_names(["a/x.log", "b/x.log"]) == ["inputs/1-x.log", "inputs/2-x.log"]


def test_json_value_makes_a_missing_number_null() -> None:  # issue 23
    assert json_value(float("nan")) is None and json_value(3) == 3


def test_user_paths_name_the_copies_as_the_user_gave_them() -> None:  # issue 23
    record = {"inputs": [{"bundle_path": "inputs/oom.log", "path": "data/oom.log"}]}
    assert user_paths(record, "inputs/oom.log:88: no KV cache line") == "data/oom.log:88: no KV cache line"
