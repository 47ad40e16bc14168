"""`python cli.py ...` from a clone does what the installed `tracehouse ...` does: the CLI is tracehouse.cli."""

if __name__ == "__main__":
    from tracehouse.cli import entry

    entry()
else:
    from tracehouse.cli import entry, main  # noqa: F401 - main: what `from cli import main` finds
