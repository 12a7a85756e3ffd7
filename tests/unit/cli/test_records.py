"""A bulk load's records: JSONL and CSV read a record at a time, checked by the batch route's own item schema, bad
ones named by line, batched, and keyed so that a load run again sends the same keys."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from services.cli import records
from services.cli.records import BadRecord, Defaults


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def items_of(path: Path, defaults: Defaults = Defaults()) -> list[dict]:
    return list(records.items(path, records.file_format(path), defaults))


def test_jsonl_lines_are_items_and_blank_lines_are_passed_over(tmp_path: Path):
    path = write(
        tmp_path / "notes.jsonl",
        '{"content": "Noa booked the ferry", "tags": ["trip"], "occurred_at": "2023-05-08"}\n'
        "\n"
        '"just a string"\n'
        '{"content": "with metadata", "metadata": {"source": "chat"}, "salience": 0.7}\n',
    )
    assert items_of(path) == [
        {"content": "Noa booked the ferry", "tags": ["trip"], "occurred_at": "2023-05-08T00:00:00Z"},
        {"content": "just a string"},
        {"content": "with metadata", "metadata": {"source": "chat"}, "salience": 0.7},
    ]


def test_csv_columns_map_to_fields_and_other_columns_to_metadata(tmp_path: Path):
    path = write(
        tmp_path / "notes.csv",
        "content,tags,metadata,occurred_at,speaker\n"
        '"Noa said: ""see you, then""","trip; ferry,notes","{""turn"": 3}",2023-05-08T10:00:00+02:00,Noa\n'
        "second,,,,\n",
    )
    assert items_of(path) == [
        {
            "content": 'Noa said: "see you, then"',
            "tags": ["trip", "ferry", "notes"],
            "metadata": {"turn": 3, "speaker": "Noa"},
            "occurred_at": "2023-05-08T10:00:00+02:00",
        },
        {"content": "second"},
    ]


def test_command_line_tags_are_added_to_every_item(tmp_path: Path):
    path = write(tmp_path / "n.jsonl", '{"content": "a", "tags": ["own"]}\n{"content": "b"}\n')
    assert [item["tags"] for item in items_of(path, Defaults(tags=("import",)))] == [["own", "import"], ["import"]]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("{not json", "not valid JSON"),
        ('{"tags": ["x"]}', "content: Field required"),
        ('{"content": "   "}', "content must contain non-whitespace text"),
        ('{"content": "a", "salience": 3}', "salience: Input should be less than or equal to 1"),
        ('{"content": "a", "colour": "red"}', "unknown field 'colour'"),
        ('{"content": "a", "sector": "episodic"}', "the server classifies each memory's sector"),
        ("[1, 2]", "must hold a JSON object"),
        ('{"content": "a", "user_id": "mallory"}', "user_id 'mallory' is not the batch's"),
    ],
)
def test_a_bad_record_is_named_by_its_line_with_the_reason(tmp_path: Path, line: str, why: str):
    path = write(tmp_path / "n.jsonl", '{"content": "fine"}\n\n' + line + "\n")
    checked = records.check(path, "jsonl", Defaults(user_id="alice"))
    assert (checked.items, checked.bad_count) == (1, 1)
    (bad,) = checked.bad
    assert bad.line == 3 and why in bad.reason, bad.reason
    assert str(bad).startswith("line 3: ")


def test_a_csv_record_spanning_lines_is_named_by_its_first_line(tmp_path: Path):
    path = write(tmp_path / "n.csv", 'content,salience\n"two\nlines",0.5\n"bad",2\n')
    checked = records.check(path, "csv", Defaults())
    assert checked.items == 1 and [b.line for b in checked.bad] == [4]


def test_a_csv_without_a_content_column_is_refused_at_its_header(tmp_path: Path):
    path = write(tmp_path / "n.csv", "text,tags\nhello,x\n")
    with pytest.raises(BadRecord, match="no `content` column"):
        records.check(path, "csv", Defaults())


def test_a_csv_row_with_more_cells_than_columns_is_bad(tmp_path: Path):
    path = write(tmp_path / "n.csv", "content,tags\nhello,x,extra\n")
    assert "more cells than the header" in records.check(path, "csv", Defaults()).bad[0].reason


def test_the_format_comes_from_the_suffix_unless_given(tmp_path: Path):
    assert records.file_format(tmp_path / "a.ndjson") == "jsonl"
    assert records.file_format(tmp_path / "a.txt", "csv") == "csv"
    with pytest.raises(ValueError, match="--format"):
        records.file_format(tmp_path / "a.txt")


def test_items_are_read_lazily_in_batches(tmp_path: Path):
    path = write(tmp_path / "n.jsonl", "".join(json.dumps({"content": f"m{i}"}) + "\n" for i in range(25)))
    stream = records.batches(records.items(path, "jsonl", Defaults()), 10)
    assert [len(batch) for batch in stream] == [10, 10, 5]


def test_keys_follow_the_place_and_the_content_of_a_batch():
    one, two = [{"content": "a"}], [{"content": "b"}]
    key = records.batch_key(0, one, sequence=False)
    assert key == records.batch_key(0, [{"content": "a"}], sequence=False)  # a run again sends the same key
    assert len({key, records.batch_key(1, one, sequence=False), records.batch_key(0, two, sequence=False)}) == 3
    assert key != records.batch_key(0, one, sequence=True)
    assert key.startswith("mnemoflow-batch-0-") and len(key) <= 200
