import pytest

from core.bounded_labels import OTHER, BoundedLabels


def test_the_first_names_keep_their_label_and_later_ones_count_as_other():
    labels = BoundedLabels(2)
    assert [labels.label(v) for v in ("User:a", "User:b", "User:c", "User:a", "User:d", "User:b")] == [
        "User:a", "User:b", OTHER, "User:a", OTHER, "User:b"]


def test_a_limit_of_zero_puts_everyone_under_other():
    assert BoundedLabels(0).label("User:a") == OTHER


def test_a_negative_limit_is_refused():
    with pytest.raises(ValueError, match="limit must be >= 0"):
        BoundedLabels(-1)
