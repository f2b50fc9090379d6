"""Hub models made locally for vLLM's own unit tests: config and tokenizer folders, no weights.

vLLM's scheduler tests name Hugging Face repositories (``facebook/opt-125m``,
``llava-hf/llava-1.5-7b-hf``) only to build a ``ModelConfig``; none of them loads weights.
:func:`make_hub_cache` writes such repositories into a Hugging Face cache
(``$HF_HOME/hub``) in the layout ``huggingface_hub`` reads offline.

More: scripts/vllm_own/README.md.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path
from typing import Callable

from labkit.errors import UsageError

__all__ = ["HUB_MODELS", "repo_folder", "write_hub_model", "make_hub_cache", "snapshot_revision"]


def repo_folder(hub: str | Path, repo_id: str) -> Path:
    """The cache folder of model repository ``repo_id`` (``ORG/NAME``) under ``hub``."""
    parts = repo_id.split("/")
    if len(parts) != 2 or not all(parts) or any(p in (".", "..") or "\\" in p for p in parts):
        raise UsageError(f"not a hub model name (ORG/NAME): {repo_id!r}")
    return Path(hub) / f"models--{parts[0]}--{parts[1]}"


def snapshot_revision(folder: str | Path) -> str:
    """A 40-hex revision naming a folder's files (SHA-1 over sorted relative names and contents)."""
    folder = Path(folder)
    h = hashlib.sha1()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def write_hub_model(hub: str | Path, repo_id: str, write: Callable[[Path], None]) -> Path:
    """Write repository ``repo_id`` into the cache at ``hub`` with ``write(folder)``; returns the snapshot folder.

    ``write`` fills an empty folder with the repository's files. The snapshot is named by
    :func:`snapshot_revision` and ``refs/main`` names it; an earlier snapshot of the same
    repository is replaced, so the cache holds one revision per name.
    """
    repo = repo_folder(hub, repo_id)
    tmp = repo.parent / f".{repo.name}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    files = tmp / "files"
    files.mkdir(parents=True)
    try:
        write(files)
        rev = snapshot_revision(files)
        (tmp / "snapshots").mkdir()
        files.rename(tmp / "snapshots" / rev)
        (tmp / "refs").mkdir()
        (tmp / "refs" / "main").write_text(rev, encoding="utf-8")  # no newline, as huggingface_hub writes it
        shutil.rmtree(repo, ignore_errors=True)
        tmp.rename(repo)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return repo / "snapshots" / rev


# --------------------------------------------------------------------------------------
# The models
# --------------------------------------------------------------------------------------


def _word_tokenizer(vocab: dict[str, int], special: dict[str, str], chat_template: str | None = None):
    """A fast tokenizer over ``vocab`` (token -> id), words split on spaces; ``special``: role -> token."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token=special["unk_token"]))
    core.pre_tokenizer = pre_tokenizers.Split(pattern=" ", behavior="removed")
    core.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    extra = {"chat_template": chat_template} if chat_template else {}
    return PreTrainedTokenizerFast(tokenizer_object=core, **special, **extra)


def _opt_125m(out: Path) -> None:
    from transformers import OPTConfig

    config = OPTConfig()  # the defaults are opt-125m: 12 layers of 768, 50272 tokens, 2048 positions
    config.architectures = ["OPTForCausalLM"]
    config.dtype = "float16"
    config.save_pretrained(out)
    # GPT-2's special tokens at their ids: </s> 2 is BOS/EOS and <pad> 1
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
    vocab.update({f"w{i}": i for i in range(4, config.vocab_size)})
    tok = _word_tokenizer(vocab, {"bos_token": "</s>", "eos_token": "</s>", "pad_token": "<pad>",
                                  "unk_token": "<unk>"})
    tok.save_pretrained(out)


_LLAVA_CHAT = (
    "{% for m in messages %}{{ m['role'].upper() }}: {% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for c in m['content'] %}{% if c['type'] == 'image' %}<image> {% elif c['type'] == 'text' %}"
    "{{ c['text'] }}{% endif %}{% endfor %}{% endif %} {% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}"
)


def _llava_15_7b(out: Path) -> None:
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig
    from transformers.models.clip import CLIPImageProcessorPil
    from transformers.models.llava import LlavaProcessor

    text = LlamaConfig(vocab_size=32064, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=4096,
                       rms_norm_eps=1e-5, pad_token_id=32001, bos_token_id=1, eos_token_id=2)
    vision = CLIPVisionConfig(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                              num_attention_heads=16, image_size=336, patch_size=14, projection_dim=768)
    config = LlavaConfig(vision_config=vision, text_config=text, image_token_index=32000,
                         projector_hidden_act="gelu", vision_feature_layer=-2,
                         vision_feature_select_strategy="default", image_seq_length=576)
    config.architectures = ["LlavaForConditionalGeneration"]
    config.dtype = "float16"
    config.pad_token_id = 32001
    config.save_pretrained(out)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"w{i}": i for i in range(3, 32000)})
    vocab.update({"<image>": 32000, "<pad>": 32001})
    tok = _word_tokenizer(vocab, {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>",
                                  "unk_token": "<unk>"}, _LLAVA_CHAT)
    tok.add_special_tokens({"additional_special_tokens": ["<image>"]})
    images = CLIPImageProcessorPil(size={"shortest_edge": 336}, crop_size={"height": 336, "width": 336},
                                   do_center_crop=True, image_mean=[0.48145466, 0.4578275, 0.40821073],
                                   image_std=[0.26862954, 0.26130258, 0.27577711])
    processor = LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=14,
                               vision_feature_select_strategy="default", num_additional_image_tokens=1,
                               image_token="<image>", chat_template=_LLAVA_CHAT)
    processor.save_pretrained(out)


#: hub name -> writer of its folder (config, tokenizer, processor; no weights)
HUB_MODELS: dict[str, Callable[[Path], None]] = {
    "facebook/opt-125m": _opt_125m,
    "llava-hf/llava-1.5-7b-hf": _llava_15_7b,
}


def make_hub_cache(hf_home: str | Path, names: list[str] | None = None) -> dict[str, Path]:
    """Write the models ``names`` (default: all of :data:`HUB_MODELS`) into ``<hf_home>/hub``.

    Returns name -> snapshot folder. An unknown name is a ``UsageError`` listing the known ones.
    """
    names = list(HUB_MODELS) if names is None else names
    unknown = [n for n in names if n not in HUB_MODELS]
    if unknown:
        raise UsageError(f"no local writer for hub model(s) {', '.join(unknown)}: known {', '.join(HUB_MODELS)}")
    try:
        import tokenizers  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        raise UsageError("making hub models needs transformers and tokenizers: run in .venv-vllm-cpu") from None
    hub = Path(hf_home) / "hub"
    hub.mkdir(parents=True, exist_ok=True)
    return {name: write_hub_model(hub, name, HUB_MODELS[name]) for name in names}
