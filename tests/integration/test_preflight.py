"""DNS preflight against a real DNS server on loopback (dnslib): no network."""

from __future__ import annotations

import logging

import airflow.sdk  # noqa: F401 - Airflow sets up logging on import; before caplog attaches
import pytest

from outreach import cli
from outreach.airflow import tasks_approval, tasks_send
from outreach.leads import import_leads
from outreach.preflight import FAIL, PASS, WARN, make_resolver, run_preflight
from outreach.queue import queue_due
from outreach.signing import public_key_b64
from support.dnszone import a, dns_server, good_zone, mx, ptr, rsa_key, txt
from support.flow import rows
from support.paths import CAMPAIGN, LEADS, ROOT

DOMAIN, SELECTOR, IP = "mail.sender.example", "s2026", "192.0.2.25"


def statuses(report) -> dict[str, str]:
    return {c.name: c.status for c in report.checks}


def test_good_zone_passes_every_check():
    key = rsa_key()
    with dns_server(good_zone(DOMAIN, SELECTOR, key, IP)) as ns:
        report = run_preflight(DOMAIN, selector=SELECTOR, sending_ip=IP,
                               dkim_public_key=public_key_b64(key), resolver=make_resolver(ns))
    assert statuses(report) == {n: PASS for n in ("SPF", "DKIM", "DMARC", "alignment", "MX", "PTR")}, report.text()
    assert not report.failed
    assert "p=quarantine" in report.text()
    # Each line names the mailbox-provider rule it serves.
    assert all("Gmail" in c.rule or "RFC" in c.rule for c in report.checks)


def test_spf_is_evaluated_through_include_and_a_sender_outside_it_fails():
    key = rsa_key()
    with dns_server(good_zone(DOMAIN, SELECTOR, key, IP)) as ns:
        resolver = make_resolver(ns)
        via_include = run_preflight(DOMAIN, sending_ip="198.51.100.7", resolver=resolver)
        outside = run_preflight(DOMAIN, sending_ip="203.0.113.9", resolver=resolver)
    assert via_include.status("SPF") == PASS
    assert outside.status("SPF") == FAIL and "does not authorise 203.0.113.9" in outside.text()


def test_broken_zone_fails_with_reasons():
    key, other = rsa_key(), rsa_key(label="other")
    host = f"smtp.{DOMAIN}"
    broken = [
        txt(DOMAIN, "v=spf1 ip4:203.0.113.0/24 -all"),        # does not cover the sending IP
        txt(f"{SELECTOR}._domainkey.{DOMAIN}", "v=DKIM1; k=rsa; p="),   # revoked
        txt(f"other._domainkey.{DOMAIN}",                      # a key that is not ours
            "v=DKIM1; k=rsa; p=" + public_key_b64(other)),
        mx(DOMAIN, host), a(host, IP), ptr(IP, "static.isp.example"),  # PTR does not resolve back
        # no _dmarc record at all
    ]
    with dns_server(broken) as ns:
        resolver = make_resolver(ns)
        report = run_preflight(DOMAIN, selector=SELECTOR, sending_ip=IP,
                               dkim_public_key=public_key_b64(key), resolver=resolver)
        mismatch = run_preflight(DOMAIN, selector="other", dkim_public_key=public_key_b64(key),
                                 resolver=resolver)
        missing = run_preflight(DOMAIN, selector="nosuch", resolver=resolver)
    s = statuses(report)
    assert report.failed
    assert (s["SPF"], s["DKIM"], s["DMARC"], s["alignment"], s["MX"], s["PTR"]) == \
        (FAIL, FAIL, FAIL, FAIL, PASS, FAIL), report.text()
    assert "revoked" in report.text() and "no v=DMARC1 record" in report.text()
    assert mismatch.status("DKIM") == FAIL and "does not match" in mismatch.text()
    assert missing.status("DKIM") == FAIL and "no DKIM key record" in missing.text()


@pytest.mark.parametrize("domain, org", [
    ("mail.acme.co.uk", "acme.co.uk"),        # ICANN section, two-label suffix
    ("mail.acme.com.au", "acme.com.au"),
    ("mail.acme.github.io", "acme.github.io"),  # PSL private section (GitHub Pages)
])
def test_dmarc_is_found_at_the_organisational_domain_of_the_public_suffix_list(domain, org):
    """RFC 7489 §6.6.3: _dmarc.<From domain>, else _dmarc.<organisational domain> (§3.2: the
    public suffix plus one label). A decoy record at the public suffix itself (where counting the
    last two labels looks) must never be used."""
    suffix = org.partition(".")[2]
    decoy = txt(f"_dmarc.{suffix}", "v=DMARC1; p=reject; rua=mailto:decoy@" + suffix)
    ours = txt(f"_dmarc.{org}", "v=DMARC1; p=quarantine; rua=mailto:dmarc@" + org)
    with dns_server([decoy, ours, txt(domain, "v=spf1 -all")]) as ns:
        found = run_preflight(domain, resolver=make_resolver(ns))
    with dns_server([decoy, txt(domain, "v=spf1 -all")]) as ns:
        missing = run_preflight(domain, resolver=make_resolver(ns))
    dmarc = next(c for c in found.checks if c.name == "DMARC")
    assert dmarc.status == PASS, found.text()
    assert f"_dmarc.{org}:" in dmarc.detail and "p=quarantine" in dmarc.detail
    gone = next(c for c in missing.checks if c.name == "DMARC")
    assert gone.status == FAIL, missing.text()
    assert gone.detail.startswith(f"no v=DMARC1 record at _dmarc.{domain} or _dmarc.{org} ")
    # The exact domain's own record comes first.
    with dns_server([ours, txt(f"_dmarc.{domain}", "v=DMARC1; p=none")]) as ns:
        exact = run_preflight(domain, resolver=make_resolver(ns))
    assert f"p=none (_dmarc.{domain}:" in exact.text()


