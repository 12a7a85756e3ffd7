"""Sample documents and media generated on the spot (no binary fixtures): for the tests and bench.extract."""

from __future__ import annotations

import array
import ctypes
import email.message
import io
import math
import subprocess
import sys
import wave
import zipfile
import zlib
from pathlib import Path

import av
import docx
import numpy as np
import openpyxl
import pptx
import pypandoc
from fpdf import FPDF

SPEECH = "The quick brown fox jumps over the lazy dog. Memory engines remember documents for a long time."
# Distinct sentences: Whisper takes a window of repeated text for a decoding loop (compression ratio) and
# falls back to sampling, so a long clip must not be SPEECH said four times.
TALK = (
    "Good morning and welcome to the weekly meeting. Today we review the migration of the heron colony. "
    "Volunteers counted two hundred pairs near the old mill this spring. The water level was low after a dry "
    "winter, but the nests were safe. Next week we will repair the bird hide and paint the signs. "
    "Please send your photographs to the warden before Friday. Thank you all for your help."
)

ARTICLE_HTML = """<!DOCTYPE html>
<html><head><title>Birds Weekly | The Heron Migration</title></head><body>
<nav><ul><li><a href="/">Home</a></li><li><a href="/about">About us</a></li>
<li><a href="/shop">Shop our store</a></li></ul></nav>
<div class="sidebar"><p>Subscribe to our newsletter for weekly updates and exclusive offers!</p></div>
<article>
<h1>The Heron Migration</h1>
<p>Every spring the grey herons return to the marshes north of the city, where they build their nests
high in the alder trees and raise their young until the summer.</p>
<h2>Nesting</h2>
<p>The colony has grown from twelve pairs in 1990 to more than two hundred pairs today, according to the
annual survey carried out by volunteers of the local bird society.</p>
<ul><li>Eggs are laid in March.</li><li>Chicks fledge after about fifty days.</li></ul>
</article>
<footer><p>Copyright 2024 Birds Weekly. All rights reserved. Privacy policy. Cookie settings.</p></footer>
</body></html>
"""

MARKDOWN = """# Field Guide

Herons are large wading birds with long legs and necks. They hunt fish in shallow water.

## Identification

- Grey plumage on the back
- A black stripe above the eye

See [the society](https://example.org/herons) for more.
"""

PLAIN_TEXT = (
    "Notes from the marsh walk.\n\n"
    "We counted forty herons near the old mill this morning. The water level was low after a dry week.\n\n"
    "Next visit planned for the first Saturday of May.\n"
)


def pdf(path: Path, pages: int = 3, paragraphs_per_page: int = 1, label: str = "") -> Path:
    """A PDF whose page n says "Page n" followed by some prose (after `label`: documents of their own)."""
    document = FPDF()
    document.set_font("helvetica", size=11)
    for number in range(1, pages + 1):
        document.add_page()
        for paragraph in range(paragraphs_per_page):
            document.multi_cell(
                0,
                6,
                f"{label}Page {number}, paragraph {paragraph + 1}. The heron colony near the marsh grows every year; "
                "volunteers count nests in the alder trees each spring and write the figures in a ledger.",
                new_x="LMARGIN",
                new_y="NEXT",
            )
    document.output(str(path))
    return path


def image_only_pdf(path: Path) -> Path:
    """A PDF with drawings but no text layer, as a scanner produces (minus the picture)."""
    document = FPDF()
    document.add_page()
    document.rect(20, 20, 100, 60, style="F")
    document.output(str(path))
    return path


def docx_file(path: Path, sections: int = 2) -> Path:
    document = docx.Document()
    document.add_heading("Annual Report", level=1)
    for number in range(1, sections + 1):
        document.add_heading(f"Section {number}", level=2)
        document.add_paragraph(
            f"In section {number} the volunteers describe how the colony grew and which trees the herons chose."
        )
        document.add_paragraph(f"Finding {number}.a", style="List Bullet")
    table = document.add_table(rows=2, cols=2)
    for row, values in zip(table.rows, (("Year", "Pairs"), ("2020", "214")), strict=True):
        for cell, value in zip(row.cells, values, strict=True):
            cell.text = value
    document.save(str(path))
    return path


def pptx_file(path: Path) -> Path:
    presentation = pptx.Presentation()
    for number, body in ((1, "Herons return in spring."), (2, "Two hundred pairs nest here.")):
        slide = presentation.slides.add_slide(presentation.slide_layouts[1])
        slide.shapes.title.text = f"Slide {number}"
        slide.placeholders[1].text = body
    presentation.save(str(path))
    return path


