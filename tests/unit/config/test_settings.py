"""The settings object: defaults from the seeds, OpenMemory names, validation that explains itself."""

from __future__ import annotations

from dataclasses import astuple

import pytest
from pydantic import SecretStr, ValidationError

from shared.config import OpenAccessRefused, Settings, normalize_database_url
from shared.embedding.params import EmbeddingParams
from shared.ingest.params import IngestParams
from shared.lifecycle.compression import CompressionRules
from shared.lifecycle.formulas import ReinforcementRules, TierRules, WaypointRules
from shared.lifecycle.schedule import DecaySchedule
from shared.memory.limits import InputLimits
from shared.memory.sequence import SequenceContext
from shared.retrieval.lexical import LexicalParams
from shared.retrieval.params import RetrievalParams
from shared.retrieval.scoring import ScoringParams


def test_defaults_follow_the_seeds():
    s = Settings(_env_file=None)
    assert astuple(s.scoring.weights) == (0.6, 0.2, 0.1, 0.1)
    assert (s.rrf_k, s.waypoint_threshold) == (60, 0.75)
    assert s.min_score == 0.1  # on relevance; OpenMemory's 0.3 was on the composite (docs/retrieval.md#the-gate)
    assert (s.decay_ratio, s.decay_cold_threshold, s.decay_interval_minutes) == (0.03, 0.25, 1440)
    assert (s.tier_hot_lambda, s.tier_warm_lambda, s.tier_cold_lambda) == (0.005, 0.02, 0.05)
    assert (s.port, s.flower_port) == (8080, 5555)
    assert (s.embedding_provider, s.vector_dim) == ("local", None)  # the model decides its dimension


def test_each_group_is_its_code_s_dataclass_with_the_defaults_declared_there():
    # One declaration of each default: the dataclass the code takes. A setting left unset is that default.
    s = Settings(_env_file=None)
    expected = {
        "limits": InputLimits(),
        "context": SequenceContext(),
        "retrieval": RetrievalParams(),
        "lexical": LexicalParams(),
        "scoring": ScoringParams(),
        "waypoints": WaypointRules(),
        "reinforcement": ReinforcementRules(),
        "tiers": TierRules(),
        "compression": CompressionRules(),
        "decay": DecaySchedule(),
        "ingest": IngestParams(),
    }
    for group, default in expected.items():
        assert getattr(s, group) == default, group
    # the embedding group resolves the static model's directory under the data dir
    assert s.embedding == EmbeddingParams(static_model_path=s.resolved_static_model_path)


def test_a_group_reads_its_settings_under_their_environment_names(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_BM25_K1", "1.2")
    monkeypatch.setenv("MNEMOFLOW_WEIGHT_SALIENCE", "0.05")
    monkeypatch.setenv("OM_DECAY_THREADS", "2")
    monkeypatch.setenv("MNEMOFLOW_INGEST_ALLOWED_NETWORKS", "10.1.0.0/16")
    s = Settings(_env_file=None)
    assert s.lexical.k1 == 1.2 and s.lexical.b == LexicalParams().b
    assert s.scoring.weights.salience == 0.05
    assert s.decay.threads == 2
    assert s.ingest.allowed_networks == ("10.1.0.0/16",)


def test_openmemory_environment_names_are_honoured(monkeypatch):
    monkeypatch.setenv("OM_DECAY_RATIO", "0.1")
    monkeypatch.setenv("OM_MIN_SCORE", "0.45")
    monkeypatch.setenv("OM_REGENERATION_ENABLED", "false")
    monkeypatch.setenv("PORT", "9090")
    s = Settings()
    assert (s.decay_ratio, s.min_score, s.regeneration_enabled, s.port) == (0.1, 0.45, False, 9090)


def test_every_decay_knob_of_the_seed_carries_over(monkeypatch):
    knobs = {
        "OM_DECAY_THREADS": ("decay_threads", "5", 5),
        "OM_DECAY_COLD_THRESHOLD": ("decay_cold_threshold", "0.15", 0.15),
        "OM_DECAY_REINFORCE_ON_QUERY": ("decay_reinforce_on_query", "false", False),
        "OM_REGENERATION_ENABLED": ("regeneration_enabled", "false", False),
        "OM_MAX_VECTOR_DIM": ("max_vector_dim", "768", 768),
        "OM_MIN_VECTOR_DIM": ("min_vector_dim", "128", 128),
        "OM_SUMMARY_LAYERS": ("summary_layers", "1", 1),
        "OM_DECAY_RATIO": ("decay_ratio", "1.0", 1.0),
        "OM_DECAY_SLEEP_MS": ("decay_sleep_ms", "0", 0),
        "OM_DECAY_INTERVAL_MINUTES": ("decay_interval_minutes", "60", 60),
    }
    for name, (_, raw, _) in knobs.items():
        monkeypatch.setenv(name, raw)
    s = Settings(_env_file=None)
    assert {name: getattr(s, field) for name, (field, _, _) in knobs.items()} == {
        name: value for name, (_, _, value) in knobs.items()
    }


def test_decay_settings_that_cannot_work_are_explained():
    with pytest.raises(ValidationError, match="must be above the fingerprint"):
        Settings(_env_file=None, min_vector_dim=32)
    with pytest.raises(ValidationError, match="must not exceed OM_MAX_VECTOR_DIM"):
        Settings(_env_file=None, min_vector_dim=512, max_vector_dim=256)
    with pytest.raises(ValidationError, match=r"summary_layers|OM_SUMMARY_LAYERS"):
        Settings(_env_file=None, summary_layers=4)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgres://u:p@h/db", "postgresql+psycopg://u:p@h/db"),
        ("postgresql://u@h:5433/db?sslmode=require", "postgresql+psycopg://u@h:5433/db?sslmode=require"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
    ],
)
def test_database_url_is_normalised_to_psycopg3(url, expected):
    assert normalize_database_url(url) == expected
    assert Settings(database_url=url).database_url == expected


