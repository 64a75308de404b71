"""Two-level fairness (tenants.account_separator): accounts first, then each account's keys.

The bound docs/scheduler.md states ("Accounts: fair to customers, not to keys"), checked on the
reference model at every pop of random runs (the differential test holds the Lua to the model step
for step): two accounts backlogged together differ in weighted service by at most V/w_a + V/w_b,
and two keys of one account by at most 2V, where V is the most work one visit can charge
(``tenants.batch`` jobs, or under runtime charging ``batch`` times the longest job).
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairctl.status_view import as_json, class_statuses, render
from fairness_core import InvalidJob, Model, parse_config
from fairness_core.accounts import account_of
from fairness_core.jobs import check_tenant

from .conftest import make_config

NOW = 1_700_000_000_000
TIERS = {"enterprise": 6, "pro": 3, "free": 1}
SEED_S = 0.1  # the class's service_time: what a task's first job is charged under runtime


def one_class(separator: str | None = "/", *, batch: int = 1, charge: str = "jobs", topk: int = 10) -> Model:
    return Model(make_config(
        exporter={"topk_tenants": topk},
        classes=[{"name": "jobs", "weight": 1, "max_age": "1h", "arrival_rate": "1/s",
                  "service_time": f"{int(SEED_S * 1000)}ms"}],
        classification=[{"class": "jobs", "reason": "everything"}],
        scheduler={"policy": "weighted-fair", "charge": charge},
        tenants={"tiers": TIERS, "default_tier": "free", "batch": batch,
                 **({"account_separator": separator} if separator else {})}))


def test_an_id_names_its_account_before_the_first_separator() -> None:
    assert account_of("acme/ws-17", "/") == "acme"
    assert account_of("acme/ws/17", "/") == "acme"
    assert account_of("acme", "/") == "acme"  # an account of one key
    assert account_of("acme/ws-17", None) == "acme/ws-17"
    assert account_of("ünï::ö", "::") == "ünï"


@pytest.mark.parametrize("tenant, problem", [("/ws-1", "names no account before '/'"),
                                             ("acme/", "names no key after '/'")])
def test_an_id_with_an_empty_account_or_key_is_refused_naming_the_field(tenant: str, problem: str) -> None:
    config = make_config(tenants={"account_separator": "/"})
    with pytest.raises(InvalidJob, match=f"tenant: .*{problem}.*tenants.account_separator"):
        check_tenant(tenant, config)
    assert check_tenant(tenant, make_config()) == tenant  # without accounts any such id is a tenant


@pytest.mark.parametrize("value, message", [("", "expected a non-empty string"), ("a b", "without spaces"),
                                            ("/////", "1 to 4 visible characters"), (7, "expected a non-empty string")])
def test_a_bad_separator_is_refused_naming_the_field(value: object, message: str) -> None:
    data = {**make_config_data(), "tenants": {"account_separator": value}}
    with pytest.raises(Exception, match=f"tenants.account_separator.*{message}"):
        parse_config(data)


@pytest.mark.parametrize("field", ["account_max_queued", "account_max_rate"])
def test_an_account_limit_without_accounts_is_refused_naming_the_field(field: str) -> None:
    data = make_config_data()
    tenants = data["tenants"]
    with pytest.raises(Exception, match=f"tenants.{field}: .*needs tenants.account_separator"):
        parse_config({**data, "tenants": {**tenants, field: 5}})
    assert getattr(parse_config({**data, "tenants": {**tenants, field: 5, "account_separator": "/"}}).tenants, field) == 5


def make_config_data() -> dict:
    import yaml

    from .conftest import EXAMPLE_CONFIG
    return yaml.safe_load(EXAMPLE_CONFIG.read_text())


def key_spread(separator: str | None, pops: int) -> Counter[str]:
    """One account floods through 200 keys beside 50 accounts of one key: who gets the pops."""
    model = one_class(separator)
    for k in range(200):
        model.submit_many(NOW, "newsletter", f"flood/k{k}", 50)
    for a in range(50):
        model.submit_many(NOW, "newsletter", f"acct{a}", 200)  # none runs dry in the pops
    served: Counter[str] = Counter()
    for _ in range(pops):
        for lease in model.pop(NOW, 1):
            served[account_of(lease.tenant, "/")] += 1
    return served


def test_an_account_spread_over_200_keys_gets_one_accounts_share() -> None:
    flat, accounts = key_spread(None, 5100), key_spread("/", 5100)
    assert flat["flood"] == 4050  # 200 of 250 parties: 20 visits each, then 100 more in id order
    assert accounts["flood"] == 100  # 1 of 51 accounts
    assert all(accounts[f"acct{a}"] == 100 for a in range(50))


@settings(max_examples=40, deadline=None)
@given(data=st.data(), batch=st.integers(1, 4), charge=st.sampled_from(["jobs", "runtime"]))
def test_service_stays_within_the_stated_bound_at_every_pop(data: st.DataObject, batch: int, charge: str) -> None:
    accounts = data.draw(st.lists(st.tuples(st.sampled_from(sorted(TIERS)), st.integers(1, 6)), min_size=2, max_size=6))
    runtimes = [0.002, 0.05, 0.3]  # seconds; each key's jobs take one of these
    model = one_class("/", batch=batch, charge=charge)
    cost_s: dict[str, float] = {}
    for a, (tier, keys) in enumerate(accounts):
        for k in range(keys):
            tenant = f"a{a}/k{k}"
            cost_s[tenant] = data.draw(st.sampled_from(runtimes))
            model.submit_many(NOW, "task", tenant, 1300, tier=tier)  # none runs dry in 300 visits
    unit = (lambda t: 1.0) if charge == "jobs" else (lambda t: cost_s[t] * 1e6)
    longest = 1.0 if charge == "jobs" else max(max(runtimes), SEED_S) * 1e6
    visit = batch * longest  # V: the most one visit can charge
    weight = {f"a{a}": TIERS[tier] for a, (tier, _) in enumerate(accounts)}
    served: Counter[str] = Counter()
    for _ in range(300):
        for lease in model.pop(NOW, batch):
            served[lease.tenant] += unit(lease.tenant)
            model.ack(NOW, lease, runtime=cost_s[lease.tenant])
        per_account: Counter[str] = Counter()
        for tenant, work in served.items():
            per_account[account_of(tenant, "/")] += work
        for a, w_a in weight.items():
            for b, w_b in weight.items():
                gap = abs(per_account[a] / w_a - per_account[b] / w_b)
                assert gap <= visit / w_a + visit / w_b + 1e-6, (a, b, dict(per_account))
        for a, (_, keys) in enumerate(accounts):
            mine = [served[f"a{a}/k{k}"] for k in range(keys)]
            assert max(mine) - min(mine) <= 2 * visit + 1e-6, (a, mine)


def test_the_snapshot_names_the_spread_account_not_its_keys() -> None:
    """What the exporter serves with accounts: bigco's 200 keys, each a sliver of the class, are one
    account of 51 by service; each top account's busiest keys are named; and the quiet accounts'
    oldest age skips every key of the noisy account, however many of the oldest heads it holds."""
    model = one_class("/", topk=51)
    for k in range(200):
        model.submit_many(NOW, "newsletter", f"bigco/k{k}", 50)
    for a in range(50):
        model.submit_many(NOW + 1000, "newsletter", f"acct{a}", 200)
    later = NOW + 2000
    for _ in range(5100):
        for lease in model.pop(later, 1):
            model.ack(later, lease)
    view = model.snapshot(later).classes["jobs"]
    assert view.active_accounts == 51 and view.active_tenants == 250
    assert dict(view.account_shares)["bigco"] == pytest.approx(1 / 51)
    bigco_keys = [(t, share) for a, t, share in view.account_tenants if a == "bigco"]
    assert len(bigco_keys) == 3 and all(t.startswith("bigco/") and share == 0.01 for t, share in bigco_keys)  # 100 keys once
    assert view.quiet_accounts_oldest_age == pytest.approx(1.0)  # the one-key accounts' heads, not bigco's
    assert view.quiet_oldest_age == pytest.approx(2.0)  # by tenant, no bigco key is noisy: 19 heads read


def spread_and_small(separator: str | None) -> Model:
    """bigco's 20,000 jobs over 200 keys and 50 one-key accounts' 200 each, after 5,100 pops."""
    model = one_class(separator, topk=5)
    for k in range(200):
        model.submit_many(NOW, "newsletter", f"bigco/k{k}", 100)
    for a in range(50):
        model.submit_many(NOW + 1000, "newsletter", f"acct{a}", 200)
    for _ in range(5100):
        for lease in model.pop(NOW + 2000, 1):
            model.ack(NOW + 2000, lease)
    return model


def test_the_fairness_index_judges_accounts() -> None:
    """Two-level fairness gives each of the 51 accounts 100 jobs: fair by accounts (1.0), though
    bigco's keys each got half a job beside the one-key accounts' 100 (judged by keys it read 0)."""
    view = spread_and_small("/").snapshot(NOW + 2000).classes["jobs"]
    assert view.fairness_index == pytest.approx(1.0, abs=0.01)
    assert spread_and_small(None).snapshot(NOW + 2000).classes["jobs"].fairness_index == pytest.approx(1.0, abs=0.01)


def test_status_shows_the_accounts_with_their_backlog_keys_and_share() -> None:
    """``fairctl status`` with accounts: the spread account is named once, with its keys, not
    hidden behind its keys' 100 jobs each; and nothing of accounts without a separator."""
    model = spread_and_small("/")
    rows = class_statuses(model.config, None, model.snapshot(NOW + 2000), top=3)
    text, data = render(rows, None), as_json(rows, None)["classes"][0]
    assert "most backlogged accounts" in text
    assert "  jobs (51 accounts queued): bigco (19900, 200 keys, 2.0%), acct" in text
    assert data["active_accounts"] == 51
    assert data["top_accounts"][0] == {"account": "bigco", "queued": 19900, "keys": 200, "share_pct": pytest.approx(100 / 51)}
    flat = spread_and_small(None)
    rows = class_statuses(flat.config, None, flat.snapshot(NOW + 2000), top=3)
    assert "accounts" not in render(rows, None) and "top_accounts" not in as_json(rows, None)["classes"][0]



