"""Plain names and resolved paths (``ding.utils.safe_paths``), on real files and symbolic links."""

import os

import pytest

from ding.utils.safe_paths import MAX_NAME_LENGTH, UnsafePathError, check_inside, check_plain_name, is_inside


@pytest.mark.parametrize('name', ['exp', 'learner0', 'policy_learner0', 'a.b-c_d', 'x' * MAX_NAME_LENGTH])
def test_plain_names_are_accepted(name):
    assert check_plain_name(name, 'name') == name


@pytest.mark.parametrize(
    'name', ['', '.', '..', '../x', 'a/b', 'a\\b', '/abs', '.hidden', 'a\x00b', 'a\nb', 'x' * 129, None, 3, ['a']]
)
def test_other_names_are_refused_naming_what(name):
    with pytest.raises(UnsafePathError, match='exp_name'):
        check_plain_name(name, 'exp_name')


def test_paths_inside_a_root_resolve_inside(tmp_path):
    root = tmp_path / 'root'
    assert check_inside(str(root), [str(root)], 'p') == os.path.realpath(root)
    assert check_inside(str(root / 'a' / '..' / 'b'), [str(root)], 'p') == os.path.realpath(root / 'b')
    assert is_inside(str(root / 'x' / 'y'), str(root))
    assert not is_inside(str(tmp_path / 'root2'), str(root))  # a common prefix is not a parent


def test_paths_leaving_a_root_are_refused(tmp_path):
    root = tmp_path / 'root'
    root.mkdir()
    os.symlink(tmp_path, root / 'up')
    for path in (tmp_path, root / '..' / 'other', root / 'up' / 'other', '/etc/passwd'):
        with pytest.raises(UnsafePathError, match='path_data .* outside the allowed directories'):
            check_inside(str(path), [str(root)], 'path_data')
    for value in ('', None, 'a\x00b'):
        with pytest.raises(UnsafePathError, match='path_data'):
            check_inside(value, [str(root)], 'path_data')


def test_a_relative_root_is_taken_from_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert check_inside(str(tmp_path / 'data' / 'x'), ['./data'], 'p') == os.path.realpath(tmp_path / 'data' / 'x')
    with pytest.raises(UnsafePathError):
        check_inside('./other', ['./data'], 'p')
