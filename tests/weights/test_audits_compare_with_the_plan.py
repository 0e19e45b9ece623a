"""`verify` compares an export with what the edit plan writes, not only tensor by tensor (issue 41, the mutation
audit's untested behaviours):

- the adapter audit compares ``adapter_config.json``'s ``target_modules`` with the mask's layers: PEFT wraps
  exactly the modules listed there, so a list with a module dropped (its deltas never applied) or one added (a module
  wrapped with nothing of the mask) loads another model than the audited tensors describe;
- the GGUF audit reports a tensor the plan does not write (an extra tensor in the file, named), as it reports a
  missing one: llama.cpp loads what the file holds.

One tiny run (checkpoint, adapter and F32 GGUF of the family matrix's Llama shape) through the command line; each
test damages a copy of it and runs ``verify`` (exit 1, the finding named in the output). docs/testing.md ("Behaviours
tested in round 4") says which break each test was seen failing on.
"""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from mathneuro_edit.cli.main import main
from tests._families import save_family_base
from tests._family_shapes import family_shape

gguf = pytest.importorskip("gguf")

GGUF_NAME = "model-F32.gguf"
EXTRA = "blk.0.attn_extra.weight"


def _cli(*args) -> tuple[int, str]:
    result = CliRunner().invoke(main, [str(a) for a in args])
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[Path, Path]:
    """(run folder, base): a tiny Llama run with every output."""
    root = tmp_path_factory.mktemp("audits")
    base = save_family_base(root / "base", family_shape("Llama 3.x"))
    recipe = {
        "base": {"model": str(base), "dtype": "float32", "device": "cpu"},
        "data": {"math": "organism:math", "general": ["organism:general"], "samples": 4, "seed": 0},
        "calibration": {"max_length": 32, "batch_size": 4},
        "mask": {"method": "mathneuro", "top_k": 0.1},
        "edit": {"scale": 1.1},
        "outputs": {"checkpoint": True, "adapter": True, "gguf": "F32"},
    }
    (root / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    code, text = _cli("run", root / "recipe.yaml", "--out", root / "run", "-q")
    assert code == 0, text
    assert (root / "run" / "checkpoint" / GGUF_NAME).is_file() and (root / "run" / "adapter").is_dir()
    return root / "run", base


@pytest.fixture()
def copy(run, tmp_path) -> tuple[Path, Path]:
    folder, base = run
    out = shutil.copytree(folder, tmp_path / "run")
    for f in out.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)
    return out, base


def test_the_untouched_run_verifies(run) -> None:
    folder, base = run
    code, text = _cli("verify", folder, "--base", base, "-q")
    assert code == 0, text


# ------------------------------------------------------------------- 8. the adapter's target_modules


def _target_modules(folder: Path, change) -> list[str]:
    path = folder / "adapter" / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg["target_modules"] = change(list(cfg["target_modules"]))
    path.write_text(json.dumps(cfg, indent=2))
    return cfg["target_modules"]


@pytest.mark.parametrize(
    "how,change",
    [
        ("one module dropped", lambda m: m[1:]),
        ("one module added", lambda m: [*m, "model.layers.0.input_layernorm"]),
        ("a module renamed", lambda m: [m[0].replace("layers.0", "layers.1") + "_other", *m[1:]]),
        ("no list", lambda m: []),
    ],
)
def test_the_adapter_audit_compares_target_modules_with_the_mask_s_layers(copy, how, change) -> None:
    folder, base = copy
    _target_modules(folder, change)
    code, text = _cli("verify", folder / "adapter", "--base", base, "-q")
    assert code == 1, text
    assert "adapter_config.json: target_modules are not the mask's layers" in text, text