def xlsx_file(path: Path) -> Path:
    workbook = openpyxl.Workbook()
    counts = workbook.active
    counts.title = "Counts"
    counts.append(["Year", "Pairs"])
    counts.append([1990, 12])
    counts.append([2020, 214])
    sites = workbook.create_sheet("Sites")
    sites.append(["Site", "Trees"])
    sites.append(["Old mill", "alder"])
    workbook.save(str(path))
    return path


def pandoc_file(path: Path, to: str) -> Path:
    """An EPUB or ODT written by the pandoc binary that ships in pypandoc-binary."""
    pypandoc.convert_text(MARKDOWN, to, format="md", outputfile=str(path))
    return path


def eml_file(path: Path) -> Path:
    message = email.message.EmailMessage()
    message["From"] = "warden@example.org"
    message["To"] = "volunteers@example.org"
    message["Subject"] = "Heron count on Saturday"
    message["Date"] = "Sat, 02 Mar 2024 09:00:00 +0000"
    message.set_content("Dear volunteers,\n\nThe spring heron count starts at nine at the old mill.\n\nThe warden")
    path.write_bytes(message.as_bytes())
    return path


def zip_bomb_docx(path: Path, megabytes: int) -> Path:
    """A valid DOCX whose body inflates to `megabytes` MiB of paragraphs (it is ~1/150 of that on disk)."""
    template = io.BytesIO()
    docx.Document().save(template)
    source = zipfile.ZipFile(io.BytesIO(template.getvalue()))
    head, tail = source.read("word/document.xml").split(b"<w:body>")
    paragraph = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>"
    block = paragraph * (1024 * 1024 // len(paragraph))
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as out:
        for item in source.infolist():
            if item.filename != "word/document.xml":
                out.writestr(item, source.read(item.filename))
                continue
            with out.open(item.filename, "w", force_zip64=True) as body:
                body.write(head + b"<w:body>")
                for _ in range(megabytes):
                    body.write(block)
                body.write(tail)
    return path


def text_bomb_pdf(path: Path, pages: int, lines_per_page: int = 800) -> Path:
    """A valid PDF whose pages each hold `lines_per_page` lines of ~1,000 characters in 1-point type (~0.8 million
    characters a page at the default), all drawing one deflated content stream: 100 pages are ~20 KB on disk."""
    line = b"(" + b"The heron colony near the marsh grows every year and volunteers count. " * 14 + b") '\n"
    stream = zlib.compress(b"BT /F1 1 Tf 1 TL 5 830 Td " + line * lines_per_page + b"ET", 9)
    bodies = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [" + b" ".join(b"%d 0 R" % (5 + n) for n in range(pages)) + b"] /Count %d >>" % pages,
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    page = (
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 3 0 R >> >> "
        b"/Contents 4 0 R >>"
    )
    bodies += [page] * pages
    out = bytearray(b"%PDF-1.7\n")
    offsets = []
    for number, body in enumerate(bodies, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(bodies) + 1) + b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (len(bodies) + 1, xref)
    path.write_bytes(bytes(out))
    return path


class _Espeak:
    """eSpeak NG from the espeakng-loader wheel (library and voices inside it), driven through ctypes."""

    _callback_type = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)

    def __init__(self) -> None:
        import espeakng_loader

        self.library = ctypes.CDLL(espeakng_loader.get_library_path())
        data_parent = str(Path(espeakng_loader.get_data_path()).parent).encode()
        synchronous = 2  # AUDIO_OUTPUT_SYNCHRONOUS: espeak_Synth returns once the callback has all samples
        self.sample_rate = self.library.espeak_Initialize(synchronous, 0, data_parent, 0)
        assert self.sample_rate > 0, "espeak-ng did not initialise"
        self.samples = array.array("h")
        self._callback = self._callback_type(self._collect)
        self.library.espeak_SetSynthCallback(self._callback)
        assert self.library.espeak_SetVoiceByName(b"en-us") == 0
        espeak_rate = 1  # words per minute; a little slower than the default 175 is clearer for tiny.en
        self.library.espeak_SetParameter(espeak_rate, 140, 0)

    def _collect(self, wav: ctypes.Array[ctypes.c_short], count: int, _events: int) -> int:
        if count > 0:
            self.samples.extend(wav[:count])
        return 0

    def speak(self, text: str) -> tuple[array.array[int], int]:
        self.samples = array.array("h")
        encoded = text.encode()
        status = self.library.espeak_Synth(encoded, ctypes.c_size_t(len(encoded) + 1), 0, 0, 0, 0, None, None)
        assert status == 0, f"espeak_Synth failed with {status}"
        return self.samples, self.sample_rate


