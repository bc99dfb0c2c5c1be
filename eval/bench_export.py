"""Export figures: wall time of ``export_model`` (full weights, LoRA merged, LoRA kept) and of ``verify_export``.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python eval/bench_export.py [--presets ci demo] [--samples 2]

Per arch x preset: a tiny model stands in for a full-weight run, and a rank-8 LoRA on q/v projections made with
peft for an adapter run. Verify is greedy, ``--max-new-tokens`` tokens, on ``--samples`` MedAD-Synth test records,
loading source and export one after the other. Times include model loading (what a user waits for).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from peft import LoraConfig, get_peft_model
from transformers import AutoModelForImageTextToText, AutoProcessor

from medgrpo.data.synth import generate_synth
from medgrpo.export import export_model, verify_export
from medgrpo.models.tiny import MODEL_CLASSES, build_tiny_model


def _timed(fn, *args, **kwargs) -> tuple[object, float]:
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["ci", "demo"])
    parser.add_argument("--samples", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="export-bench-"))
    data = generate_synth(root / "synth", n_train=4, n_test=args.samples, seed=0)
    print(f"{'arch':<11} {'preset':<6} {'MB':>6} {'full s':>7} {'merge s':>8} {'adapter s':>10} "
          f"{'verify s':>9} {'verify ok':>9}")
    for preset in args.presets:
        for arch in MODEL_CLASSES:
            full = build_tiny_model(arch, preset, root / f"{arch}-{preset}")
            model = AutoModelForImageTextToText.from_pretrained(full)
            lora = get_peft_model(model, LoraConfig(r=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
            adapter = root / f"{arch}-{preset}-lora"
            lora.save_pretrained(adapter)
            AutoProcessor.from_pretrained(full).save_pretrained(adapter)
            out, full_s = _timed(export_model, full, root / f"out-{arch}-{preset}")
            _, merge_s = _timed(export_model, adapter, root / f"out-{arch}-{preset}-merged")
            _, adapter_s = _timed(export_model, adapter, root / f"out-{arch}-{preset}-adapter", keep_adapter=True)
            report, verify_s = _timed(verify_export, root / f"out-{arch}-{preset}-merged", adapter, data,
                                      samples=args.samples, max_new_tokens=args.max_new_tokens)
            mb = sum(p.stat().st_size for p in Path(out).iterdir()) / 1e6
            print(f"{arch:<11} {preset:<6} {mb:>6.1f} {full_s:>7.2f} {merge_s:>8.2f} {adapter_s:>10.2f} "
                  f"{verify_s:>9.2f} {str(report.ok):>9}")


if __name__ == "__main__":
    main()
