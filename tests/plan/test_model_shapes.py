"""training_scripts/model_shapes.py against the models train.py really builds."""

import sys
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "training_scripts"
sys.path.insert(0, str(SCRIPTS))

import model  # noqa: E402  (train.py's own module, imported as train.py imports it)
import model_shapes  # noqa: E402


@pytest.mark.parametrize("preset", list(model_shapes.PRESETS))
def test_parameter_counts_match_the_built_model(preset):
    built = model.build_model(model.model_config(preset, None, None, 1))  # meta device: 70b costs nothing
    shape = model_shapes.PRESETS[preset]
    counted = sum(p.numel() for p in built.parameters())
    embedding = built.model.embed_tokens.weight.numel()
    assert model_shapes.parameter_count(shape) == counted
    assert model_shapes.embedding_parameter_count(shape) == embedding
    assert model_shapes.non_embedding_parameter_count(shape) == counted - embedding


def test_config_json_shapes_count_tied_embeddings_once_and_grouped_query_heads():
    shape = {**model_shapes.PRESETS["tiny"], "tie_word_embeddings": True, "num_key_value_heads": 2}
    config = model.LlamaConfig(**shape)
    built = model.build_model(config)
    assert model_shapes.parameter_count(config.to_dict()) == sum(p.numel() for p in built.parameters())


def test_flops_per_token_leaves_out_the_embedding_lookup():
    """issue 10: 6N over non-embedding parameters plus PaLM's attention term; at 125m and seq 2048
    counting the embedding table would overstate MFU by about 17 %."""
    shape = model_shapes.PRESETS["125m"]
    built = model.build_model(model.model_config("125m", None, None, 2048))
    # train.py's MFU takes the built model's config.
    assert model_shapes.flops_per_token(built.config.to_dict(), 2048) == model_shapes.flops_per_token(
        shape, 2048
    )
    attention = 12 * 12 * 12 * 64 * 2048
    assert (
        model_shapes.flops_per_token(shape, 2048)
        == 6 * model_shapes.non_embedding_parameter_count(shape) + attention
    )
    with_embeddings = 6 * model_shapes.parameter_count(shape) + attention
    assert with_embeddings / model_shapes.flops_per_token(shape, 2048) == pytest.approx(1.17, abs=0.01)