def northwind_share(late: bool) -> int:
    """Enterprise northwind's three keys beside pro globex, for 500 pops; ``late``: one free job
    of the key northwind/late queued after them."""
    model = one_class("/")
    for k in range(3):
        model.submit_many(NOW, "newsletter", f"northwind/k{k}", 400, tier="enterprise")
    model.submit_many(NOW, "newsletter", "globex", 600, tier="pro")
    if late:
        model.submit_many(NOW, "newsletter", "northwind/late", 1, tier="free")
    served: Counter[str] = Counter()
    for _ in range(500):
        for lease in model.pop(NOW, 1):
            served[account_of(lease.tenant, "/")] += 1
    return served["northwind"]


def test_one_free_job_of_one_key_leaves_an_enterprise_account_its_weight() -> None:
    assert northwind_share(False) == 333  # 6 of 6 + 3
    assert northwind_share(True) == 333  # the free key is queued beside enterprise ones


def test_an_account_is_charged_at_the_highest_tier_of_its_queued_keys() -> None:
    model = one_class("/")
    model.submit_many(NOW, "newsletter", "northwind/k0", 2, tier="pro")
    model.submit_many(NOW, "newsletter", "northwind/late", 1, tier="free")
    cls = model.classes["jobs"]
    assert cls.cost == {"northwind": "pro"}
    model.submit_many(NOW, "newsletter", "northwind/big", 1, tier="enterprise")
    assert cls.cost == {"northwind": "enterprise"}
    model.submit_many(NOW, "newsletter", "northwind/big", 1, tier="free")  # its latest job is free
    assert cls.cost == {"northwind": "pro"}
    model.submit_many(NOW, "newsletter", "northwind/k0", 1, tier="free")  # every key free now
    assert cls.cost == {}
    for _ in range(6):
        model.pop(NOW, 1)
    assert not cls.key_tier and not cls.account_tiers  # nothing queued, nothing kept
