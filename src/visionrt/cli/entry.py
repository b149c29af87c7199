"""The `visionrt` console script: takes Ctrl-C and SIGTERM before anything heavy is imported,
then runs the command line (`visionrt.cli.main`)."""

from __future__ import annotations

from visionrt.cli.signals import install_early

install_early()  # this module is imported only as the console script's entry point


def main() -> None:
    from visionrt.cli.main import main as command_line

    command_line()
