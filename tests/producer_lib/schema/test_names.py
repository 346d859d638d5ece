import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producer_lib.errors import SchemaError
from producer_lib.schema.names import decode_name, encode_name

AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@pytest.mark.parametrize(
    "original",
    [
        "/BIC/MANDT000",
        "REVENUE$",
        "A complicated $ name",
        "Größe",
        "1ST_VALUE",
        "_x_a",
        "_x__2f_",
        "__x",
        "a b",
        "x_",
        "😀",
        "tab\there",
        "_",
    ],
    ids=lambda name: repr(name),
)
def test_awkward_names_encode_to_valid_avro_names_and_back(original):
    encoded = encode_name(original)
    assert AVRO_NAME.fullmatch(encoded)
    assert decode_name(encoded) == original


@pytest.mark.parametrize("name", ["ORDER_ID", "order_id", "_private", "__change_type", "A1"])
def test_valid_names_stay_unchanged(name):
    assert encode_name(name) == name
    assert decode_name(name) == name


@pytest.mark.parametrize(
    ("original", "encoded"),
    [
        ("/BIC/MANDT000", "_x__2f_BIC_2f_MANDT000"),
        ("REVENUE$", "_x_REVENUE_24_"),
        ("Größe", "_x_Gr_f6__df_e"),
        ("1ST_VALUE", "_x_1ST__VALUE"),
    ],
)
def test_encoding_is_readable_and_stable(original, encoded):
    assert encode_name(original) == encoded


def test_empty_name_is_an_error():
    with pytest.raises(SchemaError, match="empty"):
        encode_name("")


@pytest.mark.parametrize("bad", ["a b", "_x_", "_x__zz_", "_x__41_", "_x_a_", "_x__110000_"])
def test_decoding_rejects_names_encode_never_makes(bad):
    with pytest.raises(SchemaError):
        decode_name(bad)


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1))
def test_any_text_round_trips_through_a_valid_avro_name(original):
    encoded = encode_name(original)
    assert AVRO_NAME.fullmatch(encoded)
    assert decode_name(encoded) == original


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1), st.text(min_size=1))
def test_different_names_never_share_an_encoding(first, second):
    if first != second:
        assert encode_name(first) != encode_name(second)
