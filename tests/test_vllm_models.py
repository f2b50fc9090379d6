"""labkit.vllm.conformance.models without vLLM: the made models' image placeholders against hand-worked counts.

vLLM's own placeholders for the same sizes are checked in tests/vllm_cpu/ (make test-vllm-cpu).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from labkit.errors import UsageError
from labkit.vllm.conformance.models import ARCHS, config_hash, image_prompt, make_model, model_arch, placeholder_layout


@pytest.mark.parametrize("width,height,soft", [
    # scale = sqrt(280 * 9 / ((h / 16) * (w / 16))); sides floor(side * scale / 48) * 48; soft = patches / 9
    (1536, 1024, 260),  # #40143's images: 624 x 960 px -> 39 x 60 patches -> 2340 / 9
    (96, 64, 260),  # the same aspect ratio, scaled up to the same budget
    (64, 64, 256),  # 768 x 768 -> 48 x 48 patches -> 2304 / 9
    (224, 224, 256),
    (900, 3, 280),  # 48 x 13872 px -> 3 x 867 patches = 289 cells, clamped to the 280 budget
])
def test_gemma4_placeholder_is_boi_soft_tokens_eoi(width, height, soft):
    p = placeholder_layout("gemma4", width, height)
    assert p.length == soft + 2 and p.num_embeds == soft
    assert p.is_embed[0] is False and p.is_embed[-1] is False and all(p.is_embed[1:-1])


@pytest.mark.parametrize("width,height,rows,cols", [
    (64, 64, 4, 4),  # 20 tokens, 16 embeddings
    (224, 224, 14, 14),  # 210 / 196
    (1536, 1024, 10, 14),  # scaled down by 1536 / 224: 224 x 149 px -> 10 rows of 14
    (40, 17, 2, 3),  # not scaled up; partial patches count
])
def test_pixtral_placeholder_rows_end_in_a_break_token(width, height, rows, cols):
    p = placeholder_layout("pixtral-llava", width, height)
    assert p.length == rows * (cols + 1) and p.num_embeds == rows * cols
    row = (True,) * cols + (False,)
    assert p.is_embed == row * rows


def test_bad_inputs_are_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="unknown model architecture"):
        placeholder_layout("llama", 64, 64)
    with pytest.raises(UsageError, match="positive"):
        placeholder_layout("gemma4", 0, 64)
    with pytest.raises(UsageError, match="not a model folder made by"):
        model_arch(tmp_path)
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="not a model folder made by labkit"):
        make_model("gemma4", tmp_path)
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_prompts_carry_one_marker_per_image():
    assert image_prompt("gemma4", 3).count("<|image|>") == 3
    assert image_prompt("pixtral-llava", 2).count("[IMG]") == 2
    assert set(ARCHS) == {"gemma4", "pixtral-llava"}


def test_config_hash_names_the_contents(tmp_path):
    a = tmp_path / "a"
    a.mkdir()
    (a / "config.json").write_text('{"x": 1}')
    h = config_hash(a)
    assert len(h) == 16 and config_hash(a) == h
    (a / "config.json").write_text('{"x": 2}')
    assert config_hash(a) != h
    with pytest.raises(UsageError, match="not found"):
        config_hash(tmp_path / "missing")


def test_make_model_without_transformers_says_where_to_run_it(tmp_path):
    code = ("import sys; sys.modules['transformers'] = None; from labkit.cli import main; "
            f"sys.exit(main(['vllm', 'make-model', '--arch', 'gemma4', '--out', {str(tmp_path / 'm')!r}]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and ".venv-vllm-cpu" in out.stderr
    assert not (tmp_path / "m").exists()
