"""Transformers is consulted for a config only where it can change the result."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from iterserve.model.config import parse_model_config
from iterserve.model.hf_config import needs_transformers, resolve, resolve_with_transformers
from iterserve.model.make_model import llama_config_json
from iterserve.model.presets import PRESETS


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_preset_configs_skip_transformers_and_resolve_as_it_would(preset: str) -> None:
    raw = json.loads(json.dumps(llama_config_json(PRESETS[preset], 512, 0, 1)))
    config = parse_model_config(raw)
    assert not needs_transformers(config, raw)
    assert resolve(config, raw) == resolve_with_transformers(config, raw) == config


@pytest.mark.parametrize("change", [
    {"rope_theta": None},  # a family default (absent key)
    {"rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"},
    {"architectures": ["MistralForCausalLM"], "model_type": "mistral"},
])
def test_configs_transformers_may_change_go_through_it(change: dict[str, object]) -> None:
    raw = dict(llama_config_json(PRESETS["tiny"], 512, 0, 1))
    raw.update(change)
    raw = {key: value for key, value in raw.items() if value is not None}
    assert needs_transformers(parse_model_config(raw), raw)


def test_loading_a_preset_config_does_not_import_transformers(tiny_dir) -> None:
    code = ("import sys; from iterserve.model.loader import load_config; "
            f"load_config({str(tiny_dir)!r}); print('transformers' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
