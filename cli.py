"""`python cli.py ...` from a clone does what the installed `tracehouse ...` does: the CLI is tracehouse.cli."""

from tracehouse.cli import entry, main  # noqa: F401 - main: what `from cli import main` finds

if __name__ == "__main__":
    entry()
