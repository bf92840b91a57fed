"""Repository scanning, version directories and version policies."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tritonclient.grpc.model_config_pb2 import ModelConfig

from modelyard.config import (
    DUPLICATE_REASON,
    available_versions,
    model_config_path,
    parse_config_text,
    scan_repositories,
    select_versions,
    validate_model_name,
)
from modelyard.errors import ConfigError, ErrorCode, InvalidArgument


def make_dirs(root: Path, *names: str) -> None:
    for name in names:
        (root / name).mkdir(parents=True, exist_ok=True)


def test_scan_lists_directories_sorted_and_ignores_files(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    make_dirs(repo, "b_model/1", "a_model/1", ".hidden")
    (repo / "README.md").write_text("not a model")
    found = scan_repositories([repo])
    assert list(found) == [".hidden", "a_model", "b_model"]  # Triton counts hidden dirs too
    loc = found["a_model"]
    assert loc.name == "a_model"
    assert loc.path == repo / "a_model"
    assert loc.repository == repo
    assert loc.loadable and loc.error == "" and loc.duplicates == ()


def test_scan_follows_symlinked_model_directories(tmp_path: Path) -> None:
    make_dirs(tmp_path, "elsewhere/m/1", "repo")
    (tmp_path / "repo" / "m").symlink_to(tmp_path / "elsewhere" / "m")
    assert list(scan_repositories([str(tmp_path / "repo")])) == ["m"]


def test_name_in_two_repositories_is_an_error_for_that_model_only(tmp_path: Path) -> None:
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    make_dirs(r1, "shared/1", "only1/1")
    make_dirs(r2, "shared/1", "only2/1")
    found = scan_repositories([r1, r2])
    assert sorted(found) == ["only1", "only2", "shared"]
    assert found["only1"].loadable and found["only2"].repository == r2
    dup = found["shared"]
    assert not dup.loadable
    assert dup.error == DUPLICATE_REASON == "model appears in two or more repositories"
    assert dup.duplicates == (r1 / "shared", r2 / "shared")


def test_missing_repository_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nope"):
        scan_repositories([tmp_path / "nope"])


@pytest.mark.parametrize("name", ["", "   ", "..", "a/b", "../x", "/abs", ".", "x\0y"])
def test_invalid_model_names(name: str) -> None:
    with pytest.raises(InvalidArgument) as info:
        validate_model_name(name)
    assert info.value.code == ErrorCode.INVALID_ARG


def test_invalid_model_name_messages() -> None:
    with pytest.raises(InvalidArgument, match="Model name cannot be empty"):
        validate_model_name(" ")
    with pytest.raises(InvalidArgument, match="must not contain path traversal characters"):
        validate_model_name("a/b")


# "a\\b" as in Triton (a Python model of that name is refused by its backend, not here).
@pytest.mark.parametrize("name", ["m", "model.identity", "my-model_2", "..x", "a..b", "a\\b"])
def test_valid_model_names(name: str) -> None:
    validate_model_name(name)


def test_available_versions_numeric_dirs_only(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    make_dirs(tmp_path, "1", "2", "10", "01", "abc", "configs", "warmup", "-1", "1.5")
    (tmp_path / "3").write_text("a file, not a version")
    with caplog.at_level(logging.WARNING):
        assert available_versions(tmp_path) == [1, 2, 10]
    assert "ignore version directory '01' which contains leading zeros" in caplog.text
    assert "ignore version directory 'abc' which fails to convert" in caplog.text


def test_available_versions_of_missing_dir_is_empty(tmp_path: Path) -> None:
    assert available_versions(tmp_path / "none") == []


def config(text: str, name: str = "m") -> ModelConfig:
    cfg = parse_config_text(text, "config.pbtxt")
    cfg.name = name
    return cfg


def test_default_policy_is_latest_one() -> None:
    assert select_versions(config(""), [3, 1, 2]) == [3]


def test_latest_n() -> None:
    cfg = config("version_policy { latest { num_versions: 2 } }")
    assert select_versions(cfg, [1, 2, 3]) == [2, 3]
    big = config("version_policy { latest { num_versions: 10 } }")
    assert select_versions(big, [1, 2]) == [1, 2]


def test_all() -> None:
    assert select_versions(config("version_policy { all { } }"), [3, 1, 2]) == [1, 2, 3]


def test_specific_missing_version_is_logged_and_skipped(caplog: pytest.LogCaptureFixture) -> None:
    cfg = config("version_policy { specific { versions: [1, 5] } }", name="sm")
    with caplog.at_level(logging.ERROR):
        assert select_versions(cfg, [1, 2]) == [1]
    assert "version 5 is specified for model 'sm', but the version directory is not present" in (
        caplog.text
    )


def test_specific_duplicates_collapse() -> None:
    cfg = config("version_policy { specific { versions: [2, 1, 2] } }")
    assert select_versions(cfg, [1, 2]) == [1, 2]


@pytest.mark.parametrize(
    ("policy", "available"),
    [
        ("version_policy { specific { versions: [7] } }", [1]),
        ("version_policy { latest { } }", [1, 2]),  # num_versions 0
        ("", []),
        ("version_policy { all { } }", []),
    ],
)
def test_no_version_selected_is_triton_error(policy: str, available: list[int]) -> None:
    with pytest.raises(ConfigError) as info:
        select_versions(config(policy, name="nv"), available)
    assert info.value.message == (
        "at least one version must be available under the version policy of model 'nv'"
    )


def test_model_config_path(tmp_path: Path) -> None:
    assert model_config_path(tmp_path) == tmp_path / "config.pbtxt"
    assert model_config_path(tmp_path, "prod") == tmp_path / "config.pbtxt"
    make_dirs(tmp_path, "configs")
    (tmp_path / "configs" / "prod.pbtxt").write_text("")
    assert model_config_path(tmp_path, "prod") == tmp_path / "configs" / "prod.pbtxt"