def test_api_keys_parse_and_bind_tenants(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", "k1-aaaaaaaaaaaa=alice, k2-bbbbbbbbbbbb=bob")
    monkeypatch.setenv("OM_API_KEY", "legacy-key-cccccccc")
    s = Settings()
    assert s.all_api_keys == {
        "k1-aaaaaaaaaaaa": "alice",
        "k2-bbbbbbbbbbbb": "bob",
        "legacy-key-cccccccc": "anonymous",
    }


def test_malformed_api_keys_are_explained(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", "justakey")
    with pytest.raises(ValidationError, match="key=tenant"):
        Settings()


def test_placeholder_keys_are_refused_outside_development(monkeypatch):
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", "changeme=alice")
    assert Settings(environment="development").all_api_keys == {"changeme": "alice"}
    with pytest.raises(ValidationError, match="key 1 of MNEMOFLOW_API_KEYS is a placeholder"):
        Settings(environment="production")


def test_chunk_size_follows_the_providers_speed_unless_set():
    assert Settings(_env_file=None, embedding_provider="local").chunk_size == 500
    assert Settings(_env_file=None, embedding_provider="openai").chunk_size == 256
    assert Settings(_env_file=None, embedding_provider="synthetic").chunk_size == 500
    assert Settings(_env_file=None, embedding_provider="local", batch_chunk_size=32).chunk_size == 32


OPERATOR, TENANT, LEGACY = "op-4f9K2xQ7mZ1vB8nR", "tk-9Hs2Lq8Xv3Wp6Zr", "om-7Yt3Kd9Qx2Lm5Nv"


def test_the_operator_key_must_be_strong_outside_development():
    with pytest.raises(ValueError, match="MNEMOFLOW_ADMIN_API_KEY is a placeholder"):
        Settings(_env_file=None, environment="production", admin_api_key="secret")
    assert Settings(_env_file=None, environment="production", admin_api_key=OPERATOR).admin_api_key is not None


@pytest.mark.parametrize(
    ("key", "why"),
    [
        (" " * 12, "contains whitespace"),
        ("open sesame please", "contains whitespace"),
        ("000000000000", "repeats too few characters"),
        ("abcabcabcabcabc", "repeats too few characters"),
        ("a" * 24, "repeats too few characters"),
        ("Xy7-short", "is shorter than 12 characters"),
    ],
)
def test_keys_that_are_not_random_are_refused_outside_development_without_being_shown(key, why):
    for name, settings in (
        ("MNEMOFLOW_ADMIN_API_KEY", {"admin_api_key": key, "api_keys": {TENANT: "alice"}}),
        ("key 2 of MNEMOFLOW_API_KEYS", {"admin_api_key": OPERATOR, "api_keys": {TENANT: "alice", key: "bob"}}),
    ):
        with pytest.raises(ValidationError) as refused:
            Settings(_env_file=None, environment="production", **settings)
        message = str(refused.value)
        assert f"{name} {why}" in message and (key.strip() == "" or key not in message)
        Settings(_env_file=None, environment="development", **settings)  # a machine of one's own: as it likes


def test_a_key_stands_for_one_caller_in_every_environment(monkeypatch):
    for environment in ("development", "production"):
        with pytest.raises(
            ValidationError, match="also MNEMOFLOW_ADMIN_API_KEY: that tenant would act as the operator"
        ):
            Settings(_env_file=None, environment=environment, admin_api_key=OPERATOR, api_keys={OPERATOR: "alice"})
        with pytest.raises(ValidationError, match="OM_API_KEY is also in MNEMOFLOW_API_KEYS for another tenant"):
            Settings(_env_file=None, environment=environment, om_api_key=LEGACY, api_keys={LEGACY: "alice"})
    Settings(_env_file=None, om_api_key=LEGACY, api_keys={LEGACY: "anonymous"})  # the same tenant twice is one
    monkeypatch.setenv("MNEMOFLOW_API_KEYS", f"{TENANT}=alice,{TENANT}=bob")
    with pytest.raises(ValidationError, match="entry 2 repeats the left side of an earlier entry") as refused:
        Settings(_env_file=None)
    assert TENANT not in str(refused.value)


def test_keyless_processes_listen_on_loopback_only_in_every_environment():
    keyless = Settings(_env_file=None, environment="development")
    for local in ("127.0.0.1", "::1", "[::1]", "localhost", "127.0.0.2", "/run/mnemoflow.sock"):
        keyless.require_keys("the gateway", listens_on=local)
    for open_ in ("0.0.0.0", "::", "192.168.1.20", "gateway.internal", "file descriptor 3"):
        with pytest.raises(OpenAccessRefused, match=f"without keys on {open_}"):
            keyless.require_keys("the gateway", listens_on=open_)
    keyed = Settings(_env_file=None, environment="production", admin_api_key=OPERATOR, api_keys={TENANT: "alice"})
    keyed.require_keys("the gateway", listens_on="0.0.0.0")


def test_outside_development_a_server_refuses_to_start_without_both_kinds_of_key():
    Settings(_env_file=None, environment="development").require_keys("the gateway")  # keyless `make run`
    for environment in ("test", "production"):
        with pytest.raises(OpenAccessRefused) as refused:
            Settings(_env_file=None, environment=environment).require_keys("the gateway")
        message = str(refused.value)
        assert "the gateway" in message and "MNEMOFLOW_API_KEYS" in message and "MNEMOFLOW_ADMIN_API_KEY" in message
    tenants_only = Settings(_env_file=None, environment="production", api_keys={TENANT: "alice"})
    with pytest.raises(OpenAccessRefused, match="no MNEMOFLOW_ADMIN_API_KEY:"):
        tenants_only.require_keys("the gateway")
    operator_only = Settings(_env_file=None, environment="production", admin_api_key=OPERATOR)
    with pytest.raises(OpenAccessRefused, match="no MNEMOFLOW_API_KEYS:"):
        operator_only.require_keys("the gateway")
    operator_only.model_copy(update={"om_api_key": LEGACY}).require_keys("the gateway")  # OM_API_KEY counts
    tenants_only.model_copy(update={"admin_api_key": SecretStr(OPERATOR)}).require_keys("the gateway")


def test_advanced_mode_gives_sectors_their_own_provider():
    from shared.embedding.factory import create_sector_embedders

    s = Settings(
        _env_file=None, embedding_provider="synthetic", embed_mode="advanced", sector_providers="procedural=static"
    )
    assert (s.provider_for("procedural"), s.provider_for("semantic")) == ("static", "synthetic")
    simple = Settings(_env_file=None, embedding_provider="synthetic")
    embedders = create_sector_embedders(simple)
    assert len({id(e) for e in embedders.values()}) == 1  # one instance serves every sector
    with pytest.raises(ValidationError, match="needs MNEMOFLOW_EMBED_MODE=advanced"):
        Settings(_env_file=None, sector_providers="procedural=static")
    with pytest.raises(ValidationError, match="unknown sector 'dreams'"):
        Settings(_env_file=None, embed_mode="advanced", sector_providers="dreams=static")
    with pytest.raises(ValidationError, match="unknown provider 'word2vec'"):
        Settings(_env_file=None, embed_mode="advanced", sector_providers="semantic=word2vec")
    with pytest.raises(ValidationError, match="must look like 'sector=provider'"):
        Settings(_env_file=None, embed_mode="advanced", sector_providers="semantic")
