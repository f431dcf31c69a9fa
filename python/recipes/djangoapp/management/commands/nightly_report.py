"""Recipe: a Django management command that runs under a lock, so two cron hosts that start
``manage.py nightly_report`` together run it once. The Locker's URL is the setting
``FENCELOCK_URL``; ``--wait`` says how long to queue behind another run (0: skip at once)."""

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

import fencelock


class Command(BaseCommand):
    help = "Writes the nightly report, once at a time across every host."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--wait", type=float, default=0.0)

    def handle(self, *args: Any, **options: Any) -> None:
        with fencelock.connect(settings.FENCELOCK_URL) as locker:
            try:
                with locker.lock("nightly-report", ttl=60, wait=options["wait"]) as lease:
                    # The report's work; its writes would carry lease.token to a Fence.
                    self.stdout.write(f"report written under fencing token {lease.token}")
            except fencelock.Timeout:
                self.stdout.write("another run holds the lock: skipped")