def test_unreachable_server_is_warn_not_pass():
    # A port nobody answers on: every lookup times out, so nothing can be told.
    report = run_preflight(DOMAIN, selector=SELECTOR, sending_ip=IP,
                           resolver=make_resolver("127.0.0.1:9", timeout=0.3))
    assert set(statuses(report).values()) == {WARN}, report.text()


def test_cli_exit_code_and_output(capsys):
    key = rsa_key()
    with dns_server(good_zone(DOMAIN, SELECTOR, key, IP)) as ns:
        ok = cli.main(["preflight", DOMAIN, "--selector", SELECTOR, "--sending-ip", IP,
                       "--nameserver", ns])
        good_out = capsys.readouterr().out
        bad = cli.main(["preflight", "nodmarc.example", "--selector", SELECTOR, "--nameserver", ns])
        bad_out = capsys.readouterr().out
    assert ok == 0, good_out
    assert good_out.count("PASS") == 6 and "FAIL" not in good_out.replace("no FAIL", "")
    assert bad != 0
    assert "FAIL  SPF" in bad_out and "FAIL  DMARC" in bad_out and "FAIL  DKIM" in bad_out


def _mailbox_file(tmp_path, selector: str | None):
    text = (ROOT / "include" / "mailboxes.yaml").read_text()
    if selector:
        text = text.replace("    warmup_start: 2026-01-05\n",
                            f"    warmup_start: 2026-01-05\n    dkim_selector: {selector}\n"
                            "    dkim_key_conn_id: outreach_dkim_test\n")
    path = tmp_path / "mailboxes.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("mode", ["block", "warn"])
def test_preflight_task_blocks_failing_domains_in_block_mode(db_url, tmp_path, monkeypatch, caplog,
                                                             mode):
    """The task body of the DAG's preflight step and the plan that follows it."""
    import json

    key = rsa_key()
    import_leads(db_url, CAMPAIGN, _mailbox_file(tmp_path, SELECTOR), LEADS)
    queue_due(db_url)
    demo_domain = "mail.outreach-demo.example"
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", "https://unsubscribe.test.example")
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", "test-secret-0123456789")
    monkeypatch.setenv("AIRFLOW_CONN_OUTREACH_DKIM_TEST",
                       json.dumps({"conn_type": "generic", "password": key.decode()}))
    monkeypatch.setenv("OUTREACH_SENDING_IP", IP)
    monkeypatch.setenv("OUTREACH_PREFLIGHT", mode)
    caplog.set_level(logging.INFO, logger="outreach")
    with dns_server(good_zone(demo_domain, SELECTOR, key, IP)) as ns:
        monkeypatch.setenv("OUTREACH_DNS_NAMESERVER", ns)
        good = tasks_send.preflight_task()
        assert good["blocked"] == [] and good["domains"] == {demo_domain: PASS}
        assert {q[0] for b in tasks_send.plan_task(good) for q in b["quotas"]} == {1, 2}
        # The launch approval's preflight (outreach_campaign_approval) checks the same way.
        targets = rows(db_url, "SELECT split_part(address, '@', 2) AS domain, dkim_selector, "
                               "dkim_key_conn_id FROM outreach.mailboxes")
        assert tasks_approval.approval_preflight(targets) == {demo_domain: "PASS"}
    broken = [r for r in good_zone(demo_domain, SELECTOR, key, IP) if "_dmarc" not in str(r.rname)]
    with dns_server(broken) as ns:
        monkeypatch.setenv("OUTREACH_DNS_NAMESERVER", ns)
        checked = tasks_send.preflight_task()
        plan = tasks_send.plan_task(checked)
        assert tasks_approval.approval_preflight(targets) == {demo_domain: "FAIL: DMARC"}
    assert checked["domains"] == {demo_domain: FAIL}
    if mode == "block":
        assert {b["mailbox_id"] for b in checked["blocked"]} == {1, 2}
        # Each blocked mailbox gets a batch of its own that claims nothing and fails its task.
        assert plan and all(b["quotas"] == [] and b["blocked"] for b in plan)
        assert "blocked for this run: DMARC failed (OUTREACH_PREFLIGHT=block)" in caplog.text
    else:
        assert checked["blocked"] == [] and {q[0] for b in plan for q in b["quotas"]} == {1, 2}
        assert "sends anyway: DMARC failed (OUTREACH_PREFLIGHT=warn)" in caplog.text
    assert "anna.schmidt@" not in caplog.text and "BEGIN PRIVATE KEY" not in caplog.text


def test_preflight_off_checks_nothing(monkeypatch, db_url, settings):
    # The task's config check (issue 31) runs first: a deployment's settings and database.
    monkeypatch.setenv("OUTREACH_DATABASE_URL", db_url)
    monkeypatch.setenv("OUTREACH_PUBLIC_URL", settings.public_url)
    monkeypatch.setenv("OUTREACH_UNSUBSCRIBE_SECRET", settings.unsubscribe_secret)
    monkeypatch.setenv("OUTREACH_PREFLIGHT", "off")
    off = tasks_send.preflight_task()
    assert (off["mode"], off["blocked"], off["domains"], off.get("failed", {})) == ("off", [], {}, {})
    monkeypatch.setenv("OUTREACH_PREFLIGHT", "sometimes")
    from airflow.sdk.exceptions import AirflowFailException

    with pytest.raises(AirflowFailException, match="OUTREACH_PREFLIGHT"):
        tasks_send.preflight_task()
