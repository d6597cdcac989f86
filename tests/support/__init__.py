"""What the tests share that is not a pytest fixture of every test: the demo flow (``flow``), the
invariant checker (``invariants``), the fault-injecting SMTP server (``faultsmtp``), the fake
Postmaster Tools API (``fakepostmaster``), the DNS zone on loopback (``dnszone``), Dovecot
(``imapserver``), the inbox flow (``inboxflow``), the bounce scenario (``scenario``), headless
chromium (``browser``), the Airflow home (``airflowhome``), the lead sources (``sources``), sample
messages (``samples``) and the project paths (``paths``). ``tests/`` is on ``sys.path``
(``pythonpath`` in pyproject.toml), so a test writes ``from support.flow import rows``."""