@pytest.mark.parametrize(
    "key,value,said",
    [
        ("target_modules", 5, "adapter_config.json: target_modules 5 is not a list of module names"),
        ("target_modules", [1, 2], "adapter_config.json: target_modules [1, 2] is not a list of module names"),
        ("target_modules", "q_proj", "adapter_config.json: target_modules 'q_proj' is not a list of module names"),
        ("r", [1] * 3, "adapter_config.json: r [1, 1, 1] is not a whole number >= 0"),
        ("r", "32", "adapter_config.json: r '32' is not a whole number >= 0"),
    ],
)
def test_an_adapter_config_value_of_the_wrong_kind_is_a_finding(copy, key, value, said) -> None:
    """Issue 48: `verify` of an adapter_config.json with `target_modules: 5` was "internal error: TypeError"; a
    value of the wrong kind is a finding (exit 1) naming it, as any other difference."""
    folder, base = copy
    path = folder / "adapter" / "adapter_config.json"
    cfg = json.loads(path.read_text())
    cfg[key] = value
    path.write_text(json.dumps(cfg))
    code, text = _cli("verify", folder / "adapter", "--base", base, "-q")
    assert code == 1 and "internal error" not in text, text
    assert said in text, text


def test_the_same_target_modules_in_another_order_verify(copy) -> None:
    """The audit compares the set (PEFT keeps a set); the file's sha256 then differs from the lock's: that finding
    alone."""
    folder, base = copy
    _target_modules(folder, lambda m: m[::-1])
    code, text = _cli("verify", folder / "adapter", "--base", base, "-q")
    assert "target_modules are not" not in text and ": OK (14 checked, 14 edited)" in text, text


# ------------------------------------------------------------- 9. a tensor the plan does not write


def _add_tensor(path: Path, name: str, n: int = 32) -> None:
    """Append an F32 tensor of ``n`` entries to a GGUF: one more tensor info (the count, the info, the data start
    realigned) and its data at the end; every other tensor's bytes and offsets stay as they are."""
    r = gguf.GGUFReader(str(path))
    raw = path.read_bytes()
    names, first = [t.name for t in r.tensors], np.array(r.tensors[0].data)  # copies: the file is rewritten below
    field = r.fields.get("general.alignment")
    align = int(field.contents()) if field is not None else gguf.GGUF_DEFAULT_ALIGNMENT
    last = r.tensors[-1].field
    infos_end = last.offset + sum(int(p.nbytes) for p in last.parts)
    data = raw[r.data_offset :]
    offset = -(-len(data) // align) * align
    info = struct.pack("<Q", len(name)) + name.encode() + struct.pack("<IQIQ", 1, n, 0, offset)  # 1-D, F32 (type 0)
    head = raw[:8] + struct.pack("<Q", len(r.tensors) + 1) + raw[16:infos_end] + info
    head += b"\0" * (-len(head) % align)
    path.write_bytes(head + data + b"\0" * (offset - len(data)) + np.arange(n, dtype=np.float32).tobytes())
    again = gguf.GGUFReader(str(path))  # a well-formed file: the old tensors unchanged, the new one readable
    assert [t.name for t in again.tensors] == [*names, name]
    np.testing.assert_array_equal(again.tensors[-1].data, np.arange(n, dtype=np.float32))
    np.testing.assert_array_equal(again.tensors[0].data, first)


def test_the_gguf_audit_names_a_tensor_the_plan_does_not_write(copy) -> None:
    folder, base = copy
    _add_tensor(folder / "checkpoint" / GGUF_NAME, EXTRA)
    code, text = _cli("verify", folder / "checkpoint", "--base", base, "-q")
    assert code == 1, text
    assert f"{GGUF_NAME}: {EXTRA}: not a tensor of this checkpoint" in text, text


def test_the_gguf_audit_names_a_tensor_the_plan_does_not_write_in_the_run_folder(copy) -> None:
    """The same through the run folder (every output audited, the lock's base, mask and scale)."""
    folder, base = copy
    _add_tensor(folder / "checkpoint" / GGUF_NAME, "token_types.weight")  # a name llama.cpp knows, not planned here
    code, text = _cli("verify", folder, "--base", base, "-q")
    assert code == 1, text
    assert f"{GGUF_NAME}: token_types.weight: not a tensor of this checkpoint" in text, text
