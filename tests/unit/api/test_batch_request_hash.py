"""A batch's request hash, which an idempotency key is checked against: the same batch however it is spelt."""

from __future__ import annotations

from shared.api.memories import BatchRequest

ITEMS = [{"content": "Shipment 1 left"}, {"content": "Shipment 2 left", "tags": ["ops"]}]


def _hash(**body) -> str:
    return BatchRequest.model_validate({"items": ITEMS} | body).request_hash()


def test_the_same_batch_hashes_the_same_however_it_is_spelt():
    plain = _hash()
    assert len(plain) == 64
    assert _hash(sequence=False) == plain  # a default spelt out
    assert _hash(idempotency_key="k1") == _hash(idempotency_key="k2") == plain  # the key is not the request
    assert _hash(user_id="alice") == plain  # the tenant is the key's scope
    spelt = [{"tags": [], "metadata": {}, "content": "Shipment 1 left", "user_id": "alice"}, ITEMS[1]]
    assert BatchRequest.model_validate({"items": spelt}).request_hash() == plain
    dated = [{"content": "x", "metadata": {"date": "2023-05-08"}}]
    assert (
        BatchRequest.model_validate({"items": dated}).request_hash()
        == BatchRequest.model_validate({"items": [{**dated[0], "occurred_at": "2023-05-08T00:00:00Z"}]}).request_hash()
    )


def test_another_batch_hashes_otherwise():
    plain = _hash()
    others = {
        _hash(sequence=True),
        BatchRequest.model_validate({"items": ITEMS[::-1]}).request_hash(),
        BatchRequest.model_validate({"items": ITEMS[:1]}).request_hash(),
        BatchRequest.model_validate({"items": [ITEMS[0], {**ITEMS[1], "tags": []}]}).request_hash(),
        BatchRequest.model_validate({"items": [ITEMS[0], {**ITEMS[1], "salience": 0.9}]}).request_hash(),
    }
    assert plain not in others and len(others) == 5
