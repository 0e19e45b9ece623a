"""``runs/sweep/evidence.py``'s decisions at unit speed (issue 48 item 3; milliseconds, no model, no CLI): what a
shared sweep.json must hold for a release to take its setting (``read_sweep`` and its checks, each on the field it
names), and what ``recipe_from_sweep`` applies (the confirmed variant from the recipe's own text, a replaced data
file's Hub origin dropped, prune for a scale of 0, a base bound by content). Written for the mutmut survivors of
``scripts/mutation.sh evidence``; the CLI tests of ``--from-sweep`` stay."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from mathneuro_edit.errors import InputError
from mathneuro_edit.recipe.io import quickstart_recipe
from mathneuro_edit.runs.sweep import evidence as ev
from mathneuro_edit.runs.sweep.evidence import SweepEvidence, read_sweep, recipe_from_sweep

from ._sweep_json import CONF, SEL, control_evidence, valid_sweep

A, B = "a" * 64, "b" * 64


# ------------------------------------------------------------------------------------------- small pure parts


def test_a_key_only_the_other_recipe_has_is_a_difference() -> None:
    assert list(ev._differences({"a": 1}, {"a": 1, "b": 2})) == [("b", None, 2)]


def test_a_shown_value_is_its_repr_cut_at_80() -> None:
    assert ev._shown(5) == "5"
    assert ev._shown("x" * 100) == repr("x" * 100)[:80]


def test_the_gist_of_a_recommendation() -> None:
    assert ev._gist("a (b) c [d]") == "a c"
    assert ev._gist("a  b") == "a b"
    assert ev._gist("a; b") == "a"
    assert ev._gist("ab") == "ab"
    assert ev._gist("x" * 300) == "x" * 300  # at the limit: whole
    assert ev._gist("x" * 301) == "x" * 296 + " ..."  # one word longer than the limit: cut, marked
    assert ev._gist("a " + "(" * 9 + "x" + ")" * 9) == "a ()"  # 8 rounds of innermost groups, no more
    assert ev._gist("aa bb cc dd", 9) == "aa bb ..."  # cut at the last space that leaves room for " ..."
    assert ev._gist("a bcdefghij", 9) == "a ..."
    # only the first 4000 characters are read: a group closed after them stays (and is cut between words)
    assert ev._gist("ab (" + "x" * 3996 + ")") == "ab ..."


def test_a_fraction_s_bounds() -> None:
    assert ev._fraction(0, "w") == 0 and ev._fraction(1, "w") == 1
    assert ev._fraction(None, "w", optional=True) is None
    for bad, kw in [(None, {}), (1.5, {}), (0, {"low_open": True}), (1, {"high_open": True}), (True, {})]:
        with pytest.raises(InputError, match=r"^w: must be a number in"):
            ev._fraction(bad, "w", **kw)


def test_a_problem_list_must_be_a_list_of_sha256() -> None:
    assert ev._hashes([A], "w") == [A]
    for bad in ("", 5, None, ["x"]):
        with pytest.raises(InputError, match=r"^w: must be a list"):
            ev._hashes(bad, "w")


def test_a_point_s_numbers_and_its_maps() -> None:
    point = {"top_k": {"default": 0.05}, "scale": {"default": 1.1}, "general_kl": 0, "math_correct": 0}
    assert ev._point(point, "w") is point
    with pytest.raises(InputError, match=r"^w\.general_kl: must be a finite number >= 0"):
        ev._point({"general_kl": -1}, "w")
    with pytest.raises(InputError, match=r"^w\.general_kl: must be a finite number >= 0"):
        ev._point({"top_k": {"default": 0.05}, "general_kl": -1}, "w")  # the keys after a map are checked
    with pytest.raises(InputError, match=r"^w\.top_k: must be a number in \(0, 1\]"):
        ev._point({"top_k": {"default": 2}}, "w")  # a top_k map's values are fractions


def test_a_setting_s_values() -> None:
    assert ev._setting({"default": 0.05}, "w", "top_k") == {"default": 0.05}
    assert ev._setting(0, "w", "scale") == 0 and ev._setting(0.5, "w", "scale") == 0.5
    with pytest.raises(InputError, match=r"^w: must be a finite number >= 0"):
        ev._setting(-1, "w", "scale")


def test_an_override_of_a_setting() -> None:
    assert ev._override({"default": 0.5}) == '{"default": 0.5}'
    assert ev._override(0.5) == "0.5"


def test_a_sweep_json_of_exactly_the_bound_is_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "MAX_SWEEP_BYTES", 10)
    path = tmp_path / "sweep.json"
    path.write_bytes(b"[1,2,3,45]")  # 10 bytes
    assert ev._load(path) == (b"[1,2,3,45]", [1, 2, 3, 45])
    path.write_bytes(b"[1,2,3,456]")
    with pytest.raises(InputError, match="more than a sweep.json holds"):
        ev._load(path)


# ------------------------------------------------------------------------------------------- the control tests


def _boost(b: int, k: int, n: int = 8) -> dict[str, Any]:
    """A confirmation's formats whose three tests all count ``k`` vs ``b``, its verdicts math-boost whatever."""
    c = control_evidence(n, b, k, control_only=b)
    c["verdict"] = c["formats"][0]["verdict"] = "math-boost"
    return c


