"""The loop: verify, publish, keep re-verifying, withdraw within the stated bound, publish again.

States:
    unpublished  retry with backoff (0.5 s, 1 s, 2 s ... capped at the interval; reset when the URL
                 changes) until a URL verifies; a fresh quick-tunnel hostname typically fails with
                 "hostname not resolvable yet" for a while first. Never gives up: the tunnel may come
                 back, and the healthcheck already reports unhealthy meanwhile.
    published    one check every `interval`, on a fixed schedule (start times, not gaps, so the
                 withdraw bound holds whatever each check costs). Each success rewrites the hand-off
                 (`verified_at`, and `valid_until` one validity period later). `failures_to_withdraw` consecutive failures withdraw it.

A check does three things within one `timeout`: read the proxy's /health locally, ask the provider
for the current URL, and GET <url>/health. A URL that changed (cloudflared restarted on a new
quick-tunnel hostname) is published as soon as it verifies.
"""

from __future__ import annotations

import logging
import threading
import time

from stack import handoff
from stack.readers.tunnel_check import Settings

from . import probe
from .discover import Discovery

log = logging.getLogger("tunnel_check")

# A check that raised instead of returning a verdict. Counted like any failed check (so a URL that can no
# longer be checked is still withdrawn within the bound), never the end of the loop: the loop ending
# leaves the env server refusing every rollout with nothing to bring the check back.
CHECK_CRASHED = "check crashed"

# Local calls (proxy /health on loopback, cloudflared metrics) get at most this much of a check's
# timeout each, so the request through the tunnel always keeps most of it.
LOCAL_TIMEOUT_S = 2.0


class Monitor:
    def __init__(self, settings: Settings, discovery: Discovery | None = None):
        self.s = settings
        self.http = probe.new_client()
        self.discovery = discovery or Discovery(settings, self.http)
        self.published: handoff.Verified | None = None
        self.failures = 0  # consecutive failed checks while published
        self.attempts = 0  # consecutive failed checks while unpublished (backoff)
        self.attempt_url: str | None = None
        self.unverified_since = time.monotonic()
        self.last: probe.Verdict | None = None
        self.stop_event = threading.Event()

    # -- one check --------------------------------------------------------------------------------
    def check(self) -> probe.Verdict:
        start = time.monotonic()
        deadline = start + self.s.timeout_s
        local = min(LOCAL_TIMEOUT_S, self.s.timeout_s / 3)
        instance, bad = probe.local_instance(self.s.local_health_url, local, self.http)
        if bad is not None:
            return bad
        url, bad = self.discovery.current(min(local, max(0.05, deadline - time.monotonic())))
        if bad is not None:
            return bad
        remaining = deadline - time.monotonic()
        if remaining < 0.05:
            return probe.fail(probe.TIMEOUT, f"local checks used the whole {self.s.timeout_s:g}s budget", url)
        verdict = probe.through(url, instance, remaining, self.http)
        if not verdict.ok:
            left = deadline - time.monotonic()
            if left > 0.2:
                extra = self.discovery.hint(min(0.5, left / 2))
                if extra:
                    verdict = probe.Verdict(False, verdict.cause, f"{verdict.detail} [{extra}]", url)
        return verdict

    # -- what a verdict does ----------------------------------------------------------------------
    def apply(self, verdict: probe.Verdict) -> None:
        self.last = verdict
        if verdict.ok:
            previous = self.published
            self.published = handoff.publish(
                verdict.url, verdict.instance, self.s.mode, self.s.valid_for_s, self.s.handoff_dir
            )
            if previous is None:
                waited = time.monotonic() - self.unverified_since
                log.info(
                    "HEALTHY: published %s (%s, instance %s) after %d failed attempt(s) over %.1fs",
                    verdict.url,
                    self.s.mode,
                    verdict.instance,
                    self.attempts,
                    waited,
                )
            elif previous.url != self.published.url:
                log.info("HEALTHY: URL changed %s -> %s, published the new one", previous.url, verdict.url)
            elif self.failures:
                log.info("HEALTHY: %s verified again after %d failed check(s)", verdict.url, self.failures)
            self.failures = self.attempts = 0
            return

        if self.published is not None:
            self.failures += 1
            n = self.s.failures_to_withdraw
            if self.failures < n:
                log.warning("check failed (%d/%d before withdrawal): %s", self.failures, n, verdict.detail)
                return
            reason = (
                f"{self.published.url} failed {self.failures} consecutive check(s) "
                f"{self.s.interval_s:g}s apart; last: {verdict.detail}"
            )
            handoff.withdraw(reason, self.s.handoff_dir)
            log.error("UNHEALTHY: withdrew %s: %s", self.published.url, verdict.detail)
            self.published = None
            self.failures = 0
            self.attempts = 0
            self.attempt_url = verdict.url
            self.unverified_since = time.monotonic()
            self.discovery.renew()
            return

        if verdict.url != self.attempt_url:
            self.attempts, self.attempt_url = 0, verdict.url
        self.attempts += 1
        log.warning(
            "not verified yet (attempt %d, %.0fs unpublished): %s",
            self.attempts,
            time.monotonic() - self.unverified_since,
            verdict.detail,
        )

    def delay_after(self, started: float) -> float:
        """Seconds until the next check should start."""
        if self.published is not None:
            return max(0.0, started + self.s.interval_s - time.monotonic())
        backoff = min(self.s.interval_s, 0.5 * 2 ** max(0, self.attempts - 1))
        return max(0.0, started + backoff - time.monotonic())

    # -- the loop ---------------------------------------------------------------------------------
    def step(self) -> None:
        """One iteration that cannot end the loop: whatever a check or its bookkeeping raises becomes a
        failed check, logged with its cause (the traceback's last frame names the line that raised)."""
        try:
            verdict = self.check()
        except Exception as exc:  # noqa: BLE001 -- one bad iteration must never stop the re-checks
            where = _where(exc)
            log.error("%s: %s: %s (at %s); the loop goes on", CHECK_CRASHED, type(exc).__name__, exc, where)
            url = self.published.url if self.published is not None else self.attempt_url
            verdict = probe.fail(CHECK_CRASHED, f"{type(exc).__name__}: {exc} (at {where})", url)
        try:
            self.apply(verdict)
        except Exception as exc:  # noqa: BLE001 -- e.g. the hand-off volume briefly unwritable
            log.error(
                "%s while recording a verdict: %s: %s (at %s); the loop goes on",
                CHECK_CRASHED,
                type(exc).__name__,
                exc,
                _where(exc),
            )

    def run(self) -> None:
        log.info("tunnel-check: %s", self.s.describe())
        handoff.withdraw("tunnel-check started: no URL verified yet in this run", self.s.handoff_dir)
        try:
            while not self.stop_event.is_set():
                started = time.monotonic()
                self.step()
                self.stop_event.wait(self.delay_after(started))
        finally:
            self.discovery.close()
            self.http.close()
            handoff.withdraw("tunnel-check stopped: nothing re-verifies the URL", self.s.handoff_dir)
            log.info("tunnel-check stopped; URL withdrawn")

    def stop(self) -> None:
        self.stop_event.set()


def _where(exc: BaseException) -> str:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return "?"
    return f"{tb.tb_frame.f_code.co_filename.rsplit('/', 1)[-1]}:{tb.tb_lineno}"