def speech_wav(path: Path, text: str = SPEECH) -> Path:
    """Real synthetic speech (eSpeak NG, 22.05 kHz mono) saying `text`, the same every time.

    eSpeak NG keeps state across utterances in its process (terminating it does not reset it): only a process's first
    utterance is repeatable, and the same text said second comes out a few hundred samples longer and shaped
    differently, enough to change what tiny.en hears. So each utterance is made in a process of its own."""
    subprocess.run(
        [sys.executable, "-c", f"from {__name__} import _speak_to; _speak_to({str(path)!r}, {text!r})"],
        cwd=Path(__file__).parents[3],
        check=True,
        timeout=120,
    )
    return path


def _speak_to(path: str, text: str) -> None:
    samples, rate = _Espeak().speak(text)
    with wave.open(path, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())


def tone_wav(path: Path, seconds: float = 2.0, rate: int = 16_000) -> Path:
    """A 440 Hz tone: audio with no speech in it."""
    t = np.arange(int(seconds * rate)) / rate
    samples = (0.3 * np.sin(2 * math.pi * 440 * t) * 32767).astype(np.int16)
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(samples.tobytes())
    return path


def silent_wav(path: Path, seconds: float, rate: int = 8_000, width: int = 1) -> Path:
    """A WAV of digital silence (8 kHz, 8-bit by default: 26 minutes are 12.5 MB, under the upload limit)."""
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(width)
        out.setframerate(rate)
        silence = (b"\x80" if width == 1 else b"\x00" * width) * rate  # 8-bit PCM is unsigned: 128 is zero
        for _ in range(int(seconds)):
            out.writeframes(silence)
    return path


def padded_wav(speech: Path, path: Path, before: float, after: float) -> Path:
    """`speech` (16-bit mono) with `before` and `after` seconds of silence around it."""
    with wave.open(str(speech), "rb") as source:
        rate, frames = source.getframerate(), source.readframes(source.getnframes())
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes(b"\x00\x00" * int(before * rate) + frames + b"\x00\x00" * int(after * rate))
    return path


# container → (audio codec, video codec or None) for re-encoding a WAV with PyAV's bundled FFmpeg.
CODECS = {
    "mp3": ("libmp3lame", None),
    "m4a": ("aac", None),
    "ogg": ("libopus", None),  # this FFmpeg build has no libvorbis
    "flac": ("flac", None),
    "webm": ("libopus", None),
    "mp4": ("aac", "mpeg4"),
    "mov": ("aac", "mpeg4"),
    "avi": ("libmp3lame", "mpeg4"),
}


def reencode(wav_path: Path, out_path: Path, container: str, with_audio: bool = True) -> Path:
    """`wav_path`'s audio in another container/codec, optionally beside a small video stream (or instead of it)."""
    audio_codec, video_codec = CODECS[container]
    fmt = {"m4a": "ipod"}.get(container, container)
    with av.open(str(wav_path)) as source, av.open(str(out_path), "w", format=fmt) as target:
        in_stream = source.streams.audio[0]
        rate = 48_000 if audio_codec == "libopus" else in_stream.rate
        video = None
        if video_codec is not None:
            video = target.add_stream(video_codec, rate=10)
            video.width, video.height, video.pix_fmt = 64, 48, "yuv420p"
        audio = target.add_stream(audio_codec, rate=rate, layout="mono") if with_audio else None
        duration = float(in_stream.duration * in_stream.time_base) if in_stream.duration else 5.0
        if video is not None:
            for index in range(int(duration * 10)):
                frame = av.VideoFrame.from_ndarray(np.full((48, 64, 3), index % 255, np.uint8), format="rgb24")
                target.mux(video.encode(frame.reformat(format="yuv420p")))
            target.mux(video.encode(None))
        if audio is not None:
            resampler = av.AudioResampler(format=audio.format.name, layout="mono", rate=rate)
            for frame in source.decode(in_stream):
                frame.pts = None
                for resampled in resampler.resample(frame):
                    target.mux(audio.encode(resampled))
            for resampled in resampler.resample(None):
                target.mux(audio.encode(resampled))
            target.mux(audio.encode(None))
    return out_path