def test_formats_that_are_not_a_list_of_records_are_refused() -> None:
    for formats in ([], [5], {"x": 1}, None):
        with pytest.raises(InputError, match="no control edits or prompt formats"):
            ev._check_controls({"formats": formats}, 8, 0.05, "w")


def test_tests_that_are_not_a_list_read_as_none() -> None:
    c = _boost(0, 6)
    c["formats"][0]["tests"] = 5
    with pytest.raises(InputError, match="has no test of the candidate against base"):
        ev._check_controls(c, 8, 0.05, "w")


def test_only_the_candidate_s_test_records_are_read() -> None:
    c = _boost(0, 6)
    wrong = {**c["formats"][0]["tests"][0], "after": "general-specific", "before_only": 6, "after_only": 0}
    c["formats"][0]["tests"] += [5, wrong]  # neither is a test of the candidate
    ev._check_controls(c, 8, 0.05, "w")


def test_every_discordant_problem_may_favour_the_candidate() -> None:
    ev._check_controls(_boost(0, 8), 8, 0.05, "w")  # b + k == the test's n


@pytest.mark.parametrize(("b", "k", "alpha"), [(6, 0, 0.05), (0, 5, 0.0625), (3, 4, 0.9)])
def test_a_test_that_favours_the_base_or_is_not_below_alpha_fails(b: int, k: int, alpha: float) -> None:
    # (6, 0): significant the wrong way; (0, 5): p = 2/32 = alpha exactly; (3, 4): k > b, p = 1 > alpha
    with pytest.raises(InputError, match="does not show a gain"):
        ev._check_controls(_boost(b, k), 8, alpha, "w")


@pytest.mark.parametrize("key", ["n", "before_only", "after_only"])
def test_a_test_s_count_out_of_range_is_named_where_it_is(key: str) -> None:
    c = _boost(0, 6)
    c["formats"][0]["tests"][0][key] = -1
    with pytest.raises(InputError, match=rf"^w\.{key}: must be an integer in \[0, 8\]"):
        ev._check_controls(c, 8, 0.05, "w")


# ------------------------------------------------------------------------------------ the file's other fields


def test_a_file_without_selection_or_confirmation_is_not_a_sweep() -> None:
    for data in ({"selection": {}}, {"selection": 5, "confirmation": {"confirmed": True}}, [1]):
        with pytest.raises(InputError, match=r"^p: not a sweep.json with selection and confirmation"):
            ev._confirmed(Path("p"), data)


def test_nothing_confirmed_says_so_without_a_recommendation() -> None:
    with pytest.raises(InputError, match=r"^p: nothing was confirmed \(nothing confirmed\)"):
        ev._confirmed(Path("p"), {"selection": {}, "confirmation": {"confirmed": False}})


def test_a_confirmation_without_its_p_value_is_read() -> None:
    c = {"base_only": 0, "edited_only": 6, "base_correct": 1, "edited_correct": 7, "alpha": 0.05}
    assert ev._confirmation_counts(c, 8, "w") == (0, 6, 0.05)


def test_the_chosen_point_is_one_of_the_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ev, "MAX_POINTS", 2)
    sel = {"points": [{}, {}]}
    c = {"point": 1, "top_k": 0.05, "scale": 0}
    assert ev._chosen_point(Path("p"), sel, c, "w") == ([{}, {}], 1, 0.05, 0)  # MAX_POINTS points: taken
    for chosen in (True, 2, -1, None):
        with pytest.raises(InputError, match=r"^w\.point: must be the index"):
            ev._chosen_point(Path("p"), sel, {**c, "point": chosen}, "w")
    with pytest.raises(InputError, match=r"^p: selection\.points: must be a list of 1 to 2"):
        ev._chosen_point(Path("p"), {"points": [{}, {}, {}]}, c, "w")


