"""`check_same_data`: the same data read from two locations (a laptop's ../shared/data and a cluster's
claim, /mnt/factprobe/data) joins in `compare` when the data digests agree (issue 38 item 3); other
data options and a different digest are still refused."""

from __future__ import annotations

import pytest

from factprobe.errors import DataError
from factprobe.metrics.same_data import check_same_data

LAPTOP = {"source": "countryinfo", "data": None, "train_data": "/work/shared/data/lpaqa/trex_train", "seed": 0}
CLUSTER = {**LAPTOP, "train_data": "/mnt/factprobe/data/lpaqa/trex_train"}


def test_train_data_at_another_location_with_the_same_digest_joins():
    assert check_same_data(LAPTOP, CLUSTER, "sha256:aa", "sha256:aa") == ""


def test_train_data_at_another_location_with_another_digest_is_refused():
    with pytest.raises(DataError, match="--train-data"):
        check_same_data(LAPTOP, CLUSTER, "sha256:aa", "sha256:bb")


def test_without_digests_the_locations_decide():
    with pytest.raises(DataError, match="--train-data"):
        check_same_data(LAPTOP, CLUSTER)


def test_another_seed_with_the_same_digest_is_still_refused():
    with pytest.raises(DataError, match="--seed"):
        check_same_data(LAPTOP, {**CLUSTER, "seed": 1}, "sha256:aa", "sha256:aa")
