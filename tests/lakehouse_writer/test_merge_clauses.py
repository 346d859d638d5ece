"""The MERGE clauses rendered for Spark and for delta-rs (DataFusion): pure functions."""

from __future__ import annotations

from lakehouse_writer.rules.merge import DATAFUSION, SPARK, key_range_condition, merge_clauses

COLUMNS = ["ID", 'odd "name"', "NOTE", "__change_type", "__change_time"]


def test_both_dialects_get_the_same_clauses_quoted_their_way():
    spark = merge_clauses(COLUMNS, ["ID", 'odd "name"'], ["__change_type", "__change_time"], SPARK)
    rs = merge_clauses(
        COLUMNS, ["ID", 'odd "name"'], ["__change_type", "__change_time"], DATAFUSION
    )
    assert spark.on == '(t.`ID` <=> s.`ID`) AND (t.`odd "name"` <=> s.`odd "name"`)'
    assert rs.on == (
        '(t."ID" IS NOT DISTINCT FROM s."ID") AND '
        '(t."odd ""name""" IS NOT DISTINCT FROM s."odd ""name""")'
    )
    assert rs.delete == ('s."__action" = \'delete\' AND s."__change_time" >= t."__change_time"')
    assert spark.delete == "s.`__action` = 'delete' AND s.`__change_time` >= t.`__change_time`"
    assert set(rs.every) == {
        '"ID"',
        '"odd ""name"""',
        '"NOTE"',
        '"__change_type"',
        '"__change_time"',
    }
    assert set(rs.technical) == {'"__change_type"', '"__change_time"'}
    assert rs.insert == "s.\"__action\" != 'delete'"


def test_a_key_range_is_a_literal_condition_for_integers_and_text_only():
    assert key_range_condition("ID", 3, 90, DATAFUSION) == 't."ID" BETWEEN 3 AND 90'
    assert key_range_condition("K", "a'b", "z", SPARK) == "t.`K` BETWEEN 'a''b' AND 'z'"
    assert key_range_condition("ID", 1.5, 2.0, DATAFUSION) is None
    assert key_range_condition("ID", True, True, DATAFUSION) is None


def test_a_key_range_joins_the_match_condition_when_it_has_literals():
    on = merge_clauses(["ID"], ["ID"], [], DATAFUSION, key_range=(3, 9)).on
    assert on == '(t."ID" IS NOT DISTINCT FROM s."ID") AND t."ID" BETWEEN 3 AND 9'
    on = merge_clauses(["ID"], ["ID"], [], DATAFUSION, key_range=(1.5, 2.0)).on
    assert on == '(t."ID" IS NOT DISTINCT FROM s."ID")'