def test_the_base_s_count_on_the_selection() -> None:
    assert ev._base_correct(Path("p"), {"base": 5}, 3) is None
    assert ev._base_correct(Path("p"), {"base": {"math_correct": 0}}, 3) == 0
    assert ev._base_correct(Path("p"), {"base": {"math_correct": 3}}, 3) == 3
    for bad in (True, 4, -1, 1.0):
        with pytest.raises(InputError, match=r"^p: selection\.base\.math_correct"):
            ev._base_correct(Path("p"), {"base": {"math_correct": bad}}, 3)


def test_the_three_forms_of_a_base_identity() -> None:
    for good in (
        {"gguf_sha256": A},
        {"weights_sha256": {"model.safetensors": A}},
        {"weights_sha256": {f"m-{i}.safetensors": A for i in range(10_000)}},
        {"hub_id": "org/model", "revision": "c" * 40},
    ):
        assert ev._base_identity(good, Path("p")) == good
    for bad in (
        {"x": 1},
        {"weights_sha256": {"model.bin": A}},
        {"weights_sha256": "x.safetensors"},
        {"weights_sha256": {"model.safetensors": A}, "extra": 1},
        {"weights_sha256": {}},
        {"weights_sha256": {f"m-{i}.safetensors": A for i in range(10_001)}},
        {"weights_sha256": {"model.safetensors": "x"}},
    ):
        with pytest.raises(InputError, match=r"^p: base_identity: must be"):
            ev._base_identity(bad, Path("p"))


# -------------------------------------------------------------------------------------------------- read_sweep


def _write(tmp_path: Path, data: dict[str, Any]) -> Path:
    (tmp_path / "sweep").mkdir(exist_ok=True)
    path = tmp_path / "sweep" / "sweep.json"
    path.write_text(json.dumps(data))
    return path


def test_what_a_release_takes_of_a_confirmed_sweep(tmp_path: Path) -> None:
    data = valid_sweep()
    data["confirmation"]["top_k"] = {"default": 0.05}
    data["confirmation"]["scale"] = {"default": 1.1}
    path = _write(tmp_path, data)
    e = read_sweep(path.parent)
    assert (e.top_k, e.scale) == ({"default": 0.05}, {"default": 1.1})
    assert e.selection_sha256 == tuple(SEL) and e.selection_point == data["selection"]["points"][0]
    assert (e.n_settings, e.selection_base_correct) == (1, 5)
    assert e.sweep_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()


def _edit(data: dict[str, Any], what: str) -> None:
    if what == "no confirmation":
        del data["confirmation"]
    elif what == "no points":
        data["selection"]["points"] = []
    elif what == "base count":
        data["selection"]["base"]["math_correct"] = -1
    elif what == "no formats":
        data["confirmation"]["formats"] = []
    elif what == "no base identity":
        del data["base_identity"]


@pytest.mark.parametrize("what", ["no confirmation", "no points", "base count", "no formats", "no base identity"])
def test_each_refusal_names_the_file(tmp_path: Path, what: str) -> None:
    data = valid_sweep()
    _edit(data, what)
    path = _write(tmp_path, data)
    with pytest.raises(InputError) as e:
        read_sweep(path.parent)
    assert str(e.value).startswith(f"{path}: ")


def test_a_confirmation_whose_own_p_equals_alpha_is_refused(tmp_path: Path) -> None:
    data = valid_sweep()
    c = data["confirmation"]
    c.update(alpha=0.0625, base_only=0, edited_only=5, edited_correct=6, mcnemar_p=0.0625)
    c.update(control_evidence(len(CONF), 0, 8))  # the controls pass: only the confirmation's own p fails
    with pytest.raises(InputError, match="its confirmation says confirmed, but its counts"):
        read_sweep(_write(tmp_path, data).parent)


# ------------------------------------------------------------------------------------------ recipe_from_sweep

_MATH_FILE = ["data.math.path=math.jsonl", "data.math.split=null", "data.math.hub_dataset=openai/gsm8k"]
_VARIANTS = (
    'sweep.variants=[{name: other, set: ["data.math.path=other.jsonl"]},'
    ' {name: both, set: ["data.math.path=b.jsonl", "data.math.hub_dataset=x/y"]}]'
)


def _evidence(recipe: Any, scale: Any = 1.1, top_k: Any = 0.05, **confirmation: Any) -> SweepEvidence:
    return SweepEvidence(
        top_k, scale, (), dict(confirmation), {}, 1, "s", recipe.public_dict(), None, {"gguf_sha256": A}
    )


