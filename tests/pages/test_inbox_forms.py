"""UI-2, UI-3, HITL-6: an `ask_user` schema becomes one control per property, labelled by
the property's name, and the posted fields read back into the value the schema checks."""

from __future__ import annotations

from agentruns.answers import answer_errors
from agentruns.forms.questions import controls, typed_fields, unplaced_errors, value_from_post

SCHEMA = {
    "type": "object",
    "properties": {
        "severity": {"type": "string", "enum": ["low", "high"], "description": "How bad"},
        "hours": {"type": "integer", "minimum": 0, "maximum": 72},
        "ratio": {"type": "number", "minimum": 0.5},
        "urgent": {"type": "boolean"},
        "summary": {"type": "string", "minLength": 3, "maxLength": 40},
        "owner": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "team": {"type": "integer", "enum": [1, 2]}},
        },
    },
    "required": ["severity"],
}


def by_label(items):
    return {control.label: control for control in items}


def test_ui3_each_schema_type_gets_its_control_labelled_by_the_property_name():
    shown = by_label(controls(SCHEMA))
    assert list(shown) == ["severity", "hours", "ratio", "urgent", "summary", "owner"]
    assert shown["severity"].widget == "select" and shown["severity"].options == ("low", "high")
    assert shown["severity"].required and shown["severity"].description == "How bad"
    assert shown["hours"].widget == "number"
    assert shown["hours"].attrs == {"min": 0, "max": 72, "step": 1}
    assert shown["hours"].hint == "0 to 72"
    assert shown["ratio"].attrs == {"min": 0.5, "step": "any"}
    assert shown["urgent"].widget == "checkbox"
    assert shown["summary"].widget == "text"
    assert shown["summary"].attrs == {"minlength": 3, "maxlength": 40}
    assert shown["summary"].hint == "3 to 40 characters"


def test_nested_objects_become_fieldsets_with_their_own_controls():
    owner = by_label(controls(SCHEMA))["owner"]
    assert owner.widget == "fieldset"
    inner = by_label(owner.children)
    assert inner["name"].name == "value.owner.name" and inner["name"].path == "owner/name"
    assert inner["team"].widget == "select" and inner["team"].options == ("1", "2")


def test_hitl6_posted_fields_read_back_into_typed_values():
    post = {
        "value.severity": "high",
        "value.hours": "12",
        "value.ratio": "0.75",
        "value.urgent": "on",
        "value.summary": "",
        "value.owner.team": "2",
    }
    value = value_from_post(SCHEMA, post)
    assert value == {
        "severity": "high",
        "hours": 12,
        "ratio": 0.75,
        "urgent": True,
        "owner": {"team": 2},
    }
    assert answer_errors(SCHEMA, value) == {}


def test_an_unticked_checkbox_is_false_and_blank_optional_fields_are_left_out():
    assert value_from_post(SCHEMA, {"value.severity": "low"}) == {
        "severity": "low",
        "urgent": False,
    }


def test_hitl6_text_that_is_not_a_number_stays_text_so_the_schema_names_the_error():
    value = value_from_post(SCHEMA, {"value.severity": "low", "value.hours": "twelve"})
    assert value["hours"] == "twelve"
    assert "hours" in answer_errors(SCHEMA, value)


def test_typed_values_and_errors_are_shown_again_on_their_controls():
    post = {"value.severity": "high", "value.hours": "99", "note": "x"}
    errors = answer_errors(SCHEMA, value_from_post(SCHEMA, post))
    shown = by_label(controls(SCHEMA, typed_fields(post), errors))
    assert shown["hours"].value == "99"
    assert shown["hours"].errors == ("At most 72.",)
    assert shown["severity"].value == "high" and shown["severity"].errors == ()
    assert typed_fields(post) == {"value.severity": "high", "value.hours": "99"}


def test_errors_naming_no_control_are_listed_for_the_whole_form():
    items = controls(SCHEMA)
    assert unplaced_errors(items, {"": ["not an object"], "hours": ["too big"]}) == [
        "not an object"
    ]


def test_ui3_a_property_name_that_is_no_html_id_still_gets_a_working_label():
    schema = {"type": "object", "properties": {'due "date"': {"type": "string"}}}
    [control] = controls(schema)
    assert control.label == 'due "date"' and control.name == 'value.due "date"'
    assert control.dom_id == "value__due__date_"


def test_ui3_a_control_is_captioned_by_the_schemas_title_else_its_name_made_readable():
    schema = {
        "type": "object",
        "properties": {
            "severity": {"type": "string", "enum": ["low", "high"]},
            "due_date": {"type": "string"},
            "hours": {"type": "integer", "title": "Hours of downtime", "description": "Best guess"},
            "eta": {"type": "string", "title": "When it is back"},
        },
    }
    shown = by_label(controls(schema))
    assert shown["severity"].caption == "Severity"
    assert shown["hours"].caption == "Hours of downtime"
    assert shown["hours"].description == "Best guess"  # the help under the label
    # UI-3 finds a control by its property's name: kept when the words do not say it.
    assert shown["due_date"].caption == "Due date (due_date)"
    assert shown["eta"].caption == "When it is back (eta)"
    assert shown["eta"].description == ""  # the title is the caption, not repeated as help
