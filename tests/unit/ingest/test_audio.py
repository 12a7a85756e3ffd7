"""Speech to text with the bundled tiny.en model, on real (synthetic eSpeak NG) speech, offline."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shared.errors import ExtractionFailed
from shared.ingest import Format, extract, extract_document
from shared.ingest.audio import SAMPLE_RATE, is_speech, model_dir, sound_clips
from tests.unit.ingest import samples


def words(text: str) -> set[str]:
    return set(re.findall(r"[a-z]+", text.lower()))


def assert_heard(text: str) -> None:
    """Word accuracy on eSpeak's robotic voice, not just "something came out": tiny.en gets ~15 of SPEECH's 16
    words, but which one it misses varies (once "lazy" through an MP3); three quarters is the floor."""
    said, heard = words(samples.SPEECH), words(text)
    assert len(said & heard) >= 0.75 * len(said), text


def test_the_model_ships_as_a_local_directory() -> None:
    assert {"model.bin", "config.json", "tokenizer.json"} <= {p.name for p in model_dir().iterdir()}


def test_speech_is_transcribed_into_timed_segments(speech_wav: Path) -> None:
    extracted = extract_document(speech_wav, "audio/wav")
    assert extracted.format is Format.WAV
    assert_heard(extracted.text)  # it sometimes hears "brown fox" as "round-fark"
    for segment in extracted.elements:
        assert segment.kind == "Transcript"
        assert 0 <= segment.metadata["start"] < segment.metadata["end"] <= extracted.metadata["duration_s"] + 0.5
    assert extracted.metadata["model"].startswith("whisper-tiny.en")
    assert extracted.metadata["has_video"] is False


@pytest.mark.parametrize("container", ["mp3", "webm", "m4a"])
def test_compressed_audio_is_decoded_through_pyav(speech_wav: Path, tmp_path: Path, container: str) -> None:
    clip = samples.reencode(speech_wav, tmp_path / f"speech.{container}", container)
    extracted = extract_document(clip)
    assert extracted.format is Format(container)
    assert_heard(extracted.text)


def test_video_is_transcribed_from_its_audio_track(speech_wav: Path, tmp_path: Path) -> None:
    video = samples.reencode(speech_wav, tmp_path / "talk.mp4", "mp4")
    extracted = extract_document(video, "video/mp4")
    assert extracted.metadata["has_video"] is True
    assert_heard(extracted.text)


def test_a_video_without_audio_is_a_clear_error(speech_wav: Path, tmp_path: Path) -> None:
    silent = samples.reencode(speech_wav, tmp_path / "silent.mov", "mov", with_audio=False)
    with pytest.raises(ExtractionFailed, match="this mov video has no audio track"):
        extract_document(silent)


def test_audio_without_speech_is_an_error_not_an_empty_transcript(tmp_path: Path) -> None:
    with pytest.raises(ExtractionFailed, match=r"no speech recognised in 2\.0 s of wav audio"):
        extract(samples.tone_wav(tmp_path / "tone.wav"), Format.WAV)


def test_a_sampled_retry_over_a_silent_window_is_not_speech() -> None:
    # Measured on the 2 s tone (one run in ~40): "beep beep beep beep", no_speech 0.79, T 0.8.
    assert not is_speech(no_speech_prob=0.79, temperature=0.8)
    # Greedy decodings are kept, even when the model leans towards silence; so is speech from a retry.
    assert is_speech(no_speech_prob=0.79, temperature=0.0)
    assert is_speech(no_speech_prob=0.40, temperature=0.0)  # a lone "Yes."
    assert is_speech(no_speech_prob=0.07, temperature=0.4)


def test_undecodable_audio_is_a_clear_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.mp3"
    broken.write_bytes(b"ID3\x03\x00\x00\x00\x00\x00\x00" + b"\x13\x37" * 500)
    with pytest.raises(ExtractionFailed, match="mp3"):
        extract_document(broken)


def test_silence_is_found_by_its_energy_and_a_short_pause_stays_inside_its_clip() -> None:
    import numpy as np

    rate = SAMPLE_RATE
    tone = 0.2 * np.sin(np.arange(rate) * 2 * np.pi * 440 / rate)  # 1 s
    quiet = np.zeros(10 * rate)
    samples = np.concatenate([quiet, tone, np.zeros(rate), tone, quiet]).astype(np.float32)
    assert sound_clips(samples) == [9.5, 13.5]  # one clip from 10 s to 13 s, padded half a second each side
    assert sound_clips(np.zeros(60 * rate, dtype=np.float32)) == []
    hiss = (np.random.default_rng(1).standard_normal(rate) * 0.01).astype(np.float32)  # -40 dBFS: not silence
    assert sound_clips(hiss) == [0.0, 1.0]


def test_a_silent_recording_is_refused_without_running_the_model(tmp_path: Path) -> None:
    silent = samples.silent_wav(tmp_path / "silent.wav", seconds=300)
    with pytest.raises(ExtractionFailed, match=r"no speech recognised in 300\.0 s of wav audio: it is silent"):
        extract(silent, Format.WAV)


def test_speech_between_long_silences_is_still_heard_at_its_own_time(speech_wav: Path, tmp_path: Path) -> None:
    padded = samples.padded_wav(speech_wav, tmp_path / "padded.wav", before=45, after=45)
    extracted = extract(padded, Format.WAV)
    assert_heard(extracted.text)
    assert min(segment.metadata["start"] for segment in extracted.elements) >= 44


def test_a_recording_longer_than_the_limit_is_refused_from_its_header(tmp_path: Path) -> None:
    long = samples.silent_wav(tmp_path / "long.wav", seconds=120)
    with pytest.raises(ExtractionFailed, match=r"2\.0 minutes long; the limit is 1\.0 minutes") as refused:
        extract(long, Format.WAV, max_media_seconds=60)
    assert "MNEMOFLOW_INGEST_MAX_MEDIA_SECONDS" in refused.value.message
    assert refused.value.status_code == 422