def test_the_confirmed_setting_is_applied() -> None:
    recipe = quickstart_recipe()
    out = recipe_from_sweep(recipe, _evidence(recipe, scale=1.0, top_k=0.02), base={"gguf_sha256": A})
    assert (out.mask.top_k, out.edit.scale, out.edit.prune) == (0.02, 1.0, False)
    out = recipe_from_sweep(recipe, _evidence(recipe, scale=0), base={"gguf_sha256": A})
    assert out.edit.prune is True


def test_a_base_given_by_content_is_the_one_compared() -> None:
    recipe = quickstart_recipe()  # its own files are the organism's, not the sweep's GGUF
    assert recipe_from_sweep(recipe, _evidence(recipe), base={"gguf_sha256": A}).mask.top_k == 0.05


@pytest.mark.parametrize(
    ("sets", "shown"), [([], "'organism': GGUF"), (["base.model=x/y", "base.gguf_file=m.gguf"], "'x/y (m.gguf)': GGUF")]
)
def test_another_base_is_refused_naming_the_recipe_s_model(sets: list[str], shown: str) -> None:
    recipe = quickstart_recipe(sets)
    with pytest.raises(InputError, match=r"^W: the recipe's base\.model \(") as e:
        recipe_from_sweep(recipe, _evidence(recipe), "W", base={"gguf_sha256": B})
    assert f"base.model ({shown} sha256 {B})" in str(e.value)


def test_the_confirmed_variant_is_the_recipe_s_own_and_its_replaced_file_s_origin_is_dropped() -> None:
    recipe = quickstart_recipe([*_MATH_FILE, _VARIANTS])
    out = recipe_from_sweep(
        recipe, _evidence(recipe, variant="other", variant_set=["data.math.path=other.jsonl"]), base={"gguf_sha256": A}
    )
    assert (out.data.math.path, out.data.math.hub_dataset) == ("other.jsonl", None)
    both = _evidence(recipe, variant="both", variant_set=["data.math.path=b.jsonl", "data.math.hub_dataset=x/y"])
    out = recipe_from_sweep(recipe, both, base={"gguf_sha256": A})
    assert (out.data.math.path, out.data.math.hub_dataset) == ("b.jsonl", "x/y")
    general = quickstart_recipe(
        [
            "data.general=[{path: g.jsonl, hub_dataset: x/y}]",
            'sweep.variants=[{name: g, set: ["data.general.0.path=h.jsonl"]}]',
        ]
    )
    out = recipe_from_sweep(
        general, _evidence(general, variant="g", variant_set=["data.general.0.path=h.jsonl"]), base={"gguf_sha256": A}
    )
    assert (out.data.general[0].path, out.data.general[0].hub_dataset) == ("h.jsonl", None)
    for named in ({"variant": "nope", "variant_set": []}, {"variant": "other", "variant_set": []}):
        with pytest.raises(InputError, match=r"^W: the sweep confirmed variant .*sweep\.variants \(other, both\) "):
            recipe_from_sweep(recipe, _evidence(recipe, **named), "W", base={"gguf_sha256": A})
    plain = quickstart_recipe()
    with pytest.raises(InputError, match=r"sweep\.variants \(it has none\) "):
        recipe_from_sweep(plain, _evidence(plain, variant="other"), base={"gguf_sha256": A})


def test_a_setting_the_recipe_refuses_is_named_where_it_is() -> None:
    recipe = quickstart_recipe()
    with pytest.raises(InputError, match=r"^W: .*mask\.top_k"):
        recipe_from_sweep(recipe, _evidence(recipe, top_k=1.5), "W", base={"gguf_sha256": A})


def test_the_data_sources_whose_file_a_variant_replaces_without_its_origin() -> None:
    resolved = {
        "data": {
            "math": {"hub_dataset": "openai/gsm8k"},
            "general": [{"hub_dataset": "x/y"}, {"hub_dataset": None}, {"hub_dataset": "z/w"}],
        }
    }
    variant = ["data.math.path=a=b.jsonl", " data.general.0.path = g.jsonl", "data.general.1.path=h.jsonl"]
    assert ev._replaced_provenance(resolved, variant) == [
        "data.math.hub_dataset=null",
        "data.general.0.hub_dataset=null",
    ]
    both = ["data.math.path=x.jsonl", "data.math.hub_dataset=a/b"]
    assert ev._replaced_provenance(resolved, both) == []
    assert ev._replaced_provenance(copy.deepcopy(resolved), []) == []
