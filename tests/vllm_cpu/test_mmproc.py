"""``labkit bench vllm-mmproc`` at a tiny size: vLLM's own processor benchmark and the lab's, both models.

One request of two 64 x 96 images per side, one round: every stage both sides time has a figure on
both, every stage only one side times has its figure there and a note, and each side's stages nest
inside its total. Timings themselves are never compared.
"""

from __future__ import annotations

import json

from labkit.vllm.processor.mmproc_compare import STAGE_MAP


def test_both_sides_produce_every_mapped_stage(run_root, capsys):
    from labkit.vllm.processor.mm_processor_bench import MODELS, main

    out = run_root / "mmproc.json"
    rc = main(["--images", "2", "--requests", "1", "--image-size", "64x96", "--no-save", "--json", str(out),
               "--run-dir", str(run_root / "mmproc")])
    assert rc == 0, capsys.readouterr().err
    result = json.loads(out.read_text())
    assert result["name"] == "vllm_mmproc_quick" and result["source"] == "measured-cpu"
    params = result["params"]
    assert (params["image_size"], params["images_per_request"], params["requests"]) == ("64x96", 2, 1)
    assert params["vllm_version"] and params["order"] == [f"{m}:0:{s}" for m in MODELS for s in ("vllm", "lab")]
    for model in MODELS:
        rows = {r["stage"]: r for r in result["rows"] if r["model"] == model}
        assert list(rows) == [v or lab for v, lab in STAGE_MAP]
        for v_stage, l_stage in STAGE_MAP:
            row = rows[v_stage or l_stage]
            if v_stage:
                assert row["vllm_us"] is not None and row["vllm_us"] >= 0, row
            if l_stage:
                assert row["lab_us"] is not None and row["lab_us"] >= 0, row
            if v_stage and l_stage:
                assert row["ratio"] is not None and row["status"] in ("within", "within_spread", "outside")
            else:
                assert row["status"] == "no_peer" and row["note"].startswith("no peer: ")
        for side in ("vllm_us", "lab_us"):
            assert 0 < rows["apply_hf_processor"][side] <= rows["preprocessor_total"][side]
        assert params["models"][model]["config_hash"] and params["models"][model]["verdict"].startswith(model)
