"""Property-based tests generated from the inventory contract (playbooks/vars/contract.yml): for every
setting there, values that are absent, empty, zero, negative, of the wrong type, huge, non-finite,
unicode, YAML-special, and mappings with misspelt keys. The property: the preflight's verdict
(module_utils/bc_contract.problems, what roles/cycle/tasks/preflight.yml asserts before anything is
touched) never raises, and either refuses the value with a message that names the setting, or accepts
it with the meaning the contract documents (in its range, among its choices, non-empty where empty is
refused). The contract is the generator: a setting added there is covered the day it is added."""

from __future__ import annotations

import decimal
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_contract import problems

ROOT = Path(__file__).resolve().parents[2]
CONTRACT: dict[str, dict[str, Any]] = yaml.safe_load((ROOT / "playbooks/vars/contract.yml").read_text())["bc_contract"]
KEY = "sk-prop-5b2e91c4d7"
# a sound site: every problem a test sees comes from the one setting it varies
BASE = {"bc_unit": "sglang-k26", "bc_api_key": KEY, "bc_lb_required": False}

YAML_SPECIAL = ["yes", "no", "on", "off", "true", "false", "null", "~", "Null", "0x10", "0o17", "1e3", ".inf", "-.inf",
                ".nan", "NaN", "inf", "-0", "00", " ", "\t", "\n", ": ", "- a", "{}", "[]", "'", '"', "*alias", "&anchor",
                "!!python/object", "%", "@", "`", "${HOME}", "$(id)", "a\nb", "\x00", "é€", "💥", "\u202e"]
NUMBERS = st.one_of(st.sampled_from([0, -1, 1, -(2 ** 63), 2 ** 63, 2 ** 200, 10 ** 12]), st.integers(),
                    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([math.nan, math.inf, -math.inf, 0.5, -0.0]))
SCALARS = st.one_of(st.none(), st.booleans(), NUMBERS, st.text(max_size=40), st.sampled_from(YAML_SPECIAL))


def misspelt(keys: list[str]) -> st.SearchStrategy[str]:
    """A known key with one character changed, its case changed, or a stray one."""
    def mangle(args: tuple[str, int, str]) -> str:
        key, at, ch = args
        at = at % (len(key) + 1)
        return key[:at] + ch + key[at + 1:]
    base = st.sampled_from(keys or ["argv"])
    return st.one_of(st.tuples(base, st.integers(0, 30), st.sampled_from("_-xzA ")).map(mangle),
                     base.map(str.upper), st.text(min_size=1, max_size=12))


def hostile(spec: dict[str, Any]) -> st.SearchStrategy[Any]:
    """Values a real site, an AWX survey or an adversary could hand this setting."""
    empty = st.sampled_from(["", "  ", [], {}, None, 0])
    known = list((spec.get("default") or {}).keys()) if isinstance(spec.get("default"), dict) else []
    known += ["argv", "url", "timeout", "method", "token", "kind", "max", "level"]
    mappings = st.dictionaries(st.one_of(misspelt(known), st.sampled_from(known)), SCALARS, max_size=4)
    lists = st.lists(SCALARS, max_size=5)
    nested = st.one_of(st.lists(st.dictionaries(st.sampled_from(["kind", "kinds", "skew", "file"]), SCALARS, max_size=3),
                                max_size=3), st.lists(lists, max_size=2))
    return st.one_of(empty, SCALARS, lists, mappings, nested)


def names(message_list: list[str], name: str) -> bool:
    return any(name in m for m in message_list)


def accepted_means_what_the_contract_says(name: str, spec: dict[str, Any], value: Any) -> None:
    """An accepted value has the documented meaning: non-empty where empty is refused, a number in
    its range, one of the choices."""
    if spec.get("nonempty"):
        assert value not in ("", [], {}, None) and not (isinstance(value, str) and not value.strip()), (name, value)
    if "range" in spec and spec["type"] == "int" and not isinstance(value, (list, dict)):
        low, high = spec["range"]
        # read as Ansible reads an int (validation.py check_type_int: Decimal, which strips Unicode whitespace)
        assert not isinstance(value, bool) and low <= int(decimal.Decimal(str(value))) <= high, (name, value)
    if "choices" in spec:
        assert str(value) in [str(c) for c in spec["choices"]], (name, value)
    if name == "bc_serial":  # each batch at least one host: never the whole fleet at once by accident
        for item in value if isinstance(value, list) else [value]:
            text = str(item).strip()
            assert (text.endswith("%") and 0 < float(text[:-1]) <= 100) or int(text) >= 1, value


@pytest.mark.parametrize("name", sorted(CONTRACT))
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_every_setting_is_refused_naming_it_or_accepted_with_its_meaning(name, data):
    spec = CONTRACT[name]
    value = data.draw(hostile(spec), label=name)
    found = problems(CONTRACT, dict(BASE, **{name: value}))  # never raises: that is the first property
    assert all(isinstance(m, str) and m for m in found)
    assert not names(found, KEY), found  # the key is never quoted
    if found:
        assert names(found, name), (name, value, found)  # a refusal names the setting
    else:
        accepted_means_what_the_contract_says(name, spec, value)


@pytest.mark.parametrize("name", sorted(n for n, s in CONTRACT.items() if s.get("no_log")))
@settings(max_examples=40, deadline=None)
@given(secret=st.text(min_size=6, max_size=30).filter(lambda s: s.strip() == s and len(s.strip()) >= 6))
def test_a_secret_value_never_appears_in_a_refusal(name, secret):
    for value in (secret + "\n", {"url": "ftp://x", "token": secret}, [secret], {"token": secret, "tags": secret}):
        found = problems(CONTRACT, dict(BASE, **{name: value}))
        assert not any(secret in m for m in found), (value, found)


@pytest.mark.parametrize("name", ["bc_lb_remove", "bc_lb_restore"])
@settings(max_examples=80, deadline=None)
@given(hook=st.dictionaries(misspelt(["argv", "url", "timeout", "method", "headers", "body", "status_code"]), SCALARS,
                            min_size=1, max_size=3))
def test_a_router_hook_with_a_misspelt_key_is_never_taken_for_a_hook(name, hook):
    other = "bc_lb_restore" if name == "bc_lb_remove" else "bc_lb_remove"
    found = problems(CONTRACT, dict(BASE, **{name: hook, other: {"argv": ["/usr/local/bin/lb", "x"]}}))
    valid_keys = {"argv", "timeout"} if "argv" in hook else {"url", "method", "headers", "body", "status_code", "timeout"}
    if not set(hook) <= valid_keys or not ({"argv", "url"} & set(hook)):
        assert names(found, name), (hook, found)


def test_every_setting_says_what_absent_and_empty_mean():
    for name, spec in CONTRACT.items():
        if spec["type"] in ("str", "list", "dict", "path", "raw"):
            assert spec.get("nonempty") is True or len(spec.get("empty", "")) > 3, name
        if spec["type"] == "int":
            assert "range" in spec, name  # zero and negatives have a stated meaning: inside the range or refused


def test_the_contracts_choices_are_the_codes_own():
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_engines import ENGINES
    from ansible_collections.inference_ops.benchmark_cycle.plugins.module_utils.bc_strategy import POLICIES

    assert set(CONTRACT["bc_engine"]["choices"]) == set(ENGINES)
    assert set(CONTRACT["bc_stop_policy"]["choices"]) == set(POLICIES)
