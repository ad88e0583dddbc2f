"""What the report says of a finding is what riffd will do with it: the classes riffd is configured
to repair (published by the daemon) decide whether a finding waits for a repair or is only reported,
and a class riffd repairs only when asked says how to ask."""

from __future__ import annotations

from riffd.reports.attention import DEFAULT_REPAIR_NAMES, attention_item
from riffd.transcript.findings import OPT_IN_REPAIRS, FindingClass

FINDING = {"class": str(FindingClass.LONE_SURROGATE), "lines": [7], "message": "a lone surrogate"}


def test_an_opt_in_class_not_configured_is_not_said_to_wait_for_a_repair() -> None:
    assert FindingClass.LONE_SURROGATE in OPT_IN_REPAIRS
    item = attention_item("/p/s.jsonl", FINDING, waiting=True, repairable=DEFAULT_REPAIR_NAMES)
    assert item.state == "never_repaired" and not item.repairable
    assert "repair.classes" in item.action and "riffd ack /p/s.jsonl:7" in item.action


def test_an_opt_in_class_the_configuration_names_waits_for_its_repair() -> None:
    named = DEFAULT_REPAIR_NAMES | {str(FindingClass.LONE_SURROGATE)}
    item = attention_item("/p/s.jsonl", FINDING, waiting=True, repairable=named)
    assert item.state == "waiting_for_repair" and item.repairable
